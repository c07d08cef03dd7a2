"""Joey NMT 2.x checkpoints (``best.ckpt``, ``<step>.ckpt``) as hf_s2s folders.

Joey NMT keeps the model's options in ``config.yaml`` and the vocabularies in ``src_vocab.txt`` /
``trg_vocab.txt`` beside the checkpoint (its ``model_dir``), not inside it: the converter reads them from
there unless given (``--config``, ``--source-vocab``, ``--target-vocab``). The checkpoint holds only
``model_state`` (and training state, ignored).

Supported, mapped onto the family whose math is Joey's:

- the recurrent model (``type: recurrent``, ``rnn_type: gru|lstm``, ``attention: bahdanau|luong``,
  ``input_feeding``, ``init_hidden: bridge|last|zero``) -> ``rnn_seq2seq``. Joey queries *both* attentions
  with the decoder state after the step, ``h_t`` (``RecurrentDecoder._forward_step``), so ``bahdanau`` is
  hf_s2s's ``luong_concat`` (the additive score ``v^T tanh(W_q h_t + W_k h_s)``) and ``luong`` is
  ``luong_general``; the attentional vector ``tanh(W [h_t; c_t] + b)`` is the readout with its two column
  blocks swapped; the bridge ``tanh(W_b [h_fwd; h_bwd] + b_b)`` is one Linear for every layer (tiled into
  hf_s2s's per-layer bridge); an LSTM decoder starts its cell equal to its hidden state
  (``decoder_init_cell="copy_hidden"``); ``last`` with an encoder twice the decoder's size takes the forward
  half (``decoder_init="last_forward"``);
- the Transformer (``type: transformer``, ``layer_norm: pre|post``, relu/gelu) -> ``transformer_seq2seq`` with
  ``position_embedding_layout="interleaved"`` and ``layer_norm_eps=1e-6``; the separate query, key and value
  Linears are concatenated into the fused projections.

Sources end with ``</s>`` (Joey's ``sentences_to_ids``); decoding starts with ``<s>`` and may not end at the
first step (``min_output_length`` 1). ``tied_embeddings`` (one vocabulary, one token table) maps onto
``share_encoder_decoder_embeddings`` on the Transformer; ``tied_softmax`` onto ``tie_word_embeddings``.

The config is read field by field with Joey NMT 2.3's defaults; a field of the wrong type (or null) is refused
naming it. Options the converter cannot reproduce exactly are refused, naming the option. A side Joey segmented
with ``level: bpe``, ``tokenizer_type: sentencepiece`` is carried over (:mod:`.subwords`): the tokenizer lowercases
when ``lowercase`` is set, segments with ``tokenizer_cfg.model_file`` (or ``--source-subword-model`` /
``--target-subword-model``) restricted to Joey's vocabulary as ``SentencePieceTokenizer.set_vocab`` restricts it, and
joins the output pieces back; ``normalize`` or a Moses ``pretokenizer`` before it is refused. What Joey did to the
text of the other sides that the folder does not (subword-nmt segmentation, lowercasing, Moses tokenization, ...)
is returned as notes.
"""

from pathlib import Path

import torch
import yaml
from transformers import GenerationConfig

from ..models.configuration_rnn_seq2seq import RNNSeq2SeqConfig
from ..models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from ..models.modeling_rnn_seq2seq import RNNSeq2SeqForConditionalGeneration
from ..models.modeling_transformer_seq2seq import TransformerSeq2SeqForConditionalGeneration
from .base import RNN_TABLES_COPIED, Converted, register
from .checkpoints import CheckpointError, load_checkpoint, read_text_file
from .positions import check_sinusoid_table
from .subwords import (
    Subwords,
    absent_pieces,
    alias_unknown_pieces,
    load_subwords,
)
from .vocabulary import SpecialTokens, check_vocabulary_sizes, translation_tokenizer
from .weights import LayerMapping, Tensors, check_same, load_converted, map_layers

TOOLKIT = "joeynmt"
# Joey NMT 2.x's default special symbols (joeynmt/config.py), ids 0..3 in every vocabulary file
SPECIALS = SpecialTokens(unk="<unk>", pad="<pad>", bos="<s>", eos="</s>")
CELL_TYPES = ("gru", "lstm")
ATTENTION_TYPES = {"bahdanau": "luong_concat", "luong": "luong_general"}
INIT_HIDDEN = ("bridge", "last", "zero")
LAYER_NORMS = ("pre", "post")
# Joey NMT 2.3.0's defaults for what a config leaves out (encoders.py, decoders.py: the constructors'
# defaults)
TRANSFORMER_DEFAULTS = {"encoder": {"hidden_size": 512, "ff_size": 2048, "num_layers": 8, "num_heads": 4},
                        "decoder": {"hidden_size": 512, "ff_size": 2048, "num_layers": 4, "num_heads": 8}}
RNN_DEFAULTS = {"encoder": {"hidden_size": 1, "num_layers": 1},
                "decoder": {"hidden_size": 0, "num_layers": 1}}
EMBEDDING_DIM = 64  # embeddings.py: Embeddings(embedding_dim=64)
REQUIRED = object()  # a field without a default: Joey NMT itself needs it


def refuse(option: str, value, why: str) -> CheckpointError:
    return CheckpointError(f"Joey NMT option {option}: {value!r} is not supported: {why}")


class Section:
    """One mapping of a Joey NMT config (``path``, e.g. "model.encoder"), each value checked for its type as
    it is read: a value of the wrong type (null included), or a required one missing, is a
    :class:`CheckpointError` naming the file, the field, the value and what is allowed. An optional section
    that is absent or null is empty."""

    def __init__(self, values, path: str, file: Path, required: bool = False):
        if values is None and not required:
            values = {}
        if not isinstance(values, dict):
            shown = "missing" if values is None else f"{type(values).__name__} {values!r}"
            raise CheckpointError(f"{file}: {path} is {shown}, not a mapping of options (not a Joey NMT "
                                  "config?)")
        self.values, self.path, self.file = values, path, file

    def field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def section(self, key: str, required: bool = False) -> "Section":
        return Section(self.values.get(key), self.field(key), self.file, required)

    def value(self, key: str, default, kinds: tuple[type, ...], allowed: str):
        """``key``'s value, ``default`` where the config leaves it out (``REQUIRED``: refused)."""
        if key not in self.values:
            if default is REQUIRED:
                raise CheckpointError(f"{self.file}: {self.field(key)} is missing; give {allowed}")
            return default
        value = self.values[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            shown = "null" if value is None else repr(value)
            otherwise = "" if default is REQUIRED else f", or leave it out for Joey NMT's default {default!r}"
            raise CheckpointError(f"{self.file}: {self.field(key)} is {shown}; give {allowed}{otherwise}")
        return value

    def integer(self, key: str, default=REQUIRED, minimum: int = 1) -> int:
        value = self.value(key, default, (int,), f"a whole number >= {minimum}")
        if value < minimum:
            raise CheckpointError(f"{self.file}: {self.field(key)} is {value!r}; give a whole number >= "
                                  f"{minimum}")
        return value

    def number(self, key: str, default) -> float:
        return self.value(key, default, (int, float), "a number")

    def flag(self, key: str, default: bool) -> bool:
        return self.value(key, default, (bool,), "true or false")

    def text(self, key: str, default) -> str:
        return self.value(key, default, (str,), "a string")

    def choice(self, key: str, default: str, allowed: tuple[str, ...] | dict, why: str) -> str:
        """A string among ``allowed``; another value is refused as an option the converter does not
        support."""
        value = self.text(key, default)
        if value not in allowed:
            raise refuse(self.field(key), value, f"{why} ({', '.join(allowed)})")
        return value


def read_config(path: Path) -> Section:
    what = "the Joey NMT config (Joey keeps config.yaml in its model_dir, beside the checkpoint)"
    text = read_text_file(path, what, "--config")
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise CheckpointError(f"{path} is not valid YAML: {' '.join(str(error).split())}") from error
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} holds {type(config).__name__} {str(config)[:40]!r}, not a Joey NMT "
                              "config (a mapping with a 'model' section)")
    return Section(config, "", path)


def read_vocab(path: Path, side: str, flag: str) -> list[str]:
    """A Joey NMT vocabulary file: one token a line, in id order, Joey's four special symbols among them."""
    text = read_text_file(path, f"the {side} vocabulary (Joey writes it beside the checkpoint)", flag)
    tokens = text.rstrip("\n").split("\n")
    missing = [token for token in (SPECIALS.unk, SPECIALS.pad, SPECIALS.bos, SPECIALS.eos)
               if token not in tokens]
    if missing:
        raise CheckpointError(f"{path} lacks Joey NMT's special symbol(s) {missing} ({len(tokens)} lines): "
                              f"not a Joey NMT {side} vocabulary; pass the one beside the checkpoint with "
                              f"{flag}")
    return tokens


def segments_with_sentencepiece(options: Section) -> bool:
    """Whether Joey NMT segments this side (``data.src`` / ``data.trg``) with a SentencePiece model."""
    level = options.choice("level", "word", ("word", "bpe", "char"), "the converted tokenizer reads "
                           "space-separated tokens: 'char' is not that")
    return level == "bpe" and options.text("tokenizer_type", options.text("bpe_type", "sentencepiece")) == \
        "sentencepiece"


def subword_models(data: Section, source: Path | None, target: Path | None
                   ) -> tuple[Subwords | None, Subwords | None]:
    """The SentencePiece model of each side Joey NMT segmented with one (None for the others): the convert flag's
    file, else ``tokenizer_cfg.model_file``. What Joey does around it that the tokenizer would not reproduce
    (``normalize``, a Moses ``pretokenizer``) is refused, naming the option."""
    models, source_file = {}, None
    for side, given, flag in (("src", source, "--source-subword-model"), ("trg", target, "--target-subword-model")):
        options = data.section(side)
        if not segments_with_sentencepiece(options):
            if given is not None:
                raise ValueError(f"{flag} is for a side Joey NMT segmented with a SentencePiece model (level bpe, "
                                 f"tokenizer_type sentencepiece); data.{side} is level "
                                 f"{options.values.get('level', 'word')}")
            models[side] = None
            continue
        if options.flag("normalize", False):
            raise refuse(f"data.{side}.normalize", True, "Joey NMT applies NFKC and removes extra spaces before "
                         "segmenting, which the converted tokenizer does not reproduce")
        tokenizer = options.section("tokenizer_cfg")
        if tokenizer.text("pretokenizer", "none") != "none":
            raise refuse(f"data.{side}.tokenizer_cfg.pretokenizer", tokenizer.values["pretokenizer"],
                         "Joey NMT Moses-tokenizes before segmenting, which the converted tokenizer does not "
                         "reproduce")
        option = f"data.{side}.tokenizer_cfg.model_file"
        recorded = tokenizer.values.get("model_file")
        if side == "trg" and given is None and models["src"] is not None and recorded == source_file:
            given, flag = source, "--source-subword-model"  # one file named for both sides: one flag replaces it
        models[side] = load_subwords(recorded, given, option, flag, lowercase=options.flag("lowercase", False),
                                     restricted=True)
        source_file = recorded
    return models["src"], models["trg"]


def text_steps(data: Section, carried: set[str] = frozenset()) -> list[str]:
    """What ``joeynmt translate`` did to the text around the model that the converted folder does not: one
    note a step, naming the option; the sides in ``carried`` ("src", "trg") are segmented by the converted
    tokenizer (:func:`subword_models`). Refuses what the whitespace tokenizer cannot stand in for (characters,
    other symbols)."""
    if data.values.get("special_symbols"):
        raise refuse("data.special_symbols", data.values["special_symbols"], "the converter knows Joey's "
                     "default symbols")
    notes = []
    for side, text, undo in (("src", "the input", False), ("trg", "the output", True)):
        options = data.section(side)
        if side in carried:
            continue
        level = options.choice("level", "word", ("word", "bpe", "char"), "the converted tokenizer reads "
                               "space-separated tokens: 'char' is not that")
        tokenizer = options.section("tokenizer_cfg")
        if not undo:
            for name, step in (("lowercase", "lowercased"), ("normalize", "normalized (Unicode and spaces)")):
                if options.flag(name, False):
                    notes.append(f"data.{side}.{name}: Joey NMT {step} {text}; the converted tokenizer does "
                                 f"not, so do it to {text} yourself")
        if tokenizer.text("pretokenizer", "none") == "moses":
            notes.append(f"data.{side}.tokenizer_cfg.pretokenizer moses: Joey NMT Moses-"
                         f"{'detokenized' if undo else 'tokenized'} {text}; do it yourself")
        if level == "bpe":
            kind = options.text("tokenizer_type", options.text("bpe_type", "sentencepiece"))
            model = tokenizer.values.get("model_file" if kind == "sentencepiece" else "codes")
            done, action = ("joined", "join the subwords of") if undo else ("segmented", "segment")
            notes.append(f"data.{side}.tokenizer_type {kind} ({model}): Joey NMT {done} {text}'s subwords "
                         f"with it; the converted tokenizer does not, so {action} {text} yourself")
    return notes


def decoding_steps(testing: Section) -> list[str]:
    """The ``testing`` options that change Joey NMT's search and that the folder's generation config does not
    reproduce: one note each."""
    notes = []
    if not testing.flag("generate_unk", True):
        notes.append("testing.generate_unk false: Joey NMT never chose <unk>; the folder may (pass "
                     "suppress_tokens=[<unk> id] to generate() for the same)")
    for name in ("repetition_penalty", "no_repeat_ngram_size"):
        if testing.number(name, -1) > 1:
            notes.append(f"testing.{name} {testing.values[name]}: not in the folder's generation config "
                         "(Joey NMT also penalizes the source's tokens, which generate() does not)")
    alpha = testing.number("beam_alpha", -1)
    if alpha > 0:
        notes.append(f"testing.beam_alpha {alpha}: Joey NMT's length penalty ((5 + n) / 6)^alpha is not "
                     f"generate()'s n^alpha; the folder's length_penalty={float(alpha)} ranks beams "
                     "differently")
    return notes


# ------------------------------------------------------------------------------------------ recurrent

def rnn_config(model: Section, source_vocab: list[str], target_vocab: list[str]) -> RNNSeq2SeqConfig:
    """The rnn_seq2seq config whose math is Joey NMT's recurrent model for these options."""
    encoder, decoder = model.section("encoder", required=True), model.section("decoder", required=True)
    cells = {}
    for side, options in (("encoder", encoder), ("decoder", decoder)):
        cells[side] = options.choice("rnn_type", "gru", CELL_TYPES, "hf_s2s has these cells")
        if options.section("embeddings", required=True).flag("scale", False):
            raise refuse(f"model.{side}.embeddings.scale", True, "hf_s2s's RNN does not scale its embeddings")
    if cells["encoder"] != cells["decoder"]:
        raise refuse("model.decoder.rnn_type", cells["decoder"], "hf_s2s uses one cell type for both sides")
    attention = decoder.choice("attention", "bahdanau", ATTENTION_TYPES, "Joey NMT's attentions are")
    decoder.choice("activation", "tanh", ("tanh",), "hf_s2s's readout and bridge use")
    init_hidden = decoder.choice("init_hidden", "bridge", INIT_HIDDEN, "Joey NMT's initializations are")
    bidirectional = encoder.flag("bidirectional", True)
    encoder_hidden = encoder.integer("hidden_size", RNN_DEFAULTS["encoder"]["hidden_size"])
    hidden = decoder.integer("hidden_size", RNN_DEFAULTS["decoder"]["hidden_size"])
    encoder_output = encoder_hidden * (2 if bidirectional else 1)
    decoder_init = {"bridge": "bridge", "zero": "zero"}.get(init_hidden)
    if init_hidden == "last":
        decoder_init = "last" if encoder_output == hidden else "last_forward"  # Joey: the forward half if E == 2H
    lstm = cells["encoder"] == "lstm"
    return RNNSeq2SeqConfig(
        vocab_size=len(source_vocab),
        decoder_vocab_size=None if source_vocab == target_vocab else len(target_vocab),
        encoder_embedding_size=encoder.section("embeddings").integer("embedding_dim", EMBEDDING_DIM),
        decoder_embedding_size=decoder.section("embeddings").integer("embedding_dim", EMBEDDING_DIM),
        encoder_hidden_size=encoder_hidden,
        decoder_hidden_size=hidden,
        attention_size=hidden,  # Joey's BahdanauAttention(hidden_size=decoder hidden_size)
        encoder_layers=encoder.integer("num_layers", RNN_DEFAULTS["encoder"]["num_layers"]),
        decoder_layers=decoder.integer("num_layers", RNN_DEFAULTS["decoder"]["num_layers"]),
        bidirectional=bidirectional,
        cell_type=cells["encoder"],
        attention_type=ATTENTION_TYPES[attention],
        input_feeding=decoder.flag("input_feeding", True),
        decoder_init=decoder_init,
        decoder_init_cell="copy_hidden" if lstm and decoder_init != "zero" else "zero",
        tie_word_embeddings=model.flag("tied_softmax", False),
        dropout=0.0,  # inference; fine-tuning sets its own
        **special_ids(target_vocab),
    )


def special_ids(vocab: list[str]) -> dict:
    return {"pad_token_id": vocab.index(SPECIALS.pad), "bos_token_id": vocab.index(SPECIALS.bos),
            "eos_token_id": vocab.index(SPECIALS.eos), "decoder_start_token_id": vocab.index(SPECIALS.bos)}


def token_tables(take: Tensors, tied_embeddings: bool) -> dict[str, torch.Tensor]:
    """Joey NMT's source and target token tables; under ``tied_embeddings`` one module, saved under both
    names."""
    tables = {name: take(name) for name in ("src_embed.lut.weight", "trg_embed.lut.weight")}
    if tied_embeddings:
        check_same(tables, "model.tied_embeddings")
    return tables


def output_layer(take: Tensors, target_table: torch.Tensor, tied_softmax: bool) -> torch.Tensor:
    """The output layer's weight; under ``tied_softmax`` the target token table, checked equal."""
    weight = take("decoder.output_layer.weight")
    if tied_softmax:
        check_same({"decoder.output_layer.weight": weight, "trg_embed.lut.weight": target_table},
                   "model.tied_softmax")
    return weight


def rnn_state_dict(state: dict, config: RNNSeq2SeqConfig, tied_embeddings: bool) -> dict[str, torch.Tensor]:
    """Joey NMT's recurrent parameter names -> hf_s2s's. Under ``tied_embeddings`` both token tables are
    written (hf_s2s's RNN keeps one a side): equal, checked."""
    take, out = Tensors(state, "a Joey NMT recurrent model of these options"), {}
    tables = token_tables(take, tied_embeddings)
    out["model.encoder.embed_tokens.weight"] = tables["src_embed.lut.weight"]
    out["model.decoder.embed_tokens.weight"] = tables["trg_embed.lut.weight"]
    for name in [n for n in take.left if n.startswith(("encoder.rnn.", "decoder.rnn."))]:  # nn.GRU/LSTM names
        out["model." + name] = take(name)
    if config.attention_type == "luong_concat":
        out["model.decoder.attention.query_proj.weight"] = take("decoder.attention.query_layer.weight")
        out["model.decoder.attention.key_proj.weight"] = take("decoder.attention.key_layer.weight")
        out["model.decoder.attention.energy.weight"] = take("decoder.attention.energy_layer.weight")
    else:
        out["model.decoder.attention.key_proj.weight"] = take("decoder.attention.key_layer.weight")
    # Joey's attentional layer reads [h_t; c_t], hf_s2s's readout [c_t; h_t]: swap the column blocks
    weight, hidden = take("decoder.att_vector_layer.weight"), config.decoder_hidden_size
    out["model.decoder.readout.weight"] = torch.cat([weight[:, hidden:], weight[:, :hidden]], dim=1)
    out["model.decoder.readout.bias"] = take("decoder.att_vector_layer.bias")
    if config.decoder_init == "bridge":  # one Linear(E -> H) for every layer -> hf_s2s's Linear(E -> L x H)
        out["model.decoder.bridge.weight"] = take("decoder.bridge_layer.weight").repeat(config.decoder_layers, 1)
        out["model.decoder.bridge.bias"] = take("decoder.bridge_layer.bias").repeat(config.decoder_layers)
    out["lm_head.weight"] = output_layer(take, tables["trg_embed.lut.weight"], config.tie_word_embeddings)
    take.finish()
    return out


# ------------------------------------------------------------------------------------------ transformer

# The names of a Transformer layer's modules (hf_s2s's: Joey NMT's); the feed-forward block is named alike on
# both sides
FEED_FORWARD = {"final_layer_norm": ("feed_forward.layer_norm",), "ffn.fc1": ("feed_forward.pwff_layer.0",),
                "ffn.fc2": ("feed_forward.pwff_layer.3",)}


def attention(prefix: str, parts: str = "qkv") -> tuple[str, ...]:
    """Joey NMT's separate projections of one attention (``q_layer``, ``k_layer``, ``v_layer``), in ``parts``'
    order."""
    return tuple(f"{prefix}.{part}_layer" for part in parts)


ENCODER_LAYER = LayerMapping(
    source="encoder.layers.{layer}", target="model.encoder.layers.{layer}",
    modules={"self_attn_layer_norm": ("layer_norm",), "self_attn.qkv_proj": attention("src_src_att"),
             "self_attn.out_proj": ("src_src_att.output_layer",), **FEED_FORWARD},
)
DECODER_LAYER = LayerMapping(
    source="decoder.layers.{layer}", target="model.decoder.layers.{layer}",
    modules={"self_attn_layer_norm": ("x_layer_norm",), "self_attn.qkv_proj": attention("trg_trg_att"),
             "self_attn.out_proj": ("trg_trg_att.output_layer",),
             "encoder_attn_layer_norm": ("dec_layer_norm",),
             "encoder_attn.q_proj": attention("src_trg_att", "q"),
             "encoder_attn.kv_proj": attention("src_trg_att", "kv"),
             "encoder_attn.out_proj": ("src_trg_att.output_layer",), **FEED_FORWARD},
)


def transformer_config(model: Section, source_vocab: list[str],
                       target_vocab: list[str]) -> TransformerSeq2SeqConfig:
    """The transformer_seq2seq config whose math is Joey NMT's Transformer for these options."""
    encoder, decoder = model.section("encoder", required=True), model.section("decoder", required=True)
    decoder.choice("type", "transformer", ("transformer",),
                   "a transformer encoder converts with a decoder of type")
    if "layer_norm" not in encoder.values:
        raise refuse("model.encoder.layer_norm", None, "unset, Joey NMT 2.3.0 builds pre-norm encoder layers without "
                     "the final LayerNorm, which hf_s2s cannot express")
    norm = encoder.choice("layer_norm", "pre", LAYER_NORMS, "Joey NMT's placements are")
    decoder_norm = decoder.choice("layer_norm", "post", LAYER_NORMS, "Joey NMT's placements are")
    if decoder_norm != norm:
        raise refuse("model.decoder.layer_norm", decoder_norm, f"hf_s2s places LayerNorm alike in encoder "
                     f"and decoder; the encoder's is {norm!r}")
    sides = {"encoder": encoder, "decoder": decoder}
    sizes = {side: {name: options.integer(name, default) for name, default in
                    TRANSFORMER_DEFAULTS[side].items()}
             for side, options in sides.items()}
    width = sizes["encoder"]["hidden_size"]
    scale, activation = {}, {}
    for side, options in sides.items():
        if options.number("alpha", 1.0) != 1.0:
            raise refuse(f"model.{side}.alpha", options.values["alpha"], "hf_s2s's residuals have weight 1")
        activation[side] = options.choice("activation", "relu", ("relu", "gelu"), "hf_s2s has")
        embeddings = options.section("embeddings", required=True)
        for name, value in (("hidden_size", sizes[side]["hidden_size"]),
                            ("embeddings.embedding_dim", embeddings.integer("embedding_dim", EMBEDDING_DIM))):
            if value != width:
                raise refuse(f"model.{side}.{name}", value, f"hf_s2s's Transformer has one width ({width})")
        scale[side] = embeddings.flag("scale", False)
    if scale["encoder"] != scale["decoder"]:
        raise refuse("model.decoder.embeddings.scale", scale["decoder"], "hf_s2s scales both sides alike")
    if activation["encoder"] != activation["decoder"]:
        raise refuse("model.decoder.activation", activation["decoder"], "hf_s2s uses one activation")
    tied = model.flag("tied_embeddings", False)
    return TransformerSeq2SeqConfig(
        vocab_size=len(source_vocab),
        decoder_vocab_size=None if tied else len(target_vocab),
        d_model=width,
        encoder_layers=sizes["encoder"]["num_layers"],
        decoder_layers=sizes["decoder"]["num_layers"],
        encoder_attention_heads=sizes["encoder"]["num_heads"],
        decoder_attention_heads=sizes["decoder"]["num_heads"],
        encoder_ffn_dim=sizes["encoder"]["ff_size"],
        decoder_ffn_dim=sizes["decoder"]["ff_size"],
        activation_function=activation["encoder"],
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,  # inference; fine-tuning sets its own
        norm_position=norm,
        position_embedding_type="sinusoidal",
        position_embedding_layout="interleaved",
        scale_embedding=scale["encoder"],
        layer_norm_eps=1e-6,  # joeynmt/transformer_layers.py: nn.LayerNorm(size, eps=1e-6) everywhere
        share_encoder_decoder_embeddings=tied,
        tie_word_embeddings=model.flag("tied_softmax", False),
        **special_ids(target_vocab),
    )


def transformer_state_dict(state: dict, config: TransformerSeq2SeqConfig) -> dict[str, torch.Tensor]:
    """Joey NMT's Transformer parameter names -> hf_s2s's (``ENCODER_LAYER``, ``DECODER_LAYER``); the stored
    sinusoid tables are checked (:mod:`.positions`) and dropped; under ``tied_embeddings`` the one token table is the
    encoder's."""
    take, out = Tensors(state, "a Joey NMT Transformer of these options"), {}
    for side in ("encoder", "decoder"):
        check_sinusoid_table(take(f"{side}.pe.pe")[0], f"{side}.pe.pe", "interleaved", "Joey NMT's PositionalEncoding")
        if config.norm_position == "pre":
            for kind in ("weight", "bias"):
                out[f"model.{side}.layer_norm.{kind}"] = take(f"{side}.layer_norm.{kind}")
    tables = token_tables(take, config.share_encoder_decoder_embeddings)
    out["model.encoder.embed_tokens.weight"] = tables["src_embed.lut.weight"]
    if not config.share_encoder_decoder_embeddings:
        out["model.decoder.embed_tokens.weight"] = tables["trg_embed.lut.weight"]
    out.update(map_layers(take, ENCODER_LAYER, config.encoder_layers))
    out.update(map_layers(take, DECODER_LAYER, config.decoder_layers))
    out["lm_head.weight"] = output_layer(take, tables["trg_embed.lut.weight"], config.tie_word_embeddings)
    take.finish()
    return out


# ------------------------------------------------------------------------------------------ convert

def generation_config(config, testing: Section) -> GenerationConfig:
    """``joeynmt translate``'s search for these ``testing`` options (search.py): ``beam_size`` beams, </s>
    forbidden before ``min_output_length`` tokens, at most ``max_output_length`` decoding steps (none of them
    forced to </s>), or without it ``int(1.5 x the longest source of the batch, </s> included)`` steps: for a
    batch of one line ``floor(1.5 x source + 1)`` tokens in hf_s2s's bound, which counts the </s> it
    forces."""
    beam_size = testing.integer("beam_size", 1)
    beam_alpha = testing.number("beam_alpha", -1)
    max_output_length = testing.integer("max_output_length", -1, minimum=-1)
    if max_output_length == 0:
        raise refuse("testing.max_output_length", 0, "Joey NMT then decodes no token; give a whole number "
                     ">= 1, or -1 for 1.5 x the source length")
    generation = GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id, bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, num_beams=beam_size,
        min_new_tokens=testing.integer("min_output_length", 1, minimum=0),  # Joey forbids </s> before it
    )
    if beam_size > 1:
        # beam_alpha <= 0: hypotheses ranked by summed log-probability; Joey's GNMT penalty
        # ((5 + n) / 6)^alpha for alpha > 0 is not generate()'s n^alpha: the closest is kept, a note says so
        generation.length_penalty = 0.0 if beam_alpha <= 0 else float(beam_alpha)
    if max_output_length > 0:
        generation.max_new_tokens = max_output_length
        generation.max_len_a = generation.max_len_b = None
    else:
        generation.max_len_a, generation.max_len_b = 1.5, 1
    return generation


@register(TOOLKIT)
def convert(checkpoint: Path, config: Path | None = None, source_vocab: Path | None = None,
            target_vocab: Path | None = None, source_subword_model: Path | None = None,
            target_subword_model: Path | None = None, **files) -> Converted:
    """A Joey NMT 2.x checkpoint, with the config.yaml and vocabularies beside it (or those given), as an
    hf_s2s model and tokenizer; ``source_subword_model`` / ``target_subword_model`` replace the SentencePiece
    models its config names."""
    unused = sorted(name for name, value in files.items() if value is not None)
    if unused:
        raise ValueError(f"a Joey NMT conversion reads the checkpoint, its config and vocabularies; {unused} is "
                         "not used")
    data = load_checkpoint(checkpoint, TOOLKIT)  # first: a file that is no checkpoint is named as such
    if not isinstance(data.get("model_state"), dict):
        raise CheckpointError(f"{checkpoint} lacks 'model_state': not a Joey NMT 2.x checkpoint")
    folder = checkpoint.parent
    source_path = source_vocab or folder / "src_vocab.txt"
    target_path = target_vocab or folder / "trg_vocab.txt"
    options = read_config(config or folder / "config.yaml")
    sources = read_vocab(source_path, "source", "--source-vocab")
    targets = read_vocab(target_path, "target", "--target-vocab")
    source_subwords, target_subwords = subword_models(options.section("data"), source_subword_model,
                                                      target_subword_model)
    carried = {side for side, model in (("src", source_subwords), ("trg", target_subwords)) if model is not None}
    notes = text_steps(options.section("data"), carried)
    model_options = options.section("model", required=True)
    kind = model_options.section("encoder", required=True).choice(
        "type", "recurrent", ("recurrent", "transformer"), "the converter handles")
    tied_embeddings = model_options.flag("tied_embeddings", False)
    if tied_embeddings and sources != targets:
        raise refuse("model.tied_embeddings", True, f"it needs one vocabulary, but {source_path} and "
                     f"{target_path} differ (Joey NMT refuses to tie them too)")
    if kind == "recurrent":
        model_options.section("decoder", required=True).choice(
            "type", "transformer", ("recurrent",), "a recurrent encoder converts with a decoder of type")
        hf_config = rnn_config(model_options, sources, targets)
        state = rnn_state_dict(data["model_state"], hf_config, tied_embeddings)
        model_class = RNNSeq2SeqForConditionalGeneration
        if tied_embeddings:
            notes.append(f"model.tied_embeddings: {RNN_TABLES_COPIED}")
    else:
        hf_config = transformer_config(model_options, sources, targets)
        state = transformer_state_dict(data["model_state"], hf_config)
        model_class = TransformerSeq2SeqForConditionalGeneration
    if sources.index(SPECIALS.pad) != hf_config.pad_token_id:
        raise CheckpointError(f"{source_path} and {target_path} put <pad> at different ids")
    check_vocabulary_sizes(state, len(sources), len(targets), str(source_path), str(target_path))
    # the pieces the toolkit reads as <unk> on the source side: tokenizer ids after its vocabulary, which the encoder
    # reads as <unk>
    aliases = absent_pieces(source_subwords, sources)
    alias_unknown_pieces(hf_config, aliases, sources.index(SPECIALS.unk))
    testing = options.section("testing")
    generation = generation_config(hf_config, testing)
    notes += decoding_steps(testing)
    model = model_class(hf_config)
    load_converted(model, state)
    model.eval()
    model.generation_config = generation
    model._set_default_generation_length()
    if generation.max_new_tokens is not None:  # max_output_length is Joey's only cap then
        generation.max_length = None
    tokenizer = translation_tokenizer(sources + aliases, targets, SPECIALS, source_eos=True, source_subwords=source_subwords,
                                      target_subwords=target_subwords)
    shown = ("beam_size", "beam_alpha", "min_output_length", "max_output_length")
    details = {"encoder_type": kind, "model": model_options.values,
               "testing": {k: testing.values[k] for k in shown if k in testing.values}}
    if carried:
        details["subword_models"] = {name: model.record() for name, model in
                                     (("source", source_subwords), ("target", target_subwords)) if model is not None}
    architecture = "rnn" if kind == "recurrent" else "transformer"
    return Converted(model=model, tokenizer=tokenizer, toolkit=TOOLKIT, architecture=architecture,
                     details=details, not_carried_over=notes)


__all__ = ["convert"]
