"""What every toolkit converter shares: the result it returns and the registry of ``--from`` names."""

from collections.abc import Callable
from dataclasses import dataclass, field

from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class Converted:
    """What a toolkit converter returns: the model, its tokenizer, and what the folder records about the source."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    toolkit: str
    architecture: str  # e.g. "rnn" or "transformer", as the toolkit names it
    details: dict = field(default_factory=dict)  # toolkit options that decided the conversion


def register(name: str) -> Callable:
    """Decorator registering a toolkit's converter function under the ``--from`` name ``name``."""
    def decorate(function: Callable) -> Callable:
        CONVERTERS[name] = function
        return function
    return decorate


CONVERTERS: dict[str, Callable[..., Converted]] = {}
