"""Corpus filters applied while the corpus loads, as OpenNMT-py's filter transforms do: they DROP a pair,
where ``max_source_length`` / ``max_target_length`` (:func:`hf_s2s.data.encoding.tokenize_corpus`) TRUNCATE one.

Two kinds, applied where what they read first exists:

- text filters (identical sides, repeated pairs) need no tokenizer: :meth:`CorpusFilter.filter_texts` runs
  them on the loaded corpus, before a tokenizer is trained on it, so that it learns from the kept pairs only;
- token filters (longest source, longest target, length ratio) count tokens of the run's tokenizer as the
  model is fed them, ``</s>`` included, before truncation: :func:`~hf_s2s.data.encoding.tokenize_corpus` runs
  them (:func:`token_verdict`) as it encodes.

A dropped pair is counted under the first filter that drops it, in the order of :data:`FILTER_NAMES`. Only the
splits the filter is given are filtered (the run's: ``train``, and validation and test when asked). Counts
cover the whole split for a corpus in memory; a streamed split is counted as it is read
(:class:`FilterCounts`).

A split the filters leave without a pair is an :class:`EmptySplitError` naming the split, the filters that removed
its pairs and their counts, raised where that stage filters it, so before anything is trained on it: a split in
memory is counted whole there; a streamed one is read up to the first pair the stage keeps (:meth:`CorpusFilter.
check_kept`), which reads it whole only when no pair is kept, the case the error is for.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field

from datasets import Dataset, IterableDataset

logger = logging.getLogger(__name__)

# Why a pair was dropped, in the order the filters are tried.
FILTER_NAMES = ("identical", "duplicate", "source_too_long", "target_too_long", "length_ratio")
# The PairFilters field whose filter drops a pair for each reason of FILTER_NAMES.
FILTER_FIELDS = {"identical": "identical", "duplicate": "duplicates", "source_too_long": "max_source_tokens",
                 "target_too_long": "max_target_tokens", "length_ratio": "max_length_ratio"}
# The PairFilters fields of the filters that count tokens.
TOKEN_FILTER_FIELDS = ("max_source_tokens", "max_target_tokens", "max_length_ratio")
# What a split's pairs are used for, as an empty split's error says it.
SPLIT_PURPOSES = {"train": "to train on", "validation": "to validate on", "test": "to score the test set on"}


class EmptySplitError(ValueError):
    """The filters removed every pair of a split."""


@dataclass(frozen=True)
class PairFilters:
    """Which pairs to drop. Token counts are those of the run's tokenizer, ``</s>`` included."""

    max_source_tokens: int | None = None  # drop a pair whose source encodes to more tokens than this
    max_target_tokens: int | None = None  # drop a pair whose target encodes to more tokens than this
    # drop a pair whose longer side has more than this times the shorter side's tokens
    max_length_ratio: float | None = None
    identical: bool = False  # drop a pair whose source and target are the same text, up to whitespace
    duplicates: bool = False  # drop a pair that came before in its split (both sides, up to whitespace)

    @property
    def on_texts(self) -> bool:
        """Some filter reads the texts (no tokenizer needed)."""
        return self.identical or self.duplicates

    @property
    def on_tokens(self) -> bool:
        """Some filter reads token counts."""
        return any(getattr(self, name) is not None for name in TOKEN_FILTER_FIELDS)

    def __bool__(self) -> bool:
        return self.on_texts or self.on_tokens

    def settings(self) -> dict:
        """The filters that are on, with their values (for results.json and the log)."""
        return {name: value for name, value in vars(self).items() if value not in (None, False)}


def check_filters(filters: PairFilters, flags: dict[str, str] | None = None) -> None:
    """ValueError naming the flag (``flags`` maps field names to the command line's) of a value no filter can
    use."""
    flags = flags or {}
    for name in ("max_source_tokens", "max_target_tokens"):
        value = getattr(filters, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
            raise ValueError(f"{flags.get(name, name)} must be an integer of at least 2 tokens (one token and "
                             f"</s>; a pair above it is dropped), got {value!r}")
    ratio = filters.max_length_ratio
    if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, int | float)
                              or not math.isfinite(ratio) or ratio < 1):
        raise ValueError(f"{flags.get('max_length_ratio', 'max_length_ratio')} must be a number of at least 1 (the "
                         f"longer side's tokens over the shorter's; 1 keeps only pairs of equal length), got "
                         f"{ratio!r}")


@dataclass
class FilterCounts:
    """What the filters did to one split. ``complete``: every pair of the split was counted (always, in
    memory; for a streamed split, once a whole pass has been read, and until then the counts are of the pairs
    read so far)."""

    pairs: int = 0  # pairs that reached the filters (non-empty ones: the loader skips empty pairs before)
    removed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FILTER_NAMES, 0))
    complete: bool = False

    @property
    def kept(self) -> int:
        return self.pairs - sum(self.removed.values())

    def to_dict(self) -> dict:
        return {"pairs": self.pairs, "kept": self.kept, "removed": dict(self.removed), "complete": self.complete}


# --------------------------------------------------------------------------------------------- the verdicts


def _text_key(text: str) -> str:
    """The text compared by the text filters: whitespace runs as one space, none at the ends."""
    return " ".join(text.split())


def _pair_digest(source: str, target: str) -> bytes:
    """8 bytes standing for a pair (blake2b: the same in every process, unlike ``hash``): the set of those
    seen is what duplicate removal keeps in memory, 75 bytes per distinct pair in a set (tracemalloc, 1M
    pairs). Two different pairs share one with probability ~n^2 / 2^65 (1 in 4 million for 3 million
    pairs)."""
    return hashlib.blake2b(f"{source}\t{target}".encode(), digest_size=8).digest()


def text_judge(filters: PairFilters) -> Callable[[str, str], str | None]:
    """A judge for one pass through a split: called with each ``(source, target)`` in order, it names the text
    filter that drops the pair, or returns None. It remembers the pairs of its pass (duplicate removal)."""
    seen: set[bytes] = set()

    def verdict(source: str, target: str) -> str | None:
        source, target = _text_key(source), _text_key(target)
        if filters.identical and source == target:
            return "identical"
        if filters.duplicates:
            digest = _pair_digest(source, target)
            if digest in seen:
                return "duplicate"
            seen.add(digest)
        return None

    return verdict


def token_verdict(filters: PairFilters, source_tokens: int, target_tokens: int) -> str | None:
    """The token filter that drops a pair of these lengths (tokens, ``</s>`` included), or None."""
    if filters.max_source_tokens is not None and source_tokens > filters.max_source_tokens:
        return "source_too_long"
    if filters.max_target_tokens is not None and target_tokens > filters.max_target_tokens:
        return "target_too_long"
    if filters.max_length_ratio is not None and \
            max(source_tokens, target_tokens) > filters.max_length_ratio * min(source_tokens, target_tokens):
        return "length_ratio"
    return None


# --------------------------------------------------------------------------------------------- streams


class _StreamCounts:
    """The counts of one filter stage over a streamed split: each pass through the stream counts afresh, and
    the counts shown are those of the pass that has read furthest, so that a pass abandoned early (a peek at
    the first row) does not stand for the split; the first complete pass stays."""

    def __init__(self):
        self.shown = FilterCounts()

    def new_pass(self) -> FilterCounts:
        return FilterCounts()

    def update(self, counts: FilterCounts) -> None:
        if not self.shown.complete and counts.pairs >= self.shown.pairs:
            self.shown = counts


def filter_stream(split: IterableDataset, new_judge: Callable[[], Callable[[dict], str | None]],
                  counts: _StreamCounts) -> IterableDataset:
    """The rows of ``split`` that the judges keep, counted into ``counts``. Each pass through the stream gets
    a judge of its own from ``new_judge`` (duplicate removal remembers one pass only); a judge names why a row
    is dropped, or returns None."""

    def rows() -> Iterator[dict]:
        judge, tally = new_judge(), counts.new_pass()
        for row in split:
            verdict = judge(row)
            tally.pairs += 1
            if verdict is None:
                yield row
            else:
                tally.removed[verdict] += 1
            counts.update(tally)
        tally.complete = True
        counts.update(tally)

    return IterableDataset.from_generator(rows)


# --------------------------------------------------------------------------------------------- the corpus


class CorpusFilter:
    """The run's filters, the splits they apply to, and what they removed from each, stage by stage. ``flags``
    maps :class:`PairFilters` field names, and ``"splits"`` (the option that applies the filters beyond ``train``),
    to the command line's flags, for the errors; without it they name the fields."""

    def __init__(self, filters: PairFilters, splits: Collection[str], source_lang: str, target_lang: str,
                 flags: Mapping[str, str] | None = None):
        self.filters = filters
        self.splits = tuple(splits)
        self.source_lang, self.target_lang = source_lang, target_lang
        self.flags = dict(flags or {})
        self._stages: dict[str, dict[str, FilterCounts | _StreamCounts]] = {"text": {}, "token": {}}

    def applies_to(self, split: str) -> bool:
        return bool(self.filters) and split in self.splits

    def filter_texts(self, corpus):
        """``corpus`` with the text filters applied to the splits they are for (the same kind of
        DatasetDict)."""
        if not self.filters.on_texts:
            return corpus
        for split in [name for name in corpus if self.applies_to(name)]:
            corpus[split] = self._filter_split_texts(split, corpus[split])
            self.check_kept(split, corpus[split])
        return corpus

    def _filter_split_texts(self, split: str, dataset: Dataset | IterableDataset) -> Dataset | IterableDataset:
        source_lang, target_lang = self.source_lang, self.target_lang
        if isinstance(dataset, IterableDataset):
            def new_judge() -> Callable[[dict], str | None]:
                judge = text_judge(self.filters)
                return lambda row: judge(row["translation"][source_lang], row["translation"][target_lang])
            return filter_stream(dataset, new_judge, self._stage("text", split, streamed=True))
        counts, judge, keep = self._stage("text", split, streamed=False), text_judge(self.filters), []
        # read a batch at a time: row by row a datasets split costs ~10 us a row, all at once a Python dict a
        # pair
        pairs = (pair for batch in dataset.iter(batch_size=10_000) for pair in batch["translation"])
        for index, pair in enumerate(pairs):
            verdict = judge(pair[source_lang], pair[target_lang])
            if verdict is None:
                keep.append(index)
            else:
                counts.removed[verdict] += 1
        counts.pairs, counts.complete = len(dataset), True
        return dataset.select(keep) if len(keep) < len(dataset) else dataset

    def keep_by_tokens(self, pairs: list[dict], tokenizer) -> list[dict]:
        """The ``translation`` dicts of ``pairs`` the token filters keep, judged on the token counts
        :func:`~hf_s2s.data.encoding.tokenize_corpus` judges (``tokenizer(source)``,
        ``tokenizer(text_target=target)``): for a split decoded from its texts, the test set."""
        if not self.filters.on_tokens:
            return pairs
        sources = tokenizer([pair[self.source_lang] for pair in pairs])["input_ids"]
        targets = tokenizer(text_target=[pair[self.target_lang] for pair in pairs])["input_ids"]
        return [pair for pair, source, target in zip(pairs, sources, targets, strict=True)
                if token_verdict(self.filters, len(source), len(target)) is None]

    def check_kept(self, split: str, dataset: Dataset | IterableDataset | list) -> None:
        """An :class:`EmptySplitError` when ``dataset``, ``split`` as a filter stage left it, holds no pair. A stream
        is read up to its first pair (the stage counts that partial pass as it counts any other), and so whole when
        it holds none: then the counts of that pass are complete and the error gives them."""
        empty = next(iter(dataset), None) is None if isinstance(dataset, IterableDataset) else len(dataset) == 0
        if not empty:
            return
        counts = self.counts()[split]
        removed = [f"{self.flags.get(FILTER_FIELDS[name], FILTER_FIELDS[name])} removed {n:,}"
                   for name, n in counts.removed.items() if n]
        beyond_train = (f", or leave out {self.flags.get('splits', 'the filters of this split')} to keep it whole"
                        if split != "train" else "")
        raise EmptySplitError(
            f"the corpus filters removed every pair of split '{split}' ({counts.pairs:,} pairs: "
            f"{', '.join(removed)}), leaving nothing {SPLIT_PURPOSES.get(split, 'to use')}: loosen those filters or "
            f"leave them out{beyond_train}")

    def token_counts(self, split: str, streamed: bool) -> FilterCounts | _StreamCounts:
        """Where :func:`~hf_s2s.data.encoding.tokenize_corpus` counts the token filters' drops of ``split``."""
        return self._stage("token", split, streamed)

    def _stage(self, stage: str, split: str, streamed: bool) -> FilterCounts | _StreamCounts:
        counts = _StreamCounts() if streamed else FilterCounts()
        self._stages[stage][split] = counts
        return counts

    def counts(self) -> dict[str, FilterCounts]:
        """What the filters removed from each split so far, both stages together: the pairs that reached the
        first stage, each drop under its filter; complete when every stage has counted the whole split."""
        result = {}
        for split in self.splits:
            stages = [self._stages[stage][split] for stage in ("text", "token") if split in self._stages[stage]]
            stages = [s.shown if isinstance(s, _StreamCounts) else s for s in stages]
            if not stages:
                continue
            merged = FilterCounts(pairs=stages[0].pairs, complete=all(s.complete for s in stages))
            for counts in stages:
                for name, removed in counts.removed.items():
                    merged.removed[name] += removed
            result[split] = merged
        return result

    def report(self) -> dict | None:
        """For results.json: the filters that are on and what they removed per split; None when none is on."""
        if not self.filters:
            return None
        return {"filters": self.filters.settings(), "splits": {split: counts.to_dict()
                                                               for split, counts in self.counts().items()}}

    def log(self) -> None:
        """One line per split: what each filter removed (a streamed split: of the pairs read so far)."""
        for split, counts in self.counts().items():
            removed = ", ".join(f"{n} {name}" for name, n in counts.removed.items() if n) or "none"
            scope = "" if counts.complete else " (streamed: of the pairs read so far)"
            logger.warning("corpus filters, split '%s': kept %d of %d pairs%s; removed: %s", split, counts.kept,
                           counts.pairs, scope, removed)


__all__ = ["FILTER_FIELDS", "FILTER_NAMES", "TOKEN_FILTER_FIELDS", "CorpusFilter", "EmptySplitError", "FilterCounts",
           "PairFilters", "check_filters", "filter_stream", "text_judge", "token_verdict"]
