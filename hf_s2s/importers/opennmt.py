"""OpenNMT-py 3.x checkpoints (``onmt_train`` / ``onmt_release_model``) as hf_s2s folders.

Supported: the RNN encoder-decoder (``-encoder_type rnn|brnn``, ``-decoder_type rnn``, ``-rnn_type LSTM|GRU``,
``-global_attention dot|general|mlp``, ``-input_feed 0|1``, ``-bridge``, shared or separate embeddings and
vocabularies). It maps onto ``rnn_seq2seq`` with the switches that reproduce OpenNMT-py's math exactly:

- ``dot`` / ``general`` -> ``luong_dot`` / ``luong_general`` (OpenNMT-py scores ``(W_a h_t) . h_s``, hf_s2s
  ``h_t . (W_k h_s)``: ``W_k = W_a^T``); ``mlp`` -> ``luong_concat`` with ``attention_query_bias``
  (``linear_query`` has a bias) and ``readout_activation="none"`` (no tanh on ``linear_out``'s result, which
  has a bias);
- the attentional vector ``tanh(W_out [c_t; h_t])`` is hf_s2s's readout (a zero bias for ``dot``/``general``);
- the decoder starts from every encoder layer's final (hidden, cell) states: ``decoder_init="final_states"``,
  or ``"final_states_bridge"`` with ``-bridge`` (OpenNMT-py's ReLU bridge and its row layout);
- the generator ``Linear`` has a bias: ``output_bias``; sources get no end token (OpenNMT-py 3.x
  numericalize).

Also the Transformer (``-encoder_type transformer -decoder_type transformer``, ``-position_encoding`` with
``SinusoidalInterleaved`` or ``SinusoidalConcat``, ``-layer_norm standard``, ``relu``/``gelu``, with or
without ``-add_qkvbias`` / ``-add_ffnbias``, shared or separate embeddings). It maps onto
``transformer_seq2seq`` (pre-LN with final LayerNorms, embeddings scaled by sqrt(d)) with
``position_embedding_layout="interleaved"`` (``"tensor2tensor"``), ``layer_norm_eps=-norm_eps``,
``output_bias`` (the generator) and ``source_eos=False``; the separate query, key and value projections are
concatenated into hf_s2s's fused ones, absent biases are zeros. ``-share_embeddings`` (one vocabulary, one
token table saved under both sides' names) maps onto ``share_encoder_decoder_embeddings`` and
``-share_decoder_embeddings`` onto ``tie_word_embeddings``.

The generation config is ``onmt_translate``'s defaults for a batch of one line (beam 5, at most
``int(1.25 x source + 5)`` tokens). ``-transforms sentencepiece`` is carried over: the tokenizer segments raw text
with ``-src_subword_model`` (``-tgt_subword_model`` for the target, the source's under ``-share_vocab``) and joins
the output pieces back, as ``onmt_translate -transforms sentencepiece`` does (:mod:`.subwords`); a recorded path
that does not exist here is replaced by ``--source-subword-model`` / ``--target-subword-model``. The other -transforms
that change the text at translation time (``bpe``, prefixes, ...) are not carried over: they are returned as notes.

Every checkpoint tensor is mapped or the conversion fails naming it; options the converter cannot express
exactly (copy or coverage attention, context gates, source features, sparsemax, relative or rotary positions,
...) are refused, naming the option.
"""

from pathlib import Path

import torch
from transformers import GenerationConfig

from ..models.configuration_rnn_seq2seq import RNNSeq2SeqConfig
from ..models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from ..models.modeling_rnn_seq2seq import RNNSeq2SeqForConditionalGeneration
from ..models.modeling_transformer_seq2seq import TransformerSeq2SeqForConditionalGeneration
from .base import APPLY_YOURSELF, RNN_TABLES_COPIED, Converted, register
from .checkpoints import CheckpointError, load_checkpoint, options
from .positions import check_sinusoid_table
from .subwords import (
    Subwords,
    absent_pieces,
    alias_unknown_pieces,
    load_subwords,
    target_note,
)
from .vocabulary import SpecialTokens, check_vocabulary_sizes, translation_tokenizer
from .weights import LayerMapping, Tensors, check_same, load_converted, map_layers

TOOLKIT = "opennmt-py"
# OpenNMT-py 3.x's onmt.constants.DefaultTokens
SPECIALS = SpecialTokens(unk="<unk>", pad="<blank>", bos="<s>", eos="</s>")
# onmt_translate's defaults (onmt/opts.py): what the converted folder's generation config reproduces
TRANSLATE_DEFAULTS = {"beam_size": 5, "max_length": 250, "max_length_ratio": 1.25, "batch_size": 30}

# the token tables' names; under -share_embeddings they are one tensor, saved under both
EMBEDDINGS = {side: f"{side}.embeddings.make_embedding.emb_luts.0.weight" for side in ("encoder", "decoder")}
ATTENTION_TYPES = {"dot": "luong_dot", "general": "luong_general", "mlp": "luong_concat"}
CELL_TYPES = {"LSTM": "lstm", "GRU": "gru"}
# option -> the values this converter reproduces exactly (anything else is refused, naming the option)
REQUIRED = {
    "model_task": ("seq2seq",),
    "model_type": ("text",),
    "global_attention_function": ("softmax",),
    "generator_function": ("softmax",),
    "copy_attn": (False,),
    "coverage_attn": (False,),
    "context_gate": (None,),
    "n_src_feats": (0, None),
    "position_encoding": (False, None),
    "lambda_coverage": (0.0, 0, None),
    "lora_layers": ([], None),
    "quant_layers": ([], None),
}
# -transforms that change only the training data (filters, noise, augmentation): nothing to do at translation
# time
TRAINING_ONLY_TRANSFORMS = {"filtertoolong", "clean", "switchout", "tokendrop", "tokenmask", "bart",
                            "uppercase"}
# the options naming each text transform's model files or strings, shown where the folder does not apply it
TRANSFORM_FILES = {
    "sentencepiece": ("src_subword_model", "tgt_subword_model"),
    "bpe": ("src_subword_model", "tgt_subword_model"),
    "onmt_tokenize": ("src_subword_type", "src_subword_model", "tgt_subword_model", "src_onmttok_kwargs"),
    "prefix": ("src_prefix", "tgt_prefix"),
    "suffix": ("src_suffix", "tgt_suffix"),
}
# -transforms the converted tokenizer applies itself
CARRIED_TRANSFORMS = {"sentencepiece"}
# the convert flags that name each side's SentencePiece model where the recorded path does not exist here
SUBWORD_FLAGS = {"src": "--source-subword-model", "tgt": "--target-subword-model"}
# -position_encoding_type -> position_embedding_layout: the same sinusoids, both from position 0
POSITION_LAYOUTS = {"SinusoidalInterleaved": "interleaved", "SinusoidalConcat": "tensor2tensor"}
# and, for the Transformer, these (relative/rotary/ALiBi positions, grouped-query attention, parallel
# residuals, RMSNorm, average attention, sliding windows, mixtures of experts, guided alignment)
TRANSFORMER_REQUIRED = {
    "position_encoding": (True,),
    "position_encoding_type": ("SinusoidalInterleaved", "SinusoidalConcat"),
    "max_relative_positions": (0,),
    "relative_positions_buckets": (0, None),
    "num_kv": (0, None),
    "parallel_residual": (False, None),
    "layer_norm": ("standard", None),
    "self_attn_type": ("scaled-dot-flash", "scaled-dot"),
    "pos_ffn_activation_fn": ("relu", "gelu"),
    "sliding_window": (0, None),
    "num_experts": (0, None),
    "lambda_align": (0.0, 0, None),
}


def refuse(option: str, value, why: str) -> CheckpointError:
    return CheckpointError(f"OpenNMT-py option -{option} {value!r} is not supported: {why}")


def check_required(opt: dict, required: dict) -> None:
    for name, allowed in required.items():
        value = opt.get(name, allowed[0])
        if value not in allowed:
            shown = " or ".join(repr(a) for a in allowed if a is not None)
            raise refuse(name, value, f"the converter reproduces only {shown} exactly")


def check_options(opt: dict) -> None:
    """Refuse, naming the option, whatever the RNN conversion cannot reproduce exactly."""
    check_required(opt, REQUIRED)
    if opt.get("encoder_type") not in ("rnn", "brnn"):
        raise refuse("encoder_type", opt.get("encoder_type"),
                     "the converter handles 'rnn' and 'brnn' encoders with an 'rnn' decoder, and 'transformer' "
                     "with 'transformer'")
    if opt.get("decoder_type") != "rnn":
        raise refuse("decoder_type", opt.get("decoder_type"), "the converter handles the 'rnn' decoder")
    if opt.get("rnn_type") not in CELL_TYPES:
        raise refuse("rnn_type", opt.get("rnn_type"), f"hf_s2s has {sorted(CELL_TYPES)} cells")
    if opt.get("global_attention") not in ATTENTION_TYPES:
        raise refuse("global_attention", opt.get("global_attention"),
                     f"the converter handles {sorted(ATTENTION_TYPES)} (an attention-free OpenNMT-py decoder "
                     "feeds the RNN output straight to the generator, which hf_s2s's 'none' does not)")
    if opt["enc_layers"] != opt["dec_layers"]:
        raise refuse("enc_layers", opt["enc_layers"], f"the decoder starts from every encoder layer's final "
                     f"state, so it must equal -dec_layers ({opt['dec_layers']})")
    if opt["enc_hid_size"] != opt["dec_hid_size"]:
        raise refuse("enc_hid_size", opt["enc_hid_size"], f"must equal -dec_hid_size ({opt['dec_hid_size']})")


def rnn_config(opt: dict, source_vocab: list[str], target_vocab: list[str]) -> RNNSeq2SeqConfig:
    """The rnn_seq2seq config whose math is OpenNMT-py's for these options."""
    bidirectional = opt["encoder_type"] == "brnn"
    hidden = opt["dec_hid_size"]
    attention = ATTENTION_TYPES[opt["global_attention"]]
    mlp = opt["global_attention"] == "mlp"
    return RNNSeq2SeqConfig(
        vocab_size=len(source_vocab),
        decoder_vocab_size=None if source_vocab == target_vocab else len(target_vocab),
        encoder_embedding_size=opt["src_word_vec_size"],
        decoder_embedding_size=opt["tgt_word_vec_size"],
        encoder_hidden_size=opt["enc_hid_size"] // (2 if bidirectional else 1),
        decoder_hidden_size=hidden,
        attention_size=hidden,
        encoder_layers=opt["enc_layers"],
        decoder_layers=opt["dec_layers"],
        bidirectional=bidirectional,
        cell_type=CELL_TYPES[opt["rnn_type"]],
        attention_type=attention,
        input_feeding=bool(opt.get("input_feed", 1)),
        decoder_init="final_states_bridge" if opt.get("bridge") else "final_states",
        readout_activation="none" if mlp else "tanh",
        attention_query_bias=mlp,
        output_bias=True,
        tie_word_embeddings=bool(opt.get("share_decoder_embeddings")),  # the generator is the target table
        source_eos=False,
        dropout=0.0,  # inference; fine-tuning sets its own
        pad_token_id=target_vocab.index(SPECIALS.pad),
        bos_token_id=target_vocab.index(SPECIALS.bos),
        eos_token_id=target_vocab.index(SPECIALS.eos),
        decoder_start_token_id=target_vocab.index(SPECIALS.bos),
    )


def rnn_state_dict(model: dict, generator: dict, config: RNNSeq2SeqConfig,
                   opt: dict) -> dict[str, torch.Tensor]:
    """OpenNMT-py's parameter names -> hf_s2s's; a checkpoint tensor left unmapped is an error naming it.
    Under -share_embeddings both token tables are written (hf_s2s's RNN keeps one a side): equal, checked."""
    take, out = Tensors(model, "an OpenNMT-py RNN of these options"), {}
    tables = {name: take(name) for name in EMBEDDINGS.values()}
    if opt.get("share_embeddings"):
        check_same(tables, "-share_embeddings")
    out["model.encoder.embed_tokens.weight"] = tables[EMBEDDINGS["encoder"]]
    out["model.decoder.embed_tokens.weight"] = tables[EMBEDDINGS["decoder"]]
    for name in [n for n in take.left if n.startswith("encoder.rnn.")]:  # nn.LSTM / nn.GRU: the same names
        out["model.encoder." + name.removeprefix("encoder.")] = take(name)
    for kind in range(2 if config.cell_type == "lstm" else 1):
        if config.decoder_init == "final_states_bridge":
            for part in ("weight", "bias"):
                out[f"model.decoder.final_state_bridge.{kind}.{part}"] = take(f"encoder.bridge.{kind}.{part}")
    for layer in range(config.decoder_layers):
        for part in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            stacked = f"decoder.rnn.layers.{layer}.{part}"  # StackedLSTM/GRU (input feeding)
            name = stacked if config.uses_input_feeding else f"decoder.rnn.{part}_l{layer}"  # nn.LSTM/GRU
            out[f"model.decoder.rnn.{part}_l{layer}"] = take(name)
    if config.attention_type == "luong_general":
        out["model.decoder.attention.key_proj.weight"] = take("decoder.attn.linear_in.weight").t().contiguous()
    elif config.attention_type == "luong_concat":
        out["model.decoder.attention.query_proj.weight"] = take("decoder.attn.linear_query.weight")
        out["model.decoder.attention.query_proj.bias"] = take("decoder.attn.linear_query.bias")
        out["model.decoder.attention.key_proj.weight"] = take("decoder.attn.linear_context.weight")
        out["model.decoder.attention.energy.weight"] = take("decoder.attn.v.weight")
    readout = take("decoder.attn.linear_out.weight")
    out["model.decoder.readout.weight"] = readout
    out["model.decoder.readout.bias"] = take.bias_or_zeros("decoder.attn.linear_out.bias", readout)
    take.finish()
    out.update(generator_state(generator, opt, out))
    return out


def check_transformer_options(opt: dict) -> None:
    """Refuse, naming the option, whatever the Transformer conversion cannot reproduce exactly."""
    check_required(opt, {**{k: v for k, v in REQUIRED.items() if k != "position_encoding"}, **TRANSFORMER_REQUIRED})
    if opt.get("decoder_type") != "transformer":
        raise refuse("decoder_type", opt.get("decoder_type"), "a 'transformer' encoder converts with a 'transformer' "
                     "decoder only")
    width = opt["enc_hid_size"]
    for name in ("dec_hid_size", "src_word_vec_size", "tgt_word_vec_size"):
        if opt[name] != width:
            raise refuse(name, opt[name], f"hf_s2s's Transformer has one width, d_model: it must equal -enc_hid_size "
                         f"({width})")


def transformer_config(opt: dict, source_vocab: list[str], target_vocab: list[str]) -> TransformerSeq2SeqConfig:
    """The transformer_seq2seq config whose math is OpenNMT-py's for these options: pre-LN layers with final
    LayerNorms, embeddings x sqrt(d) + interleaved sinusoids from position 0, LayerNorm eps -norm_eps, a
    generator with a bias, sources without </s>."""
    shared = bool(opt.get("share_embeddings"))
    return TransformerSeq2SeqConfig(
        vocab_size=len(source_vocab),
        decoder_vocab_size=None if shared else len(target_vocab),
        d_model=opt["enc_hid_size"],
        encoder_layers=opt["enc_layers"],
        decoder_layers=opt["dec_layers"],
        encoder_attention_heads=opt["heads"],
        decoder_attention_heads=opt["heads"],
        encoder_ffn_dim=opt["transformer_ff"],
        decoder_ffn_dim=opt["transformer_ff"],
        activation_function=opt.get("pos_ffn_activation_fn", "relu"),
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,  # inference; fine-tuning sets its own
        norm_position="pre",
        position_embedding_type="sinusoidal",
        position_embedding_layout=POSITION_LAYOUTS[opt.get("position_encoding_type") or "SinusoidalInterleaved"],
        scale_embedding=True,
        layer_norm_eps=float(opt.get("norm_eps", 1e-6)),
        share_encoder_decoder_embeddings=shared,
        tie_word_embeddings=bool(opt.get("share_decoder_embeddings")),
        output_bias=True,
        source_eos=False,
        pad_token_id=target_vocab.index(SPECIALS.pad),
        bos_token_id=target_vocab.index(SPECIALS.bos),
        eos_token_id=target_vocab.index(SPECIALS.eos),
        decoder_start_token_id=target_vocab.index(SPECIALS.bos),
    )


# The names of a Transformer layer's modules (hf_s2s's: OpenNMT-py's); the encoder's and the decoder's layers
# share the self-attention's and the feed-forward's, and differ in their LayerNorms' names and the decoder's
# cross-attention
SELF_ATTENTION = {
    "self_attn.qkv_proj": ("self_attn.linear_query", "self_attn.linear_keys", "self_attn.linear_values"),
    "self_attn.out_proj": ("self_attn.final_linear",),
}
FEED_FORWARD = {"final_layer_norm": ("feed_forward.layer_norm",), "ffn.fc1": ("feed_forward.w_1",),
                "ffn.fc2": ("feed_forward.w_2",)}
CROSS_ATTENTION = {"encoder_attn.q_proj": ("context_attn.linear_query",),
                   "encoder_attn.kv_proj": ("context_attn.linear_keys", "context_attn.linear_values"),
                   "encoder_attn.out_proj": ("context_attn.final_linear",)}
# Linears have biases only with -add_qkvbias / -add_ffnbias: absent, they are zeros
LINEARS = frozenset(SELF_ATTENTION) | frozenset(CROSS_ATTENTION) | {"ffn.fc1", "ffn.fc2"}
ENCODER_LAYER = LayerMapping(
    source="encoder.transformer.{layer}", target="model.encoder.layers.{layer}",
    modules={"self_attn_layer_norm": ("layer_norm",), **SELF_ATTENTION, **FEED_FORWARD},
    optional_bias=LINEARS)
DECODER_LAYER = LayerMapping(
    source="decoder.transformer_layers.{layer}", target="model.decoder.layers.{layer}",
    modules={"self_attn_layer_norm": ("layer_norm_1",), **SELF_ATTENTION,
             "encoder_attn_layer_norm": ("layer_norm_2",), **CROSS_ATTENTION, **FEED_FORWARD},
    optional_bias=LINEARS)


def embedding_tables(take: Tensors, opt: dict) -> dict[str, torch.Tensor]:
    """The token tables: one, the encoder's, under -share_embeddings (OpenNMT-py's decoder table is the same
    tensor, saved under both names); else one a side."""
    tables = {side: take(name) for side, name in EMBEDDINGS.items()}
    if opt.get("share_embeddings"):
        check_same({EMBEDDINGS[side]: tables[side] for side in tables}, "-share_embeddings")
        del tables["decoder"]
    return {f"model.{side}.embed_tokens.weight": table for side, table in tables.items()}


def transformer_state_dict(model: dict, generator: dict, config: TransformerSeq2SeqConfig,
                           opt: dict) -> dict[str, torch.Tensor]:
    """OpenNMT-py's Transformer parameter names -> hf_s2s's (``ENCODER_LAYER``, ``DECODER_LAYER``): separate
    query/key/value Linears concatenated into the fused ``qkv_proj`` / ``kv_proj``; biases absent without
    ``-add_qkvbias`` / ``-add_ffnbias`` become zeros. The stored sinusoid tables (``pe.pe``) are checked
    against hf_s2s's (its ``position_embedding_layout``, :mod:`.positions`) and dropped. A checkpoint tensor left unmapped is an
    error naming it."""
    take = Tensors(model, "an OpenNMT-py Transformer of these options")
    out = {}
    for side in ("encoder", "decoder"):
        name, layout = f"{side}.embeddings.make_embedding.pe.pe", config.position_embedding_layout
        kind = next(k for k, v in POSITION_LAYOUTS.items() if v == layout)
        check_sinusoid_table(take(name)[:, 0], name, layout, f"OpenNMT-py's -position_encoding_type {kind}")
        for kind in ("weight", "bias"):
            out[f"model.{side}.layer_norm.{kind}"] = take(f"{side}.layer_norm.{kind}")
    out.update(embedding_tables(take, opt))
    out.update(map_layers(take, ENCODER_LAYER, config.encoder_layers))
    out.update(map_layers(take, DECODER_LAYER, config.decoder_layers))
    take.finish()
    out.update(generator_state(generator, opt, out))
    return out


def generator_state(generator: dict, opt: dict, mapped: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """OpenNMT-py's generator (a Linear with a bias) as hf_s2s's lm_head; under -share_decoder_embeddings its
    weight is the target token table (``mapped`` holds it), checked equal."""
    take = Tensors(generator, "OpenNMT-py's generator")
    out = {"lm_head.weight": take("weight"), "lm_head.bias": take("bias")}
    if take.left:
        raise CheckpointError(f"the generator holds {sorted(take.left)}: only OpenNMT-py's Linear generator "
                              "is supported")
    if opt.get("share_decoder_embeddings"):
        table = mapped.get("model.decoder.embed_tokens.weight", mapped["model.encoder.embed_tokens.weight"])
        check_same({"generator.weight": out["lm_head.weight"], EMBEDDINGS["decoder"]: table},
                   "-share_decoder_embeddings")
    return out


def vocabularies(checkpoint: dict) -> tuple[list[str], list[str]]:
    vocab = checkpoint.get("vocab")
    if not isinstance(vocab, dict) or not isinstance(vocab.get("src"), list) or not isinstance(vocab.get("tgt"), list):
        raise CheckpointError("the checkpoint's 'vocab' is not OpenNMT-py 3.x's {'src': [...], 'tgt': [...]}: "
                              "convert a checkpoint saved by OpenNMT-py 3.x (2.x checkpoints pickle torchtext fields)")
    start = vocab.get("decoder_start_token", SPECIALS.bos)
    if start != SPECIALS.bos:
        raise refuse("decoder_start_token", start, f"the converter reproduces {SPECIALS.bos!r}")
    return list(vocab["src"]), list(vocab["tgt"])


def opennmt_max_lengths(source_lengths: list[int], batch_size: int = TRANSLATE_DEFAULTS["batch_size"],
                        max_length: int = TRANSLATE_DEFAULTS["max_length"],
                        max_length_ratio: float = TRANSLATE_DEFAULTS["max_length_ratio"]) -> list[int]:
    """The most tokens ``onmt_translate`` (3.5.1, ``-batch_type sents``) lets each input line generate, </s>
    not counted: it sorts the lines by source length (stably), cuts them into batches of ``batch_size`` and
    gives a whole batch ``int(min(max_length, longest source x max_length_ratio + 5))``
    (``Translator.translate_batch``). So a line's cap depends on its neighbours;
    ``generate(max_new_tokens=...)`` per line reproduces it."""
    order = sorted(range(len(source_lengths)), key=lambda i: source_lengths[i])
    caps = [max_length] * len(source_lengths)
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        longest = max(source_lengths[i] for i in batch)
        cap = int(min(max_length, longest * max_length_ratio + 5)) if max_length_ratio > 0 else max_length
        for i in batch:
            caps[i] = cap
    return caps


def not_carried_over(opt: dict) -> list[str]:
    """What OpenNMT-py did to the text around the model that the converted folder does not do: the transforms
    of the training options that change a sentence at translation time (segmentation, normalization,
    prefixes...). The training-only ones (filters, noise, augmentation) need nothing."""
    notes = []
    for name in sorted(set(opt.get("transforms") or []) - TRAINING_ONLY_TRANSFORMS - CARRIED_TRANSFORMS):
        files = {key: opt[key] for key in TRANSFORM_FILES.get(name, ()) if opt.get(key)}
        shown = "".join(f" -{key} {value}" for key, value in files.items())
        notes.append(f"-transforms {name}{shown}: OpenNMT-py applied it to the text; {APPLY_YOURSELF}")
    if opt.get("share_embeddings") and opt.get("encoder_type") != "transformer":
        notes.append(f"-share_embeddings: {RNN_TABLES_COPIED}")
    return notes


def subword_models(opt: dict, source: Path | None, target: Path | None) -> tuple[Subwords | None, Subwords | None]:
    """The SentencePiece models ``onmt_translate -transforms sentencepiece`` segments each side with (None, None
    without that transform): ``source`` / ``target`` (the convert flags) or the paths the options recorded. Under
    ``-share_vocab`` with the same subword vocabulary options the target side uses the source's model, as
    OpenNMT-py's transform does."""
    if "sentencepiece" not in (opt.get("transforms") or []):
        for name, path in (("source", source), ("target", target)):
            if path is not None:
                raise ValueError(f"--{name}-subword-model is for a checkpoint trained with -transforms "
                                 f"sentencepiece; this one's -transforms are {sorted(opt.get('transforms') or [])}")
        return None, None
    for side in ("src", "tgt"):
        if opt.get(f"{side}_subword_vocab") and (opt.get(f"{side}_vocab_threshold") or 0) > 0:
            raise refuse(f"{side}_subword_vocab", opt[f"{side}_subword_vocab"],
                         f"with -{side}_vocab_threshold the transform restricts the SentencePiece model to that "
                         "vocabulary (LoadVocabulary), which the converted tokenizer does not reproduce")
    shared = opt.get("share_vocab") and all(opt.get(f"src_{name}") == opt.get(f"tgt_{name}")
                                            for name in ("subword_vocab", "vocab_threshold"))
    models = {}
    for side, given in (("src", source), ("tgt", target)):
        # one file named for both sides: the source's flag replaces it for both
        same_file = opt.get("tgt_subword_model") == opt.get("src_subword_model")
        if side == "tgt" and (shared or same_file) and given is None:
            models[side] = models["src"]
            continue
        models[side] = load_subwords(opt.get(f"{side}_subword_model"), given, f"-{side}_subword_model",
                                     SUBWORD_FLAGS[side])
    return models["src"], models["tgt"]


@register(TOOLKIT)
def convert(checkpoint: Path, source_subword_model: Path | None = None, target_subword_model: Path | None = None,
            **files) -> Converted:
    """An OpenNMT-py 3.x checkpoint (vocabularies and options inside it) as an hf_s2s model and tokenizer;
    ``source_subword_model`` / ``target_subword_model`` replace the SentencePiece model paths its options
    recorded."""
    unused = sorted(name for name, value in files.items() if value is not None)
    if unused:
        raise ValueError(f"an OpenNMT-py checkpoint holds its vocabularies and options; {unused} is not used")
    data = load_checkpoint(checkpoint, TOOLKIT)
    for key in ("model", "generator", "vocab", "opt"):
        if data.get(key) is None:
            raise CheckpointError(f"{checkpoint} lacks {key!r}: not an OpenNMT-py checkpoint")
    for key in ("model", "generator"):
        if not isinstance(data[key], dict):
            kind = type(data[key]).__name__
            raise CheckpointError(f"{checkpoint}'s {key!r} is a {kind}, not a state dict: not an OpenNMT-py "
                                  "3.x checkpoint")
    opt = options(data["opt"], f"{checkpoint}'s options (opt)")
    transformer = opt.get("encoder_type") == "transformer"
    (check_transformer_options if transformer else check_options)(opt)
    source_vocab, target_vocab = vocabularies(data)
    source_subwords, target_subwords = subword_models(opt, source_subword_model, target_subword_model)
    config = (transformer_config if transformer else rnn_config)(opt, source_vocab, target_vocab)
    if source_vocab.index(SPECIALS.pad) != config.pad_token_id:
        raise CheckpointError("the source and target vocabularies put <blank> at different ids")
    if transformer:
        state = transformer_state_dict(data["model"], data["generator"], config, opt)
    else:
        state = rnn_state_dict(data["model"], data["generator"], config, opt)
    check_vocabulary_sizes(state, len(source_vocab), len(target_vocab), f"{checkpoint}'s vocab['src']",
                           f"{checkpoint}'s vocab['tgt']")
    # the pieces the toolkit reads as <unk> on the source side: tokenizer ids after its vocabulary, which the encoder
    # reads as <unk>
    aliases = absent_pieces(source_subwords, source_vocab)
    alias_unknown_pieces(config, aliases, source_vocab.index(SPECIALS.unk))
    model = (TransformerSeq2SeqForConditionalGeneration if transformer
             else RNNSeq2SeqForConditionalGeneration)(config)
    load_converted(model, state)
    model.eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id, bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id,
        num_beams=TRANSLATE_DEFAULTS["beam_size"], length_penalty=1.0, early_stopping=True,
        max_length=TRANSLATE_DEFAULTS["max_length"] + 1,  # the decoder start token counts in generate's max_length
    )
    # onmt_translate lets a batch of one line run int(1.25 x source length + 5) decoding steps and stops a
    # line that has not produced </s> by then (DecodeStrategy.ensure_max_length): that many tokens, </s> not
    # counted. hf_s2s's bound counts the </s> it forces: b + 1.
    model.generation_config.max_len_a = TRANSLATE_DEFAULTS["max_length_ratio"]
    model.generation_config.max_len_b = 5 + 1
    model._set_default_generation_length()
    tokenizer = translation_tokenizer(source_vocab + aliases, target_vocab, SPECIALS, source_eos=False,
                                      source_subwords=source_subwords, target_subwords=target_subwords)
    if transformer:
        details = {"encoder_type": "transformer", "layers": [opt["enc_layers"], opt["dec_layers"]],
                   "hidden_size": opt["enc_hid_size"], "heads": opt["heads"], "transformer_ff": opt["transformer_ff"],
                   "position_encoding_type": opt.get("position_encoding_type"), "norm_eps": config.layer_norm_eps,
                   "add_qkvbias": bool(opt.get("add_qkvbias")), "add_ffnbias": bool(opt.get("add_ffnbias"))}
    else:
        details = {"rnn_type": opt["rnn_type"], "encoder_type": opt["encoder_type"],
                   "global_attention": opt["global_attention"], "input_feed": int(opt.get("input_feed", 1)),
                   "bridge": bool(opt.get("bridge")), "layers": opt["dec_layers"], "hidden_size": opt["dec_hid_size"]}
    details.update({name: bool(opt.get(name)) for name in ("share_vocab", "share_embeddings",
                                                            "share_decoder_embeddings")})
    details["transforms"] = sorted(opt.get("transforms") or [])
    if source_subwords is not None:
        details["subword_models"] = {"source": source_subwords.record(), "target": target_subwords.record(),
                                     "source_pieces_read_as_unk": len(aliases)}
    architecture = "transformer" if transformer else "rnn"
    notes = not_carried_over(opt) + target_note(target_subwords, target_vocab, "OpenNMT-py")
    return Converted(model=model, tokenizer=tokenizer, toolkit=TOOLKIT, architecture=architecture,
                     details=details, not_carried_over=notes)


__all__ = ["convert", "opennmt_max_lengths"]
