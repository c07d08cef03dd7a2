"""Training samplers whose order is a pure function of (seed, epoch), so that a run resumed from a checkpoint
in any epoch sees exactly the batches the uninterrupted run saw.

Trainer's own ``LengthGroupedSampler`` draws its shuffle from the global torch random state at the start of
each epoch. That state has been advanced by every dropout mask of the epochs before, and a resumed run does
not replay them (it restores the random state of the checkpoint only after the epoch's shuffle is drawn), so
from the second epoch on a resumed run shuffled differently and ended with different weights. The samplers
here own their generator, seeded with ``seed + epoch`` (the convention of accelerate's
``SeedableRandomSampler`` and transformers' ``BatchRebalanceSampler``), and Trainer tells them the epoch.

:class:`TokenBudgetBatchSampler` builds batches to a budget of padded source + target tokens, as fairseq's
``--max-tokens``, Marian, OpenNMT-py and Joey NMT do, and shards them across processes itself;
:class:`StreamTokenBudgetBatches` builds the same batches window by window from a stream (OpenNMT-py's
buckets), in memory bounded by the window. Both build them with :func:`length_bucketed_batches`.
"""

import hashlib
import itertools
from collections.abc import Iterable, Iterator, Sequence

import torch
from transformers.trainer_pt_utils import get_length_grouped_indices

# Pairs of a stream sorted and batched together (StreamTokenBudgetBatches): encoded Multi30k pairs hold 1.4 kB
# each as the rows the stream yields (tracemalloc), so 140 MB at this size
DEFAULT_STREAMING_WINDOW_PAIRS = 100_000


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
    if parts == 1:  # one process, no accumulation: the search below would only find the batch again
        return [batch]

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


def length_bucketed_batches(source_lengths: Sequence[int], target_lengths: Sequence[int], budget: int, parts: int,
                            generator: torch.Generator) -> list[list[list[int]]]:
    """Global batches of the pairs ``0 .. n-1`` (their lengths given), each cut into ``parts`` pieces:

    1. the pairs are shuffled with ``generator``, then stably sorted by (source length, target length): length
       buckets whose ties are in random order;
    2. walking that order, a global batch takes pairs while ``n * (max_source + max_target)`` stays within
       ``budget``; it always takes at least ``parts`` pairs, and a last batch too small for that joins the one
       before it (nothing is dropped);
    3. each global batch is cut into ``parts`` pieces balanced by padded tokens (:func:`split_balanced`).
    """
    order = torch.randperm(len(source_lengths), generator=generator).tolist()
    order.sort(key=lambda i: (source_lengths[i], target_lengths[i]))  # stable: ties keep the random order
    batches = fill_to_budget(order, source_lengths, target_lengths, budget, min_size=parts)
    if len(batches) > 1 and len(batches[-1]) < parts:
        batches[-2].extend(batches.pop())
    return [split_balanced(batch, source_lengths, target_lengths, parts) for batch in batches]


def check_pairs_fit(source_lengths: Sequence[int], target_lengths: Sequence[int], max_tokens: int,
                    where: str = "training pair(s)", offset: int = 0) -> None:
    """ValueError when a pair alone (source + target tokens) exceeds ``max_tokens``, naming the first and the
    budget that would hold them all; pairs are numbered from ``offset``."""
    too_long = [i for i, (source, target) in enumerate(zip(source_lengths, target_lengths, strict=True))
                if source + target > max_tokens]
    if too_long:
        i = too_long[0]
        raise ValueError(
            f"--max_tokens_per_batch {max_tokens} is smaller than {len(too_long)} {where} alone, e.g. "
            f"pair {offset + i} ({source_lengths[i]} source + {target_lengths[i]} target tokens): raise the budget "
            f"to at least {max(source_lengths[j] + target_lengths[j] for j in too_long)} or lower "
            "--max_source_length / --max_target_length")


class TokenBudgetBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Batches filled to a budget of padded source + target tokens, built from length buckets, in a shuffled
    order that differs per epoch; for one process of ``num_processes``.

    The batches are built once, from ``seed``, as fairseq's ``--max-tokens`` does
    (:func:`length_bucketed_batches`): length buckets filled to ``max_tokens * num_processes *
    accumulation_steps``, each cut into one piece per process and micro-batch. Each epoch the order of the
    global batches is shuffled with :func:`epoch_generator`. Process ``rank`` yields, for each global batch,
    its piece of each of the ``accumulation_steps`` micro-batches. Every process thus makes the same number of
    steps, the pieces of one step are disjoint, and their union is the global batch, the same whatever the
    number of processes (as long as the budget holds a pair per piece and the last batch of the length order,
    which joins the one before it when smaller than the pieces, is not): the gradient (normalised by the
    tokens of the whole step, Trainer's ``num_items_in_batch``) equals that of one process given the summed
    budget. Because the global batch is cut after it is filled, a piece can exceed ``max_tokens`` a little (by
    4% at most on the synthetic reversal corpus, budget 200, 2 to 4 processes); a global batch never exceeds
    its budget unless it holds only one pair per piece.
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
        check_pairs_fit(source_lengths, target_lengths, max_tokens)
        self.batches = length_bucketed_batches(source_lengths, target_lengths, max_tokens * parts, parts,
                                               torch.Generator().manual_seed(seed))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        """Micro-batches of this process in one epoch: the same on every process."""
        return len(self.batches) * self.accumulation_steps

    def __iter__(self) -> Iterator[list[int]]:
        for b in torch.randperm(len(self.batches), generator=epoch_generator(self.seed, self.epoch)).tolist():
            for step in range(self.accumulation_steps):
                yield self.batches[b][step * self.num_processes + self.rank]


def window_generator(seed: int, pass_number: int, window_number: int) -> torch.Generator:
    """The generator of one window of one pass through a stream: the same on every process and in a resumed
    run."""
    digest = hashlib.blake2b(repr((seed, pass_number, window_number)).encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)  # manual_seed takes < 2**63


class StreamTokenBudgetBatches(torch.utils.data.IterableDataset):
    """:class:`TokenBudgetBatchSampler`'s batches for a stream of tokenized pairs, built window by window, for
    one process of ``num_processes``: the batches themselves (lists of rows), for a DataLoader with
    ``batch_size=None``.

    The stream is read ``window`` pairs at a time (the last window also takes a tail of fewer than one pair
    per piece, so that every pair is used). Each window's pairs make length-bucketed global batches of
    ``max_tokens * num_processes * accumulation_steps`` padded tokens (:func:`length_bucketed_batches`, drawn
    from :func:`window_generator`), yielded in a shuffled order; process ``rank`` yields its piece of each
    micro-batch. At most ``window + num_processes * accumulation_steps`` pairs are held at once.

    Passes through the stream follow each other without end (pass p draws with ``(seed, p)``): Trainer, which
    needs ``max_steps`` for a stream, sees one endless epoch, so a resumed run skips the batches it trained on
    from the start of the stream and then trains on exactly the batches the uninterrupted run did. Every
    process reads the whole stream and builds the same global batches; the pieces of a step are disjoint. They
    are the batches one process builds with the summed budget unless a window ends in a batch of fewer pairs
    than pieces (that batch then joins the one before it), as in memory.
    """

    def __init__(self, stream: Iterable[dict], max_tokens: int, seed: int, window: int, num_processes: int = 1,
                 rank: int = 0, accumulation_steps: int = 1):
        self.stream = stream  # rows with input_ids and labels; iterated afresh for every pass
        self.max_tokens = max_tokens  # padded source + target tokens of one micro-batch on one process
        self.seed = seed
        self.num_processes, self.rank, self.accumulation_steps = num_processes, rank, accumulation_steps
        self.parts = num_processes * accumulation_steps
        if window < self.parts:
            raise ValueError(f"a window of {window} pairs cannot fill one batch on each of {num_processes} "
                             f"process(es) x {accumulation_steps} accumulation step(s)")
        self.window = window  # pairs batched together

    def windows(self) -> Iterator[list[dict]]:
        """One pass through the stream in windows of ``window`` pairs; a tail too small for one pair per piece
        joins the last window."""
        rows = iter(self.stream)
        window = list(itertools.islice(rows, self.window))
        while window:
            following = list(itertools.islice(rows, self.parts))  # read ahead: is the stream about to end?
            if len(following) < self.parts:
                yield window + following
                return
            yield window
            window = following + list(itertools.islice(rows, self.window - self.parts))

    def one_pass(self, pass_number: int) -> Iterator[list[dict]]:
        """This process's micro-batches of one pass through the stream."""
        read = 0
        for number, window in enumerate(self.windows()):
            if len(window) < self.parts:
                raise ValueError(f"the training stream holds {len(window)} pair(s), too few to fill one batch on "
                                 f"each of {self.num_processes} process(es) x {self.accumulation_steps} "
                                 "accumulation step(s)")
            source = [len(row["input_ids"]) for row in window]
            target = [len(row["labels"]) for row in window]
            check_pairs_fit(source, target, self.max_tokens, "pair(s) of the training stream", offset=read)
            read += len(window)
            generator = window_generator(self.seed, pass_number, number)
            batches = length_bucketed_batches(source, target, self.max_tokens * self.parts, self.parts, generator)
            for b in torch.randperm(len(batches), generator=generator).tolist():
                for step in range(self.accumulation_steps):
                    yield [window[i] for i in batches[b][step * self.num_processes + self.rank]]
        if not read:
            raise ValueError("the training stream holds no pairs")

    def __iter__(self) -> Iterator[list[dict]]:
        for pass_number in itertools.count():
            yield from self.one_pass(pass_number)


__all__ = ["DEFAULT_STREAMING_WINDOW_PAIRS", "LengthGroupedEpochSampler", "StreamTokenBudgetBatches",
           "TokenBudgetBatchSampler", "check_pairs_fit",
           "epoch_generator", "fill_to_budget", "length_bucketed_batches", "padded_tokens", "split_balanced",
           "window_generator"]
