"""Coverage penalty for beam search (Wu et al. 2016, GNMT, arXiv:1609.08144, eq. 14; OpenNMT-py's
``-coverage_penalty wu -beta B``): hypotheses whose cross-attention has left source words unattended lose score,

    s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y),    cp(X; Y) = beta * sum_i log(min(sum_j p_ij, 1.0)),

p_ij the attention of target word j on source word i (the last decoder layer's, averaged over heads, and over
members in an ensemble: the weights translate.alignment plots), i over the real source tokens. beta 0 is off.

How the stock ``generate()`` applies it, as OpenNMT-py does by default (its ``-stepwise_penalty`` off) and GNMT
ranks complete hypotheses: the beams grow by log-probability as usual, and the penalty enters the score of a
hypothesis when it ends. Beam search divides a finished hypothesis' running sum of processed log-probabilities by
``length ** length_penalty`` (its lp); a logits processor that adds ``cp * t ** length_penalty`` to the end token's
score of a hypothesis that becomes t tokens long (to every token's at the length limit, where all hypotheses end)
makes that finished score exactly ``log P / lp + cp``.
(Penalizing every step instead, OpenNMT-py's ``-stepwise_penalty``, ranks partial hypotheses by how evenly they have
spread their attention so far: on the main job's model it cost 3.9 and 9.0 validation BLEU at beta 0.1 and 0.2.)

A processor sees only the token ids and the scores, not the attention, and beam search reorders hypotheses every
step. So the coverage lives in the decoding cache of :class:`hf_s2s.inference.ensemble.Seq2SeqEnsemble` (an ensemble of one
model for a single model), which ``generate()`` reorders with the beams; the wrapper asks its members for the
cross-attention of each step (eager kernel) only while a :class:`CoveragePenaltyLogitsProcessor` is attached.
"""

import torch
from transformers import LogitsProcessor

from ..models.output_vocabulary import OutputVocabulary, with_compact_eos


def coverage_penalty(coverage: torch.Tensor, source_mask: torch.Tensor, beta: float) -> torch.Tensor:
    """GNMT eq. 14: beta * sum_i log(min(coverage_i, 1)) over the real source tokens. coverage, source_mask (N, S)
    (attention summed over the target steps so far; True on real tokens) -> (N,)."""
    capped = coverage.clamp(max=1.0).masked_fill(~source_mask, 1.0)  # padding contributes log 1 = 0
    return beta * capped.log().sum(dim=-1)


class CoveragePenaltyLogitsProcessor(LogitsProcessor):
    """Adds ``cp * length ** length_penalty`` (see the module docstring) to the score of every continuation that ends
    a hypothesis: the end token's, and at the last step allowed by ``max_length`` (the whole sequence's, decoder
    start token included, as generate() counts it) every token's, since beam search finishes all of them there. It
    reads the coverage from ``decoder``'s current cache. Beam search only (greedy search never compares finished
    hypotheses), from the decoder start token alone (no decoder prompt); ``length_penalty`` must be the one
    ``generate()`` uses."""

    def __init__(self, decoder, beta: float, length_penalty: float, eos_token_id: int, max_length: int):
        if beta < 0:
            raise ValueError(f"coverage_penalty (beta) must be >= 0 (0 = off), got {beta}")
        self.decoder = decoder
        self.beta = beta
        self.length_penalty = length_penalty
        self.eos_token_id = eos_token_id
        self.max_length = max_length

    def for_output_vocabulary(self, vocabulary: OutputVocabulary) -> "CoveragePenaltyLogitsProcessor":
        """The processor of a call decoding over a shortlist's compact ids: its end token mapped."""
        return with_compact_eos(self, vocabulary)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """input_ids (N, t): the start token and t - 1 generated ones, so a hypothesis ending here is t tokens
        long, as beam search counts; scores (N, V) log-probabilities."""
        state = self.decoder.coverage_state
        length = input_ids.shape[1]
        penalty = coverage_penalty(state.coverage, state.source_mask, self.beta) * length ** self.length_penalty
        penalty = penalty.to(scores.dtype)[:, None]  # (N, 1)
        if length + 1 >= self.max_length:  # the length limit ends every hypothesis here
            return scores + penalty
        scores = scores.clone()
        scores[:, self.eos_token_id : self.eos_token_id + 1] += penalty
        return scores
