"""Checks shared by the hf_s2s configuration classes.

Every check raises ``ValueError`` naming the field, the value it got and what is allowed, so a wrong config
fails where it is built instead of deep inside a forward pass. This file is copied beside the configuration
files into every saved model folder (``save_pretrained`` follows single-dot relative imports), so it must
import nothing from hf_s2s.
"""

from collections.abc import Iterable, Mapping
from typing import Any

# Keyword arguments that transformers itself passes to a config's ``__post_init__`` (when loading a saved
# config.json, or from ``from_pretrained(..., attn_implementation=...)``), and consumes there.
TRANSFORMERS_CONFIG_KWARGS = frozenset(
    {
        "model_type",
        "auto_map",
        "name_or_path",
        "_name_or_path",
        "_commit_hash",
        "torch_dtype",
        "output_attentions",
        "attn_implementation",
        "experts_implementation",
        "per_layer_config",
        "num_labels",
        "custom_pipelines",  # the pipeline classes a Hub folder ships (hf_s2s.hub writes it)
    }
)


def reject_unknown_kwargs(config_name: str, kwargs: Mapping[str, Any], known: Iterable[str]) -> None:
    """Raise if ``kwargs`` holds a keyword the config does not define (a typo would otherwise be kept as a stray
    attribute and silently ignored by the model)."""
    unknown = sorted(set(kwargs) - TRANSFORMERS_CONFIG_KWARGS)
    if unknown:
        raise ValueError(
            f"{config_name} got unknown argument(s) {unknown}; the fields it defines are: {sorted(known)}"
        )


def check_positive(name: str, value: Any) -> None:
    """A size or count: an int > 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}")


def check_choice(name: str, value: Any, allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {list(allowed)}, got {value!r}")


def check_dropout(name: str, value: Any) -> None:
    """A dropout probability: a float in [0, 1) (1 would zero every activation)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a float in [0, 1), got {value!r}")


def check_probability(name: str, value: Any) -> None:
    """A probability that may be exactly 1: a float in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"`{name}` must be a float in [0, 1], got {value!r}")


def check_token_id(name: str, value: Any, vocab_size: int, optional: bool = False) -> None:
    """A special token id: an int in [0, vocab_size)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab_size:
        raise ValueError(f"`{name}` must be a token id in [0, {vocab_size}) (the vocabulary size), got {value!r}")
