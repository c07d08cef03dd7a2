"""Training samplers whose order is a pure function of (seed, epoch), so that a run resumed from a checkpoint
in any epoch sees exactly the batches the uninterrupted run saw.

Trainer's own ``LengthGroupedSampler`` draws its shuffle from the global torch random state at the start of
each epoch. That state has been advanced by every dropout mask of the epochs before, and a resumed run does
not replay them (it restores the random state of the checkpoint only after the epoch's shuffle is drawn), so
from the second epoch on a resumed run shuffled differently and ended with different weights. The samplers
here own their generator, seeded with ``seed + epoch`` (the convention of accelerate's
``SeedableRandomSampler`` and transformers' ``BatchRebalanceSampler``), and Trainer tells them the epoch.
"""

from collections.abc import Iterator, Sequence

import torch
from transformers.trainer_pt_utils import get_length_grouped_indices


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The generator of one epoch's shuffle: independent of the global random state (dropout, data order of
    other epochs), so the same on every process and in a resumed run."""
    return torch.Generator().manual_seed(seed + epoch)


class LengthGroupedEpochSampler(torch.utils.data.Sampler[int]):
    """Trainer's ``group_by_length`` order (``get_length_grouped_indices``: shuffle, sort by length within
    mega-batches of 50 batches, longest batch first) drawn from :func:`epoch_generator` instead of the global
    random state. Every process draws the same order; accelerate deals its batches out round-robin."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int):
        self.lengths = list(lengths)  # source tokens of each example, what Trainer groups by
        self.batch_size = batch_size  # examples per optimizer step on one process (batch x accumulation)
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        generator = epoch_generator(self.seed, self.epoch)
        return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=generator))


__all__ = ["LengthGroupedEpochSampler", "epoch_generator"]
