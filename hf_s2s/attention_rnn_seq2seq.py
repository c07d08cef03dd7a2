"""Attention modules of the RNN encoder-decoder (Bahdanau and Luong).

Each module splits its score in two parts: ``project_keys`` (what depends on the source only, computed ONCE per
source and kept in the decoder cache) and ``score`` (what depends on the decoder query, computed every step).
``attend`` turns the scores into masked weights and a context vector. Copied into saved model folders: imports
nothing from hf_s2s.
"""

import torch
from torch import nn


def attend(
    scores: torch.Tensor, memory: torch.Tensor, source_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax over the source and the weighted sum of the memory.

    scores: (B, T, S); memory: (B, S, E); source_mask: (B, S) bool, True on real tokens.
    Returns context (B, T, E) and weights (B, T, S). Padding gets weight exactly 0; a row with no real token gets
    all-zero weights and a zero context (no NaN: masked scores use the dtype minimum, not -inf).
    """
    mask = source_mask[:, None, :]  # (B, 1, S)
    scores = scores.float().masked_fill(~mask, torch.finfo(torch.float32).min)  # (B, T, S), softmax in fp32
    weights = (scores.softmax(dim=-1) * mask).to(memory.dtype)  # (B, T, S)
    context = torch.bmm(weights, memory)  # (B, T, E)
    return context, weights


class AdditiveAttention(nn.Module):
    """Additive (concat) attention, Bahdanau et al. 2015 (arXiv:1409.0473), eq. A.1.2 / Luong et al. 2015
    (arXiv:1508.04025), eq. 8 "concat":

        score(q, h_i) = v^T tanh(W_q q + W_h h_i)

    Luong's ``v_a^T tanh(W_a [h_t; h_s])`` is the same function with ``W_a = [W_q, W_h]``. Bahdanau queries with the
    decoder state before the step, s_{t-1}; Luong concat with the current state h_t: the decoder decides which.
    ``W_h h_i`` is the precomputed key.
    """

    def __init__(self, query_size: int, memory_size: int, attention_size: int):
        super().__init__()
        self.query_proj = nn.Linear(query_size, attention_size, bias=False)  # W_q
        self.key_proj = nn.Linear(memory_size, attention_size, bias=False)  # W_h
        self.energy = nn.Linear(attention_size, 1, bias=False)  # v

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        """memory (B, S, E) -> keys W_h h_i (B, S, A)."""
        return self.key_proj(memory)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """query (B, T, Q), keys (B, S, A) -> scores (B, T, S)."""
        hidden = torch.tanh(self.query_proj(query)[:, :, None, :] + keys[:, None, :, :])  # (B, T, S, A)
        return self.energy(hidden).squeeze(-1)  # (B, T, S)


class LuongDotAttention(nn.Module):
    """Dot-product attention, Luong et al. 2015 (arXiv:1508.04025), eq. 8 "dot": score(h_t, h_s) = h_t^T h_s.
    Needs decoder_hidden_size == encoder output size (checked by the config). The keys are the memory itself."""

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return memory  # (B, S, E)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """query (B, T, H), keys (B, S, H) -> scores (B, T, S)."""
        return torch.bmm(query, keys.transpose(1, 2))


class LuongGeneralAttention(LuongDotAttention):
    """Bilinear attention, Luong et al. 2015 (arXiv:1508.04025), eq. 8 "general": score(h_t, h_s) = h_t^T W_a h_s.
    The precomputed key is ``W_a h_s`` (B, S, H), so each step is one batched dot product."""

    def __init__(self, query_size: int, memory_size: int):
        super().__init__()
        self.key_proj = nn.Linear(memory_size, query_size, bias=False)  # W_a

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return self.key_proj(memory)  # (B, S, H)


def build_attention(attention_type: str, query_size: int, memory_size: int, attention_size: int) -> nn.Module | None:
    if attention_type in ("bahdanau", "luong_concat"):
        return AdditiveAttention(query_size, memory_size, attention_size)
    if attention_type == "luong_dot":
        return LuongDotAttention()
    if attention_type == "luong_general":
        return LuongGeneralAttention(query_size, memory_size)
    if attention_type == "none":
        return None
    raise ValueError(f"unknown attention_type {attention_type!r}")


__all__ = ["attend", "AdditiveAttention", "LuongDotAttention", "LuongGeneralAttention", "build_attention"]
