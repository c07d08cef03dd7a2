"""Decoding over part of the target vocabulary: the K tokens a ``generate()`` call may produce (a vocabulary shortlist's,
``shortlist.py``), searched in a compact id space of their own.

With a shortlist, each sentence of a call may generate only its own tokens; the call's union of them is K of the V
target tokens (``token_ids``, sorted). ``generate()`` then decodes with compact ids 0..K-1, compact id k standing for
full id ``token_ids[k]``:

- the output layer multiplies only the K rows of its weight (gathered once per call) and returns (rows, T, K) logits,
  each row's tokens outside its own sentence's list at -inf; the decoder maps its input ids compact -> full before the
  embedding (``full_ids``);
- everything after the output layer, the logits processors, the softmax, beam search's top-k and its bookkeeping,
  works on K columns instead of V: the search costs what the shortlist holds, at every batch size;
- the ids the search reads are mapped to compact ids once per call (:func:`map_generation_config`, the processors'
  own ids through :func:`compact_processors`): the generation config's special tokens, suppressed and bad words,
  sequence biases, a term constraint's terms. A processor whose ids cannot be mapped (a user's own, one built from the
  source ids, ``prefix_allowed_tokens_fn``'s) sees the full vocabulary, as without a shortlist, through
  :class:`FullVocabularyView` (correct, at the cost of V columns for that processor);
- the returned sequences are mapped back to full ids, and the scores and logits (when asked for) to (rows, V), -inf
  outside the shortlist (:meth:`OutputVocabulary.full_output`).

Compact ids are sorted as the full ones, so ties (argmax, top-k) break towards the same token as over the full
vocabulary. Greedy search gives the ids and scores of the full-vocabulary reference path bit for bit (the output layer
computes the same K columns; no normalization); beam search gives its ids, and its log-probabilities up to the
rounding of a softmax sum over K terms instead of V with zeros (~1e-6). A shortlist holding every token (K = V) is the
identity: bit for bit the decoding without one. ``OutputVocabulary(..., compact=False)`` keeps the reference path: the
K columns written into (rows, T, V) logits, -inf elsewhere, and everything else on the full vocabulary.

Sampling draws from the same distributions, but not the same random numbers as over V: a seeded sampling run gives
other samples than the same run without the compact ids.

Copied beside the modeling files into every saved model folder (``save_pretrained`` follows single-dot relative
imports), so it imports nothing from hf_s2s.
"""

import copy
from collections.abc import Iterable

import torch
import torch.nn.functional as F
import transformers.generation as generation
from torch import nn
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

# The generation config's fields holding one target token id (or a list of them) that a call may generate.
SPECIAL_TOKEN_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "forced_bos_token_id",
                        "forced_eos_token_id")

# transformers' processors that read no token ids (they act on the scores' values, or compare ids only with each
# other), and those whose ids come from the generation config's fields that map_generation_config maps: both work on
# compact ids unchanged. Resolved by name, so a release without one of them still loads this file.
_COMPACT_SAFE_PROCESSORS = tuple(filter(None, (getattr(generation, name, None) for name in (
    "TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "TopHLogitsWarper", "MinPLogitsWarper",
    "TypicalLogitsWarper", "EpsilonLogitsWarper", "EtaLogitsWarper", "RepetitionPenaltyLogitsProcessor",
    "NoRepeatNGramLogitsProcessor", "InfNanRemoveLogitsProcessor", "LogitNormalization",
    # ids from the mapped generation config
    "MinLengthLogitsProcessor", "MinNewTokensLengthLogitsProcessor", "NoBadWordsLogitsProcessor",
    "SequenceBiasLogitsProcessor", "ForcedBOSTokenLogitsProcessor", "ForcedEOSTokenLogitsProcessor",
    "ExponentialDecayLengthPenalty", "SuppressTokensLogitsProcessor", "SuppressTokensAtBeginLogitsProcessor"))))
_COMPACT_SAFE_CRITERIA = tuple(filter(None, (getattr(generation, name, None) for name in (
    "MaxLengthCriteria", "MaxTimeCriteria", "EosTokenCriteria"))))


class OutputVocabulary:
    """What one ``generate()`` call may generate, per sentence: ``allowed`` (B, V) bool. The call decodes over the K
    tokens some sentence allows, plus ``extra_ids`` (a decoder prompt's tokens, which must be representable though no
    sentence may generate them): ``token_ids`` (K,), sorted full ids; compact id k is full id ``token_ids[k]``.

    generate() passes it to forward as a model input (an object, so that generate() does not repeat it per beam as it
    repeats tensors). A forward given it reads compact decoder ids and returns (rows, T, K) logits (``compact``; else
    (rows, T, V), the reference path), rows = B x the hypotheses per sentence, laid out as generate() lays them out
    (each sentence's rows together)."""

    def __init__(self, allowed: torch.Tensor, extra_ids: Iterable[int] = (), compact: bool = True):
        if allowed.dim() != 2 or allowed.dtype != torch.bool or not bool(allowed.any(dim=1).all()):
            raise ValueError(f"an output vocabulary is a (sentences, V) bool tensor with a token in every row, got "
                             f"{tuple(allowed.shape)} {allowed.dtype}")
        self.vocab_size = allowed.shape[1]  # V
        representable = allowed.any(dim=0)  # (V,)
        extra = torch.as_tensor(list(extra_ids), dtype=torch.long)
        if extra.numel() and (int(extra.min()) < 0 or int(extra.max()) >= self.vocab_size):
            raise ValueError(f"decoder ids must lie in the target vocabulary [0, {self.vocab_size}), got "
                             f"{int(extra.min())} .. {int(extra.max())}")
        representable[extra] = True
        self.token_ids = representable.nonzero().squeeze(1)  # (K,) full ids, sorted
        self.blocked = ~allowed[:, self.token_ids]  # (B, K): True where the sentence may not generate the token
        self.any_blocked = bool(self.blocked.any())  # False: every sentence may generate all K (one sentence, say)
        self.compact = compact
        self.compact_of = torch.full((self.vocab_size,), -1, dtype=torch.long)  # (V,) full -> compact id, -1: none
        self.compact_of[self.token_ids] = torch.arange(len(self.token_ids))
        self._rows = {}  # output layer -> (its weight's version, weight (K, H), bias (K,) or None), see logits()
        self._blocked_rows = {}  # (rows, device) -> (rows, K) bool, the blocked mask repeated over each hypothesis

    def __len__(self) -> int:
        return len(self.token_ids)

    def __repr__(self) -> str:
        return f"OutputVocabulary({len(self)} of {self.vocab_size} target tokens, {len(self.blocked)} sentences)"

    # the output layer ---------------------------------------------------------------------------------------------

    def logits(self, lm_head: nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
        """The output layer on the K rows: hidden_states (rows, T, H) -> logits (rows, T, K) (the reference path:
        (rows, T, V), -inf outside the K), each row's allowed tokens as the full layer would give them, -inf at the
        others. The gathered (K, H) rows are kept per layer (an ensemble's members each have one) while its weight is
        unchanged: a decoding call gathers them once."""
        if not isinstance(lm_head, nn.Linear):
            raise ValueError(f"a shortlist gathers rows of the output layer's weight, which needs an nn.Linear output "
                             f"layer; this model's is {type(lm_head).__name__} (int8 weights?): decode it in float "
                             "precision, or without the shortlist")
        weight, bias = lm_head.weight, lm_head.bias
        if weight.shape[0] != self.vocab_size:
            raise ValueError(f"the shortlist is for {self.vocab_size} target tokens but the output layer has "
                             f"{weight.shape[0]}")
        rows, sentences = hidden_states.shape[0], len(self.blocked)
        if rows % sentences:
            raise ValueError(f"{rows} decoding rows cannot be the hypotheses of the shortlist's {sentences} sentences")
        key = (weight.data_ptr(), weight._version, weight.dtype, weight.device,
               None if bias is None else (bias.data_ptr(), bias._version))
        if id(lm_head) not in self._rows or self._rows[id(lm_head)][0] != key:
            token_ids = self.token_ids.to(weight.device)
            self._rows[id(lm_head)] = (key, weight.detach().index_select(0, token_ids),  # (K, H)
                                       None if bias is None else bias.detach().index_select(0, token_ids))
        _, rows_weight, rows_bias = self._rows[id(lm_head)]
        logits = F.linear(hidden_states, rows_weight, rows_bias)  # (rows, T, K)
        if self.any_blocked:
            logits = logits.masked_fill(self._blocked(rows, logits.device)[:, None, :], float("-inf"))
        if self.compact:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.vocab_size), float("-inf"))  # (rows, T, V)
        return full.index_copy_(-1, self.token_ids.to(logits.device), logits)

    def _blocked(self, rows: int, device: torch.device) -> torch.Tensor:
        """The (rows, K) blocked mask, each sentence's row repeated over its hypotheses; built once per row count."""
        if (rows, device) not in self._blocked_rows:
            self._blocked_rows[rows, device] = self.blocked.to(device).repeat_interleave(rows // len(self.blocked), 0)
        return self._blocked_rows[rows, device]

    # ids and scores ------------------------------------------------------------------------------------------------

    def full_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Compact ids (any shape) -> full ids; the reference path's ids are full already."""
        if not self.compact:
            return ids
        return self.token_ids.to(ids.device)[ids]

    def compact_ids(self, ids, name: str) -> torch.Tensor:
        """Full ids (a tensor or a list, any shape) -> compact ids; a ValueError naming ``name`` for an id outside the
        call's K tokens."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise ValueError(f"{name} holds ids outside the target vocabulary [0, {self.vocab_size})")
        compact = self.compact_of.to(ids.device)[ids]
        if bool((compact < 0).any()):
            missing = sorted(set(ids[compact < 0].tolist()))
            raise ValueError(f"{name} holds target tokens {missing[:5]} that this call's shortlist does not hold")
        return compact

    def kept(self, ids: Iterable[int]) -> list[int]:
        """The compact ids of those of ``ids`` (full ids) that the call's K tokens hold; the others, which no sentence
        can generate, are left out."""
        return [int(self.compact_of[token]) for token in ids if 0 <= token < self.vocab_size
                and int(self.compact_of[token]) >= 0]

    def full_scores(self, scores: torch.Tensor) -> torch.Tensor:
        """(rows, K) scores -> (rows, V), -inf at the tokens outside the K."""
        full = scores.new_full((*scores.shape[:-1], self.vocab_size), float("-inf"))
        return full.index_copy_(-1, self.token_ids.to(scores.device), scores)

    def full_output(self, output):
        """generate()'s result decoded over compact ids, in full ids: the sequences, and the scores and logits (each
        step's (rows, K) -> (rows, V), -inf outside the K). The reference path's result is returned as it is."""
        if not self.compact:
            return output
        if torch.is_tensor(output):
            return self.full_ids(output)
        output.sequences = self.full_ids(output.sequences)
        for name in ("scores", "logits"):
            steps = getattr(output, name, None)
            if steps is not None:
                setattr(output, name, tuple(self.full_scores(step) for step in steps))
        return output


class FullVocabularyView(LogitsProcessor):
    """A logits processor that reads full ids, run on compact decoding: it sees the full ids and (rows, V) scores, -inf
    outside the call's K tokens, as without the compact ids, and its result's K columns go on. For processors whose ids
    cannot be mapped (a user's own, ``prefix_allowed_tokens_fn``'s, those built from the source ids)."""

    def __init__(self, processor, vocabulary: OutputVocabulary):
        self.processor, self.vocabulary = processor, vocabulary

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """input_ids (rows, t) compact; scores (rows, K) -> (rows, K)"""
        full = self.processor(self.vocabulary.full_ids(input_ids), self.vocabulary.full_scores(scores))  # (rows, V)
        return full.index_select(-1, self.vocabulary.token_ids.to(full.device))


class FullIdsCriteria(StoppingCriteria):
    """A stopping criterion that reads full ids (a user's own, ``stop_strings``'), run on compact decoding."""

    def __init__(self, criteria, vocabulary: OutputVocabulary):
        self.criteria, self.vocabulary = criteria, vocabulary

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        return self.criteria(self.vocabulary.full_ids(input_ids), scores, **kwargs)


def map_generation_config(generation_config, vocabulary: OutputVocabulary) -> None:
    """Map the call's generation config (its own copy) to compact ids: its special tokens (each must be among the K;
    generate(shortlist=...) puts them there), and the suppressed tokens, bad words and sequence biases (those that
    hold a token outside the K, which no sentence can generate, are left out)."""
    for name in SPECIAL_TOKEN_FIELDS:
        value = getattr(generation_config, name, None)
        if value is not None:
            mapped = vocabulary.compact_ids(value, f"the generation config's {name}")
            setattr(generation_config, name, mapped.tolist())
    for name in ("suppress_tokens", "begin_suppress_tokens"):
        value = getattr(generation_config, name, None)
        if value is not None:
            setattr(generation_config, name, vocabulary.kept(value))
    if generation_config.bad_words_ids is not None:
        mapped = [vocabulary.kept(words) for words in generation_config.bad_words_ids]
        generation_config.bad_words_ids = [kept for kept, words in zip(mapped, generation_config.bad_words_ids,
                                                                       strict=True) if len(kept) == len(words)] or None
    if generation_config.sequence_bias is not None:
        biases = generation_config.sequence_bias
        pairs = biases.items() if isinstance(biases, dict) else [(tuple(p[0]), p[1]) for p in biases]
        mapped = {tuple(vocabulary.kept(sequence)): bias for sequence, bias in pairs}
        generation_config.sequence_bias = {sequence: bias for (sequence, bias), (original, _) in
                                           zip(mapped.items(), pairs, strict=True) if len(sequence) == len(original)
                                           } or None


def compact_processors(processors: LogitsProcessorList, vocabulary: OutputVocabulary) -> LogitsProcessorList:
    """generate()'s processors for compact decoding: those that read no ids or the mapped config's as they are, those
    that know how to map themselves (a ``for_output_vocabulary(vocabulary)`` method) mapped, the rest behind
    :class:`FullVocabularyView`."""
    return LogitsProcessorList(_compact(processor, vocabulary, _COMPACT_SAFE_PROCESSORS, FullVocabularyView)
                               for processor in processors)


def compact_criteria(criteria: StoppingCriteriaList, vocabulary: OutputVocabulary) -> StoppingCriteriaList:
    """generate()'s stopping criteria for compact decoding, as :func:`compact_processors` for processors."""
    return StoppingCriteriaList(_compact(criterion, vocabulary, _COMPACT_SAFE_CRITERIA, FullIdsCriteria)
                                for criterion in criteria)


def _compact(item, vocabulary: OutputVocabulary, safe: tuple, view: type):
    if type(item) in safe or isinstance(item, FullVocabularyView | FullIdsCriteria):
        return item
    if hasattr(item, "for_output_vocabulary"):
        return item.for_output_vocabulary(vocabulary)
    return view(item, vocabulary)


def user_processors(processors, vocabulary: OutputVocabulary, view: type):
    """A call's own processors or stopping criteria (full ids, whatever their class) for compact decoding: each mapped
    by its ``for_output_vocabulary`` or put behind ``view``."""
    if processors is None:
        return None
    return type(processors)(item.for_output_vocabulary(vocabulary) if hasattr(item, "for_output_vocabulary")
                            else view(item, vocabulary) for item in processors)


def with_compact_eos(processor, vocabulary: OutputVocabulary, name: str = "eos_token_id"):
    """A copy of ``processor`` whose attribute ``name`` (one end token id, or a tensor of them) is in compact ids: the
    ``for_output_vocabulary`` of a processor whose only token id is the end token."""
    mapped = copy.copy(processor)
    value = getattr(processor, name)
    compact = vocabulary.compact_ids(value, name)
    setattr(mapped, name, compact if torch.is_tensor(value) else compact.tolist())
    return mapped


__all__ = ["SPECIAL_TOKEN_FIELDS", "FullIdsCriteria", "FullVocabularyView", "OutputVocabulary", "compact_criteria",
           "compact_processors", "map_generation_config", "user_processors", "with_compact_eos"]
