"""Training samplers whose order is a pure function of (seed, epoch), so that a run resumed from a checkpoint
in any epoch sees exactly the batches the uninterrupted run saw.

Trainer's own ``LengthGroupedSampler`` draws its shuffle from the global torch random state at the start of
each epoch. That state has been advanced by every dropout mask of the epochs before, and a resumed run does
not replay them (it restores the random state of the checkpoint only after the epoch's shuffle is drawn), so
from the second epoch on a resumed run shuffled differently and ended with different weights. The samplers
here own their generator, seeded with ``seed + epoch`` (the convention of accelerate's
``SeedableRandomSampler`` and transformers' ``BatchRebalanceSampler``), and Trainer tells them the epoch.

:class:`TokenBudgetBatchSampler` builds batches to a budget of padded source + target tokens, as fairseq's
``--max-tokens``, Marian, OpenNMT-py and Joey NMT do, and shards them across processes itself.
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


def padded_tokens(indices: Sequence[int], source_lengths: Sequence[int], target_lengths: Sequence[int]) -> int:
    """Source + target tokens of a batch padded to its longest source and longest target, as the collator
    pads it: ``n_sentences * (max_source_len + max_target_len)``."""
    if not indices:
        return 0
    return len(indices) * (max(source_lengths[i] for i in indices) + max(target_lengths[i] for i in indices))


def fill_to_budget(order: Sequence[int], source_lengths: Sequence[int], target_lengths: Sequence[int],
                   budget: int, min_size: int = 1) -> list[list[int]]:
    """Cut ``order`` into consecutive batches, each taking pairs while its padded cost (:func:`padded_tokens`)
    stays within ``budget``, and at least ``min_size`` pairs whatever their cost."""
    batches, batch, longest_source, longest_target = [], [], 0, 0
    for i in order:
        source, target = max(longest_source, source_lengths[i]), max(longest_target, target_lengths[i])
        if len(batch) >= min_size and (len(batch) + 1) * (source + target) > budget:
            batches.append(batch)
            batch, source, target = [], source_lengths[i], target_lengths[i]
        batch.append(i)
        longest_source, longest_target = source, target
    return [*batches, batch] if batch else batches


def split_balanced(batch: list[int], source_lengths: Sequence[int], target_lengths: Sequence[int],
                   parts: int) -> list[list[int]]:
    """Split a length-sorted ``batch`` into ``parts`` non-empty contiguous pieces whose largest padded cost
    (:func:`padded_tokens`) is as small as a greedy cut allows: the pieces of one global batch go to processes
    that wait for each other, so they should cost about the same. Shorter sentences go in larger pieces."""
    if len(batch) < parts:
        raise ValueError(f"cannot split a batch of {len(batch)} sentences into {parts} non-empty parts")

    low = max(source_lengths[i] + target_lengths[i] for i in batch)  # any piece holds at least one sentence
    high = padded_tokens(batch, source_lengths, target_lengths)
    while low < high:  # the smallest cap at which the greedy cut needs at most `parts` pieces
        cap = (low + high) // 2
        if len(fill_to_budget(batch, source_lengths, target_lengths, cap)) <= parts:
            high = cap
        else:
            low = cap + 1
    pieces = fill_to_budget(batch, source_lengths, target_lengths, low)
    while len(pieces) < parts:  # halving the largest piece never raises the largest cost
        largest = max(range(len(pieces)), key=lambda k: len(pieces[k]))
        piece = pieces[largest]
        pieces[largest: largest + 1] = [piece[: len(piece) // 2], piece[len(piece) // 2:]]
    return pieces


class TokenBudgetBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Batches filled to a budget of padded source + target tokens, built from length buckets, in a shuffled
    order that differs per epoch; for one process of ``num_processes``.

    How the batches are built (once, from ``seed``, as fairseq's ``--max-tokens`` does):
      1. the pairs are shuffled, then stably sorted by (source length, target length): length buckets whose
         ties are in random order;
      2. walking that order, a global batch takes pairs while ``n * (max_source + max_target)`` stays within
         ``max_tokens * num_processes * accumulation_steps``; it always takes at least one pair per process
         and micro-batch, and a last batch too small for that joins the one before it (nothing is dropped);
      3. each global batch is cut into ``num_processes * accumulation_steps`` pieces balanced by padded
         tokens (:func:`split_balanced`).
    Each epoch the order of the global batches is shuffled with :func:`epoch_generator`. Process ``rank``
    yields, for each global batch, its piece of each of the ``accumulation_steps`` micro-batches. Every
    process thus makes the same number of steps, the pieces of one step are disjoint, and their union is the
    global batch, the same whatever the number of processes (as long as the budget holds a pair per piece):
    the gradient (normalised by the tokens of the
    whole step, Trainer's ``num_items_in_batch``) equals that of one process given the summed budget.
    Because the global batch is cut after it is filled, a piece can exceed ``max_tokens`` a little (by 4% at
    most on the synthetic reversal corpus, budget 200, 2 to 4 processes); a global batch never exceeds its
    budget unless it holds only one pair per piece.
    """

    def __init__(self, source_lengths: Sequence[int], target_lengths: Sequence[int], max_tokens: int, seed: int,
                 num_processes: int = 1, rank: int = 0, accumulation_steps: int = 1):
        if len(source_lengths) != len(target_lengths):
            raise ValueError(f"{len(source_lengths)} source lengths but {len(target_lengths)} target lengths")
        self.num_processes, self.rank, self.accumulation_steps = num_processes, rank, accumulation_steps
        self.max_tokens = max_tokens  # padded source + target tokens of one micro-batch on one process
        self.seed = seed
        self.epoch = 0
        parts = num_processes * accumulation_steps
        if len(source_lengths) < parts:
            raise ValueError(f"{len(source_lengths)} training pairs cannot fill one batch on each of {num_processes} "
                             f"process(es) x {accumulation_steps} accumulation step(s)")
        too_long = [i for i, (s, t) in enumerate(zip(source_lengths, target_lengths, strict=True)) if s + t > max_tokens]
        if too_long:
            i = too_long[0]
            raise ValueError(
                f"--max_tokens_per_batch {max_tokens} is smaller than {len(too_long)} training pair(s) alone, e.g. "
                f"pair {i} ({source_lengths[i]} source + {target_lengths[i]} target tokens): raise the budget to at "
                f"least {max(source_lengths[j] + target_lengths[j] for j in too_long)} or lower "
                "--max_source_length / --max_target_length")
        self.batches = [split_balanced(batch, source_lengths, target_lengths, parts)
                        for batch in self._global_batches(source_lengths, target_lengths, max_tokens * parts, parts)]

    def _global_batches(self, source_lengths, target_lengths, budget: int, parts: int) -> list[list[int]]:
        """Steps 1 and 2 of the class docstring: length-sorted global batches of at least ``parts`` pairs."""
        order = torch.randperm(len(source_lengths), generator=torch.Generator().manual_seed(self.seed)).tolist()
        order.sort(key=lambda i: (source_lengths[i], target_lengths[i]))  # stable: ties keep the random order
        batches = fill_to_budget(order, source_lengths, target_lengths, budget, min_size=parts)
        if len(batches) > 1 and len(batches[-1]) < parts:
            batches[-2].extend(batches.pop())
        return batches

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        """Micro-batches of this process in one epoch: the same on every process."""
        return len(self.batches) * self.accumulation_steps

    def __iter__(self) -> Iterator[list[int]]:
        for b in torch.randperm(len(self.batches), generator=epoch_generator(self.seed, self.epoch)).tolist():
            for step in range(self.accumulation_steps):
                yield self.batches[b][step * self.num_processes + self.rank]


__all__ = ["LengthGroupedEpochSampler", "TokenBudgetBatchSampler", "epoch_generator", "fill_to_budget",
           "padded_tokens", "split_balanced"]
