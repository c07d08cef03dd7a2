"""fairseq 0.12.x checkpoints (``fairseq-train``'s ``checkpoint_*.pt``) as hf_s2s folders.

fairseq keeps the dictionaries beside the data (``data-bin/dict.<lang>.txt``), not in the checkpoint: they
come from ``source_vocab`` / ``target_vocab``, by default the two ``dict.*.txt`` beside the checkpoint. A
dictionary's ids are ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, then the file's lines in order
(``data/dictionary.py``). Sources end with ``</s>`` and decoding starts from ``</s>`` (``SequenceGenerator``:
``tokens[:, 0] = eos``).

Supported: ``--arch lstm`` (and its named variants) -> ``rnn_seq2seq``:

- ``AttentionLayer``: score ``h_s . (W_in h_t)`` -> ``luong_general`` with ``W_k = W_in^T``; its
  ``output_proj``, ``tanh(W_out [c_t; h_t])`` without bias, is the readout with a zero bias; input feeding is
  always on;
- the decoder starts from every encoder layer's final (h, c), directions concatenated, through
  ``encoder_hidden_proj`` / ``encoder_cell_proj`` when the sizes differ:
  ``decoder_init="final_states_projected"`` (else ``"final_states"``);
- ``additional_fc`` (``--decoder-hidden-size`` != ``--decoder-out-embed-dim``): ``output_projection_size``;
  ``fc_out`` has a bias (``output_bias``), or the output layer is the tied decoder embedding.

And ``--arch transformer`` (and its named variants) -> ``transformer_seq2seq``:

- post-norm (``--encoder/decoder-normalize-before`` off, fairseq's default: no final LayerNorm) or pre-norm
  (with the final LayerNorms), LayerNorm eps 1e-5, ``relu``/``gelu``, embeddings scaled by sqrt(d) unless
  ``--no-scale-embedding``, ``q_proj/k_proj/v_proj`` concatenated into hf_s2s's fused projections;
- positions: fairseq numbers real tokens from ``padding_idx + 1`` (= 2) and its sinusoid is tensor2tensor's,
  ``[sin(p w_i); cos(p w_i)]`` with ``w_i = 10000^(-i / (d/2 - 1))``:
  ``position_embedding_layout="tensor2tensor"`` and ``position_offset=2``, which compute them as fairseq does,
  fixed (fine-tuning leaves them alone, as fairseq would). Learned positions
  (``--encoder/decoder-learned-pos``) become ``position_embedding_type="learned"`` tables whose row j is
  fairseq's position j + 2 (their table without its first ``padding_idx + 1`` rows); where only one side
  learned them, the other side's sinusoid is written as a table too (hf_s2s has one position type for both
  sides); a learned table shorter than the other side's maximum is refused (hf_s2s has one table size for both);
- the output projection (no bias) tied to the decoder embedding (``--share-decoder-input-output-embed``), or
  not; ``--share-all-embeddings`` -> ``share_encoder_decoder_embeddings``.

``--bpe sentencepiece`` is carried over (:mod:`.subwords`): the tokenizer segments raw text with the model
fairseq-interactive's ``--sentencepiece-model`` names and joins the output pieces back. The checkpoint records that
model only where fairseq-train was given ``--bpe`` (and only as a path): ``--source-subword-model`` names it (one model
for both sides, as fairseq's ``SentencepieceBPE``). Any other ``--bpe`` and the ``--tokenizer`` are not carried over:
they are returned as notes.

Every checkpoint tensor is mapped or the conversion fails naming it; options the converter cannot express
exactly are refused, naming the option.
"""

import argparse
from pathlib import Path

import torch
from transformers import GenerationConfig

from ..models.attention_transformer_seq2seq import sinusoidal_positions
from ..models.configuration_rnn_seq2seq import RNNSeq2SeqConfig
from ..models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from ..models.modeling_rnn_seq2seq import RNNSeq2SeqForConditionalGeneration
from ..models.modeling_transformer_seq2seq import TransformerSeq2SeqForConditionalGeneration
from .base import APPLY_YOURSELF, RNN_TABLES_COPIED, Converted, register
from .checkpoints import CheckpointError, load_checkpoint, options, read_text_file
from .moses_bpe import SEPARATOR, MosesBPE, fsmt_tokenizer, punctuation_note
from .subwords import (
    Subwords,
    absent_pieces,
    alias_unknown_pieces,
    load_subwords,
    target_note,
)
from .vocabulary import SpecialTokens, check_vocabulary_sizes, translation_tokenizer
from .weights import LayerMapping, Tensors, check_same, load_converted, map_layers

TOOLKIT = "fairseq"
# data/dictionary.py: Dictionary(bos="<s>", pad="<pad>", eos="</s>", unk="<unk>"), added in this order
SPECIALS = SpecialTokens(unk="<unk>", pad="<pad>", bos="<s>", eos="</s>")
SPECIAL_ORDER = [SPECIALS.bos, SPECIALS.pad, SPECIALS.eos, SPECIALS.unk]
# fairseq-generate's defaults (dataclass/configs.py GenerationConfig): what the converted folder's generation
# config reproduces
GENERATE_DEFAULTS = {"beam": 5, "max_len_a": 0.0, "max_len_b": 200, "min_len": 1, "lenpen": 1.0}

LSTM_ARCHS = ("lstm", "lstm_wiseman_iwslt_de_en", "lstm_luong_wmt_en_de")
TRANSFORMER_ARCHS = ("transformer", "transformer_tiny", "transformer_iwslt_de_en", "transformer_wmt_en_de",
                     "transformer_vaswani_wmt_en_de_big", "transformer_vaswani_wmt_en_fr_big",
                     "transformer_wmt_en_de_big", "transformer_wmt_en_de_big_t2t")
# the token tables' names; tied options make them one tensor, saved under each name
EMBEDDINGS = {side: f"{side}.embed_tokens.weight" for side in ("encoder", "decoder")}
# checkpoint entries that hold no parameter: fairseq's state-dict versions and deprecated position buffers
IGNORED = (".version", "embed_positions._float_tensor")
# transformer option -> the values this converter reproduces exactly (anything else is refused, naming the
# option)
TRANSFORMER_REQUIRED = {
    "layernorm_embedding": (False, None),
    "no_token_positional_embeddings": (False, None),
    "cross_self_attention": (False, None),
    "no_cross_attention": (False, None),
    "adaptive_softmax_cutoff": (None,),
    "adaptive_input": (False, None),
    "tie_adaptive_weights": (False, None),
    "quant_noise_pq": (0, None),
    "quant_noise_scalar": (0, None),
    "merge_src_tgt_embed": (False, None),
    "encoder_layers_to_keep": (None,),
    "decoder_layers_to_keep": (None,),
    "alignment_layer": (None,),
    "alignment_heads": (None,),
}


def refuse(option: str, value, why: str) -> CheckpointError:
    return CheckpointError(f"fairseq option --{option.replace('_', '-')} {value!r} is not supported: {why}")


def read_dictionary(path: Path) -> list[str]:
    """A fairseq ``dict.<lang>.txt`` as the token list in id order: the four specials, then one ``<token>
    <count>`` per line (``Dictionary.add_from_file``)."""
    tokens = list(SPECIAL_ORDER)
    text = read_text_file(path, "the fairseq dictionaries (data-bin/dict.<lang>.txt)",
                          "--source-vocab and --target-vocab")
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.rstrip().rsplit(" ", 1)
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
            if line.rstrip().endswith("#fairseq:overwrite"):
                raise CheckpointError(f"{path}:{number} uses #fairseq:overwrite, which gives one token two ids; the "
                                      "converter needs one id per token")
            raise CheckpointError(f"{path}:{number} is not '<token> <count>': {line!r} (not a fairseq dictionary)")
        tokens.append(fields[0])
    return tokens


def dictionary_paths(checkpoint: Path, source_vocab: Path | None, target_vocab: Path | None,
                     model_args: dict) -> tuple[Path, Path]:
    """--source-vocab / --target-vocab, else ``dict.<source_lang>.txt`` / ``dict.<target_lang>.txt`` beside
    the checkpoint (the languages from the checkpoint's task options, else the only two dict.*.txt there)."""
    if source_vocab is not None and target_vocab is not None:
        return source_vocab, target_vocab
    folder = checkpoint.parent
    source_lang, target_lang = model_args.get("source_lang"), model_args.get("target_lang")
    if not (source_lang and target_lang):
        found = sorted(folder.glob("dict.*.txt"))
        if len(found) != 2:
            raise CheckpointError(
                f"fairseq keeps its dictionaries beside the data: pass --source-vocab and --target-vocab "
                f"(data-bin/dict.<lang>.txt); {folder} holds {len(found)} dict.*.txt, so which is which is unknown")
        # the checkpoint does not say the languages: the fixture convention (and fairseq-preprocess's) is one
        # file per side; tell them apart by which one matches the embedding sizes in convert()
        return found[0], found[1]
    return (source_vocab or folder / f"dict.{source_lang}.txt"), (target_vocab or folder / f"dict.{target_lang}.txt")


def model_options(data: dict) -> dict:
    """The model's options: ``cfg["model"]`` (a Namespace for the legacy architectures, a dict otherwise) in
    fairseq >= 0.10 checkpoints, else the older ``args``; plus the task's languages."""
    cfg = data.get("cfg")
    if isinstance(cfg, dict) and cfg.get("model") is not None:
        opts = options(cfg["model"])
        task = cfg.get("task") or {}
        task = options(task) if isinstance(task, argparse.Namespace | dict) else {}
        for key in ("source_lang", "target_lang"):
            opts[key] = opts.get(key) or task.get(key)
        return opts
    if data.get("args") is not None:
        return options(data["args"])
    raise CheckpointError("the checkpoint holds neither cfg['model'] nor args: not a fairseq checkpoint")


# ---------------------------------------------------------------------------------------------------- lstm

def check_lstm_options(opt: dict) -> None:
    """Refuse, naming the option, whatever the lstm conversion cannot reproduce exactly."""
    if str(opt.get("decoder_attention", "1")).lower() in ("0", "false", "none"):
        raise refuse("decoder_attention", opt.get("decoder_attention"), "without attention fairseq's decoder feeds "
                     "the raw LSTM output on, and hf_s2s's attention_type 'none' computes something else")
    if opt.get("criterion") == "adaptive_loss":
        raise refuse("criterion", "adaptive_loss", "the adaptive softmax (--adaptive-softmax-cutoff) has no hf_s2s "
                     "counterpart")
    if opt["encoder_layers"] != opt["decoder_layers"]:
        raise refuse("encoder_layers", opt["encoder_layers"], f"must equal --decoder-layers ({opt['decoder_layers']})")


def lstm_config(opt: dict, source_vocab: list[str], target_vocab: list[str]) -> RNNSeq2SeqConfig:
    """The rnn_seq2seq config whose math is fairseq's ``lstm`` for these options."""
    bidirectional = bool(opt.get("encoder_bidirectional"))
    encoder_output = opt["encoder_hidden_size"] * (2 if bidirectional else 1)
    hidden, out_embed = opt["decoder_hidden_size"], opt["decoder_out_embed_dim"]
    tied = bool(opt.get("share_decoder_input_output_embed") or opt.get("share_all_embeddings"))
    return RNNSeq2SeqConfig(
        vocab_size=len(source_vocab),
        decoder_vocab_size=None if source_vocab == target_vocab else len(target_vocab),
        encoder_embedding_size=opt["encoder_embed_dim"],
        decoder_embedding_size=opt["decoder_embed_dim"],
        encoder_hidden_size=opt["encoder_hidden_size"],
        decoder_hidden_size=hidden,
        attention_size=hidden,
        encoder_layers=opt["encoder_layers"],
        decoder_layers=opt["decoder_layers"],
        bidirectional=bidirectional,
        cell_type="lstm",
        attention_type="luong_general",
        input_feeding=True,
        decoder_init="final_states" if encoder_output == hidden else "final_states_projected",
        output_projection_size=out_embed if out_embed != hidden else None,
        output_bias=not tied,
        tie_word_embeddings=tied,
        source_eos=True,
        dropout=0.0,  # inference; fine-tuning sets its own
        **special_ids(target_vocab),
    )


def special_ids(target_vocab: list[str]) -> dict:
    return {"pad_token_id": target_vocab.index(SPECIALS.pad), "bos_token_id": target_vocab.index(SPECIALS.bos),
            "eos_token_id": target_vocab.index(SPECIALS.eos),
            "decoder_start_token_id": target_vocab.index(SPECIALS.eos)}  # fairseq starts decoding from </s>


def lstm_state_dict(model: dict, config: RNNSeq2SeqConfig, opt: dict) -> dict[str, torch.Tensor]:
    """fairseq's lstm parameter names -> hf_s2s's."""
    take, out = Tensors(model, "a fairseq lstm of these options", ignore=IGNORED), {}
    tables = {name: take(name) for name in EMBEDDINGS.values()}
    if opt.get("share_all_embeddings"):
        check_same(tables, "--share-all-embeddings")
    out["model.encoder.embed_tokens.weight"] = tables[EMBEDDINGS["encoder"]]
    out["model.decoder.embed_tokens.weight"] = tables[EMBEDDINGS["decoder"]]
    for name in [n for n in take.left if n.startswith("encoder.lstm.")]:  # nn.LSTM: the same names
        out["model.encoder.rnn." + name.removeprefix("encoder.lstm.")] = take(name)
    if config.decoder_init == "final_states_projected":
        for kind, source in enumerate(("encoder_hidden_proj", "encoder_cell_proj")):
            for part in ("weight", "bias"):
                out[f"model.decoder.final_state_projection.{kind}.{part}"] = take(f"decoder.{source}.{part}")
    for layer in range(config.decoder_layers):  # one nn.LSTMCell per layer -> one nn.LSTM
        for part in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            out[f"model.decoder.rnn.{part}_l{layer}"] = take(f"decoder.layers.{layer}.{part}")
    # score h_s . (W_in h_t) = h_t . (W_in^T h_s): hf_s2s's key projection is W_in^T
    out["model.decoder.attention.key_proj.weight"] = take("decoder.attention.input_proj.weight").t()
    readout = take("decoder.attention.output_proj.weight")
    out["model.decoder.readout.weight"] = readout
    out["model.decoder.readout.bias"] = readout.new_zeros(readout.shape[0])  # AttentionLayer(bias=False)
    if config.output_projection_size:
        out["model.decoder.output_projection.weight"] = take("decoder.additional_fc.weight")
        out["model.decoder.output_projection.bias"] = take("decoder.additional_fc.bias")
    if not config.tie_word_embeddings:  # tied, fairseq has no fc_out: it multiplies by the decoder table
        out["lm_head.weight"] = take("decoder.fc_out.weight")
        out["lm_head.bias"] = take("decoder.fc_out.bias")
    take.finish()
    return out


# ---------------------------------------------------------------------------------------------------- transformer

def check_transformer_options(opt: dict) -> None:
    """Refuse, naming the option, whatever the transformer conversion cannot reproduce exactly."""
    for name, allowed in TRANSFORMER_REQUIRED.items():
        value = opt.get(name, allowed[0])
        if value not in allowed:
            raise refuse(name, value, f"the converter reproduces only {allowed[0]!r} exactly")
    d_model = opt["encoder_embed_dim"]
    for name in ("decoder_embed_dim", "decoder_input_dim", "decoder_output_dim"):
        if opt.get(name, d_model) != d_model:
            raise refuse(name, opt[name], f"hf_s2s's Transformer has one width: must equal --encoder-embed-dim "
                         f"({d_model}) (fairseq's project_in_dim / project_out_dim have no counterpart)")
    if bool(opt.get("encoder_normalize_before")) != bool(opt.get("decoder_normalize_before")):
        raise refuse("decoder_normalize_before", opt.get("decoder_normalize_before"), "hf_s2s places the LayerNorm "
                     "alike in encoder and decoder: must equal --encoder-normalize-before")
    if opt.get("activation_fn", "relu") not in ("relu", "gelu"):
        raise refuse("activation_fn", opt.get("activation_fn"), "hf_s2s has 'relu' and 'gelu' (erf)")
    # hf_s2s has one position table size for both sides (position_table_size): a learned table must hold that many
    # (a sinusoidal side is computed to any length)
    for side, kind in (("encoder", "source"), ("decoder", "target")):
        if opt.get(f"{side}_learned_pos") and max_positions(opt, kind) < position_table_size(opt):
            raise refuse(f"max_{kind}_positions", max_positions(opt, kind), f"the {side}'s learned position table "
                         f"holds {max_positions(opt, kind)} positions, and hf_s2s's one table size for both sides is "
                         f"the other side's {position_table_size(opt)}: convert a model trained with "
                         "--max-source-positions equal to --max-target-positions")


def max_positions(opt: dict, kind: str) -> int:
    """fairseq's --max-source-positions (``kind`` "source") or --max-target-positions, 1024 where not set."""
    return int(opt.get(f"max_{kind}_positions") or 1024)


def position_table_size(opt: dict) -> int:
    """hf_s2s's one position table size for both sides: the longer of fairseq's two maximums."""
    return max(max_positions(opt, "source"), max_positions(opt, "target"))


def transformer_config(opt: dict, source_vocab: list[str], target_vocab: list[str]) -> TransformerSeq2SeqConfig:
    """The transformer_seq2seq config whose math is fairseq's ``transformer`` for these options."""
    shared, ids = bool(opt.get("share_all_embeddings")), special_ids(target_vocab)
    return TransformerSeq2SeqConfig(
        vocab_size=len(source_vocab),
        decoder_vocab_size=None if source_vocab == target_vocab else len(target_vocab),
        d_model=opt["encoder_embed_dim"],
        encoder_layers=opt["encoder_layers"],
        decoder_layers=opt["decoder_layers"],
        encoder_attention_heads=opt["encoder_attention_heads"],
        decoder_attention_heads=opt["decoder_attention_heads"],
        encoder_ffn_dim=opt["encoder_ffn_embed_dim"],
        decoder_ffn_dim=opt["decoder_ffn_embed_dim"],
        activation_function=opt.get("activation_fn", "relu"),
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,  # inference; fine-tuning sets its own
        norm_position="pre" if opt.get("encoder_normalize_before") else "post",
        # fairseq's sinusoid as computed (module docstring), or its learned tables (either side learned: both
        # tables)
        position_embedding_type="learned" if learned_positions(opt) else "sinusoidal",
        position_embedding_layout="tensor2tensor",
        position_offset=0 if learned_positions(opt) else ids["pad_token_id"] + 1,  # real tokens from padding_idx + 1
        max_position_embeddings=position_table_size(opt),
        scale_embedding=not opt.get("no_scale_embedding"),
        share_encoder_decoder_embeddings=shared,
        tie_word_embeddings=shared or bool(opt.get("share_decoder_input_output_embed")),
        **ids,
    )


def learned_positions(opt: dict) -> bool:
    """Whether either side learned its positions (``--encoder-learned-pos`` / ``--decoder-learned-pos``)."""
    return bool(opt.get("encoder_learned_pos") or opt.get("decoder_learned_pos"))


def layer_mapping(side: str) -> LayerMapping:
    """fairseq's names for a transformer layer of ``side``: the decoder's adds the encoder attention."""
    modules = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
               "self_attn.out_proj": ("self_attn.out_proj",),
               "self_attn_layer_norm": ("self_attn_layer_norm",)}
    if side == "decoder":
        modules.update({"encoder_attn.q_proj": ("encoder_attn.q_proj",),
                        "encoder_attn.kv_proj": ("encoder_attn.k_proj", "encoder_attn.v_proj"),
                        "encoder_attn.out_proj": ("encoder_attn.out_proj",),
                        "encoder_attn_layer_norm": ("encoder_attn_layer_norm",)})
    modules.update({"ffn.fc1": ("fc1",), "ffn.fc2": ("fc2",), "final_layer_norm": ("final_layer_norm",)})
    return LayerMapping(source=f"{side}.layers.{{layer}}", target=f"model.{side}.layers.{{layer}}",
                        modules=modules)


LAYERS = {side: layer_mapping(side) for side in ("encoder", "decoder")}


def transformer_state_dict(model: dict, config: TransformerSeq2SeqConfig, opt: dict) -> dict[str, torch.Tensor]:
    """fairseq's transformer parameter names -> hf_s2s's (``LAYERS``: q/k/v concatenated), positions as tables
    where learned. Under --share-all-embeddings the one token table is the encoder's; under
    --share-decoder-input-output-embed the output projection is the target table: each checked equal."""
    take, out = Tensors(model, "a fairseq transformer of these options", ignore=IGNORED), {}
    padding_idx, rows = config.pad_token_id, config.max_position_embeddings
    tables = {name: take(name) for name in EMBEDDINGS.values()}
    if config.share_encoder_decoder_embeddings:
        check_same(tables, "--share-all-embeddings")
    for side in ("encoder", "decoder"):
        if side == "encoder" or not config.share_encoder_decoder_embeddings:
            out[f"model.{side}.embed_tokens.weight"] = tables[EMBEDDINGS[side]]
        if opt.get(f"{side}_learned_pos"):
            table = take(f"{side}.embed_positions.weight")[padding_idx + 1 :]
            if table.shape[0] != rows:
                raise CheckpointError(f"{side}.embed_positions holds {table.shape[0]} positions, not {rows}")
            out[f"model.{side}.embed_positions.weight_table.weight"] = table
        elif learned_positions(opt):  # the other side learned: this side's sinusoid becomes a table like it
            positions = torch.arange(rows) + padding_idx + 1
            out[f"model.{side}.embed_positions.weight_table.weight"] = sinusoidal_positions(positions, config.d_model,
                                                                                              "tensor2tensor")
        layers = config.encoder_layers if side == "encoder" else config.decoder_layers
        out.update(map_layers(take, LAYERS[side], layers))
        if config.norm_position == "pre":
            for part in ("weight", "bias"):
                out[f"model.{side}.layer_norm.{part}"] = take(f"{side}.layer_norm.{part}")
    projection = take("decoder.output_projection.weight")
    if config.tie_word_embeddings:
        target_table = tables[EMBEDDINGS["decoder"]]
        check_same({"decoder.output_projection.weight": projection, EMBEDDINGS["decoder"]: target_table},
                   "--share-decoder-input-output-embed")
    out["lm_head.weight"] = projection
    take.finish()
    return out


# ---------------------------------------------------------------------------------------------------- convert

def generation_config(config, max_target_positions: int) -> GenerationConfig:
    """fairseq-generate's defaults: beam 5, normalized scores with --lenpen 1 (sum of log-probabilities over
    the generated tokens, </s> counted: transformers' length_penalty=1.0), a sentence done when beam
    hypotheses have finished (early_stopping=True), --min-len 1, <pad> never generated, and the length bound:
    at most ``max_len_a x source length + max_len_b`` tokens, then </s> forced (hf_s2s's bound counts the
    </s>: b + 1)."""
    generation = GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id, bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id,
        num_beams=GENERATE_DEFAULTS["beam"], length_penalty=GENERATE_DEFAULTS["lenpen"], early_stopping=True,
        min_new_tokens=GENERATE_DEFAULTS["min_len"], suppress_tokens=[config.pad_token_id],
        # fairseq caps the tokens before </s> at max_decoder_positions - 1; the start token counts in
        # max_length
        max_length=max_target_positions + 1,
    )
    generation.max_len_a = GENERATE_DEFAULTS["max_len_a"]
    generation.max_len_b = GENERATE_DEFAULTS["max_len_b"] + 1
    return generation


def vocabularies(checkpoint: Path, files: dict, opt: dict,
                 model: dict) -> tuple[list[str], list[str], Path, Path]:
    """The source and target dictionaries (token lists in id order) and the files they came from."""
    source_path, target_path = dictionary_paths(checkpoint, files.get("source_vocab"), files.get("target_vocab"), opt)
    source, target = read_dictionary(source_path), read_dictionary(target_path)
    rows = tuple(getattr(model.get(name), "shape", (None,))[0] for name in EMBEDDINGS.values())
    guessed = not (files.get("source_vocab") and files.get("target_vocab")) and not (
        opt.get("source_lang") and opt.get("target_lang"))
    if guessed and source != target:  # two dict.*.txt beside a checkpoint that does not name its languages
        if rows[0] == rows[1]:
            raise CheckpointError(f"the checkpoint does not name its languages and {source_path.name} and "
                                  f"{target_path.name} have the same size: pass --source-vocab and --target-vocab")
        if (len(target), len(source)) == rows:
            source, target, source_path, target_path = target, source, target_path, source_path
    return source, target, source_path, target_path


def text_option(data: dict, opt: dict, name: str) -> dict:
    """The checkpoint's ``--bpe`` or ``--tokenizer`` settings (``_name`` and its options; empty when unset)."""
    value = (data.get("cfg") or {}).get(name) or opt.get(name)
    if not value:
        return {}
    return options(value) if isinstance(value, argparse.Namespace | dict) else {"_name": value}


def subword_model(data: dict, opt: dict, given: Path | None, target: Path | None) -> Subwords | None:
    """The SentencePiece model fairseq-interactive's ``--bpe sentencepiece`` segments and joins with: ``given``
    (--source-subword-model) or the path the checkpoint recorded; None when neither says sentencepiece."""
    if target is not None:
        raise ValueError("fairseq's --bpe sentencepiece has one model for both sides: pass it with "
                         "--source-subword-model (--target-subword-model is for OpenNMT-py and Joey NMT)")
    bpe = text_option(data, opt, "bpe")
    if bpe.get("_name") not in (None, "sentencepiece"):
        if given is not None:
            raise refuse("bpe", bpe["_name"], "--source-subword-model carries a --bpe sentencepiece model over; "
                         "this checkpoint was trained with another --bpe")
        return None
    if given is None and not bpe:
        return None
    return load_subwords(bpe.get("sentencepiece_model"), given, "--sentencepiece-model", "--source-subword-model")


def moses_bpe_settings(data: dict, opt: dict, given: Path | None) -> MosesBPE | None:
    """fairseq-interactive's ``--tokenizer moses --bpe subword_nmt`` (None unless the checkpoint names both), with
    the BPE codes from ``given`` (--source-subword-model) or the ``--bpe-codes`` path the checkpoint recorded;
    what FSMTTokenizer cannot reproduce is refused naming the option (:mod:`.moses_bpe`)."""
    tokenizer, bpe = text_option(data, opt, "tokenizer"), text_option(data, opt, "bpe")
    if tokenizer.get("_name") != "moses" or bpe.get("_name") != "subword_nmt":
        return None
    for name, what in (("moses_no_dash_splits", "splits dashes"), ("moses_no_escape", "escapes HTML characters")):
        if tokenizer.get(name):
            raise refuse(name, True, f"the converted tokenizer (transformers' FSMTTokenizer) always {what}: "
                         "segment and tokenize the input yourself, or convert a model trained without it")
    if bpe.get("bpe_separator", SEPARATOR) != SEPARATOR:
        raise refuse("bpe_separator", bpe["bpe_separator"], f"FSMTTokenizer reads subword-nmt's {SEPARATOR!r} only")
    languages = (tokenizer.get("source_lang") or opt.get("source_lang"),
                 tokenizer.get("target_lang") or opt.get("target_lang"))
    if given is not None:
        return MosesBPE(given, f"--source-subword-model {given}", languages)
    recorded = Path(str(bpe.get("bpe_codes"))).expanduser()
    if not recorded.is_file():
        raise FileNotFoundError(f"--bpe-codes {bpe.get('bpe_codes')} does not exist here (the path it had where "
                                "fairseq trained): pass the BPE codes with --source-subword-model")
    return MosesBPE(recorded, f"--bpe-codes {recorded}", languages)


def not_carried_over(data: dict, opt: dict, carried: bool = False) -> list[str]:
    """What fairseq's training configuration applied to the text that the converted folder does not: the --bpe
    (unless ``carried``) and --tokenizer (unless ``carried`` and Moses) it names (fairseq-interactive applies them; fairseq-generate reads text
    already processed)."""
    notes = []
    for name, flag in (("bpe", "--bpe"), ("tokenizer", "--tokenizer")):
        settings = text_option(data, opt, name)
        if settings and not (carried and (name == "bpe" or settings.get("_name") == "moses")):
            shown = ", ".join(f"{k}={v}" for k, v in settings.items() if k != "_name" and v not in (None, ""))
            named = f"{flag} {settings.get('_name')}" + (f" ({shown})" if shown else "")
            notes.append(f"{named}: {APPLY_YOURSELF}")
    if opt.get("share_all_embeddings") and opt.get("arch") in LSTM_ARCHS:
        notes.append(f"--share-all-embeddings: {RNN_TABLES_COPIED}")
    return notes


@register(TOOLKIT)
def convert(checkpoint: Path, source_vocab: Path | None = None, target_vocab: Path | None = None,
            source_subword_model: Path | None = None, target_subword_model: Path | None = None,
            **files) -> Converted:
    """A fairseq checkpoint and its dictionaries as an hf_s2s model and tokenizer; ``source_subword_model``: the
    ``--sentencepiece-model`` fairseq-interactive segments with (``--bpe sentencepiece``)."""
    unused = sorted(name for name, value in files.items() if value is not None)
    if unused:
        raise ValueError(f"a fairseq conversion reads the checkpoint and its dictionaries; {unused} is not used")
    data = load_checkpoint(checkpoint, TOOLKIT)
    if not isinstance(data.get("model"), dict):
        raise CheckpointError(f"{checkpoint} lacks 'model' (a state dict): not a fairseq checkpoint")
    opt = model_options(data)
    arch = opt.get("arch") or opt.get("_name")
    if arch not in LSTM_ARCHS + TRANSFORMER_ARCHS:
        raise refuse("arch", arch, f"the converter handles {list(LSTM_ARCHS + TRANSFORMER_ARCHS)}")
    moses_bpe = moses_bpe_settings(data, opt, source_subword_model)
    subwords = None if moses_bpe else subword_model(data, opt, source_subword_model, target_subword_model)
    sources, targets, source_path, target_path = vocabularies(
        checkpoint, {"source_vocab": source_vocab, "target_vocab": target_vocab}, opt, data["model"])
    if opt.get("share_all_embeddings") and sources != targets:
        raise refuse("share_all_embeddings", True, f"it needs one dictionary (fairseq-preprocess "
                     f"--joined-dictionary), but {source_path} and {target_path} differ: pass the "
                     "dictionaries the model was trained with")
    if arch in LSTM_ARCHS:
        check_lstm_options(opt)
        config = lstm_config(opt, sources, targets)
        state = lstm_state_dict(data["model"], config, opt)
        architecture = "lstm"
        details = {"arch": arch, "encoder_bidirectional": config.bidirectional, "layers": config.decoder_layers,
                   "encoder_hidden_size": opt["encoder_hidden_size"], "decoder_hidden_size": config.decoder_hidden_size,
                   "decoder_out_embed_dim": opt["decoder_out_embed_dim"]}
    else:
        check_transformer_options(opt)
        config = transformer_config(opt, sources, targets)
        state = transformer_state_dict(data["model"], config, opt)
        architecture = "transformer"
        details = {"arch": arch, "d_model": config.d_model, "layers": [config.encoder_layers, config.decoder_layers],
                   "normalize_before": config.norm_position == "pre",
                   "learned_pos": [bool(opt.get(f"{side}_learned_pos")) for side in ("encoder", "decoder")]}
    details.update({"share_decoder_input_output_embed": config.tie_word_embeddings,
                    "share_all_embeddings": bool(opt.get("share_all_embeddings"))})
    check_vocabulary_sizes(state, len(sources), len(targets), str(source_path), str(target_path))
    # the pieces the toolkit reads as <unk> on the source side: tokenizer ids after its vocabulary, which the encoder
    # reads as <unk>
    aliases = absent_pieces(subwords, sources)
    alias_unknown_pieces(config, aliases, sources.index(SPECIALS.unk))
    model = (RNNSeq2SeqForConditionalGeneration if architecture == "lstm"
             else TransformerSeq2SeqForConditionalGeneration)(config)
    load_converted(model, state)
    model.eval()
    model.generation_config = generation_config(config, max_positions(opt, "target"))
    model._set_default_generation_length()
    if moses_bpe is not None:
        tokenizer = fsmt_tokenizer(moses_bpe, sources, targets, SPECIALS.unk, SPECIALS.pad, SPECIALS.bos, SPECIALS.eos)
        details["subword_models"] = {"moses_bpe": moses_bpe.record()}
    else:
        tokenizer = translation_tokenizer(sources + aliases, targets, SPECIALS, source_eos=True,
                                          source_subwords=subwords, target_subwords=subwords)
    if subwords is not None:
        details["subword_models"] = {"source": subwords.record(), "target": subwords.record(),
                                     "source_pieces_read_as_unk": len(aliases)}
    notes = not_carried_over(data, opt, carried=bool(subwords or moses_bpe)) + target_note(subwords, targets, "fairseq")
    if moses_bpe is not None:
        notes.append(punctuation_note("fairseq"))
    return Converted(model=model, tokenizer=tokenizer, toolkit=TOOLKIT, architecture=architecture,
                     details=details, not_carried_over=notes)


__all__ = ["convert", "read_dictionary"]
