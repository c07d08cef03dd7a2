"""Terminology constraints for ``generate()``: target terms that must appear in a sentence's translation.

``generate(..., target_terms=terms)``: ``terms[b]`` lists sentence b's required target terms, each a list of target
token ids (a glossary's target term, tokenized alone: ``hf_s2s.inference.glossary`` finds which terms a source needs).
Every hypothesis (greedy row, beam, sample) is steered by :class:`TargetTermsLogitsProcessor`, which reads its state
from the hypothesis' own tokens at every step, so it follows beam search's reordering with no bookkeeping of its own:

1. a term is *met* once its token sequence occurs in the hypothesis; while one is not, the hypothesis cannot end:
   </s> is closed, and its probability goes to the first token of the first term not met, so a hypothesis that
   would end writes the term instead;
2. a hypothesis whose last tokens are the beginning of a term not met (it started the term) continues that term:
   its next token is forced;
3. the first token of every term not met gets ``bonus`` added to its score (log-probability under beam search, a
   logit under greedy search: alike, ``bonus`` nats more odds), so a term starts where the model finds it plausible;
4. a hypothesis whose remaining length (its source-relative bound or ``max_length``) only just holds the terms not
   met starts the first of them now.

Sentences without terms are not touched: their scores pass unchanged, so they decode exactly as without constraints.
This is a greedy, per-hypothesis steering, not the reserved beams of Post & Vilar's dynamic beam allocation (NAACL
2018, arXiv:1804.06609; fairseq's ``--constraints``): under beam search a hypothesis without the term may still lose
its place to those that have started it, and a started term is completed even where it later turns out to fit
badly.

Copied beside the modeling files into every saved model folder (``save_pretrained`` follows single-dot relative
imports), so it imports nothing from hf_s2s.
"""

import math

import torch
from transformers import LogitsProcessor

# The score added to the first token of each term not yet met, in nats (see the module docstring, rule 3).
DEFAULT_TERM_BONUS = 2.0


def check_target_terms(target_terms, batch_size: int, vocab_size: int) -> list[list[list[int]]]:
    """``target_terms`` as lists, deduplicated per sentence, or a ValueError naming what is wrong: one list per
    sentence of the batch (``batch_size``), each term a non-empty list of target token ids in [0, ``vocab_size``)."""
    if not isinstance(target_terms, list | tuple) or len(target_terms) != batch_size:
        given = f"{len(target_terms)} entries" if isinstance(target_terms, list | tuple) else type(target_terms).__name__
        raise ValueError(f"target_terms must hold one list of terms per sentence of the batch ({batch_size}), got "
                         f"{given}")
    checked = []
    for index, terms in enumerate(target_terms):
        if not isinstance(terms, list | tuple):
            raise ValueError(f"target_terms[{index}] must be a list of terms (lists of token ids), got "
                             f"{type(terms).__name__}")
        unique = []
        for term in terms:
            ids = [int(token) for token in term] if isinstance(term, list | tuple | torch.Tensor) else None
            if not ids or any(not 0 <= token < vocab_size for token in ids):
                raise ValueError(f"target_terms[{index}] holds {term!r}: each term must be a non-empty list of "
                                 f"target token ids in [0, {vocab_size})")
            if ids not in unique:
                unique.append(ids)
        checked.append(unique)
    return checked


class TargetTermsLogitsProcessor(LogitsProcessor):
    """Steers each hypothesis towards its sentence's target terms (the module docstring's rules 1-4).

    target_terms: per sentence, its terms (lists of token ids, in the ids the scores are indexed by); rows_per_sentence:
    the hypotheses of one sentence (beams or returned sequences), consecutive rows as generate() lays them out;
    max_new_tokens: (rows,) the most tokens each row may generate, </s> included; prompt_length: the decoder positions
    before the first generated token; eos_token_id: the end token(s); bonus: rule 3's score, in nats."""

    def __init__(self, target_terms: list[list[list[int]]], rows_per_sentence: int, max_new_tokens: torch.Tensor,
                 prompt_length: int, eos_token_id: torch.Tensor, bonus: float = DEFAULT_TERM_BONUS):
        pairs = [(sentence * rows_per_sentence + beam, term) for sentence, terms in enumerate(target_terms)
                 for beam in range(rows_per_sentence) for term in terms]
        device = max_new_tokens.device
        self.prompt_length = prompt_length
        self.max_new_tokens = max_new_tokens  # (rows,)
        self.eos_token_id = eos_token_id.reshape(-1).to(device)  # (n_eos,)
        self.bonus = bonus
        self.longest = max((len(term) for _, term in pairs), default=0)  # L
        # one entry per (row, term) pair: P pairs
        self.pair_row = torch.tensor([row for row, _ in pairs], dtype=torch.long, device=device)  # (P,)
        self.pair_length = torch.tensor([len(term) for _, term in pairs], dtype=torch.long, device=device)  # (P,)
        self.pair_terms = torch.full((len(pairs), max(self.longest, 1)), -1, dtype=torch.long, device=device)  # (P, L)
        for index, (_, term) in enumerate(pairs):
            self.pair_terms[index, : len(term)] = torch.tensor(term, dtype=torch.long)

    def term_state(self, generated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per pair: whether its row's tokens hold the term (met, (P,) bool), and how many of its first tokens the
        row ends with, below the whole term (progress, (P,) long, 0 when it has not started it).
        generated: (rows, g) the tokens generated so far."""
        pairs, longest = len(self.pair_row), self.longest
        fill = -2  # matches no token and no padding of pair_terms
        # each pair's row with room on both sides, so every window of L tokens and every suffix can be compared
        tokens = generated[self.pair_row]  # (P, g)
        padded = torch.cat([tokens.new_full((pairs, longest), fill), tokens, tokens.new_full((pairs, longest), fill)],
                           dim=1)  # (P, g + 2L)
        wildcard = self.pair_terms < 0  # (P, L): positions past a shorter term's end
        windows = padded.unfold(1, longest, 1)  # (P, g + L + 1, L)
        met = ((windows == self.pair_terms[:, None, :]) | wildcard[:, None, :]).all(dim=-1).any(dim=1)  # (P,)
        progress = torch.zeros(pairs, dtype=torch.long, device=generated.device)
        end = padded.shape[1] - longest  # the position after the last generated token
        for length in range(1, longest):
            suffix = padded[:, end - length : end]  # (P, length)
            started = (suffix == self.pair_terms[:, :length]).all(dim=1) & (length < self.pair_length)
            progress = torch.where(started, length, progress)
        return met, progress

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """input_ids: (rows, cur_len); scores: (rows, V) -> (rows, V)"""
        if len(self.pair_row) == 0:
            return scores
        rows = scores.shape[0]
        generated = input_ids[:, self.prompt_length :]  # (rows, g)
        met, progress = self.term_state(generated)
        unmet = ~met  # (P,)
        if not unmet.any():
            return scores
        scores = scores.clone()
        slots = self.max_new_tokens - generated.shape[1]  # (rows,) tokens this row may still generate, this one too
        # a row at its last token keeps </s> (a bound too short for its terms, which generate() raises when it can)
        row_unmet = torch.zeros(rows, dtype=torch.bool, device=scores.device).index_fill(0, self.pair_row[unmet], True)
        row_unmet &= slots > 1
        first_tokens = self.pair_terms[:, 0]  # (P,)
        # the first term not met of each row (the lowest pair index): rules 1 and 4
        pair_index = torch.arange(len(self.pair_row), device=scores.device)
        first_unmet = torch.full((rows,), len(self.pair_row), dtype=torch.long, device=scores.device).scatter_reduce(
            0, self.pair_row[unmet], pair_index[unmet], reduce="amin")  # (rows,), P where none
        has_unmet = (first_unmet < len(self.pair_row)) & row_unmet
        opening = first_tokens[first_unmet.clamp(max=len(self.pair_row) - 1)]  # (rows,) first token to write
        # rule 3: the bonus on the first token of every term not met and not started
        fresh = unmet & (progress == 0)
        scores[self.pair_row[fresh], first_tokens[fresh]] += self.bonus
        # rule 1: </s> closed; its probability goes to the first term's opening token
        eos_scores = scores[:, self.eos_token_id].logsumexp(dim=1)  # (rows,)
        opening_scores = scores.gather(1, opening[:, None]).squeeze(1)
        handed = torch.logaddexp(opening_scores, eos_scores)
        scores[has_unmet, opening[has_unmet]] = handed[has_unmet]
        scores[:, self.eos_token_id] = scores[:, self.eos_token_id].masked_fill(row_unmet[:, None], -math.inf)
        # rule 2: a started term continues (the longest start of a row wins); rule 4: out of room, open the first term
        started = unmet & (progress > 0)
        key = torch.where(started, progress * len(self.pair_row) + pair_index, -1)  # (P,)
        best = torch.full((rows,), -1, dtype=torch.long, device=scores.device).scatter_reduce(
            0, self.pair_row, key, reduce="amax")  # (rows,)
        chosen = best.clamp(min=0) % len(self.pair_row)  # (rows,) the pair each continuing row follows
        forced = torch.where((best >= 0) & row_unmet, self.pair_terms[chosen, progress[chosen]], -1)  # -1: none
        needed = torch.zeros(rows, dtype=torch.long, device=scores.device).index_add_(
            0, self.pair_row[unmet], (self.pair_length - progress)[unmet])  # tokens still to write, per row
        out_of_room = has_unmet & (best < 0) & (slots <= needed + 1)
        forced = torch.where(out_of_room, opening, forced)
        force = forced >= 0
        if force.any():
            kept = scores[force].gather(1, forced[force][:, None])  # (n, 1)
            kept = kept.masked_fill(kept.isneginf(), 0.0)  # a token another processor removed comes back
            scores[force] = torch.full_like(scores[force], -math.inf).scatter_(1, forced[force][:, None], kept)
        return scores


__all__ = ["DEFAULT_TERM_BONUS", "TargetTermsLogitsProcessor", "check_target_terms"]
