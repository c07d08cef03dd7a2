"""Configuration of the Transformer encoder-decoder (Vaswani et al. 2017, arXiv:1706.03762).

One typed config object flows into every module of ``modeling_transformer_seq2seq``; the defaults below are
the only defaults (a small reference size: 3+3 layers, d_model 256, 8 heads, FFN 512). Field names follow
transformers' Marian/BART configs where a counterpart exists, so that ``generate`` and the cache classes find
what they look for (``decoder_layers``, ``decoder_attention_heads``, ``d_model``, ...).
"""

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

ACTIVATIONS = ("relu", "gelu")
NORM_POSITIONS = ("pre", "post")
POSITION_EMBEDDING_TYPES = ("sinusoidal", "learned")
POSITION_EMBEDDING_LAYOUTS = ("concat", "interleaved", "tensor2tensor")


class TransformerSeq2SeqConfig(Seq2SeqConfigMixin, PreTrainedConfig):
    """Configuration for ``TransformerSeq2SeqModel`` / ``TransformerSeq2SeqForConditionalGeneration``.

    Every size is validated here: a wrong value raises ``ValueError`` naming the field, the value and what is
    allowed, and an unknown keyword (a typo) is an error rather than a silently ignored attribute.

    Switches that match other toolkits' math exactly (defaults keep hf_s2s's own):

    - ``position_embedding_layout="interleaved"``: the sinusoid's sines and cosines alternate,
      ``PE(pos, 2i) = sin(pos / 10000^(2i/D))``, ``PE(pos, 2i+1) = cos(pos / 10000^(2i/D))`` (OpenNMT-py 3.x
      ``PositionalEncoding`` "SinusoidalInterleaved", Joey NMT 2.x ``PositionalEncoding``); the default "concat"
      puts the same sines in the first half and the cosines in the second, ``PE(pos, i) = sin(...)``,
      ``PE(pos, D/2 + i) = cos(...)``;
    - ``position_embedding_layout="tensor2tensor"``: tensor2tensor's timing signal, ``PE(p, i) = sin(p w_i)``,
      ``PE(p, D/2 + i) = cos(p w_i)`` with ``w_i = 10000^(-i / (D/2 - 1))`` (fairseq's
      ``SinusoidalPositionalEmbedding``, OpenNMT-py's ``-position_encoding_type SinusoidalConcat``); needs
      ``d_model`` >= 4;
    - ``position_offset``: the position of the first token of a sinusoidal model, 0 by default; fairseq numbers
      the real tokens from ``padding_idx + 1`` (``utils.make_positions``), 2 with its dictionaries;
    - ``layer_norm_eps``: the epsilon of every LayerNorm, ``(x - mean) / sqrt(var + eps) * g + b``: 1e-6 in
      OpenNMT-py (``-norm_eps``) and Joey NMT, 1e-5 (torch's and fairseq's default) here;
    - ``output_bias=True``: the output projection has a bias, ``logits = W_o h + b_o`` (OpenNMT-py's generator);
    - ``source_eos=False``: the source tokenizer appends no ``</s>`` (OpenNMT-py 3.x's ``numericalize``); the
      tokenizer check then expects none.
    - ``source_unk_aliases=n``: source ids ``vocab_size`` .. ``vocab_size + n - 1`` are subword pieces the source
      vocabulary lacks, which a converted toolkit's tokenizer emits after the vocabulary (its segmentation uses them):
      the encoder reads each as ``unk_token_id``, as OpenNMT-py and fairseq read such a piece as ``<unk>``, and the
      decoder can never produce them.
    """

    model_type = "transformer_seq2seq"
    keys_to_ignore_at_inference = ["cache", "past_key_values"]  # the decoder cache, under both names (transformers 5.24 renamed it)
    # Generic names transformers (cache, generate, Trainer) reads, mapped onto this config's fields.
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "decoder_attention_heads",
        "num_hidden_layers": "decoder_layers",
    }

    vocab_size: int = 1000  # source vocabulary size (also the target's unless decoder_vocab_size is set)
    decoder_vocab_size: int | None = None  # target vocabulary size; None = same as vocab_size (target_vocab_size)
    d_model: int = 256  # width of embeddings and every residual stream
    encoder_layers: int = 3  # number of encoder layers
    decoder_layers: int = 3  # number of decoder layers (generate and the caches read this)
    encoder_attention_heads: int = 8  # heads in encoder self-attention; must divide d_model
    decoder_attention_heads: int = 8  # heads in decoder self- and cross-attention; must divide d_model
    encoder_ffn_dim: int = 512  # hidden width of the encoder position-wise feed-forward block
    decoder_ffn_dim: int = 512  # hidden width of the decoder position-wise feed-forward block
    activation_function: str = "relu"  # feed-forward nonlinearity: "relu" (the paper) or "gelu"
    dropout: float = 0.1  # dropout on embeddings and on each sublayer output before the residual add
    attention_dropout: float = 0.0  # dropout on attention probabilities
    activation_dropout: float = 0.0  # dropout after the feed-forward nonlinearity
    norm_position: str = "pre"  # LayerNorm before each sublayer ("pre", + final LayerNorm) or after ("post", paper)
    position_embedding_type: str = "sinusoidal"  # "sinusoidal" (any length) or "learned" (<= max_position_embeddings)
    max_position_embeddings: int = 512  # positions a learned table holds; sinusoidal tables grow past it
    scale_embedding: bool = True  # multiply token embeddings by sqrt(d_model) (paper section 3.4)
    position_embedding_layout: str = "concat"  # sinusoid layout: "concat" (sines, then cosines), "interleaved", ...
    position_offset: int = 0  # the first token's position, sinusoids only (fairseq: padding_idx + 1 = 2)
    # (sin, cos alternating: OpenNMT-py, Joey NMT); see the class docstring
    layer_norm_eps: float = 1e-5  # epsilon of every LayerNorm (OpenNMT-py and Joey NMT: 1e-6)
    output_bias: bool = False  # bias of the output projection (OpenNMT-py's generator has one)
    source_eos: bool = True  # sources end with </s> (hf_s2s, Joey NMT, fairseq); False: OpenNMT-py 3.x feeds none
    source_unk_aliases: int = 0  # ids vocab_size .. + n - 1: pieces the vocabulary lacks, read as unk_token_id
    unk_token_id: int | None = None  # <unk>: what the encoder reads source_unk_aliases ids as
    share_encoder_decoder_embeddings: bool = True  # one token embedding for source and target (needs one vocab)
    tie_word_embeddings: bool = True  # output projection shares the decoder input embedding's weight
    label_smoothing: float = 0.0  # eps of the label-smoothed loss the model computes from labels (Trainer's factor)
    rdrop_alpha: float = 0.0  # R-Drop: weight of the KL between two dropout passes in a training loss (0 = off;
    # > 0: a training forward with labels runs its batch twice; modeling_common.rdrop_loss)
    init_std: float = 0.02  # std of the normal init of linear and embedding weights
    use_cache: bool = True  # return the decoder key/value cache (used by generate)
    pad_token_id: int | None = 0  # padding id (package tokenizer convention: <pad> = 0)
    bos_token_id: int | None = 1  # <s>
    eos_token_id: int | None = 2  # </s>
    decoder_start_token_id: int | None = 1  # first decoder input; <s> by the package's convention
    is_encoder_decoder: bool = True  # tells transformers (generate, Trainer) this is a seq2seq model

    def __post_init__(self, **kwargs):
        reject_unknown_kwargs(type(self).__name__, kwargs, TransformerSeq2SeqConfig.__annotations__)
        super().__post_init__(**kwargs)
        self.validate_architecture()

    def validate_architecture(self):
        """This family's checks (transformers' name for them): run at construction and by ``validate()``."""
        if self.decoder_vocab_size is not None:
            check_positive("decoder_vocab_size", self.decoder_vocab_size)
        for name in (
            "vocab_size",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "max_position_embeddings",
        ):
            check_positive(name, getattr(self, name))
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, name):
                raise ValueError(
                    f"`d_model` ({self.d_model}) must be divisible by `{name}` ({getattr(self, name)}); "
                    f"allowed head counts for d_model={self.d_model}: "
                    f"{[h for h in range(1, min(self.d_model, 64) + 1) if self.d_model % h == 0]}"
                )
        check_choice("activation_function", self.activation_function, ACTIVATIONS)
        check_choice("norm_position", self.norm_position, NORM_POSITIONS)
        check_choice("position_embedding_type", self.position_embedding_type, POSITION_EMBEDDING_TYPES)
        check_choice("position_embedding_layout", self.position_embedding_layout, POSITION_EMBEDDING_LAYOUTS)
        if self.position_embedding_layout == "tensor2tensor" and self.d_model < 4:
            raise ValueError(
                "`position_embedding_layout`='tensor2tensor' divides the frequency exponent by d_model / 2 - 1: it "
                f"needs d_model >= 4 (got {self.d_model}); allowed with a smaller d_model: 'concat', 'interleaved'"
            )
        if isinstance(self.position_offset, bool) or not isinstance(self.position_offset, int) or (
                self.position_offset < 0) or (self.position_offset and self.position_embedding_type != "sinusoidal"):
            raise ValueError(
                f"`position_offset` must be a whole number >= 0, and 0 unless position_embedding_type='sinusoidal' "
                f"(a learned table starts at its first row), got {self.position_offset!r} with "
                f"position_embedding_type={self.position_embedding_type!r}"
            )
        if not (isinstance(self.layer_norm_eps, int | float) and self.layer_norm_eps > 0):
            raise ValueError(f"`layer_norm_eps` must be a positive float, got {self.layer_norm_eps!r}")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            check_dropout(name, getattr(self, name))
        check_probability("label_smoothing", self.label_smoothing)
        check_non_negative("rdrop_alpha", self.rdrop_alpha)
        if not (isinstance(self.init_std, int | float) and self.init_std > 0):
            raise ValueError(f"`init_std` must be a positive float, got {self.init_std!r}")
        if self.share_encoder_decoder_embeddings and self.target_vocab_size != self.vocab_size:
            raise ValueError(
                f"`share_encoder_decoder_embeddings=True` needs one vocabulary, but `vocab_size` is {self.vocab_size} "
                f"and `decoder_vocab_size` is {self.decoder_vocab_size}; allowed: equal sizes, or "
                "share_encoder_decoder_embeddings=False"
            )
        check_token_id("pad_token_id", self.pad_token_id, min(self.vocab_size, self.target_vocab_size))
        check_source_unk_aliases(self)
        for name in ("bos_token_id", "eos_token_id", "decoder_start_token_id"):
            check_token_id(name, getattr(self, name), self.target_vocab_size, optional=True)


__all__ = ["TransformerSeq2SeqConfig"]
