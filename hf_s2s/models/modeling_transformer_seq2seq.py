"""Transformer encoder-decoder, Vaswani et al. 2017 "Attention Is All You Need" (arXiv:1706.03762).

Reads top-down like the data flows: feed-forward, encoder layer, decoder layer, encoder, decoder, pretrained
base, base model, model with the language-modeling head. Position embeddings and multi-head attention live in
attention_transformer_seq2seq.py (copied beside this file into saved model folders). The fast path, padding-free
execution (``TokenPacking``), is applied by the encoder and decoder stacks beside their plain path: see the note
above them.

Shape letters: B batch, H heads, T_src source length, T_tgt target length (this call), T_past decoder tokens
already in the cache, D d_model, d_h head size (D / H), V vocabulary size.

Decoding follows transformers' encoder-decoder cache convention: an ``EncoderDecoderCache`` whose
self-attention half gets one key/value per decoded token and whose cross-attention half holds the projected
encoder keys/values, computed on the first decoding step and read back on every later one.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.utils.generic import can_return_tuple

from .attention_transformer_seq2seq import (
    TransformerSeq2SeqAttention,
    TransformerSeq2SeqPositionalEmbedding,
    eager_attention_forward,  # noqa: F401  (re-exported: importable from here as before the split)
    pack_source,
    sinusoidal_positions,  # noqa: F401  (re-exported)
)
from .configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from .modeling_common import (
    Seq2SeqGeneration,
    Seq2SeqPreTrainedMixin,
    TokenPacking,
    embed,
    embed_source,
    encoder_output,
    output_flags,
    output_layer_and_loss,
    repeat_batch,
    shift_tokens_right,
)
from .output_vocabulary import OutputVocabulary
from .transformers_compat import cache_argument, cache_output, causal_mask, output_cache

# ----------------------------------------------------------------------------------------------------------
# Layers
# ----------------------------------------------------------------------------------------------------------


class TransformerSeq2SeqFeedForward(nn.Module):
    """Position-wise feed-forward network, Vaswani et al. 2017 eq. 2: FFN(x) = act(x W_1 + b_1) W_2 + b_2."""

    def __init__(self, config: TransformerSeq2SeqConfig, ffn_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, config.d_model)
        self.activation = nn.ReLU() if config.activation_function == "relu" else nn.GELU()
        self.activation_dropout = config.activation_dropout

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D)"""
        hidden_states = self.activation(self.fc1(hidden_states))  # (B, T, ffn_dim)
        hidden_states = F.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)


class TransformerSeq2SeqEncoderLayer(GradientCheckpointingLayer):
    """Self-attention then feed-forward, each as ``x + Dropout(Sublayer(x))`` with LayerNorm before the sublayer
    (``norm_position="pre"``) or after the residual add (``"post"``, the paper's ``LayerNorm(x + Sublayer(x))``)."""

    def __init__(self, config: TransformerSeq2SeqConfig):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.dropout = config.dropout
        self.self_attn = TransformerSeq2SeqAttention(config, config.encoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = TransformerSeq2SeqFeedForward(config, config.encoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
        packing: TokenPacking | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states: (B, T_src, D), or (N, D) real tokens with ``packing`` -> the same shape, self-attention
        weights (B, H, T_src, T_src) or None."""
        residual = hidden_states
        hidden_states = self.self_attn_layer_norm(hidden_states) if self.pre_norm else hidden_states
        hidden_states, attn_weights = self.self_attn(hidden_states, attention_mask=attention_mask, packing=packing)
        hidden_states = residual + F.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = hidden_states if self.pre_norm else self.self_attn_layer_norm(hidden_states)

        residual = hidden_states
        hidden_states = self.final_layer_norm(hidden_states) if self.pre_norm else hidden_states
        hidden_states = self.ffn(hidden_states)
        hidden_states = residual + F.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = hidden_states if self.pre_norm else self.final_layer_norm(hidden_states)
        return hidden_states, attn_weights


class TransformerSeq2SeqDecoderLayer(GradientCheckpointingLayer):
    """Masked self-attention, cross-attention over the encoder output, then feed-forward; residuals and LayerNorm
    placed as in ``TransformerSeq2SeqEncoderLayer``."""

    def __init__(self, config: TransformerSeq2SeqConfig, layer_idx: int):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.dropout = config.dropout
        heads = config.decoder_attention_heads
        self.self_attn = TransformerSeq2SeqAttention(config, heads, is_causal=True, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.encoder_attn = TransformerSeq2SeqAttention(config, heads, is_cross_attention=True, layer_idx=layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = TransformerSeq2SeqFeedForward(config, config.decoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        packing: TokenPacking | None = None,
        source_packing: TokenPacking | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """hidden_states: (B, T_tgt, D), or (N, D) needed tokens with ``packing``; encoder_hidden_states: (B, T_src, D)
        (``source_packing``: its real tokens). Returns hidden states shaped like the input, self-attention weights
        (B, H, T_tgt, T_past + T_tgt) and cross-attention weights (B, H, T_tgt, T_src), None unless eager."""
        residual = hidden_states
        hidden_states = self.self_attn_layer_norm(hidden_states) if self.pre_norm else hidden_states
        hidden_states, self_weights = self.self_attn(
            hidden_states, attention_mask=attention_mask, cache=cache, packing=packing
        )
        hidden_states = residual + F.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = hidden_states if self.pre_norm else self.self_attn_layer_norm(hidden_states)

        residual = hidden_states
        hidden_states = self.encoder_attn_layer_norm(hidden_states) if self.pre_norm else hidden_states
        hidden_states, cross_weights = self.encoder_attn(
            hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
            cache=cache,
            packing=packing,
            source_packing=source_packing,
        )
        hidden_states = residual + F.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = hidden_states if self.pre_norm else self.encoder_attn_layer_norm(hidden_states)

        residual = hidden_states
        hidden_states = self.final_layer_norm(hidden_states) if self.pre_norm else hidden_states
        hidden_states = self.ffn(hidden_states)
        hidden_states = residual + F.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = hidden_states if self.pre_norm else self.final_layer_norm(hidden_states)
        return hidden_states, self_weights, cross_weights


# ----------------------------------------------------------------------------------------------------------
# Encoder and decoder
# ----------------------------------------------------------------------------------------------------------
# The padding-free path lives in the two stacks below, each beside its plain path: with a packing (TokenPacking), a
# stack packs its embeddings into the N needed tokens (N, D) on the way in and unpacks its output on the way out, so
# every position-wise sublayer (LayerNorm, projections, feed-forward, dropout) skips the padding; only the attention
# kernel needs the padded layout, and the attention module restores it around the kernel. The layers merely hand the
# packing on. Without one (no padding, a cache, per-layer hidden states, a captured graph, or padding_free=False) the
# same layers run on every position.


def source_padding_mask(input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None,
                        pad_token_id: int | None) -> torch.Tensor | None:
    """The source padding mask (B, T_src), 1/True on real tokens: ``attention_mask`` when given, else inferred from
    the pad id as the RNN family does (``generate(input_ids)`` on a right-padded batch passes no mask to an
    encoder-decoder model), else None (nothing to go by: every position is real). An on-device comparison: no
    read back to the host, and nothing a captured graph cannot hold."""
    if attention_mask is not None or input_ids is None or pad_token_id is None:
        return attention_mask
    return input_ids.ne(pad_token_id)  # (B, T_src) bool


@dataclass
class TransformerSeq2SeqEncoderOutput(BaseModelOutput):
    """The encoder's output, plus what it found out about the source's padding:

    - ``source_mask`` (B, T_src): the padding mask it used (the given attention_mask, or the one inferred from the
      pad id; a 4D mask passes through as given), None when nothing is masked. The decoding steps of ``generate()``, which get the encoder output but no
      attention_mask when the caller gave none, attend with it; ``generate()`` repeats it for the beams as it does
      every tensor of an encoder output.
    - ``source_packing``: the source's real tokens (``TokenPacking``), None without padding. The encoder-decoder's
      forward hands it to the decoder's cross-attention in the same call (no second look at the mask); it is not a
      tensor, so ``generate()`` does not repeat it for beams, and no later call uses it.
    """

    source_mask: torch.Tensor | None = None
    source_packing: TokenPacking | None = None


class TransformerSeq2SeqEncoder(nn.Module):
    """Token embeddings (x sqrt(D) when ``scale_embedding``) + positions, dropout, ``encoder_layers`` layers, and a
    final LayerNorm under pre-LN. Also what ``get_encoder()`` returns to ``generate``. With a shared vocabulary
    (``share_encoder_decoder_embeddings``) the decoder's token table is tied to ``embed_tokens``."""

    main_input_name = "input_ids"
    padding_free = True  # False (on an instance): the plain path on every position, tested equal to the packed one

    def __init__(self, config: TransformerSeq2SeqConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = TransformerSeq2SeqPositionalEmbedding(config)
        self.dropout = config.dropout
        self.layers = nn.ModuleList([TransformerSeq2SeqEncoderLayer(config) for _ in range(config.encoder_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_position == "pre" else None

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
    ) -> TransformerSeq2SeqEncoderOutput:
        """input_ids: (B, T_src) source ids, or inputs_embeds: (B, T_src, D) unscaled token embeddings;
        attention_mask: (B, T_src), 1 for real tokens and 0 for padding (None: inferred from the pad id in
        input_ids). Returns last_hidden_state (B, T_src, D), zero on padding when the padding-free path ran, and the
        source padding it found (``source_mask``, ``source_packing``)."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("the encoder needs exactly one of `input_ids` and `inputs_embeds`")
        output_attentions, output_hidden_states = output_flags(self.config, output_attentions, output_hidden_states)
        if inputs_embeds is None:
            inputs_embeds = embed_source(self.embed_tokens, input_ids, self.config)  # (B, T_src, D)
        seq_len = inputs_embeds.shape[1]
        positions = self.embed_positions(seq_len, 0, inputs_embeds.device)  # (T_src, D)
        hidden_states = inputs_embeds * self.embed_scale + positions.to(inputs_embeds.dtype)

        # The source's padding, found once (one host read) for these layers and the decoder's cross-attention
        attention_mask = source_padding_mask(input_ids, attention_mask, self.config.pad_token_id)
        if self.padding_free:
            attention_mask, source_packing = pack_source(attention_mask)
        else:
            source_packing = None
        mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask,
            allow_is_bidirectional_skip=source_packing is None,  # with a packing the mask has padding: no need to look
        )
        # per-layer hidden states are returned padded: the plain path then
        packing = None if output_hidden_states else source_packing
        if packing is not None:
            hidden_states = packing.pack(hidden_states)  # (N, D)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        all_hidden_states, all_attentions = [], []
        for layer in self.layers:
            all_hidden_states.append(hidden_states)
            hidden_states, weights = layer(hidden_states, mask, packing=packing)
            all_attentions.append(weights)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        if packing is not None:
            hidden_states = packing.unpack(hidden_states)  # (B, T_src, D)
        all_hidden_states.append(hidden_states)
        return TransformerSeq2SeqEncoderOutput(
            last_hidden_state=hidden_states,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
            source_mask=attention_mask,
            source_packing=source_packing,
        )


class TransformerSeq2SeqDecoder(nn.Module):
    """Target embeddings x sqrt(D) + positions continuing after the cached tokens, dropout, ``decoder_layers``
    layers, final LayerNorm under pre-LN."""

    padding_free = True  # False (on an instance): the plain path on every position, tested equal to the packed one

    def __init__(self, config: TransformerSeq2SeqConfig):
        super().__init__()
        self.config = config
        # The target token table. With a shared vocabulary TransformerSeq2SeqModel ties its weight to the encoder's
        # (_tied_weights_keys): until then it is a placeholder on the meta device, no memory and no random draws.
        placeholder = config.share_encoder_decoder_embeddings
        self.embed_tokens = nn.Embedding(config.target_vocab_size, config.d_model, padding_idx=config.pad_token_id,
                                         device="meta" if placeholder else None)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = TransformerSeq2SeqPositionalEmbedding(config)
        self.dropout = config.dropout
        self.layers = nn.ModuleList(
            [TransformerSeq2SeqDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers)]
        )
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_position == "pre" else None

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool = False,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        packing: TokenPacking | None = None,
        source_packing: TokenPacking | None = None,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """input_ids: (B, T_tgt) target ids, or inputs_embeds: (B, T_tgt, D) unscaled target token embeddings;
        encoder_hidden_states: (B, T_src, D); attention_mask: (B, T_past + T_tgt) target padding (or a ready 4D mask
        from generate); encoder_attention_mask: (B, T_src) source padding. Returns last_hidden_state (B, T_tgt, D).

        The padding-free path (the generation model's training forward): ``packing`` the target positions whose
        outputs are needed, a prefix of each row (``TokenPacking.through_last_label``): only those are computed, and
        last_hidden_state is zero elsewhere; ``source_packing`` the source's real tokens (the encoder output's), so
        the cross-attention projects only those. Both are ignored with a cache."""
        output_attentions, output_hidden_states = output_flags(self.config, output_attentions, output_hidden_states)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("the decoder needs exactly one of `input_ids` and `inputs_embeds`")
        if encoder_hidden_states is None:
            raise ValueError("the decoder needs `encoder_hidden_states` (B, T_src, D), the encoder's output")
        if inputs_embeds is None:
            inputs_embeds = embed(self.embed_tokens, input_ids, "decoder_input_ids")  # (B, T_tgt, D)
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        if cache is not None and not isinstance(cache, EncoderDecoderCache):
            raise ValueError(
                f"cache must be an EncoderDecoderCache (self- and cross-attention halves), "
                f"got {type(cache).__name__}"
            )
        past_length = cache.get_seq_length() if cache is not None else 0  # int, or tensor (static)
        positions = self.embed_positions(inputs_embeds.shape[1], past_length, inputs_embeds.device)  # (T_tgt, D)
        hidden_states = inputs_embeds * self.embed_scale + positions.to(inputs_embeds.dtype)

        # Without target padding transformers builds the causal mask from the cache alone: none at all for one new
        # token over a dynamic cache (it sees every key), the future slots masked over a static cache.
        self_attn_mask = causal_mask(
            self.config, hidden_states, attention_mask, cache.self_attention_cache if cache is not None else None
        )
        cross_attn_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
            allow_is_bidirectional_skip=source_packing is None,  # with a packing the mask has padding
        )
        # A causal query never reads a later position, so dropping each row's suffix changes nothing before it.
        # With a cache the cross-attention K/V are projected once per source anyway.
        if cache is not None or output_hidden_states or not self.padding_free:
            packing = source_packing = None
        if packing is not None:
            hidden_states = packing.pack(hidden_states)  # (N, D)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)

        all_hidden_states, all_self_attentions, all_cross_attentions = [], [], []
        for layer in self.layers:
            all_hidden_states.append(hidden_states)
            hidden_states, self_weights, cross_weights = layer(
                hidden_states,
                encoder_hidden_states,  # positional: reentrant gradient checkpointing only tracks positional tensors
                attention_mask=self_attn_mask,
                encoder_attention_mask=cross_attn_mask,
                cache=cache,
                packing=packing,
                source_packing=source_packing,
            )
            all_self_attentions.append(self_weights)
            all_cross_attentions.append(cross_weights)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        if packing is not None:
            hidden_states = packing.unpack(hidden_states)  # (B, T_tgt, D)
        all_hidden_states.append(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            **cache_output(cache if use_cache else None),
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(all_self_attentions) if output_attentions else None,
            cross_attentions=tuple(all_cross_attentions) if output_attentions else None,
        )


# ----------------------------------------------------------------------------------------------------------
# Pretrained models
# ----------------------------------------------------------------------------------------------------------


class TransformerSeq2SeqPreTrainedModel(Seq2SeqPreTrainedMixin, PreTrainedModel):
    config: TransformerSeq2SeqConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flex_attn = True  # masks come from masking_utils, kernels from ALL_ATTENTION_FUNCTIONS
    _can_compile_fullgraph = True  # generate() may compile the decoder step whole with a static cache
    _no_split_modules = ["TransformerSeq2SeqEncoderLayer", "TransformerSeq2SeqDecoderLayer"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Normal(0, init_std) linear weights, zero biases, unit LayerNorms. Token embeddings get
        Normal(0, D^-0.5) when scaled by sqrt(D) (so scaled embeddings have unit variance, as in fairseq) and
        Normal(0, init_std) otherwise; the padding row is zero. ``transformers.initialization`` skips tensors
        loaded from a checkpoint."""
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            token_std = self.config.d_model**-0.5 if self.config.scale_embedding else std
            is_token_table = module.padding_idx is not None
            init.normal_(module.weight, mean=0.0, std=token_std if is_token_table else std)
            # slicing drops the "already loaded" flag, so check it here
            if is_token_table and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])


class TransformerSeq2SeqModel(TransformerSeq2SeqPreTrainedModel):
    """The bare encoder-decoder, returning the decoder's last hidden states (``Seq2SeqModelOutput``)."""

    def __init__(self, config: TransformerSeq2SeqConfig):
        super().__init__(config)
        self.encoder = TransformerSeq2SeqEncoder(config)
        self.decoder = TransformerSeq2SeqDecoder(config)
        # One vocabulary: the decoder's token table is the encoder's. tie_weights (in post_init, and after loading)
        # makes it so; save_pretrained stores it once, under encoder.embed_tokens.
        if config.share_encoder_decoder_embeddings:
            self._tied_weights_keys = {"decoder.embed_tokens.weight": "encoder.embed_tokens.weight"}
        self.post_init()

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        """transformers' tied weights plus the shared vocabulary's. transformers applies ``_tied_weights_keys`` only
        under ``tie_word_embeddings``, which in this family ties the output layer; the encoder and decoder tables are
        one whenever ``share_encoder_decoder_embeddings``, whatever the output layer does."""
        tied = super().get_expanded_tied_weights_keys(all_submodels)
        if not all_submodels and self._tied_weights_keys:
            tied.update(self._tied_weights_keys)
        return tied

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embed_tokens = value
        if self.config.share_encoder_decoder_embeddings:  # as MarianModel: one vocabulary, one table
            self.decoder.embed_tokens = value

    def get_decoder_input_embeddings(self) -> nn.Embedding:
        """The target token table: the encoder's when the vocabulary is shared."""
        return self.decoder.embed_tokens

    def get_encoder(self, *args, **kwargs) -> TransformerSeq2SeqEncoder:
        return self.encoder

    def get_decoder(self, *args, **kwargs) -> TransformerSeq2SeqDecoder:
        return self.decoder

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        decoder_packing: TokenPacking | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        """input_ids: (B, T_src); attention_mask: (B, T_src) source padding (None: inferred from the pad id in
        input_ids, or with encoder_outputs their ``source_mask``); decoder_input_ids: (B, T_tgt) (only the
        new tokens when ``cache`` holds earlier ones); encoder_outputs: reused encoder result (generate
        runs the encoder once); decoder_packing: the decoder's padding-free path, the target positions needed (the
        generation model passes it with labels in training; see the decoder). Returns last_hidden_state
        (B, T_tgt, D), the cache and encoder outputs. ``return_dict=False`` gives a tuple."""
        cache = cache_argument(cache, kwargs)
        use_cache = self.config.use_cache if use_cache is None else use_cache
        output_attentions, output_hidden_states = output_flags(self.config, output_attentions, output_hidden_states)
        source_packing = None
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=True,
            )
            # the source padding the encoder found, for the cross-attention: no second look at the mask
            attention_mask, source_packing = encoder_outputs.source_mask, encoder_outputs.source_packing
        else:
            encoder_outputs = encoder_output(encoder_outputs)
            if attention_mask is None:  # a decoding step of generate(input_ids) without a mask: the encoder's
                attention_mask = getattr(encoder_outputs, "source_mask", None)

        if (decoder_input_ids is None) == (decoder_inputs_embeds is None):
            raise ValueError("the decoder needs exactly one of `decoder_input_ids` and `decoder_inputs_embeds` (or labels)")
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            inputs_embeds=decoder_inputs_embeds,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            attention_mask=decoder_attention_mask,
            encoder_attention_mask=attention_mask,
            cache=cache,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            packing=decoder_packing,
            source_packing=source_packing,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **cache_output(output_cache(decoder_outputs)),
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class TransformerSeq2SeqForConditionalGeneration(
    Seq2SeqGeneration, TransformerSeq2SeqPreTrainedModel, GenerationMixin
):
    """The encoder-decoder with a linear output projection to target-vocabulary logits (tied to the target
    embedding when ``tie_word_embeddings``), the token-level cross-entropy loss, and ``generate``."""

    def __init__(self, config: TransformerSeq2SeqConfig):
        super().__init__(config)
        self.model = TransformerSeq2SeqModel(config)
        self.lm_head = nn.Linear(config.d_model, config.target_vocab_size, bias=config.output_bias)
        # the target table, named where checkpoints keep it; applies only under tie_word_embeddings (transformers)
        target_table = "encoder" if config.share_encoder_decoder_embeddings else "decoder"
        self._tied_weights_keys = {"lm_head.weight": f"model.{target_table}.embed_tokens.weight"}
        self.post_init()
        self._set_default_generation_length()

    def get_encoder(self, *args, **kwargs) -> TransformerSeq2SeqEncoder:
        return self.model.encoder

    def get_decoder(self, *args, **kwargs) -> TransformerSeq2SeqDecoder:
        return self.model.decoder

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings

    @staticmethod
    def reorder_beam_cache(cache: EncoderDecoderCache, beam_idx: torch.LongTensor) -> EncoderDecoderCache:
        """Beam search (generate calls this through ``_reorder_cache``): reorder the self-attention cache only.
        generate() moves rows among the beams of one sentence, whose cross-attention K/V rows are equal, so copying
        those (B x beams, H, T_src, d_h) tensors every step would change nothing."""
        cache.self_attention_cache.reorder_cache(beam_idx)
        return cache

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """labels: (B, T_tgt) with -100 on padding -> teacher-forcing decoder inputs (B, T_tgt)."""
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        output_vocabulary: OutputVocabulary | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """As ``TransformerSeq2SeqModel.forward``, plus labels: (B, T_tgt) target ids with -100 where no loss is
        taken; without decoder inputs they are shifted right into them. ``num_items_in_batch`` (from Trainer): the
        label-token count of the whole accumulated batch, which the summed loss is divided by;
        ``config.label_smoothing`` smooths it. Returns logits (B, T_tgt, V_tgt) and the loss; a training forward
        with labels runs padding-free (positions after each row's last label are skipped by the decoder and the
        output layer, see ``output_layer_and_loss``) and returns the loss without logits. With ``config.rdrop_alpha``
        > 0 such a forward runs the batch twice (R-Drop, ``modeling_common.rdrop_loss``): its outputs other than the
        loss cover 2B rows, the second copy after the first. ``output_vocabulary``: a vocabulary shortlist's tokens,
        which generate() passes when given one: decoder ids and logits (B, T, K) in its compact ids
        (``output_vocabulary.py``)."""
        cache = cache_argument(cache, kwargs)
        if output_vocabulary is not None and decoder_input_ids is not None:  # compact ids -> the embedding's
            decoder_input_ids = output_vocabulary.full_ids(decoder_input_ids)
        _, output_hidden_states = output_flags(self.config, False, output_hidden_states)  # per-layer states: padded
        packing = None
        rdrop_alpha = self.config.rdrop_alpha if self.training and labels is not None else 0.0
        if rdrop_alpha:  # (B, ...) -> (2B, ...): the two passes of R-Drop in one
            (input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, inputs_embeds,
             decoder_inputs_embeds, labels) = repeat_batch(
                encoder_outputs, cache, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask,
                inputs_embeds, decoder_inputs_embeds, labels)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:  # an id error names the labels
                shifted = self.prepare_decoder_input_ids_from_labels(labels)  # (B, T_tgt)
                decoder_inputs_embeds = embed(self.model.decoder.embed_tokens, shifted, "labels")
            if self.training and cache is None and not output_hidden_states:
                packing = TokenPacking.through_last_label(labels)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            decoder_packing=packing,
            return_dict=True,
        )
        logits, loss = output_layer_and_loss(self.lm_head, outputs.last_hidden_state, labels, packing,
                                             num_items_in_batch, self.config.label_smoothing, rdrop_alpha,
                                             output_vocabulary)
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **cache_output(output_cache(outputs)),
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


__all__ = [
    "TransformerSeq2SeqPreTrainedModel",
    "TransformerSeq2SeqModel",
    "TransformerSeq2SeqForConditionalGeneration",
]
