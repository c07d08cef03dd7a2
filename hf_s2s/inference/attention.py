"""Reading a model's attention weights: only the eager kernel returns them (sdpa and the others return None), so the
tools that read them (the coverage penalty, ensembles that track coverage, alignments, encoder analysis) switch to
it for the duration of a block."""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ..models.transformers_compat import attention_implementation


@contextmanager
def eager_attention(models: Sequence) -> Iterator[None]:
    """Run ``models`` on the eager attention kernel inside the block, the only one that returns attention weights
    (sdpa and the others return None), and switch each back to its own kernel afterwards."""
    kernels = {model: attention_implementation(model.config) for model in models
               if attention_implementation(model.config) not in (None, "eager")}
    for model in kernels:
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        for model, kernel in kernels.items():
            model.set_attn_implementation(kernel)
