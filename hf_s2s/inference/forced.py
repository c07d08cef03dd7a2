"""Forced decoding (teacher forcing): what a model makes of translations it is given rather than the ones it
generates. The decoder reads the given target tokens as its inputs, one step behind (the decoder start token, then
each target token), in one forward pass, as in training; each position's next-token distribution then gives the
log-probability of the token that follows, and the attention weights of the pass are the attention that would have
produced that translation. This is what marian-scorer, fairseq's ``--score-reference`` and OpenNMT-py's ``-tgt``
("gold score") compute; ``hf-s2s score`` prints it and the attention explorer's "your translation" shows it.

The generated hypotheses of an n-best list go through the same pass (:func:`force_hypotheses`): their attention is
the one that produced them (``generate(output_attentions=True)``'s weights along each hypothesis, as
:func:`hf_s2s.inference.translate.attentions` reads the best one's).

Shapes: B sentences of a batch, S source tokens (</s> included), T target tokens (</s> included where the
translation has it), V the target vocabulary, L layers, H heads.
"""

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from ..data.tokenization import target_side
from .attention import eager_attention
from .decoding import batches_by_length, check_count, check_positions, decode_lines
from .ensemble import Seq2SeqEnsemble
from .translate import (
    DEFAULT_BATCH_SIZE,
    _source_limit,
    encode_sources,
    has_source_attention,
    position_limit,
    tokenizer_encoder,
)


@dataclass
class ForcedTranslation:
    """One (source, target) pair read by the model under teacher forcing."""

    source_ids: list[int]  # S token ids, </s> included
    target_ids: list[int]  # T token ids: the translation after the decoder start token
    source_tokens: list[str]  # the S source tokens as strings
    target_tokens: list[str]  # the T target tokens as strings
    token_log_probs: list[float]  # T natural-log probabilities, log p(target_t | target_<t, source)
    cross_attentions: torch.Tensor | None = None  # (L, H, T, S) the decoder's attention over the source (an RNN: one
    # "layer" of its attention mechanism); None unless asked for
    encoder_attentions: torch.Tensor | None = None  # (L, H, S, S), row i what source token i attended to; None for an
    # RNN, whose encoder has no self-attention, or unless asked for

    @property
    def score(self) -> float:
        """The translation's log-probability: the sum of its tokens' (natural log)."""
        return sum(self.token_log_probs)


def _target_ids(tokenizer, targets: Sequence[str | Sequence[int]]) -> list[list[int]]:
    """Each target as token ids: a text is tokenized by the target side of ``tokenizer`` (</s> appended, as a
    training label is), a sequence of ids is taken as it is."""
    texts = [index for index, target in enumerate(targets) if isinstance(target, str)]
    encoded = target_side(tokenizer)([targets[i] for i in texts])["input_ids"] if texts else []
    ids = [list(target) if not isinstance(target, str) else None for target in targets]
    for index, target in zip(texts, encoded, strict=True):
        ids[index] = target
    return ids


def check_forced_model(model) -> None:
    """Refuse a model forced decoding cannot read: an ensemble (whose members attend each on its own)."""
    if isinstance(model, Seq2SeqEnsemble):
        raise ValueError(f"forced decoding reads one model; got {type(model).__name__} (an ensemble: score with one "
                         "of its folders)")


@torch.no_grad()
def force_decode(model, tokenizer, sources: Sequence[str], targets: Sequence[str | Sequence[int]], *,
                 batch_size: int = DEFAULT_BATCH_SIZE, output_attentions: bool = False,
                 max_source_length: int | None = None) -> list[ForcedTranslation]:
    """Each ``(sources[i], targets[i])`` pair read by ``model`` under teacher forcing, in input order.

    ``targets``: texts (tokenized by the target side of ``tokenizer``, </s> appended) or token ids of the target
    vocabulary (taken as they are: a generated hypothesis without the decoder start token). Sources are read as
    :func:`~hf_s2s.inference.translate.translate` reads them (cut to the source limit, the cut ones named in a
    warning). Pairs are read in batches of ``batch_size`` of similar length; a pair's numbers do not depend on its
    batch (float32, up to rounding: tests/test_forced.py holds batched, single and the model's own forward pass equal).
    ``output_attentions``: every layer's and head's weights too (the eager kernel is switched on for the pass)."""
    check_count("batch_size", batch_size)
    check_forced_model(model)
    if len(sources) != len(targets):
        raise ValueError(f"forced decoding reads (source, target) pairs: got {len(sources)} sources and "
                         f"{len(targets)} targets")
    if output_attentions and not has_source_attention(model.config):
        raise ValueError(f"{type(model).__name__} has no attention over the source (attention_type "
                         f"{model.config.attention_type!r}): there are no attention weights to return")
    target_ids = _target_ids(tokenizer, targets)
    longest = max(map(len, target_ids), default=0)
    check_positions(longest, position_limit(model.config), f"a target of {longest} tokens")
    vocabulary = len(target_side(tokenizer))
    for index, ids in enumerate(target_ids):
        if not ids:
            raise ValueError(f"target {index + 1} (counted from 1) has no tokens: give at least </s>")
        if not all(0 <= token < vocabulary for token in ids):
            raise ValueError(f"target {index + 1} (counted from 1) holds a token id outside the target vocabulary "
                             f"(0 to {vocabulary - 1}): {[token for token in ids if not 0 <= token < vocabulary][:5]}")
    limit, reason = _source_limit(tokenizer, max_source_length, [model.config])
    source_ids = encode_sources(tokenizer, list(sources), list(range(len(sources))), limit, reason)
    return _force_ids(model, tokenizer, source_ids, target_ids, batch_size=batch_size,
                      output_attentions=output_attentions)


def _force_ids(model, tokenizer, source_ids: list[list[int]], target_ids: list[list[int]], *, batch_size: int,
               output_attentions: bool) -> list[ForcedTranslation]:
    """:func:`force_decode` of pairs of token ids, in batches of similar length; in input order."""
    model.eval()
    results: list[ForcedTranslation | None] = [None] * len(source_ids)
    lengths = [len(s) + len(t) for s, t in zip(source_ids, target_ids, strict=True)]  # padding follows both
    with eager_attention([model]) if output_attentions else nullcontext():
        for indices in batches_by_length(lengths, batch_size):
            found = _force_batch(model, tokenizer, [source_ids[i] for i in indices], [target_ids[i] for i in indices],
                                 output_attentions)
            for index, pair in zip(indices, found, strict=True):
                results[index] = pair
    return results


def _force_batch(model, tokenizer, sources: list[list[int]], targets: list[list[int]], output_attentions: bool
                 ) -> list[ForcedTranslation]:
    """One forward pass over a batch of pairs (token ids), right-padded."""
    device = next(model.parameters()).device
    batch = tokenizer.pad({"input_ids": sources}, return_tensors="pt").to(device)
    pad, start = model.config.pad_token_id, model.config.decoder_start_token_id
    width = max(map(len, targets))
    labels = torch.full((len(targets), width), pad, dtype=torch.long)  # (B, T)
    for row, ids in enumerate(targets):
        labels[row, : len(ids)] = torch.tensor(ids)
    labels = labels.to(device)
    # the decoder reads the start token, then each target token but the last: one step behind the labels
    decoder_input_ids = torch.cat([torch.full_like(labels[:, :1], start), labels[:, :-1]], dim=1)  # (B, T)
    outputs = model(**batch, decoder_input_ids=decoder_input_ids, output_attentions=output_attentions)
    log_probs = outputs.logits.float().log_softmax(dim=-1)  # (B, T, V)
    picked = log_probs.gather(2, labels[:, :, None]).squeeze(2)  # (B, T)
    cross = torch.stack(outputs.cross_attentions, dim=1).float() if output_attentions else None  # (B, L, H, T, S)
    encoder = outputs.encoder_attentions if output_attentions else None
    encoder = torch.stack(encoder, dim=1).float() if encoder else None  # (B, L, H, S, S)
    source_side, target = tokenizer, target_side(tokenizer)
    found = []
    for row, (source, ids) in enumerate(zip(sources, targets, strict=True)):
        s, t = len(source), len(ids)
        found.append(ForcedTranslation(
            source_ids=list(source), target_ids=list(ids),
            source_tokens=source_side.convert_ids_to_tokens(list(source)),
            target_tokens=target.convert_ids_to_tokens(list(ids)),
            token_log_probs=picked[row, :t].tolist(),
            cross_attentions=None if cross is None else cross[row, :, :, :t, :s].cpu(),
            encoder_attentions=None if encoder is None else encoder[row, :, :, :s, :s].cpu(),
        ))
    return found


def hypothesis_ids(sequences: torch.Tensor, pad_token_id: int, eos_token_id: int) -> list[list[int]]:
    """The target token ids of each generated sequence (generate()'s ``sequences``, (N, 1 + T), the decoder start
    token first): up to and including its first </s>, or, where none came (the length bound), without the padding
    that follows it."""
    found = []
    for row in sequences[:, 1:].tolist():
        if eos_token_id in row:
            row = row[: row.index(eos_token_id) + 1]
        else:
            while row and row[-1] == pad_token_id:
                row.pop()
        found.append(row)
    return found


@torch.no_grad()
def force_hypotheses(model, tokenizer, sentences: Sequence[str], *, batch_size: int = DEFAULT_BATCH_SIZE,
                     output_attentions: bool = True, **generate_kwargs) -> list[list[ForcedTranslation]]:
    """Translate ``sentences`` with ``generate_kwargs`` (the options of
    :meth:`~hf_s2s.inference.decoding.DecodingOptions.generate_kwargs`, ``num_return_sequences`` among them) in the
    batches :func:`~hf_s2s.inference.translate.translate_with_options` decodes them in (so the same hypotheses), and
    read each returned hypothesis, best first, under teacher forcing: its tokens, their log-probabilities and the
    attention that produced it. A blank sentence is not decoded: it has no hypotheses."""
    check_forced_model(model)
    model.eval()
    device = next(model.parameters()).device
    config = model.generation_config
    eos = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id

    def decode(sources: list[list[int]]) -> list[list[ForcedTranslation]]:
        batch = tokenizer.pad({"input_ids": sources}, return_tensors="pt").to(device)
        sequences = model.generate(**batch, **generate_kwargs)
        if not isinstance(sequences, torch.Tensor):  # return_dict_in_generate in the model's generation config
            sequences = sequences.sequences
        targets = hypothesis_ids(sequences, model.config.pad_token_id, eos)
        n = len(targets) // len(sources)
        read = _force_ids(model, tokenizer, [source for source in sources for _ in range(n)], targets,
                          batch_size=len(targets), output_attentions=output_attentions)
        return [read[row * n : (row + 1) * n] for row in range(len(sources))]

    limit, reason = _source_limit(tokenizer, None, [model.config])
    return decode_lines(sentences, tokenizer_encoder(tokenizer), decode, limit=limit, reason=reason,
                        batch_size=batch_size, blank=[])


__all__ = ["ForcedTranslation", "check_forced_model", "force_decode", "force_hypotheses", "hypothesis_ids"]
