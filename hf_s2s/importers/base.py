"""What every toolkit converter shares: the result it returns and the registry of ``--from`` names."""

from collections.abc import Callable
from dataclasses import dataclass, field

from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class Converted:
    """What a toolkit converter returns: the model, its tokenizer, and what the folder records about the
    source."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    toolkit: str
    architecture: str  # e.g. "rnn" or "transformer", as the toolkit names it
    details: dict = field(default_factory=dict)  # toolkit options that decided the conversion
    # what the toolkit did around the model that the folder does not (subword segmentation, lowercasing, ...),
    # one sentence each naming the option: the user's step, printed by `hf-s2s convert` and written into the
    # card
    not_carried_over: list[str] = field(default_factory=list)


# The notes a converter returns for what it does not carry over, where several toolkits need the same one
APPLY_YOURSELF = ("the converted tokenizer only splits on spaces, so apply it to the input (and undo it "
                  "on the output) yourself")
RNN_TABLES_COPIED = ("hf_s2s's RNN keeps one token table a side, so the folder holds two equal copies; "
                     "fine-tuning trains them apart")


def register(name: str) -> Callable:
    """Decorator registering a toolkit's converter function under the ``--from`` name ``name``."""
    def decorate(function: Callable) -> Callable:
        CONVERTERS[name] = function
        return function
    return decorate


CONVERTERS: dict[str, Callable[..., Converted]] = {}
