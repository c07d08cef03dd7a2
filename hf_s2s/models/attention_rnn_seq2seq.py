"""Attention modules of the RNN encoder-decoder (Bahdanau, Luong, scaled dot-product, multi-head).

Each module splits its work in two parts: ``project_keys`` (what depends on the source only, computed ONCE per
source and kept in the decoder cache) and its call (what depends on the decoder query, computed every step), which
returns the context (B, T, E) and the weights (B, heads, T, S): one head for the single-head modules, the
convention of the model's ``cross_attentions``. ``attend`` turns scores into masked weights and a context vector.
Copied into saved model folders: imports nothing from hf_s2s.
"""

import torch
from torch import nn


def attend(
    scores: torch.Tensor, memory: torch.Tensor, source_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax over the source and the weighted sum of the memory (or of each head's values).

    scores: (B, T, S), or (B, heads, T, S); memory: (B, S, E), or (B, heads, S, E_head); source_mask: (B, S) bool,
    True on real tokens. Returns context (B, [heads,] T, E) and weights (B, [heads,] T, S). Padding gets weight
    exactly 0; a row with no real token gets all-zero weights and a zero context (no NaN: masked scores use the
    dtype minimum, not -inf).
    """
    mask = source_mask.view(source_mask.shape[0], *[1] * (scores.dim() - 2), -1)  # (B, [1,] 1, S)
    scores = scores.float().masked_fill(~mask, torch.finfo(torch.float32).min)  # softmax in fp32
    weights = (scores.softmax(dim=-1) * mask).to(memory.dtype)  # (B, [heads,] T, S)
    context = torch.matmul(weights, memory)  # (B, [heads,] T, E)
    return context, weights


class SingleHeadAttention(nn.Module):
    """A score ``score(query, keys)`` (B, T, S) attended over the memory itself: one head."""

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor, source_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, T, Q), keys from ``project_keys``, memory (B, S, E), source_mask (B, S) -> context (B, T, E),
        weights (B, 1, T, S)."""
        context, weights = attend(self.score(query, keys), memory, source_mask)
        return context, weights[:, None]


class AdditiveAttention(SingleHeadAttention):
    """Additive (concat) attention, Bahdanau et al. 2015 (arXiv:1409.0473), eq. A.1.2 / Luong et al. 2015
    (arXiv:1508.04025), eq. 8 "concat":

        score(q, h_i) = v^T tanh(W_q q + W_h h_i)

    Luong's ``v_a^T tanh(W_a [h_t; h_s])`` is the same function with ``W_a = [W_q, W_h]``. Bahdanau queries with the
    decoder state before the step, s_{t-1}; Luong concat with the current state h_t: the decoder decides which.
    ``W_h h_i`` is the precomputed key. ``query_bias`` adds b_q, ``v^T tanh(W_q q + b_q + W_h h_i)``, as OpenNMT-py's
    ``mlp`` attention has it.
    """

    def __init__(self, query_size: int, memory_size: int, attention_size: int, query_bias: bool = False):
        super().__init__()
        self.query_proj = nn.Linear(query_size, attention_size, bias=query_bias)  # W_q (and b_q)
        self.key_proj = nn.Linear(memory_size, attention_size, bias=False)  # W_h
        self.energy = nn.Linear(attention_size, 1, bias=False)  # v

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        """memory (B, S, E) -> keys W_h h_i (B, S, A)."""
        return self.key_proj(memory)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """query (B, T, Q), keys (B, S, A) -> scores (B, T, S)."""
        hidden = torch.tanh(self.query_proj(query)[:, :, None, :] + keys[:, None, :, :])  # (B, T, S, A)
        return self.energy(hidden).squeeze(-1)  # (B, T, S)


class LuongDotAttention(SingleHeadAttention):
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


class ScaledDotAttention(LuongDotAttention):
    """Scaled dot-product attention, Vaswani et al. 2017 (arXiv:1706.03762), eq. 1, on the RNN's states:
    score(h_t, h_s) = h_t^T h_s / sqrt(d), d = H = E (checked by the config). Without the scale, the dot product of
    two d-dimensional states grows with d and saturates the softmax. The 1/sqrt(d) is folded into the keys, once
    per source, so each step is the same single batched dot product as Luong's "dot"."""

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return memory * memory.shape[-1] ** -0.5  # (B, S, E)


class MultiHeadDotAttention(nn.Module):
    """Multi-head dot-product attention, Vaswani et al. 2017 (arXiv:1706.03762), section 3.2.2, over the encoder
    states: head i scores ``(W_q^i h_t)^T (W_k^i h_s)`` (divided by sqrt(d_head) when ``scaled``, eq. 1; plain
    Luong "dot" otherwise) and attends over its own values ``W_v^i h_s``; the heads' contexts, d_head = E / heads
    each, are concatenated into one E-sized context. There is no output projection W^O: the context goes straight
    into the readout ``tanh(W_c [c_t; h_t])``, a linear map that would absorb it.

    The keys and values are the precomputed source side: (B, 2, heads, S, d_head), once per source.
    """

    def __init__(self, query_size: int, memory_size: int, heads: int, scaled: bool):
        super().__init__()
        self.heads, self.head_size = heads, memory_size // heads
        self.scale = self.head_size**-0.5 if scaled else 1.0
        self.query_proj = nn.Linear(query_size, memory_size, bias=False)  # W_q, all heads side by side
        self.key_value_proj = nn.Linear(memory_size, 2 * memory_size, bias=False)  # [W_k; W_v], all heads

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        """memory (B, S, E) -> keys and values (B, 2, heads, S, d_head), keys already scaled."""
        batch, length, _ = memory.shape
        keys_values = self.key_value_proj(memory).view(batch, length, 2, self.heads, self.head_size)
        keys, values = keys_values.permute(2, 0, 3, 1, 4)  # (B, heads, S, d_head) each
        return torch.stack([keys * self.scale, values], dim=1)  # (B, 2, heads, S, d_head)

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor, source_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, T, H), keys from ``project_keys`` -> context (B, T, E), weights (B, heads, T, S)."""
        batch, length, _ = query.shape
        query = self.query_proj(query).view(batch, length, self.heads, self.head_size).transpose(1, 2)  # (B, n, T, d)
        head_keys, head_values = keys.unbind(1)  # (B, n, S, d) each
        scores = torch.matmul(query, head_keys.transpose(-1, -2))  # (B, n, T, S)
        context, weights = attend(scores, head_values, source_mask)  # (B, n, T, d), (B, n, T, S)
        return context.transpose(1, 2).reshape(batch, length, -1), weights  # (B, T, E)


def build_attention(attention_type: str, query_size: int, memory_size: int, attention_size: int,
                    heads: int = 1, query_bias: bool = False) -> nn.Module | None:
    if heads > 1:  # the config allows several heads for the dot-type scores only
        return MultiHeadDotAttention(query_size, memory_size, heads, scaled=attention_type == "scaled_dot")
    if attention_type in ("bahdanau", "luong_concat"):
        return AdditiveAttention(query_size, memory_size, attention_size, query_bias)
    if attention_type == "luong_dot":
        return LuongDotAttention()
    if attention_type == "scaled_dot":
        return ScaledDotAttention()
    if attention_type == "luong_general":
        return LuongGeneralAttention(query_size, memory_size)
    if attention_type == "none":
        return None
    raise ValueError(f"unknown attention_type {attention_type!r}")


__all__ = [
    "attend",
    "SingleHeadAttention",
    "AdditiveAttention",
    "LuongDotAttention",
    "LuongGeneralAttention",
    "ScaledDotAttention",
    "MultiHeadDotAttention",
    "build_attention",
]
