"""RNN encoder-decoder: a packed (bi)directional GRU/LSTM encoder, a bridge to the decoder's initial state, and a
GRU/LSTM decoder with Bahdanau, Luong, scaled dot-product (one or several heads) or no attention.

Reads top-down like the data flows: source masks, encoder, decoder, pretrained base, RNNSeq2SeqModel,
RNNSeq2SeqForConditionalGeneration. The attention modules live in attention_rnn_seq2seq.py; the decoder state that
``generate()`` carries, and the decoding step's fast path, in cache_rnn_seq2seq.py. Copied into saved model folders:
imports only single-dot siblings, never ``hf_s2s``.

Shapes: B batch (x beams in generate), S source length, T target length, L decoder layers, E encoder output
size (2 x encoder_hidden_size if bidirectional), H decoder_hidden_size, D embedding size, V target vocabulary.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.utils.generic import can_return_tuple

from .attention_rnn_seq2seq import build_attention
from .cache_rnn_seq2seq import RNNSeq2SeqCache, RNNSeq2SeqDecoderStep, allow_rnn, run_rnn
from .configuration_rnn_seq2seq import FINAL_STATE_INITS, RNNSeq2SeqConfig
from .modeling_common import (
    Seq2SeqGeneration,
    Seq2SeqPreTrainedMixin,
    TokenPacking,
    embed,
    embed_source,
    encoder_output,
    is_capturing_graph,
    output_flags,
    output_layer_and_loss,
    repeat_batch,
    shift_tokens_right,
)
from .output_vocabulary import OutputVocabulary
from .transformers_compat import cache_argument, cache_output, output_cache

_RNN_CLASSES = {"gru": nn.GRU, "lstm": nn.LSTM}


def source_mask_from_inputs(
    input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, pad_token_id: int | None, shape
) -> torch.Tensor:
    """The source mask (B, S) bool, True on real tokens: ``attention_mask``, else inferred from the pad id
    (padding must never enter the recurrence nor be attended to), else all ones. ``shape``: (B, S) of what the
    mask is for; a zero-length source's encoder output has one masked step (S = 1), and its mask is then that."""
    if attention_mask is not None:
        mask = attention_mask.bool()
    elif input_ids is not None and pad_token_id is not None:
        mask = input_ids.ne(pad_token_id)
    else:
        return torch.ones(shape, dtype=torch.bool)
    if mask.shape[1] == 0 and shape[1] == 1:
        return mask.new_zeros(shape)
    return mask


def source_lengths(source_mask: torch.Tensor) -> torch.Tensor:
    """The lengths (B,) on the host, as ``pack_padded_sequence`` needs them: one device-to-host copy of the mask
    per source batch, where right padding is also checked (packing takes each row's prefix), so a mask that is
    not ones then zeros is an error. source_mask: (B, S) bool."""
    host = source_mask.cpu()
    if is_capturing_graph():
        return host.sum(dim=1)
    rows = host.numpy()  # host arithmetic: no further reads of the device
    lengths = rows.sum(axis=1)  # (B,)
    if not (rows == (np.arange(rows.shape[1])[None, :] < lengths[:, None])).all():
        raise ValueError(
            "RNNSeq2Seq needs right-padded sources: every attention_mask row must be ones then zeros "
            "(set the tokenizer's padding_side='right')"
        )
    return torch.from_numpy(lengths)


@dataclass
class RNNSeq2SeqEncoderOutput(BaseModelOutput):
    """The encoder's output: ``last_hidden_state`` the memory (B, S, E), zero on padding, and ``source_mask``
    (B, S) bool, the real tokens the decoder may attend to (inferred from the pad id when no attention_mask was
    given). A zero-length source comes back as one masked step (S = 1), so every later shape is valid.
    ``final_hidden`` / ``final_cell`` (B, layers x directions, encoder_hidden_size): every layer's final states in
    nn.GRU/nn.LSTM's (layer, direction) order, only for the decoder inits that read them (FINAL_STATE_INITS);
    batch-first, so generate() expands them for beams with the rest."""

    source_mask: torch.BoolTensor | None = None
    final_hidden: torch.Tensor | None = None
    final_cell: torch.Tensor | None = None


class RNNSeq2SeqEncoder(nn.Module):
    """Embedding + (bi)directional multi-layer GRU/LSTM over packed sequences: padding never enters the recurrence.
    Returns the memory h_1..h_S (B, S, E) as ``last_hidden_state``, zero on padding."""

    main_input_name = "input_ids"

    def __init__(self, config: RNNSeq2SeqConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.encoder_embedding_size, config.pad_token_id)
        self.dropout = nn.Dropout(config.dropout)
        self.rnn = _RNN_CLASSES[config.cell_type](
            config.encoder_embedding_size, config.encoder_hidden_size, num_layers=config.encoder_layers,
            batch_first=True, bidirectional=config.bidirectional,
            dropout=config.dropout if config.encoder_layers > 1 else 0.0,
        )

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
    ) -> RNNSeq2SeqEncoderOutput:
        """input_ids, attention_mask: (B, S), right-padded; or inputs_embeds (B, S, D) instead of input_ids. The
        output flags are accepted as generate() passes them; the encoder has no attention and returns only its last
        states."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("the encoder needs exactly one of `input_ids` and `inputs_embeds`")
        shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:2]
        mask = source_mask_from_inputs(input_ids, attention_mask, self.config.pad_token_id, shape)
        if inputs_embeds is None:
            if input_ids.shape[1] == 0:  # zero-length sources: one masked pad position keeps the shapes valid
                input_ids = input_ids.new_full((input_ids.shape[0], 1), self.config.pad_token_id or 0)
                mask = mask.new_zeros(input_ids.shape)
            inputs_embeds = embed_source(self.embed_tokens, input_ids, self.config)  # (B, S, D)
        embeds = self.dropout(inputs_embeds)  # (B, S, D)
        lengths = source_lengths(mask).clamp(min=1)  # packing needs >= 1 step; empty rows are zeroed below
        packed = pack_padded_sequence(embeds, lengths, batch_first=True, enforce_sorted=False)
        outputs, final = self.rnn(packed)
        memory, _ = pad_packed_sequence(outputs, batch_first=True, total_length=embeds.shape[1])  # (B, S, E)
        mask = mask.to(memory.device)
        memory = memory * mask[:, :, None].to(memory.dtype)
        final_hidden = final_cell = None
        if self.config.decoder_init in FINAL_STATE_INITS:
            nonempty = mask.any(dim=1)[:, None, None].to(memory.dtype)  # (B, 1, 1): an empty source's states are 0
            hidden, cell = final if isinstance(final, tuple) else (final, None)  # (layers x directions, B, h)
            final_hidden = hidden.transpose(0, 1) * nonempty  # (B, layers x directions, h)
            final_cell = cell.transpose(0, 1) * nonempty if cell is not None else None
        return RNNSeq2SeqEncoderOutput(
            last_hidden_state=memory, source_mask=mask, final_hidden=final_hidden, final_cell=final_cell
        )


class RNNSeq2SeqDecoder(nn.Module):
    """GRU/LSTM decoder. Per step t, with y_{t-1} the previous target token and c_t the context:

    - bahdanau: c_t = attn(s_{t-1}, h), s_t = RNN([y_{t-1}; c_t], s_{t-1})               (arXiv:1409.0473)
    - luong_*, scaled_dot:
                h_t = RNN([y_{t-1}; h~_{t-1}], h_{t-1}) (input feeding) or RNN(y_{t-1}, h_{t-1}),
                c_t = attn(h_t, h), h~_t = tanh(W_c [c_t; h_t])                             (arXiv:1508.04025)
    - none:     c = final encoder state, h_t = RNN([y_{t-1}; c], h_{t-1})                   (arXiv:1406.1078)

    The readout tanh(W_c [c_t; s_t]) (H) feeds the output layer; for Luong it is the attentional state h~_t.
    When no step depends on the previous step's output (Luong without input feeding, none) the whole target
    runs through the RNN in one cuDNN-style call; otherwise one call per step.
    """

    def __init__(self, config: RNNSeq2SeqConfig):
        super().__init__()
        self.config = config
        memory_size, hidden_size = config.encoder_output_size, config.decoder_hidden_size
        self.attention_type = config.attention_type
        self.input_feeding = config.uses_input_feeding
        self.embed_tokens = nn.Embedding(config.target_vocab_size, config.decoder_embedding_size, config.pad_token_id)
        self.dropout = nn.Dropout(config.dropout)
        context_in_input = config.attention_type in ("bahdanau", "none")
        rnn_input_size = (
            config.decoder_embedding_size
            + (memory_size if context_in_input else 0)
            + (hidden_size if self.input_feeding else 0)
        )
        self.rnn = _RNN_CLASSES[config.cell_type](
            rnn_input_size, hidden_size, num_layers=config.decoder_layers, batch_first=True,
            dropout=config.dropout if config.decoder_layers > 1 else 0.0,
        )
        self.attention = build_attention(
            config.attention_type, hidden_size, memory_size, config.attention_size, config.attention_heads,
            config.attention_query_bias,
        )
        self.readout = nn.Linear(memory_size + hidden_size, hidden_size)  # W_c over [c_t; s_t]
        self.readout_activation = nn.Tanh() if config.readout_activation == "tanh" else nn.Identity()  # no parameters
        # decoder_init="final_states_bridge" (OpenNMT-py -bridge): one Linear per state kind (hidden, LSTM cell) over
        # rows of layers x encoder_hidden_size final-state values
        state_size = config.encoder_layers * config.encoder_hidden_size
        self.final_state_bridge = (
            nn.ModuleList(nn.Linear(state_size, state_size) for _ in range(2 if config.cell_type == "lstm" else 1))
            if config.decoder_init == "final_states_bridge" else None
        )
        # decoder_init="final_states_projected" (fairseq lstm's encoder_hidden_proj / encoder_cell_proj): one Linear
        # E -> H per state kind (hidden, LSTM cell), shared by all layers, no activation
        self.final_state_projection = (
            nn.ModuleList(nn.Linear(memory_size, hidden_size) for _ in range(2 if config.cell_type == "lstm" else 1))
            if config.decoder_init == "final_states_projected" else None
        )
        # output_projection_size (fairseq lstm's additional_fc): readout (H) -> W_p h~_t + b_p (P), what lm_head reads
        self.output_projection = (
            nn.Linear(hidden_size, config.output_projection_size) if config.output_projection_size else None
        )
        # decoder_init="bridge": s_0 = tanh(W_b [h_fwd_final; h_bwd_final]), one slice of W_b per decoder layer
        self.bridge = (
            nn.Linear(memory_size, config.decoder_layers * hidden_size) if config.decoder_init == "bridge" else None
        )
        self.step = RNNSeq2SeqDecoderStep()  # run() as gradient checkpointing recomputes it; holds no weights

    @property
    def scheduled_sampling(self) -> bool:
        """Training with ``teacher_forcing_ratio`` < 1: a step's input may be the model's own previous prediction
        (``_scheduled_sampling_input``), read through the generation model's output layer."""
        return self.training and self.config.teacher_forcing_ratio < 1.0

    @property
    def steps_depend_on_outputs(self) -> bool:
        """True when step t needs step t-1's output (Bahdanau query s_{t-1}, input feeding): loop over steps."""
        return self.attention_type == "bahdanau" or self.input_feeding

    def _final_states(self, states: torch.Tensor | None, kind: int) -> torch.Tensor:
        """decoder_init "final_states(_bridge)", OpenNMT-py's RNNDecoderBase.init_state (after RNNEncoder._bridge):
        states (B, layers x directions, h) of state kind ``kind`` (0 hidden, 1 LSTM cell) -> (B, L, H), decoder layer
        l's state [fwd^l; bwd^l]."""
        if states is None:
            raise ValueError(
                f"decoder_init={self.config.decoder_init!r} needs the encoder's final states: pass the encoder output "
                "of this model's encoder (RNNSeq2SeqEncoderOutput with final_hidden / final_cell)"
            )
        batch, layers = states.shape[0], self.config.decoder_layers
        if self.final_state_bridge is not None:
            directions = 2 if self.config.bidirectional else 1
            rows = states.reshape(batch * directions, -1)  # (B x directions, layers x h), OpenNMT's bottle_hidden
            states = torch.relu(self.final_state_bridge[kind](rows)).view_as(states)
        states = states.reshape(batch, layers, -1)  # (B, L, E) per layer [fwd^l; bwd^l]
        if self.final_state_projection is not None:  # fairseq: W [fwd^l; bwd^l] + b, no activation
            states = self.final_state_projection[kind](states)  # (B, L, H)
        return states  # (B, L, H)

    def init_state(self, memory: torch.Tensor, source_mask: torch.Tensor, cache: RNNSeq2SeqCache,
                   final_states: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)) -> RNNSeq2SeqCache:
        """Fill ``cache`` from the encoder: memory (B, S, E), source_mask (B, S) bool; ``final_states`` the encoder
        output's (final_hidden, final_cell), read by decoder_init "final_states(_bridge)" only."""
        batch, hidden_size, layers = memory.shape[0], self.config.decoder_hidden_size, self.config.decoder_layers
        lengths = source_mask.sum(dim=1)  # (B,)
        last = (lengths - 1).clamp(min=0)
        rows = torch.arange(batch, device=memory.device)
        if self.config.bidirectional:  # forward direction ends at the last token, backward at the first
            half = self.config.encoder_hidden_size
            final = torch.cat([memory[rows, last, :half], memory[:, 0, half:]], dim=-1)  # (B, E)
        else:
            final = memory[rows, last]  # (B, E)
        if self.config.decoder_init == "bridge":
            hidden = torch.tanh(self.bridge(final)).view(batch, layers, hidden_size)  # (B, L, H)
        elif self.config.decoder_init == "last":
            hidden = final[:, None, :].expand(batch, layers, hidden_size).contiguous()  # (B, L, H)
        elif self.config.decoder_init == "last_forward":  # Joey NMT: the forward half of [h_fwd; h_bwd]
            hidden = final[:, None, :hidden_size].expand(batch, layers, hidden_size).contiguous()  # (B, L, H)
        elif self.config.decoder_init in FINAL_STATE_INITS:
            hidden = self._final_states(final_states[0], 0)  # (B, L, H)
        else:
            hidden = memory.new_zeros(batch, layers, hidden_size)
        cache.hidden = hidden
        cache.cell = torch.zeros_like(hidden) if self.config.cell_type == "lstm" else None
        if cache.cell is not None and self.config.decoder_init in FINAL_STATE_INITS:
            cache.cell = self._final_states(final_states[1], 1)  # (B, L, H)
        elif cache.cell is not None and self.config.decoder_init_cell == "copy_hidden":
            cache.cell = hidden.clone()  # c_0 = s_0 (Joey NMT), (B, L, H)
        cache.input_feed = memory.new_zeros(batch, hidden_size) if self.input_feeding else None
        cache.memory, cache.source_mask = memory, source_mask
        # Source-side half of the score, computed once per source here and read back at every step.
        cache.keys = self.attention.project_keys(memory) if self.attention is not None else None  # (B, S, A)
        cache.context = final if self.attention is None else None
        cache.restart_count(memory.device)
        return cache

    def _attend(self, query: torch.Tensor, state: RNNSeq2SeqCache) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, T, H) -> context (B, T, E), weights (B, heads, T, S)."""
        return self.attention(query, state.keys, state.memory, state.source_mask)

    def run(self, embeds: torch.Tensor, state: RNNSeq2SeqCache) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The equations of the class docstring over embeds (B, T, D) -> readout (B, T, H), weights
        (B, heads, T, S) or None. T must be 1 when ``steps_depend_on_outputs``. Advances ``state``."""
        if self.attention is None:
            context = state.context[:, None, :].expand(-1, embeds.shape[1], -1)  # (B, T, E)
            outputs = run_rnn(self.rnn, torch.cat([embeds, context], dim=-1), state)  # (B, T, H)
            weights = None
        elif self.attention_type == "bahdanau":
            context, weights = self._attend(state.hidden[:, -1:], state)  # query s_{t-1}: (B, 1, H)
            outputs = run_rnn(self.rnn, torch.cat([embeds, context], dim=-1), state)  # (B, 1, H)
        else:
            inputs = torch.cat([embeds, state.input_feed[:, None]], dim=-1) if self.input_feeding else embeds
            outputs = run_rnn(self.rnn, inputs, state)  # h_t: (B, T, H)
            context, weights = self._attend(outputs, state)
        readout = self.readout_activation(self.readout(torch.cat([context, outputs], dim=-1)))  # (B, T, H)
        if self.input_feeding:
            state.input_feed = readout[:, -1]
        return readout, weights

    def project_output(self, readout: torch.Tensor) -> torch.Tensor:
        """What the output layer reads: readout (B, T, H) itself, or with ``output_projection_size`` (fairseq lstm's
        additional_fc, then its dropout) the projected (B, T, P)."""
        if self.output_projection is None:
            return readout
        return self.dropout(self.output_projection(readout))  # (B, T, P)

    def _run_or_checkpoint(self, embeds: torch.Tensor, state: RNNSeq2SeqCache) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``run``, or under gradient checkpointing ``self.step``, which recomputes a step's attention and readout
        in the backward pass instead of keeping them."""
        if not (self.step.gradient_checkpointing and self.training):
            return self.run(embeds, state)
        readout, weights, state.hidden, state.cell, state.input_feed = self.step(embeds, *state.tensors(), decoder=self)
        return readout, weights

    def _scheduled_sampling_input(
        self, reference: torch.Tensor, previous_readout: torch.Tensor, output_layer: nn.Module
    ) -> torch.Tensor:
        """Scheduled sampling, Bengio et al. 2015 (arXiv:1506.03099): each example's input at this step is, with
        probability 1 - ``teacher_forcing_ratio``, the model's own prediction at the previous step (the argmax of
        ``output_layer`` over what it reads, ``project_output``) instead of the reference token. reference (B, 1, D)
        the reference token's embedding after dropout; previous_readout (B, 1, H) -> the step's input (B, 1, D)."""
        logits = output_layer(self.project_output(previous_readout))  # (B, 1, V)
        predicted = self.dropout(self.embed_tokens(logits.argmax(dim=-1)))  # (B, 1, D)
        sample = torch.rand(reference.shape[0], 1, 1, device=reference.device) >= self.config.teacher_forcing_ratio
        return torch.where(sample, predicted, reference)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        state: RNNSeq2SeqCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        output_layer: nn.Module | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """input_ids (B, T) (or inputs_embeds (B, T, D)) -> what the output layer reads, (B, T, H) (or (B, T, P) with
        ``output_projection_size``), and the attention weights (B, heads, T, S) or None; advances ``state``. Called on its own (``model.get_decoder()``), the decoder starts a state from
        ``encoder_hidden_states`` (B, S, E) and ``encoder_attention_mask`` (B, S) when no ``state`` is given.

        output_layer: (B, 1, H or P) -> logits (B, 1, V), the generation model's ``lm_head``, which passes it when
        ``scheduled_sampling``; without it the decoder is teacher-forced.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("the decoder needs exactly one of `input_ids` and `inputs_embeds`")
        if state is None:
            if encoder_hidden_states is None:
                raise ValueError("the decoder needs a `state` (RNNSeq2SeqCache) or `encoder_hidden_states`")
            source_mask = source_mask_from_inputs(
                None, encoder_attention_mask, None, encoder_hidden_states.shape[:2]
            ).to(encoder_hidden_states.device)
            state = self.init_state(encoder_hidden_states, source_mask, RNNSeq2SeqCache())
        sampling = output_layer is not None and self.scheduled_sampling
        if inputs_embeds is None:
            inputs_embeds = embed(self.embed_tokens, input_ids, "decoder_input_ids")  # (B, T, D)
        embeds = self.dropout(inputs_embeds)  # (B, T, D)
        if not sampling and not self.steps_depend_on_outputs:  # the whole target in one RNN call
            readout, weights = self._run_or_checkpoint(embeds, state)
        else:  # one call per step
            readouts, all_weights = [], []
            for t in range(embeds.shape[1]):
                step = embeds[:, t : t + 1]  # (B, 1, D)
                if sampling and t > 0:
                    step = self._scheduled_sampling_input(step, readouts[-1], output_layer)
                readout, weights = self._run_or_checkpoint(step, state)
                readouts.append(readout)
                all_weights.append(weights)
            readout = torch.cat(readouts, dim=1)  # (B, T, H)
            weights = torch.cat(all_weights, dim=2) if self.attention is not None else None  # (B, heads, T, S)
        state.advance(embeds.shape[1])
        return self.project_output(self.dropout(readout)), weights


class RNNSeq2SeqPreTrainedModel(Seq2SeqPreTrainedMixin, PreTrainedModel):
    config: RNNSeq2SeqConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _is_stateful = True  # the recurrent state cannot be rolled back: generate() refuses assisted decoding
    supports_gradient_checkpointing = True  # the decoder steps (RNNSeq2SeqDecoderStep)
    _supports_attention_backend = False
    # Device maps place the encoder and the decoder each whole on one device: the decoder's step loop reads its
    # cells, attention and readout together, and the cache it carries lives beside them.
    _no_split_modules = ["RNNSeq2SeqEncoder", "RNNSeq2SeqDecoder"]

    def get_compiled_call(self, compile_config):
        """transformers' compiled forward (compiled decoding steps), traced with dynamo's ``allow_rnn``."""
        return allow_rnn(super().get_compiled_call(compile_config))

    def _init_weights(self, module: nn.Module):
        """Every parameter, GRU/LSTM included (transformers' default skips nn.GRU); ``init`` skips loaded tensors."""
        if isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=self.config.init_std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.GRU | nn.LSTM):
            for name, param in module.named_parameters():
                if name.startswith("weight_ih"):
                    init.xavier_uniform_(param)
                elif name.startswith("weight_hh"):
                    init.orthogonal_(param)
                else:
                    init.zeros_(param)


class RNNSeq2SeqModel(RNNSeq2SeqPreTrainedModel):
    """Encoder + decoder; ``last_hidden_state`` is the decoder readout (B, T, H) that the output layer reads."""

    def __init__(self, config: RNNSeq2SeqConfig):
        super().__init__(config)
        self.encoder = RNNSeq2SeqEncoder(config)
        self.decoder = RNNSeq2SeqDecoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value):
        self.encoder.embed_tokens = value

    def get_encoder(self, modality: str | None = None):
        return self.encoder

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: RNNSeq2SeqCache | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        output_layer: nn.Module | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        """input_ids, attention_mask (B, S); decoder_input_ids (B, T). decoder_attention_mask (B, T) is accepted as
        transformers' seq2seq models accept it and needs no use: target padding is on the right, and the recurrence
        is causal, so no real position reads a padded one. With an initialised ``cache`` (also accepted as
        ``past_key_values``, its name before transformers 5.24) only
        the new decoder tokens are read and the encoder is not needed. The source mask comes with the encoder's
        output (inferred from the pad id without attention_mask), so a decoder fed by generate() sees the same.
        inputs_embeds (B, S, D) / decoder_inputs_embeds (B, T, D) replace input_ids / decoder_input_ids.
        ``return_dict=False`` gives a tuple. An RNN has no per-layer hidden states: ``output_hidden_states`` is
        accepted and returns none. ``output_layer``: the generation model's output layer, for the decoder's scheduled
        sampling (see ``RNNSeq2SeqDecoder.forward``). Other keywords transformers passes are accepted and ignored."""
        cache = cache_argument(cache, kwargs)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError(
                "RNNSeq2SeqModel needs `decoder_input_ids` or `decoder_inputs_embeds` (or `labels` on the generation model)"
            )
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        output_attentions, _ = output_flags(self.config, output_attentions, output_hidden_states)
        if cache is not None and not isinstance(cache, RNNSeq2SeqCache):
            raise TypeError(f"the cache must be an RNNSeq2SeqCache, got {type(cache).__name__}")

        if encoder_outputs is not None:
            encoder_outputs = encoder_output(encoder_outputs)
        state = cache if cache is not None and cache.is_initialized else None
        if state is None:
            if encoder_outputs is None:
                if input_ids is None and inputs_embeds is None:
                    raise ValueError("RNNSeq2SeqModel needs `input_ids`, `inputs_embeds` or `encoder_outputs`")
                encoder_outputs = self.encoder(
                    input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, return_dict=True
                )
            memory = encoder_outputs.last_hidden_state  # (B, S, E)
            source_mask = getattr(encoder_outputs, "source_mask", None)
            if source_mask is None:  # encoder outputs made elsewhere: the mask from the inputs
                source_mask = source_mask_from_inputs(input_ids, attention_mask, self.config.pad_token_id, memory.shape[:2])
            final_states = (getattr(encoder_outputs, "final_hidden", None), getattr(encoder_outputs, "final_cell", None))
            state = self.decoder.init_state(
                memory, source_mask.to(memory.device), cache if cache is not None else RNNSeq2SeqCache(), final_states
            )
        elif encoder_outputs is None:
            encoder_outputs = BaseModelOutput(last_hidden_state=state.memory)

        readout, weights = self.decoder(
            decoder_input_ids, state, inputs_embeds=decoder_inputs_embeds, output_layer=output_layer
        )
        return Seq2SeqModelOutput(
            last_hidden_state=readout,
            **cache_output(state if use_cache else None),
            # one "layer" of attention: (B, heads, T, S), one head unless attention_heads > 1, as generate() expects
            cross_attentions=(weights,) if output_attentions and weights is not None else None,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
        )


class RNNSeq2SeqForConditionalGeneration(Seq2SeqGeneration, RNNSeq2SeqPreTrainedModel, GenerationMixin):
    """RNN encoder-decoder with the output layer, loss and ``generate()`` (greedy, beam, sampling, n-best).

    Alignments: ``generate(..., output_attentions=True, return_dict_in_generate=True)`` gives
    ``cross_attentions``, a tuple over steps of ``(weights,)`` with weights (B x beams, heads, 1, S), heads being
    ``config.attention_heads`` (1 but for multi-head dot-type attention).
    """

    _tied_weights_keys = {"lm_head.weight": "model.decoder.embed_tokens.weight"}
    uses_default_cache = False  # forward creates its own RNNSeq2SeqCache; generate must not hand it another

    def __init__(self, config: RNNSeq2SeqConfig):
        super().__init__(config)
        self.model = RNNSeq2SeqModel(config)
        self.lm_head = nn.Linear(config.decoder_output_size, config.target_vocab_size, bias=config.output_bias)
        self.post_init()
        self._set_default_generation_length()

    def get_encoder(self, modality: str | None = None):
        return self.model.encoder

    def get_input_embeddings(self):
        return self.model.encoder.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def cache_for_generation(self, generation_config) -> RNNSeq2SeqCache | None:
        """``generate(cache_implementation="static")``, transformers' request for a fixed-size cache that the
        decoding step can be compiled over, gets a compileable RNNSeq2SeqCache (the recurrent state is fixed-size
        already); without it forward creates an ordinary one on the first step."""
        return RNNSeq2SeqCache(compileable=True) if generation_config.cache_implementation == "static" else None

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: RNNSeq2SeqCache | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        output_vocabulary: OutputVocabulary | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """labels (B, T), -100 on ignored positions; the loss is the token sum over ``num_items_in_batch``
        (Trainer passes it) or the token mean, smoothed by ``config.label_smoothing``. A training forward with
        labels runs the output layer on each row's positions up to its last label only (padding-free, see
        ``output_layer_and_loss``) and returns the loss without logits; otherwise logits are (B, T, V). Scheduled
        sampling reads the output layer too (the decoder's ``scheduled_sampling``). With ``config.rdrop_alpha`` > 0 a
        training forward with labels runs the batch twice (R-Drop, ``modeling_common.rdrop_loss``): its outputs
        other than the loss cover 2B rows, the second copy after the first. ``output_vocabulary``: a vocabulary
        shortlist's tokens, which generate() passes when given one: decoder ids and logits (B, T, K) in its compact
        ids (``output_vocabulary.py``). The cache is also accepted as
        ``past_key_values``."""
        cache = cache_argument(cache, kwargs)
        if output_vocabulary is not None and decoder_input_ids is not None:  # compact ids -> the embedding's
            decoder_input_ids = output_vocabulary.full_ids(decoder_input_ids)
        packing = None
        rdrop_alpha = self.config.rdrop_alpha if self.training and labels is not None else 0.0
        if rdrop_alpha:  # (B, ...) -> (2B, ...): the two passes of R-Drop in one
            (input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, inputs_embeds,
             decoder_inputs_embeds, labels) = repeat_batch(
                encoder_outputs, cache, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask,
                inputs_embeds, decoder_inputs_embeds, labels)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
            if self.training:
                packing = TokenPacking.through_last_label(labels)
        outputs = self.model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs, cache=cache, use_cache=use_cache,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
            inputs_embeds=inputs_embeds, decoder_inputs_embeds=decoder_inputs_embeds,
            output_layer=self.lm_head if self.model.decoder.scheduled_sampling else None,
        )
        logits, loss = output_layer_and_loss(self.lm_head, outputs.last_hidden_state, labels, packing,
                                             num_items_in_batch, self.config.label_smoothing, rdrop_alpha,
                                             output_vocabulary)
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **cache_output(output_cache(outputs)),
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
        )


__all__ = [
    "RNNSeq2SeqCache",  # defined in cache_rnn_seq2seq, importable from here as before
    "RNNSeq2SeqPreTrainedModel",
    "RNNSeq2SeqModel",
    "RNNSeq2SeqForConditionalGeneration",
]
