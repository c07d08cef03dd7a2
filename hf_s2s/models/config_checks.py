"""Checks and behaviour shared by the hf_s2s configuration classes.

Every check raises ``ValueError`` naming the field, the value it got and what is allowed, so a wrong config
fails where it is built instead of deep inside a forward pass. This file is copied beside the configuration
files into every saved model folder (``save_pretrained`` follows single-dot relative imports), so it must
import nothing from hf_s2s.
"""

import contextvars
from collections.abc import Iterable, Mapping
from typing import Any

from .version import __version__

# Keyword arguments that transformers itself passes to a config's ``__post_init__`` (``from_pretrained(...,
# attn_implementation=...)``, ``AutoConfig.for_model``) or writes into a config (its quantizers), accepted even when a
# person builds the config directly.
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
        "quantization_config",  # written by transformers' quantizers into the loaded config, and saved with it
        "tokenizer_class",
        "custom_pipelines",  # the pipeline classes a Hub folder ships (hf_s2s.hub.publish writes it)
        "hf_s2s_version",  # the hf_s2s release that wrote a config.json (to_dict records it)
    }
)

# True while ``from_dict`` (so ``from_pretrained`` / ``AutoConfig``) builds a config from a saved config.json.
_LOADING_SAVED_CONFIG = contextvars.ContextVar("hf_s2s_loading_saved_config", default=False)


def reject_unknown_kwargs(config_name: str, kwargs: Mapping[str, Any], known: Iterable[str]) -> None:
    """Raise if a person building a config passed a keyword the config does not define (a typo would otherwise be
    kept as a stray attribute and silently ignored by the model).

    A config loaded from a saved config.json keeps unknown keys as attributes instead, as transformers' own configs
    do: transformers' tools and later transformers versions write keys hf_s2s cannot know, and a folder they wrote
    must load again.
    """
    if _LOADING_SAVED_CONFIG.get():
        return
    unknown = sorted(set(kwargs) - TRANSFORMERS_CONFIG_KWARGS)
    if unknown:
        raise ValueError(
            f"{config_name} got unknown argument(s) {unknown}; the fields it defines are: {sorted(known)}"
        )


class Seq2SeqConfigMixin:
    """What both hf_s2s configs share on top of ``PreTrainedConfig``: lenient loading of saved keys, the family
    checks run by ``validate()`` (where transformers runs a config's checks: at save time, and on demand after a
    field was changed), and a target vocabulary where ``decoder_vocab_size=None`` means "the same as vocab_size".

    A family config defines ``validate_architecture()`` (its own checks, raising ``ValueError``) and calls it at the
    end of ``__post_init__``.
    """

    decoder_vocab_size: int | None

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        token = _LOADING_SAVED_CONFIG.set(True)
        try:
            return super().from_dict(config_dict, **kwargs)
        finally:
            _LOADING_SAVED_CONFIG.reset(token)

    def validate(self):
        """transformers' generic checks, then this family's: a field changed after construction (say
        ``config.encoder_attention_heads = 7``) fails here, and in ``save_pretrained``, with the field named."""
        super().validate()
        self.validate_architecture()

    def to_dict(self) -> dict[str, Any]:
        """transformers' dict, plus the hf_s2s release that wrote it (as transformers records its own version)."""
        output = super().to_dict()
        output["hf_s2s_version"] = __version__
        return output

    @property
    def target_vocab_size(self) -> int:
        """Size of the target (decoder) vocabulary: ``decoder_vocab_size``, or ``vocab_size`` when that is None, so
        changing ``vocab_size`` of a one-vocabulary model changes both ends."""
        return self.decoder_vocab_size if self.decoder_vocab_size is not None else self.vocab_size

    def get_text_config(self, decoder=None, encoder=None):
        """transformers splits a flat encoder-decoder config by field prefix, mapping ``decoder_vocab_size`` onto
        ``vocab_size`` for the decoder end; None there means "shared", so the decoder view gets the real size."""
        text_config = super().get_text_config(decoder=decoder, encoder=encoder)
        if text_config is not self and text_config.vocab_size is None:
            text_config.vocab_size = self.target_vocab_size
        return text_config


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


def check_non_negative(name: str, value: Any) -> None:
    """A weight: a finite float >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < float("inf"):
        raise ValueError(f"`{name}` must be a finite float >= 0, got {value!r}")


def check_token_id(name: str, value: Any, vocab_size: int, optional: bool = False) -> None:
    """A special token id: an int in [0, vocab_size)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab_size:
        raise ValueError(f"`{name}` must be a token id in [0, {vocab_size}) (the vocabulary size), got {value!r}")


def check_source_unk_aliases(config: Any) -> None:
    """``source_unk_aliases``: a whole number >= 0; when > 0, ``unk_token_id`` must be a source token id (what the
    encoder reads those ids as)."""
    count = config.source_unk_aliases
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"`source_unk_aliases` must be a whole number >= 0, got {count!r}")
    if count:
        check_token_id("unk_token_id", config.unk_token_id, config.vocab_size)
