"""Attention of the Transformer encoder-decoder and what it works on, Vaswani et al. 2017 (arXiv:1706.03762):
position embeddings (attention itself is blind to order), the source's padding-free packing (``TokenPacking``
itself lives in modeling_common), and multi-head attention. modeling_transformer_seq2seq builds the layers, encoder and decoder from them.

Shape letters: B batch, H heads, T_q / T_k query / key length, T_past decoder tokens already in the cache, N real
(unpadded) tokens, D d_model, d_h head size (D / H).

Copied into saved model folders beside the modeling file (``save_pretrained`` follows single-dot relative imports),
so it imports nothing from hf_s2s.
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers.cache_utils import EncoderDecoderCache
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from .modeling_common import TokenPacking, is_capturing_graph
from .transformers_compat import attention_implementation

# ----------------------------------------------------------------------------------------------------------
# Positions
# ----------------------------------------------------------------------------------------------------------


def sinusoidal_positions(positions: torch.Tensor, dim: int, layout: str = "concat") -> torch.Tensor:
    """Sinusoidal position encodings, Vaswani et al. 2017 section 3.5:
    PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)).

    ``layout="concat"``: sines fill the first half of the vector and cosines the second (Marian's layout, same
    information); ``"interleaved"``: sines at even and cosines at odd indices, the paper's formula as written
    (OpenNMT-py, Joey NMT); ``"tensor2tensor"``: sines, then cosines, at frequencies 10000^(-i / (D/2 - 1))
    (tensor2tensor's ``get_timing_signal_1d``, fairseq's ``SinusoidalPositionalEmbedding``, OpenNMT-py's
    "SinusoidalConcat"). Computed on the fly, so any length works and nothing needs saving.
    positions: (T,) -> (T, D), float32.
    """
    half = dim // 2
    divisor = half - 1 if layout == "tensor2tensor" else half
    inv_freq = torch.exp(
        torch.arange(half, dtype=torch.float32, device=positions.device) * (-math.log(10000.0) / divisor)
    )  # (D/2,)
    angles = positions.float()[:, None] * inv_freq[None, :]  # (T, D/2)
    if layout == "interleaved":
        table = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (T, 2 * (D/2)): sin, cos, sin, ...
    else:
        table = torch.cat([angles.sin(), angles.cos()], dim=-1)  # (T, 2 * (D/2))
    return F.pad(table, (0, dim - 2 * half))  # odd D: one zero column


class TransformerSeq2SeqPositionalEmbedding(nn.Module):
    """Absolute position embeddings, ``config.position_embedding_type``: "sinusoidal" (fixed, any length) or
    "learned" (a trained table of ``max_position_embeddings`` rows; a longer sequence is an error)."""

    def __init__(self, config: TransformerSeq2SeqConfig):
        super().__init__()
        self.dim = config.d_model
        self.max_positions = config.max_position_embeddings
        self.learned = config.position_embedding_type == "learned"
        self.layout = config.position_embedding_layout  # sinusoid layout: "concat", "interleaved" or "tensor2tensor"
        self.offset = config.position_offset  # the first token's position (fairseq: padding_idx + 1); sinusoids only
        self.weight_table = nn.Embedding(self.max_positions, self.dim) if self.learned else None

    def forward(self, seq_len: int, past_length: int | torch.Tensor, device: torch.device) -> torch.Tensor:
        """Embeddings of positions past_length .. past_length + seq_len - 1 -> (seq_len, D)."""
        positions = torch.arange(seq_len, device=device) + past_length  # (T,)
        if not self.learned:
            return sinusoidal_positions(positions + self.offset, self.dim, self.layout)
        if not is_capturing_graph() and int(past_length) + seq_len > self.max_positions:
            raise ValueError(
                f"sequence needs positions up to {int(past_length) + seq_len - 1}, but position_embedding_type="
                f"'learned' holds only max_position_embeddings={self.max_positions} positions (0..{self.max_positions - 1}); "
                "truncate the input, raise max_position_embeddings, or use position_embedding_type='sinusoidal'"
            )
        return self.weight_table(positions)


# ----------------------------------------------------------------------------------------------------------
# Padding-free execution
# ----------------------------------------------------------------------------------------------------------


def pack_source(attention_mask: torch.Tensor | None) -> tuple[torch.Tensor | None, TokenPacking | None]:
    """(attention_mask, packing) of a source batch: the packing of its real tokens, and the mask itself, or None
    when it masks nothing (then no attention mask is built at all). One device-to-host read (the packing's
    ``nonzero``); with a packing, masks can be built without transformers' own all-ones check (another read).
    attention_mask: (B, T_src); a 4D mask or a captured graph is returned as is, without a packing."""
    packing = TokenPacking.from_mask(attention_mask)
    if packing is None and attention_mask is not None and attention_mask.dim() == 2 and not is_capturing_graph():
        return None, None  # a mask with no zero
    return attention_mask, packing


# ----------------------------------------------------------------------------------------------------------
# Attention
# ----------------------------------------------------------------------------------------------------------


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, Vaswani et al. 2017 eq. 1: softmax(Q K^T / sqrt(d_k)) V.

    query: (B, H, T_q, d_h); key, value: (B, H, T_k, d_h); attention_mask: additive, 0 where allowed and the
    dtype's minimum where masked, (B, 1, T_q, T_k). Returns output (B, T_q, H, d_h) and weights (B, H, T_q, T_k).
    """
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, H, T_q, T_k)
    if attention_mask is not None:
        # Clamp: score + dtype min overflows to -inf in half precision, and a row of -inf (an all-padding source)
        # would make softmax NaN; a row of equal minima gives uniform weights instead.
        scores = (scores + attention_mask[:, :, :, : key.shape[-2]]).clamp_min(torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()  # (B, T_q, H, d_h)
    return output, weights


class TransformerSeq2SeqAttention(nn.Module):
    """Multi-head attention, Vaswani et al. 2017 (arXiv:1706.03762) section 3.2.2:
    MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),
    with Attention the scaled dot product of eq. 1.

    Self-attention projects Q, K and V with one fused matrix (``qkv_proj``). Cross-attention projects Q from the
    decoder (``q_proj``) and K, V from the encoder output with one fused matrix (``kv_proj``); with a cache those
    encoder K/V are computed on the first decoding step, stored in the cross-attention cache, and read back on
    every later step. The kernel comes from ``ALL_ATTENTION_FUNCTIONS`` ("sdpa" by default, or "eager", which
    also returns the attention weights).
    """

    def __init__(
        self,
        config: TransformerSeq2SeqConfig,
        num_heads: int,
        is_cross_attention: bool = False,
        is_causal: bool = False,
        layer_idx: int | None = None,
    ):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        self.is_cross_attention = is_cross_attention
        self.is_causal = is_causal  # read by the sdpa kernel when the mask is left implicit
        self.layer_idx = layer_idx  # which cache layer this attention writes
        d_model = config.d_model
        if is_cross_attention:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, H, T, d_h)"""
        return x.view(*x.shape[:2], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        packing: TokenPacking | None = None,
        source_packing: TokenPacking | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states: (B, T_q, D) queries (and keys/values for self-attention); encoder_hidden_states:
        (B, T_src, D), given for cross-attention; attention_mask: as built by ``masking_utils`` for the kernel.
        With ``packing``, hidden_states holds only the N real tokens (N, D): the projections run on them and the
        kernel on the re-padded layout; ``source_packing`` likewise skips source padding in the K/V projection.
        Returns output (B, T_q, D) (or (N, D) packed) and weights (B, H, T_q, T_k) under "eager", else None."""
        unpack = packing.unpack if packing is not None else (lambda x: x)  # (N, ...) -> (B, T_q, ...)
        if not self.is_cross_attention:
            qkv = unpack(self.qkv_proj(hidden_states))  # (B, T_q, 3D)
            query, key, value = (self._split_heads(x) for x in qkv.chunk(3, dim=-1))
            if cache is not None:
                # append this step's K/V; returns all of them, (B, H, T_past + T_q, d_h)
                key, value = cache.self_attention_cache.update(key, value, self.layer_idx)
        else:
            query = self._split_heads(unpack(self.q_proj(hidden_states)))  # (B, H, T_q, d_h)
            if cache is not None and cache.is_updated.get(self.layer_idx):
                cached = cache.cross_attention_cache.layers[self.layer_idx]
                key, value = cached.keys, cached.values  # (B, H, T_src, d_h), stored on the first step
            else:
                if source_packing is not None:  # project the real source tokens only
                    kv = source_packing.unpack(self.kv_proj(source_packing.pack(encoder_hidden_states)))
                else:
                    kv = self.kv_proj(encoder_hidden_states)  # (B, T_src, 2D)
                key, value = (self._split_heads(x) for x in kv.chunk(2, dim=-1))
                if cache is not None:
                    key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)
                    cache.is_updated[self.layer_idx] = True

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            attention_implementation(self.config), eager_attention_forward
        )
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
        )  # (B, T_q, H, d_h)
        output = output.flatten(2)  # (B, T_q, D)
        output = self.out_proj(packing.pack(output) if packing is not None else output)  # (B, T_q, D) or (N, D)
        return output, weights
