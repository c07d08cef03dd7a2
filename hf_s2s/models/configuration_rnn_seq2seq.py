"""Configuration of the RNN encoder-decoder family (GRU/LSTM, Bahdanau, Luong or scaled dot-product attention, or
none).

Copied into every saved model folder: it imports only single-dot siblings, never ``hf_s2s``.
"""

from dataclasses import fields

# first: an unsupported transformers gets a message naming the supported versions, not a missing name
from .transformers_compat import MIN_TRANSFORMERS_VERSION  # noqa: F401

# isort: split
from transformers import PreTrainedConfig

from .config_checks import (
    Seq2SeqConfigMixin,
    check_choice,
    check_dropout,
    check_non_negative,
    check_positive,
    check_probability,
    check_source_unk_aliases,
    check_token_id,
    reject_unknown_kwargs,
)

CELL_TYPES = ("gru", "lstm")
ATTENTION_TYPES = ("bahdanau", "luong_dot", "luong_general", "luong_concat", "scaled_dot", "none")
# Scored on the current decoder state h_t, with Luong's attentional state tanh(W_c [c_t; h_t]) and input feeding
LUONG_STYLE_TYPES = ("luong_dot", "luong_general", "luong_concat", "scaled_dot")
# Dot-product scores, which take several heads (attention_heads); luong_general is left out: with per-head query
# and key projections its W_a is one more matrix in a product of projections, the same function as luong_dot's
MULTI_HEAD_TYPES = ("luong_dot", "scaled_dot")
DECODER_INITS = ("bridge", "last", "zero", "final_states", "final_states_bridge", "final_states_projected",
                 "last_forward")
DECODER_INIT_CELLS = ("zero", "copy_hidden")
# Decoder inits that start decoder layer l from encoder layer l's final states (OpenNMT-py RNNDecoderBase.init_state,
# fairseq LSTMDecoder.extract_features)
FINAL_STATE_INITS = ("final_states", "final_states_bridge", "final_states_projected")
# ... of which these need encoder output size == decoder_hidden_size (the projected one maps E to H)
UNPROJECTED_FINAL_STATE_INITS = ("final_states", "final_states_bridge")
READOUT_ACTIVATIONS = ("tanh", "none")


class RNNSeq2SeqConfig(Seq2SeqConfigMixin, PreTrainedConfig):
    r"""Recurrent encoder-decoder: a (bi)directional GRU/LSTM encoder, a GRU/LSTM decoder and one of
    ``attention_type``:

    - ``"bahdanau"``: additive attention queried with the decoder state before the step (arXiv:1409.0473);
    - ``"luong_dot"`` / ``"luong_general"`` / ``"luong_concat"``: Luong et al. 2015 (arXiv:1508.04025) scores on
      the current decoder state, attentional state ``tanh(W_c [c_t; h_t])``, optional input feeding;
    - ``"scaled_dot"``: the same with Vaswani et al. 2017 (arXiv:1706.03762) eq. 1, ``h_t . h_s / sqrt(d)``;
      ``luong_dot`` and ``scaled_dot`` take ``attention_heads`` > 1 (multi-head attention over the encoder states);
    - ``"none"``: Cho et al. 2014 (arXiv:1406.1078), the final encoder state is the context of every step.

    Switches that match other toolkits' math exactly (defaults keep hf_s2s's own):

    - ``decoder_init="final_states"``: OpenNMT-py 3.x (``RNNDecoderBase.init_state``) starts decoder layer l from
      encoder layer l's final hidden state (and LSTM cell), its two directions concatenated:
      ``s_0^l = [h_fwd^l; h_bwd^l]``, ``c_0^l = [c_fwd^l; c_bwd^l]`` (needs encoder_layers == decoder_layers);
    - ``decoder_init="final_states_bridge"``: the same states through OpenNMT-py's ``-bridge``
      (``RNNEncoder._bridge``): the final states of all layers, flattened in (layer, direction) order, are cut into
      ``directions`` rows of ``layers x encoder_hidden_size`` each and every row becomes ``relu(W_b x + b_b)``, with
      one (W_b, b_b) for hidden states and one for LSTM cells, before the regrouping above;
    - ``decoder_init="final_states_projected"``: fairseq's ``lstm`` (``LSTMDecoder.extract_features``, when the
      encoder output size E differs from H): decoder layer l starts from its encoder layer's final states through
      one linear map for hidden states and one for cells, shared by all layers and without activation,
      ``s_0^l = W_h [h_fwd^l; h_bwd^l] + b_h``, ``c_0^l = W_c [c_fwd^l; c_bwd^l] + b_c`` (``encoder_hidden_proj``,
      ``encoder_cell_proj``); any E and H, encoder_layers == decoder_layers;
    - ``output_projection_size=P``: fairseq's ``lstm`` ``additional_fc`` (when ``--decoder-hidden-size`` differs
      from ``--decoder-out-embed-dim``): a linear map with a bias and no activation between the readout and the
      output layer, ``logits = W_o (W_p h~_t + b_p) (+ b_o)``; the output layer (and a tied target embedding) then
      has P inputs;
    - ``decoder_init="last_forward"``: Joey NMT 2.x ``init_hidden: last`` with a bidirectional encoder twice the
      decoder's size (``RecurrentDecoder._init_hidden``): every decoder layer starts from the top encoder layer's
      final *forward* state only, ``s_0^l = h_fwd^L`` (needs encoder_hidden_size == decoder_hidden_size);
    - ``decoder_init_cell="copy_hidden"``: an LSTM decoder's initial cell equals its initial hidden state,
      ``c_0^l = s_0^l`` (Joey NMT 2.x ``_init_hidden`` returns ``(hidden, hidden)`` for bridge and last); the
      default ``"zero"`` starts cells at 0. Applies to decoder_init "bridge", "last", "last_forward";
    - ``readout_activation="none"``: OpenNMT-py's ``mlp`` global attention has no tanh on the attentional vector,
      ``h~_t = W_c [c_t; h_t] + b_c`` (``GlobalAttention.forward``);
    - ``attention_query_bias=True``: the additive score's query projection has a bias,
      ``v^T tanh(W_q q + b_q + W_h h_i)`` (OpenNMT-py ``mlp``: ``linear_query``);
    - ``output_bias=True``: the output layer has a bias, ``logits = W_o h~_t + b_o`` (OpenNMT-py's generator);
    - ``source_eos=False``: the source tokenizer appends no ``</s>`` (OpenNMT-py 3.x's ``numericalize``); the
      tokenizer check then expects none.
    - ``source_unk_aliases=n``: source ids ``vocab_size`` .. ``vocab_size + n - 1`` are subword pieces the source
      vocabulary lacks, which a converted toolkit's tokenizer emits after the vocabulary (its segmentation uses them):
      the encoder reads each as ``unk_token_id``, as OpenNMT-py and fairseq read such a piece as ``<unk>``, and the
      decoder can never produce them.

    Example:
        ```python
        >>> from hf_s2s import RNNSeq2SeqConfig, RNNSeq2SeqForConditionalGeneration
        >>> config = RNNSeq2SeqConfig(vocab_size=8000, cell_type="lstm", attention_type="luong_general")
        >>> model = RNNSeq2SeqForConditionalGeneration(config)
        ```
    """

    model_type = "rnn_seq2seq"
    keys_to_ignore_at_inference = ["cache", "past_key_values"]  # the decoder cache, under both names (transformers 5.24 renamed it)
    # Generic names transformers (generate, device maps, common tooling) reads, mapped onto the decoder's fields as the
    # Transformer config does. An RNN has no attention heads, so there is no num_attention_heads.
    attribute_map = {"hidden_size": "decoder_hidden_size", "num_hidden_layers": "decoder_layers"}

    vocab_size: int = 32000  # source vocabulary size; also the target's unless decoder_vocab_size is set
    decoder_vocab_size: int | None = None  # target vocabulary size; None = same (shared) vocabulary as the source
    encoder_embedding_size: int = 256  # size of a source token embedding
    decoder_embedding_size: int = 256  # size of a target token embedding
    encoder_hidden_size: int = 256  # encoder RNN state size per direction (outputs are 2x this if bidirectional)
    decoder_hidden_size: int = 512  # decoder RNN state size, also the size of the attentional/readout vector
    attention_size: int = 512  # size of the additive score's tanh layer (bahdanau, luong_concat)
    encoder_layers: int = 1  # stacked encoder RNN layers
    decoder_layers: int = 1  # stacked decoder RNN layers
    bidirectional: bool = True  # run the encoder in both directions and concatenate the two states
    cell_type: str = "gru"  # recurrent cell of encoder and decoder: "gru" or "lstm"
    attention_type: str = "bahdanau"  # one of ATTENTION_TYPES
    attention_heads: int = 1  # heads of a dot-type score (MULTI_HEAD_TYPES), each over E / heads dimensions
    input_feeding: bool | None = None  # Luong input feeding (previous attentional vector joins the input); None = on for
    # LUONG_STYLE_TYPES
    decoder_init: str = "bridge"  # decoder initial state: "bridge" (tanh projection), "last" (final state), "zero", or
    # OpenNMT-py's per-layer "final_states" / "final_states_bridge", fairseq's "final_states_projected" (class docstring)
    readout_activation: str = "tanh"  # activation of the readout W_c [c_t; s_t]: "tanh", or "none" (OpenNMT-py mlp)
    attention_query_bias: bool = False  # bias b_q in the additive score's query projection (OpenNMT-py mlp)
    output_bias: bool = False  # bias of the output layer (OpenNMT-py's generator has one)
    decoder_init_cell: str = "zero"  # LSTM decoder's initial cell: "zero", or "copy_hidden" (c_0 = s_0, Joey NMT)
    output_projection_size: int | None = None  # size P of a linear map (with bias) between readout and output layer
    # (fairseq lstm's additional_fc); None = the output layer reads the H-sized readout
    source_eos: bool = True  # sources end with </s> (hf_s2s, Joey NMT, fairseq); False: OpenNMT-py 3.x feeds none
    source_unk_aliases: int = 0  # ids vocab_size .. + n - 1: pieces the vocabulary lacks, read as unk_token_id
    unk_token_id: int | None = None  # <unk>: what the encoder reads source_unk_aliases ids as
    dropout: float = 0.1  # dropout on embeddings, between RNN layers and on the readout vector
    teacher_forcing_ratio: float = 1.0  # training only: probability of feeding the gold token (< 1 = scheduled sampling)
    label_smoothing: float = 0.0  # eps of the label-smoothed loss the model computes from labels (Trainer's factor)
    rdrop_alpha: float = 0.0  # R-Drop: weight of the KL between two dropout passes in a training loss (0 = off;
    # > 0: a training forward with labels runs its batch twice; modeling_common.rdrop_loss)
    init_std: float = 1.0  # std of the normal init of embeddings (PyTorch's default; 0.1 learned far slower under
    # Adam on Multi30k). Matrices use Xavier, recurrent matrices orthogonal
    tie_word_embeddings: bool = False  # share the target embedding with the output projection
    use_cache: bool = True  # generate() carries the recurrent state in a cache instead of re-running the prefix
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    decoder_start_token_id: int | None = 1

    def __post_init__(self, **kwargs):
        reject_unknown_kwargs(type(self).__name__, kwargs, [f.name for f in fields(self)])
        super().__post_init__(**kwargs)
        self.validate_architecture()

    def validate_architecture(self):
        """This family's checks (transformers' name for them): run at construction and by ``validate()``."""
        for name in (
            "vocab_size", "encoder_embedding_size", "decoder_embedding_size", "encoder_hidden_size",
            "decoder_hidden_size", "attention_size", "attention_heads", "encoder_layers", "decoder_layers",
        ):
            check_positive(name, getattr(self, name))
        if self.decoder_vocab_size is not None:
            check_positive("decoder_vocab_size", self.decoder_vocab_size)
        if self.output_projection_size is not None:
            check_positive("output_projection_size", self.output_projection_size)
        check_choice("cell_type", self.cell_type, CELL_TYPES)
        check_choice("attention_type", self.attention_type, ATTENTION_TYPES)
        check_choice("decoder_init", self.decoder_init, DECODER_INITS)
        check_choice("readout_activation", self.readout_activation, READOUT_ACTIVATIONS)
        if self.attention_query_bias and self.attention_type not in ("bahdanau", "luong_concat"):
            raise ValueError(
                "`attention_query_bias`=True applies to the additive scores ('bahdanau', 'luong_concat') only, got "
                f"attention_type={self.attention_type!r}"
            )
        if self.decoder_init == "final_states_projected" and self.encoder_layers != self.decoder_layers:
            raise ValueError(
                f"`decoder_init`='final_states_projected' starts decoder layer l from encoder layer l's final states, "
                f"so `encoder_layers` ({self.encoder_layers}) must equal `decoder_layers` ({self.decoder_layers})"
            )
        if self.decoder_init in UNPROJECTED_FINAL_STATE_INITS and (
            self.encoder_layers != self.decoder_layers or self.encoder_output_size != self.decoder_hidden_size
        ):
            raise ValueError(
                f"`decoder_init`={self.decoder_init!r} starts decoder layer l from encoder layer l's final states, so "
                f"`encoder_layers` ({self.encoder_layers}) must equal `decoder_layers` ({self.decoder_layers}) and "
                f"`decoder_hidden_size` ({self.decoder_hidden_size}) the encoder output size "
                f"({self.encoder_output_size}); allowed "
                "with other sizes: 'bridge', 'zero', 'final_states_projected'"
            )
        check_dropout("dropout", self.dropout)
        check_probability("teacher_forcing_ratio", self.teacher_forcing_ratio)
        check_probability("label_smoothing", self.label_smoothing)
        check_non_negative("rdrop_alpha", self.rdrop_alpha)
        if self.input_feeding and self.attention_type not in LUONG_STYLE_TYPES:
            raise ValueError(
                f"`input_feeding` applies to the Luong attention types only {list(LUONG_STYLE_TYPES)}, got "
                f"attention_type={self.attention_type!r}"
            )
        memory_size = self.encoder_output_size
        if self.attention_heads > 1 and self.attention_type not in MULTI_HEAD_TYPES:
            raise ValueError(
                f"`attention_heads`={self.attention_heads} needs a dot-type score, attention_type one of "
                f"{list(MULTI_HEAD_TYPES)}, got attention_type={self.attention_type!r}; allowed with it: attention_heads=1"
            )
        if memory_size % self.attention_heads:
            raise ValueError(
                f"`attention_heads`={self.attention_heads} splits the encoder output size ({memory_size}) among the "
                f"heads, so it must divide it; allowed: one of {[n for n in range(1, memory_size + 1) if memory_size % n == 0]}"
            )
        if self.attention_type in MULTI_HEAD_TYPES and self.attention_heads == 1 and memory_size != self.decoder_hidden_size:
            raise ValueError(
                f"`attention_type`={self.attention_type!r} scores h_t . h_s, so `decoder_hidden_size` must equal the "
                f"encoder output size (encoder_hidden_size x {2 if self.bidirectional else 1} directions = {memory_size}), "
                f"got decoder_hidden_size={self.decoder_hidden_size}; use 'luong_general' for different sizes, or "
                "attention_heads > 1 (its heads project the decoder state)"
            )
        check_choice("decoder_init_cell", self.decoder_init_cell, DECODER_INIT_CELLS)
        if self.decoder_init_cell == "copy_hidden" and self.decoder_init not in ("bridge", "last", "last_forward"):
            raise ValueError(
                "`decoder_init_cell`='copy_hidden' copies the initial hidden state computed by decoder_init 'bridge', "
                f"'last' or 'last_forward', got decoder_init={self.decoder_init!r}; allowed with it: 'zero'"
            )
        if self.decoder_init == "last_forward" and not (
            self.bidirectional and self.encoder_hidden_size == self.decoder_hidden_size
        ):
            raise ValueError(
                "`decoder_init`='last_forward' copies the final forward encoder state, so it needs bidirectional=True "
                f"and `encoder_hidden_size` ({self.encoder_hidden_size}) == `decoder_hidden_size` "
                f"({self.decoder_hidden_size})"
            )
        if self.decoder_init == "last" and memory_size != self.decoder_hidden_size:
            raise ValueError(
                "`decoder_init`='last' copies the final encoder state, so `decoder_hidden_size` must equal the "
                f"encoder output size ({memory_size}), got {self.decoder_hidden_size}; allowed with other sizes: "
                "'bridge', 'zero'"
            )
        if self.tie_word_embeddings and self.decoder_embedding_size != self.decoder_output_size:
            raise ValueError(
                "`tie_word_embeddings`=True shares the target embedding with the output projection, which reads the "
                f"{self.decoder_output_size}-sized decoder output (decoder_hidden_size, or output_projection_size "
                f"when set), so `decoder_embedding_size` ({self.decoder_embedding_size}) must equal it"
            )
        target_vocab = self.target_vocab_size
        check_token_id("pad_token_id", self.pad_token_id, min(self.vocab_size, target_vocab), optional=True)
        check_source_unk_aliases(self)
        for name in ("bos_token_id", "eos_token_id", "decoder_start_token_id"):
            check_token_id(name, getattr(self, name), target_vocab, optional=True)

    @property
    def encoder_output_size(self) -> int:
        """Size of one encoder memory vector h_i (both directions concatenated)."""
        return self.encoder_hidden_size * (2 if self.bidirectional else 1)

    @property
    def decoder_output_size(self) -> int:
        """Size of the vector the output layer reads: the readout (H), or output_projection_size when set."""
        return self.output_projection_size or self.decoder_hidden_size

    @property
    def uses_input_feeding(self) -> bool:
        if self.input_feeding is None:
            return self.attention_type in LUONG_STYLE_TYPES
        return self.input_feeding


__all__ = ["RNNSeq2SeqConfig"]
