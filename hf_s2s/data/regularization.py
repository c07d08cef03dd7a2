"""Subword regularization: a new segmentation of every training sentence in every epoch, sampled from the tokenizer's
own subword model, so that the model sees many segmentations of each word (the standard regularizer for small
corpora, offered by OpenNMT-py, fairseq, Joey NMT and Marian):

- BPE-dropout (Provilkov et al. 2020, arXiv:1910.13267): while a word is merged, each applicable merge is left out
  with probability ``p`` at every step; ``p = 0`` gives the tokenizer's own segmentation. The name follows
  tokenizers' ``BPE(dropout=p)``.
- Unigram sampling (Kudo 2018, arXiv:1804.10959, section 3.3 with l = infinity): a segmentation ``x`` of a word is
  drawn with probability proportional to ``P(x) ** alpha`` over all its segmentations (forward filtering, backward
  sampling on the lattice); sentencepiece's and tokenizers' ``alpha`` with ``nbest_size = -1``. Smaller ``alpha``
  spreads the draws more; a large one gives the Viterbi segmentation.

Both run here, in Python, on the vocabulary of the fast tokenizer (trained by hf_s2s or converted from a SentencePiece
``.model``), with its own normalizer and pre-tokenizer, because the samplers of tokenizers and sentencepiece draw from
a random state that cannot be seeded per sentence. Here every draw comes from a generator seeded with ``(seed,
epoch, example index)``: the same segmentations for the same seed, whatever the batch order, the number of data
loader workers, or where a resumed run starts. Without sampling (``p = 0``; Viterbi) the code gives the tokenizer's
own ids, which tests check on Multi30k.

Only training batches are resegmented (:class:`RegularizedTrainSet`); validation, test decoding and the saved tokenizer
keep the deterministic segmentation.
"""

from __future__ import annotations

import json
import logging
import math
import random
from typing import Any

import torch
from transformers import PreTrainedTokenizerFast

from .encoding import sequence_lengths, truncate
from .tokenization import PROBE_TEXT

logger = logging.getLogger(__name__)

METASPACE = "▁"


def check_regularization(bpe_dropout: float | None, unigram_alpha: float | None) -> None:
    """Refuse values outside the ranges the methods are defined for, naming the flag."""
    if bpe_dropout is not None and not 0.0 <= bpe_dropout < 1.0:
        raise ValueError(f"--bpe_dropout is the probability of leaving out a merge, in [0, 1), got {bpe_dropout} "
                         "(Provilkov et al. use 0.1)")
    if unigram_alpha is not None and not (unigram_alpha > 0.0 and math.isfinite(unigram_alpha)):
        raise ValueError(f"--unigram_alpha is the exponent of the segmentation probabilities, a positive number, got "
                         f"{unigram_alpha} (Kudo uses 0.1 to 0.5 with sampling over all segmentations)")
    if bpe_dropout is not None and unigram_alpha is not None:
        raise ValueError("--bpe_dropout (BPE tokenizers) and --unigram_alpha (Unigram tokenizers) regularize different "
                         "subword models; pass the one of your tokenizer")


def _model_state(tokenizer: PreTrainedTokenizerFast) -> dict:
    return json.loads(tokenizer.backend_tokenizer.to_str())["model"]


class SubwordSampler:
    """Samples segmentations of text with a fast tokenizer's BPE or Unigram model (the module docstring says how).

    ``encode(text, rng)`` gives ids without special tokens; ``sample_ids`` adds the tokenizer's own (``</s>`` at the
    end, for hf_s2s's tokenizers). Text that spells an added token (``</s>``, ``<pad>``) is encoded by the tokenizer
    itself, unsampled: those tokens are cut out of the text before segmentation, which this sampler does not do.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerFast, bpe_dropout: float | None = None,
                 unigram_alpha: float | None = None, side: str = "tokenizer"):
        check_regularization(bpe_dropout, unigram_alpha)
        self.tokenizer = tokenizer
        backend = tokenizer.backend_tokenizer
        self.normalizer, self.pre_tokenizer = backend.normalizer, backend.pre_tokenizer
        state = _model_state(tokenizer)
        kind = state["type"]
        if kind not in ("BPE", "Unigram"):
            raise ValueError(f"subword regularization samples BPE or Unigram segmentations; the {side} is a {kind} "
                             "model")
        if kind == "BPE" and unigram_alpha is not None:
            raise ValueError(f"--unigram_alpha samples Unigram segmentations, but the {side} is a BPE model: use "
                             "--bpe_dropout")
        if kind == "Unigram" and bpe_dropout is not None:
            raise ValueError(f"--bpe_dropout leaves out BPE merges, but the {side} is a Unigram model: use "
                             "--unigram_alpha")
        self.kind = kind
        self.dropout = bpe_dropout or 0.0
        self.alpha = unigram_alpha
        self.byte_fallback = bool(state.get("byte_fallback"))
        if kind == "BPE":
            for option in ("continuing_subword_prefix", "end_of_word_suffix"):
                if state.get(option):
                    raise ValueError(f"--bpe_dropout: the {side}'s BPE model uses {option}={state[option]!r}, "
                                     "which the sampler here does not")
            self.vocab: dict[str, int] = state["vocab"]
            merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
            self.ranks = {pair: rank for rank, pair in enumerate(merges)}
            self.unk_id = self.vocab.get(state["unk_token"]) if state.get("unk_token") else None
            self.fuse_unk = bool(state.get("fuse_unk"))
            self.ignore_merges = bool(state.get("ignore_merges"))
        else:
            pieces = state["vocab"]
            self.vocab = {piece: index for index, (piece, _) in enumerate(pieces)}
            self.scores = [score for _, score in pieces]
            self.unk_id = state.get("unk_id")
            # tokenizers' (and sentencepiece's) score of an unknown character: 10 below the lowest piece's
            self.unk_score = min(self.scores) - 10.0
            self.longest = max(len(piece) for piece, _ in pieces)
        # A text is cut before each "▁" when no piece holds one after its first character: no piece can then span a
        # cut, so segmenting the parts alone is segmenting the whole (a SentencePiece model has no pre-tokenizer and
        # would otherwise make one long word of each sentence).
        self.cut_at_metaspace = not any(METASPACE in piece[1:] for piece in self.vocab)
        self.added = [token for token in tokenizer.get_added_vocab() if token]
        self._prefix, self._suffix = self._special_ids(tokenizer)

    @staticmethod
    def _special_ids(tokenizer) -> tuple[list[int], list[int]]:
        """The ids the tokenizer puts before and after a sentence's own ids (hf_s2s's: none, and ``</s>``)."""
        plain = tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]
        full = tokenizer(PROBE_TEXT)["input_ids"]
        for start in range(len(full) - len(plain) + 1):
            if full[start: start + len(plain)] == plain:
                return full[:start], full[start + len(plain):]
        raise ValueError(f"cannot tell the special tokens of the tokenizer: {PROBE_TEXT!r} encodes to {full} with them "
                         f"and {plain} without")

    # --- words ---------------------------------------------------------------------------------------------------

    def _words(self, text: str) -> list[str]:
        normalized = self.normalizer.normalize_str(text) if self.normalizer is not None else text
        words = [word for word, _ in self.pre_tokenizer.pre_tokenize_str(normalized)] \
            if self.pre_tokenizer is not None else [normalized]
        if not self.cut_at_metaspace:
            return [word for word in words if word]
        parts = []
        for word in words:
            start = 0
            for position in range(1, len(word)):
                if word[position] == METASPACE:
                    parts.append(word[start:position])
                    start = position
            parts.append(word[start:])
        return [part for part in parts if part]

    def _unknown_ids(self, text: str) -> list[int]:
        """Ids of characters no piece covers: their UTF-8 bytes with byte fallback, else ``<unk>``."""
        if self.byte_fallback:
            byte_ids = [self.vocab.get(f"<0x{byte:02X}>") for byte in text.encode("utf-8")]
            if None not in byte_ids:
                return byte_ids
        return [self.unk_id] if self.unk_id is not None else []

    # --- BPE-dropout ---------------------------------------------------------------------------------------------

    def _bpe(self, word: str, rng: random.Random | None) -> list[int]:
        """tokenizers' BPE with dropout: repeatedly apply the best-ranked merge (leftmost on ties) among those not
        dropped at this step; stop when every applicable merge is dropped or none is left. No dropout when ``rng``
        is None."""
        dropout = self.dropout if rng is not None else 0.0
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        symbols: list[str | None] = []  # None: a run of unknown characters (kept apart from merging)
        unknown: list[str] = []
        for char in word:
            if char in self.vocab:
                symbols.append(char)
            elif self.fuse_unk and symbols and symbols[-1] is None and not self.byte_fallback:
                unknown[-1] += char
            else:
                symbols.append(None)
                unknown.append(char)
        while True:
            pairs = enumerate(zip(symbols[:-1], symbols[1:], strict=True))
            candidates = sorted((self.ranks[pair], position) for position, pair in pairs if pair in self.ranks)
            chosen = next((position for _, position in candidates
                           if not (dropout and rng.random() < dropout)), None)
            if chosen is None:
                break
            symbols[chosen: chosen + 2] = [symbols[chosen] + symbols[chosen + 1]]
        ids, unknown_runs = [], iter(unknown)
        for symbol in symbols:
            ids += [self.vocab[symbol]] if symbol is not None else self._unknown_ids(next(unknown_runs))
        return ids

    # --- Unigram sampling ----------------------------------------------------------------------------------------

    def _lattice(self, word: str) -> list[list[tuple[int, int | None, float]]]:
        """``ends[j]``: the nodes ``(start, piece id, score)`` that end at character ``j`` of ``word``; a character
        no one-character piece covers gets an unknown node (id None) of the unknown score, as in tokenizers."""
        ends: list[list[tuple[int, int | None, float]]] = [[] for _ in range(len(word) + 1)]
        for start in range(len(word)):
            single = False
            for end in range(start + 1, min(len(word), start + self.longest) + 1):
                piece_id = self.vocab.get(word[start:end])
                if piece_id is not None:
                    ends[end].append((start, piece_id, self.scores[piece_id]))
                    single |= end == start + 1
            if not single:
                ends[start + 1].append((start, None, self.unk_score))
        return ends

    def _unigram(self, word: str, rng: random.Random | None) -> list[int]:
        """A segmentation of ``word`` drawn with probability proportional to ``P(x) ** alpha`` (forward filtering,
        backward sampling); the best one (Viterbi) when ``rng`` is None."""
        ends = self._lattice(word)
        # forward: best[j] or log of the summed alpha-scaled probability of every path to j
        forward = [0.0] + [-math.inf] * len(word)
        for end in range(1, len(word) + 1):
            values = [forward[start] + (score if rng is None else self.alpha * score) for start, _, score in ends[end]]
            if rng is None:
                forward[end] = max(values)
            else:
                top = max(values)
                forward[end] = top + math.log(sum(math.exp(v - top) for v in values))
        nodes, end = [], len(word)
        while end > 0:
            if rng is None:
                # the first node of highest score, as tokenizers' Viterbi keeps the first best
                node = max(ends[end], key=lambda n: forward[n[0]] + n[2])
            else:
                weights = [math.exp(forward[start] + self.alpha * score - forward[end])
                           for start, _, score in ends[end]]
                node = rng.choices(ends[end], weights=weights)[0]
            nodes.append(node)
            end = node[0]
        nodes.reverse()
        ids, position = [], 0
        while position < len(nodes):  # consecutive unknown characters are one unknown token (tokenizers' fuse_unk)
            start, piece_id, _ = nodes[position]
            if piece_id is not None:
                ids.append(piece_id)
                position += 1
                continue
            stop = position
            while stop < len(nodes) and nodes[stop][1] is None:
                stop += 1
            end = nodes[stop - 1][0] + 1
            ids += self._unknown_ids(word[start:end])
            position = stop
        return ids

    # --- sentences -----------------------------------------------------------------------------------------------

    def encode(self, text: str, rng: random.Random | None) -> list[int]:
        """Ids of ``text`` without special tokens: a sampled segmentation, or the deterministic one (the tokenizer's
        own, ``p = 0`` / Viterbi) when ``rng`` is None."""
        if any(token in text for token in self.added):
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = []
        for word in self._words(text):
            ids += self._bpe(word, rng) if self.kind == "BPE" else self._unigram(word, rng)
        return ids

    def sample_ids(self, text: str, rng: random.Random | None) -> list[int]:
        """:meth:`encode` with the tokenizer's special tokens around it, as ``tokenizer(text)["input_ids"]``."""
        return [*self._prefix, *self.encode(text, rng), *self._suffix]


def example_generator(seed: int, epoch: int, index: int) -> random.Random:
    """The generator of one training example's segmentations in one epoch: a pure function of its arguments (seeded
    through SHA-512 of the string, stable across processes and Python versions)."""
    return random.Random(f"hf_s2s-subwords/{seed}/{epoch}/{index}")


class RegularizedTrainSet(torch.utils.data.Dataset):
    """The tokenized training split with its sentences resegmented in every epoch (``set_epoch``, told by the trainer).

    ``tokenized`` is the deterministic tokenization (``input_ids``, ``labels``; what the batch samplers read lengths
    from), ``pairs`` the raw ``(source, target)`` texts in the same order. Item ``i`` in epoch ``e`` is segmented with
    :func:`example_generator` ``(seed, e, i)``, then truncated to the length limits as the corpus was (first tokens and
    the final ``</s>``).
    """

    def __init__(self, tokenized: Any, pairs: list[tuple[str, str]], source: SubwordSampler, target: SubwordSampler,
                 seed: int, max_source_length: int | None, max_target_length: int | None):
        if len(tokenized) != len(pairs):
            raise ValueError(f"{len(tokenized)} tokenized examples but {len(pairs)} sentence pairs")
        self.tokenized, self.pairs = tokenized, pairs
        self.source, self.target = source, target
        self.seed = seed
        self.max_source_length, self.max_target_length = max_source_length, max_target_length
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        rng = example_generator(self.seed, self.epoch, index)
        source_text, target_text = self.pairs[index]
        source, _ = truncate(self.source.sample_ids(source_text, rng), self.max_source_length,
                             self.source.tokenizer.eos_token_id)
        labels, _ = truncate(self.target.sample_ids(target_text, rng), self.max_target_length,
                             self.target.tokenizer.eos_token_id)
        return {"input_ids": source, "attention_mask": [1] * len(source), "labels": labels}

    def lengths(self) -> tuple[list[int], list[int]]:
        """Source and target lengths of the deterministic segmentation, which the batch samplers plan with."""
        return sequence_lengths(self.tokenized, "input_ids"), sequence_lengths(self.tokenized, "labels")


__all__ = ["RegularizedTrainSet", "SubwordSampler", "check_regularization", "example_generator"]
