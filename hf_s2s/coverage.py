"""Coverage penalty for beam search (Wu et al. 2016, GNMT, arXiv:1609.08144, eq. 14; OpenNMT-py's
``-coverage_penalty wu -beta B``): hypotheses whose cross-attention has left source words unattended lose score,

    s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y),    cp(X; Y) = beta * sum_i log(min(sum_j p_ij, 1.0)),

p_ij the attention of target word j on source word i (the last decoder layer's, averaged over heads, and over
members in an ensemble: the weights translate.alignment plots), i over the real source tokens. beta 0 is off.

How the stock ``generate()`` applies it. Beam search ranks hypotheses by their running sum of processed
log-probabilities and divides a finished hypothesis' sum by ``length ** length_penalty`` (its lp). A logits
processor may add a per-hypothesis amount to every continuation of it; adding, at the step that makes the
hypothesis t tokens long, ``cp_t * t ** length_penalty - cp_{t-1} * (t-1) ** length_penalty`` keeps the running sum
equal to ``log P + cp_t * t ** length_penalty``, so a hypothesis finishing at length t scores exactly
``log P / t ** length_penalty + cp_t`` (GNMT's s(Y, X)), and continuations of one length are ranked by it too.

A processor sees only the token ids and the scores, not the attention, and beam search reorders hypotheses every
step. So the coverage lives in the decoding cache of :class:`hf_s2s.ensemble.Seq2SeqEnsemble` (an ensemble of one
model for a single model), which ``generate()`` reorders with the beams; the wrapper asks its members for the
cross-attention of each step (eager kernel) only while a :class:`CoveragePenaltyLogitsProcessor` is attached.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from transformers import LogitsProcessor


@contextmanager
def eager_attention(models: Sequence) -> Iterator[None]:
    """Run ``models`` on the eager attention kernel inside the block, the only one that returns attention weights
    (sdpa and the others return None), and switch each back to its own kernel afterwards."""
    kernels = {model: model.config._attn_implementation for model in models
               if getattr(model.config, "_attn_implementation", None) not in (None, "eager")}
    for model in kernels:
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        for model, kernel in kernels.items():
            model.set_attn_implementation(kernel)


def coverage_penalty(coverage: torch.Tensor, source_mask: torch.Tensor, beta: float) -> torch.Tensor:
    """GNMT eq. 14: beta * sum_i log(min(coverage_i, 1)) over the real source tokens. coverage, source_mask (N, S)
    (attention summed over the target steps so far; True on real tokens) -> (N,)."""
    capped = coverage.clamp(max=1.0).masked_fill(~source_mask, 1.0)  # padding contributes log 1 = 0
    return beta * capped.log().sum(dim=-1)


class CoveragePenaltyLogitsProcessor(LogitsProcessor):
    """Adds the change of ``cp * length ** length_penalty`` (see the module docstring) to every continuation of each
    hypothesis, reading the coverage from ``decoder``'s current cache. Beam search only (greedy search picks the
    same token whatever a per-hypothesis constant is), from the decoder start token alone (no decoder prompt).
    ``length_penalty`` must be the one ``generate()`` uses."""

    def __init__(self, decoder, beta: float, length_penalty: float):
        if beta < 0:
            raise ValueError(f"coverage_penalty (beta) must be >= 0 (0 = off), got {beta}")
        self.decoder = decoder
        self.beta = beta
        self.length_penalty = length_penalty

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """input_ids (N, t): the start token and t - 1 generated ones, so a continuation ending here is t tokens
        long, as beam search counts; scores (N, V) log-probabilities."""
        state = self.decoder.coverage_state
        length = input_ids.shape[1]
        now = coverage_penalty(state.coverage, state.source_mask, self.beta) * length ** self.length_penalty
        if length > 1:  # what the previous step added for this hypothesis' prefix
            before = state.coverage - state.step_attention  # (N, S)
            now = now - coverage_penalty(before, state.source_mask, self.beta) * (length - 1) ** self.length_penalty
        return scores + now[:, None].to(scores.dtype)
