"""A translation corpus tokenized into what a seq2seq model is fed: ``input_ids``, ``attention_mask`` and ``labels``.

:func:`tokenize_corpus` turns the ``translation`` column of a (Iterable)DatasetDict (:mod:`hf_s2s.data.corpus`)
into token ids; the token filters of :mod:`hf_s2s.data.filters` drop pairs on their full token counts before
:func:`truncate` cuts what is longer than the length limits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow.compute
from datasets import Dataset, IterableDataset, IterableDatasetDict

from .corpus import AnyDatasetDict, make_dataset_dict
from .filters import CorpusFilter, FilterCounts, PairFilters, filter_stream, token_verdict

logger = logging.getLogger(__name__)


@dataclass
class TruncationStats:
    """How many examples of a split were cut to the length limits (None when unknown: a streamed split)."""

    examples: int | None
    source_truncated: int | None
    target_truncated: int | None


def truncate(ids: list[int], max_length: int | None, eos_id: int) -> tuple[list[int], bool]:
    """Keep the first ``max_length - 1`` tokens and the final ``</s>`` (what the tokenizer's own truncation
    does with a post-processor)."""
    if max_length is None or len(ids) <= max_length:
        return ids, False
    return ids[: max_length - 1] + [eos_id], True


def tokenize_corpus(
    dataset: AnyDatasetDict,
    tokenizer: Any,
    source_lang: str,
    target_lang: str,
    max_source_length: int | None = 128,
    max_target_length: int | None = 128,
    target_tokenizer: Any = None,
    num_proc: int | None = None,
    return_stats: bool = False,
    corpus_filter: CorpusFilter | None = None,
) -> AnyDatasetDict | tuple[AnyDatasetDict, dict[str, TruncationStats]]:
    """Tokenize a translation (Iterable)DatasetDict into ``input_ids``, ``attention_mask`` and ``labels``.

    Sources go through ``tokenizer``, targets through ``target_tokenizer(text_target=...)`` (default:
    ``tokenizer``, a joint vocabulary). The token filters of ``corpus_filter`` (:mod:`hf_s2s.data.filters`)
    drop the pairs they judge on their full token counts, and count them; then sequences longer than the
    limits keep their first tokens and their final ``</s>``. How many were cut is logged as a warning, and
    returned per split with ``return_stats=True`` (as ``(tokenized, {split: TruncationStats})``), counted on
    the kept pairs. ``num_proc`` processes encode an in-memory split (datasets' ``map``; a stream is encoded
    as it is read). A split the token filters leave without a pair is an
    :class:`~hf_s2s.data.filters.EmptySplitError` (a stream is read up to its first kept pair to tell).
    """
    target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer
    for name, value in (("max_source_length", max_source_length), ("max_target_length", max_target_length)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
            raise ValueError(f"`{name}` must be None or an integer >= 2 (room for one token and </s>), got {value!r}")

    def encoder(filters: PairFilters | None) -> Callable[[dict[str, list]], dict[str, list]]:
        def encode(batch: dict[str, list]) -> dict[str, list]:
            sources = [pair[source_lang] for pair in batch["translation"]]
            targets = [pair[target_lang] for pair in batch["translation"]]
            source_ids = tokenizer(sources)["input_ids"]
            target_ids = target_tokenizer(text_target=targets)["input_ids"]
            out: dict[str, list] = {"input_ids": [], "attention_mask": [], "labels": [], "_src_cut": [],
                                    "_tgt_cut": [], "_drop": []}
            for src, tgt in zip(source_ids, target_ids, strict=True):
                # "" keeps the pair (a string either way: one Arrow type for every batch)
                out["_drop"].append((token_verdict(filters, len(src), len(tgt)) or "") if filters else "")
                src, src_cut = truncate(src, max_source_length, tokenizer.eos_token_id)
                tgt, tgt_cut = truncate(tgt, max_target_length, target_tokenizer.eos_token_id)
                out["input_ids"].append(src)
                out["attention_mask"].append([1] * len(src))
                out["labels"].append(tgt)
                out["_src_cut"].append(src_cut)
                out["_tgt_cut"].append(tgt_cut)
            return out
        return encode

    tokenized, stats = {}, {}
    for split, split_ds in dataset.items():
        filtered = corpus_filter is not None and corpus_filter.filters.on_tokens and \
            corpus_filter.applies_to(split)
        encode = encoder(corpus_filter.filters if filtered else None)
        if isinstance(split_ds, IterableDataset):
            mapped = split_ds.map(encode, batched=True, remove_columns=["translation"])
            if filtered:
                mapped = filter_stream(mapped, lambda: lambda row: row["_drop"] or None,
                                       corpus_filter.token_counts(split, streamed=True))
            tokenized[split] = mapped.remove_columns(["_src_cut", "_tgt_cut", "_drop"])
            stats[split] = TruncationStats(None, None, None)
            if filtered:
                corpus_filter.check_kept(split, tokenized[split])
            continue
        mapped = split_ds.map(encode, batched=True, remove_columns=split_ds.column_names, num_proc=num_proc,
                              desc=f"tokenizing {split}")
        if filtered:
            mapped = _drop_judged(mapped, corpus_filter.token_counts(split, streamed=False), num_proc)
            corpus_filter.check_kept(split, mapped)
        # Column[:] reads a column at once; iterating a datasets Column goes row by row, ~100x slower.
        stats[split] = TruncationStats(len(mapped), sum(mapped["_src_cut"][:]), sum(mapped["_tgt_cut"][:]))
        tokenized[split] = mapped.remove_columns(["_src_cut", "_tgt_cut", "_drop"])
        if stats[split].source_truncated or stats[split].target_truncated:
            logger.warning(
                "split '%s': truncated %d of %d sources to max_source_length=%s and %d targets to "
                "max_target_length=%s", split, stats[split].source_truncated, len(mapped), max_source_length,
                stats[split].target_truncated, max_target_length,
            )
    tokenized = make_dataset_dict(tokenized, streaming=isinstance(dataset, IterableDatasetDict))
    return (tokenized, stats) if return_stats else tokenized


def _drop_judged(mapped: Dataset, counts: FilterCounts, num_proc: int | None) -> Dataset:
    """The rows of an encoded split whose ``_drop`` verdict is empty; the others counted per filter."""
    verdicts = mapped["_drop"][:]
    counts.pairs, counts.complete = len(verdicts), True
    for verdict in verdicts:
        if verdict:
            counts.removed[verdict] += 1
    if counts.kept == counts.pairs:
        return mapped
    return mapped.filter(lambda verdict: not verdict, input_columns="_drop", num_proc=num_proc)


def sequence_lengths(dataset: Dataset, column: str) -> list[int]:
    """The length of the list in ``column`` of every row (``input_ids``: source tokens), read from Arrow a
    batch at a time: iterating the column row by row takes ~30 µs a row (1.5 min for 3 million rows)."""
    lengths: list[int] = []
    for batch in dataset.with_format("arrow").iter(batch_size=10_000):
        lengths += pyarrow.compute.list_value_length(batch[column]).to_pylist()
    return lengths


__all__ = ["TruncationStats", "sequence_lengths", "tokenize_corpus", "truncate"]
