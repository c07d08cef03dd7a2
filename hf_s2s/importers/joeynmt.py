"""Joey NMT 2.x checkpoints (``best.ckpt``, ``<step>.ckpt``) as hf_s2s folders.

Joey NMT keeps the model's options in ``config.yaml`` and the vocabularies in ``src_vocab.txt`` / ``trg_vocab.txt``
beside the checkpoint (its ``model_dir``), not inside it: the converter reads them from there unless given
(``--config``, ``--source-vocab``, ``--target-vocab``). The checkpoint holds only ``model_state`` (and training
state, ignored).

Supported, mapped onto the family whose math is Joey's:

- the recurrent model (``type: recurrent``, ``rnn_type: gru|lstm``, ``attention: bahdanau|luong``,
  ``input_feeding``, ``init_hidden: bridge|last|zero``) -> ``rnn_seq2seq``. Joey queries *both* attentions with the
  decoder state after the step, ``h_t`` (``RecurrentDecoder._forward_step``), so ``bahdanau`` is hf_s2s's
  ``luong_concat`` (the additive score ``v^T tanh(W_q h_t + W_k h_s)``) and ``luong`` is ``luong_general``; the
  attentional vector ``tanh(W [h_t; c_t] + b)`` is the readout with its two column blocks swapped; the bridge
  ``tanh(W_b [h_fwd; h_bwd] + b_b)`` is one Linear for every layer (tiled into hf_s2s's per-layer bridge); an LSTM
  decoder starts its cell equal to its hidden state (``decoder_init_cell="copy_hidden"``); ``last`` with an encoder
  twice the decoder's size takes the forward half (``decoder_init="last_forward"``);
- the Transformer (``type: transformer``, ``layer_norm: pre|post``, relu/gelu) -> ``transformer_seq2seq`` with
  ``position_embedding_layout="interleaved"`` and ``layer_norm_eps=1e-6``; the separate query, key and value
  Linears are concatenated into the fused projections.

Sources end with ``</s>`` (Joey's ``sentences_to_ids``); decoding starts with ``<s>`` and may not end at the first
step (``min_output_length`` 1). Options the converter cannot reproduce exactly are refused, naming the option.
"""

from pathlib import Path

import torch
import yaml
from transformers import GenerationConfig

from ..models.attention_transformer_seq2seq import sinusoidal_positions
from ..models.configuration_rnn_seq2seq import RNNSeq2SeqConfig
from ..models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from ..models.modeling_rnn_seq2seq import RNNSeq2SeqForConditionalGeneration
from ..models.modeling_transformer_seq2seq import TransformerSeq2SeqForConditionalGeneration
from .base import Converted, register
from .checkpoints import CheckpointError, load_checkpoint
from .vocabulary import SpecialTokens, translation_tokenizer

TOOLKIT = "joeynmt"
# Joey NMT 2.x's default special symbols (joeynmt/config.py), ids 0..3 in every vocabulary file
SPECIALS = SpecialTokens(unk="<unk>", pad="<pad>", bos="<s>", eos="</s>")
CELL_TYPES = ("gru", "lstm")
ATTENTION_TYPES = {"bahdanau": "luong_concat", "luong": "luong_general"}
INIT_HIDDEN = ("bridge", "last", "zero")
# `joeynmt translate`'s defaults (joeynmt/prediction.py, search.py) for what the config's `testing` leaves out
TESTING_DEFAULTS = {"beam_size": 1, "beam_alpha": -1, "min_output_length": 1}


def refuse(option: str, value, why: str) -> CheckpointError:
    return CheckpointError(f"Joey NMT option {option}: {value!r} is not supported: {why}")


def read_config(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path} not found: Joey NMT keeps config.yaml beside the checkpoint (its model_dir); "
                              "pass it with --config")
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
        raise CheckpointError(f"{path} has no 'model' section: not a Joey NMT config")
    return config


def read_vocab(path: Path, side: str, flag: str) -> list[str]:
    if not path.is_file():
        raise CheckpointError(f"{path} not found: Joey NMT writes the {side} vocabulary beside the checkpoint; "
                              f"pass it with {flag}")
    return path.read_text(encoding="utf-8").rstrip("\n").split("\n")


def check_data(data: dict) -> None:
    """Refuse what Joey applies to the text itself that the whitespace tokenizer would not reproduce."""
    if data.get("special_symbols"):
        raise refuse("data.special_symbols", data["special_symbols"], "the converter knows Joey's default symbols")
    for side in ("src", "trg"):
        options = data.get(side) or {}
        for name in ("lowercase", "normalize"):
            if options.get(name):
                raise refuse(f"data.{side}.{name}", options[name], "joeynmt translate changes the input text itself; "
                             "the converted tokenizer does not (preprocess the text before converting)")
        if options.get("level", "word") == "char":
            raise refuse(f"data.{side}.level", "char", "the converted tokenizer splits on whitespace")


def rnn_config(model: dict, source_vocab: list[str], target_vocab: list[str]) -> RNNSeq2SeqConfig:
    """The rnn_seq2seq config whose math is Joey NMT's recurrent model for these options."""
    encoder, decoder = model["encoder"], model["decoder"]
    for side, options in (("encoder", encoder), ("decoder", decoder)):
        if options.get("rnn_type", "gru") not in CELL_TYPES:
            raise refuse(f"model.{side}.rnn_type", options.get("rnn_type"), f"hf_s2s has {list(CELL_TYPES)} cells")
        if (options.get("embeddings") or {}).get("scale", False):
            raise refuse(f"model.{side}.embeddings.scale", True, "hf_s2s's RNN does not scale its embeddings")
    if encoder.get("rnn_type", "gru") != decoder.get("rnn_type", "gru"):
        raise refuse("model.decoder.rnn_type", decoder.get("rnn_type"), "hf_s2s uses one cell type for both sides")
    attention = decoder.get("attention", "bahdanau")
    if attention not in ATTENTION_TYPES:
        raise refuse("model.decoder.attention", attention, f"Joey NMT's are {sorted(ATTENTION_TYPES)}")
    if decoder.get("activation", "tanh") != "tanh":
        raise refuse("model.decoder.activation", decoder["activation"], "hf_s2s's readout and bridge use tanh")
    init_hidden = decoder.get("init_hidden", "bridge")
    if init_hidden not in INIT_HIDDEN:
        raise refuse("model.decoder.init_hidden", init_hidden, f"Joey NMT's are {list(INIT_HIDDEN)}")
    bidirectional = bool(encoder.get("bidirectional", True))
    encoder_hidden, hidden = encoder["hidden_size"], decoder["hidden_size"]
    encoder_output = encoder_hidden * (2 if bidirectional else 1)
    decoder_init = {"bridge": "bridge", "zero": "zero"}.get(init_hidden)
    if init_hidden == "last":
        decoder_init = "last" if encoder_output == hidden else "last_forward"  # Joey: the forward half if E == 2H
    lstm = encoder.get("rnn_type", "gru") == "lstm"
    return RNNSeq2SeqConfig(
        vocab_size=len(source_vocab),
        decoder_vocab_size=None if source_vocab == target_vocab else len(target_vocab),
        encoder_embedding_size=encoder["embeddings"]["embedding_dim"],
        decoder_embedding_size=decoder["embeddings"]["embedding_dim"],
        encoder_hidden_size=encoder_hidden,
        decoder_hidden_size=hidden,
        attention_size=hidden,  # Joey's BahdanauAttention(hidden_size=decoder hidden_size)
        encoder_layers=encoder.get("num_layers", 1),
        decoder_layers=decoder.get("num_layers", 1),
        bidirectional=bidirectional,
        cell_type="lstm" if lstm else "gru",
        attention_type=ATTENTION_TYPES[attention],
        input_feeding=bool(decoder.get("input_feeding", True)),
        decoder_init=decoder_init,
        decoder_init_cell="copy_hidden" if lstm and decoder_init != "zero" else "zero",
        tie_word_embeddings=bool(model.get("tied_softmax", False)),
        dropout=0.0,  # inference; fine-tuning sets its own
        **special_ids(target_vocab),
    )


def special_ids(vocab: list[str]) -> dict:
    return {"pad_token_id": vocab.index(SPECIALS.pad), "bos_token_id": vocab.index(SPECIALS.bos),
            "eos_token_id": vocab.index(SPECIALS.eos), "decoder_start_token_id": vocab.index(SPECIALS.bos)}


class _Taker:
    """Pops checkpoint tensors by name, so that whatever is left unmapped can be named at the end."""

    def __init__(self, state: dict, what: str):
        self.left, self.what = dict(state), what

    def __call__(self, name: str) -> torch.Tensor:
        if name not in self.left:
            raise CheckpointError(f"the checkpoint lacks {name}, which a Joey NMT {self.what} of these options has")
        return self.left.pop(name).float()

    def finish(self) -> None:
        if self.left:
            raise CheckpointError(f"the checkpoint holds parameters this converter does not know: "
                                  f"{sorted(self.left)[:5]}; they belong to an option it does not support")


def rnn_state_dict(state: dict, config: RNNSeq2SeqConfig) -> dict[str, torch.Tensor]:
    """Joey NMT's recurrent parameter names -> hf_s2s's."""
    take, out = _Taker(state, "recurrent model"), {}
    out["model.encoder.embed_tokens.weight"] = take("src_embed.lut.weight")
    out["model.decoder.embed_tokens.weight"] = take("trg_embed.lut.weight")
    for name in [n for n in take.left if n.startswith("encoder.rnn.")]:  # nn.GRU / nn.LSTM: the same names
        out["model." + name] = take(name)
    for name in [n for n in take.left if n.startswith("decoder.rnn.")]:
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
    out["lm_head.weight"] = take("decoder.output_layer.weight")
    take.finish()
    return out


def transformer_config(model: dict, source_vocab: list[str], target_vocab: list[str]) -> TransformerSeq2SeqConfig:
    """The transformer_seq2seq config whose math is Joey NMT's Transformer for these options."""
    encoder, decoder = model["encoder"], model["decoder"]
    if decoder.get("type") != "transformer":
        raise refuse("model.decoder.type", decoder.get("type"), "a transformer encoder converts with a transformer "
                     "decoder only")
    if "layer_norm" not in encoder:
        raise refuse("model.encoder.layer_norm", None, "unset, Joey NMT 2.3.0 builds pre-norm encoder layers without "
                     "the final LayerNorm, which hf_s2s cannot express")
    norm = encoder["layer_norm"]
    if decoder.get("layer_norm", "post") != norm:
        raise refuse("model.decoder.layer_norm", decoder.get("layer_norm", "post"), f"hf_s2s places LayerNorm alike "
                     f"in encoder and decoder; the encoder's is {norm!r}")
    width = encoder["hidden_size"]
    scale = None
    for side, options in (("encoder", encoder), ("decoder", decoder)):
        if options.get("alpha", 1.0) != 1.0:
            raise refuse(f"model.{side}.alpha", options["alpha"], "hf_s2s's residuals have weight 1")
        if options.get("activation", "relu") not in ("relu", "gelu"):
            raise refuse(f"model.{side}.activation", options["activation"], "hf_s2s has relu and gelu")
        for name, value in (("hidden_size", options["hidden_size"]),
                            ("embeddings.embedding_dim", options["embeddings"]["embedding_dim"])):
            if value != width:
                raise refuse(f"model.{side}.{name}", value, f"hf_s2s's Transformer has one width ({width})")
        side_scale = bool(options["embeddings"].get("scale", False))
        if scale is not None and side_scale != scale:
            raise refuse(f"model.{side}.embeddings.scale", side_scale, "hf_s2s scales both sides alike")
        scale = side_scale
    if encoder.get("activation", "relu") != decoder.get("activation", "relu"):
        raise refuse("model.decoder.activation", decoder.get("activation"), "hf_s2s uses one activation")
    return TransformerSeq2SeqConfig(
        vocab_size=len(source_vocab),
        decoder_vocab_size=None if model.get("tied_embeddings") else len(target_vocab),
        d_model=width,
        encoder_layers=encoder["num_layers"],
        decoder_layers=decoder["num_layers"],
        encoder_attention_heads=encoder["num_heads"],
        decoder_attention_heads=decoder["num_heads"],
        encoder_ffn_dim=encoder["ff_size"],
        decoder_ffn_dim=decoder["ff_size"],
        activation_function=encoder.get("activation", "relu"),
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,  # inference; fine-tuning sets its own
        norm_position=norm,
        position_embedding_type="sinusoidal",
        position_embedding_layout="interleaved",
        scale_embedding=scale,
        layer_norm_eps=1e-6,  # joeynmt/transformer_layers.py: nn.LayerNorm(size, eps=1e-6) everywhere
        share_encoder_decoder_embeddings=bool(model.get("tied_embeddings")),
        tie_word_embeddings=bool(model.get("tied_softmax")),
        **special_ids(target_vocab),
    )


def transformer_state_dict(state: dict, config: TransformerSeq2SeqConfig) -> dict[str, torch.Tensor]:
    """Joey NMT's Transformer parameter names -> hf_s2s's; the stored sinusoid tables are checked and dropped."""
    take, out = _Taker(state, "Transformer"), {}

    def linear(source: str, target: str) -> None:
        for kind in ("weight", "bias"):
            out[f"{target}.{kind}"] = take(f"{source}.{kind}")

    def fused(source: str, parts: tuple[str, ...], target: str) -> None:
        for kind in ("weight", "bias"):
            out[f"{target}.{kind}"] = torch.cat([take(f"{source}.{part}_layer.{kind}") for part in parts])

    for side in ("encoder", "decoder"):
        table = take(f"{side}.pe.pe")[0]  # (max_len, D)
        ours = sinusoidal_positions(torch.arange(table.shape[0]), config.d_model, "interleaved")
        if not torch.allclose(table, ours, atol=1e-4):
            raise CheckpointError(f"{side}.pe.pe is not the interleaved sinusoid table hf_s2s computes")
        if config.norm_position == "pre":
            linear(f"{side}.layer_norm", f"model.{side}.layer_norm")
    out["model.encoder.embed_tokens.weight"] = take("src_embed.lut.weight")
    target_table = take("trg_embed.lut.weight")
    if not config.share_encoder_decoder_embeddings:
        out["model.decoder.embed_tokens.weight"] = target_table
    for layer in range(config.encoder_layers):
        source, target = f"encoder.layers.{layer}", f"model.encoder.layers.{layer}"
        linear(f"{source}.layer_norm", f"{target}.self_attn_layer_norm")
        fused(f"{source}.src_src_att", ("q", "k", "v"), f"{target}.self_attn.qkv_proj")
        linear(f"{source}.src_src_att.output_layer", f"{target}.self_attn.out_proj")
        linear(f"{source}.feed_forward.layer_norm", f"{target}.final_layer_norm")
        linear(f"{source}.feed_forward.pwff_layer.0", f"{target}.ffn.fc1")
        linear(f"{source}.feed_forward.pwff_layer.3", f"{target}.ffn.fc2")
    for layer in range(config.decoder_layers):
        source, target = f"decoder.layers.{layer}", f"model.decoder.layers.{layer}"
        linear(f"{source}.x_layer_norm", f"{target}.self_attn_layer_norm")
        fused(f"{source}.trg_trg_att", ("q", "k", "v"), f"{target}.self_attn.qkv_proj")
        linear(f"{source}.trg_trg_att.output_layer", f"{target}.self_attn.out_proj")
        linear(f"{source}.dec_layer_norm", f"{target}.encoder_attn_layer_norm")
        linear(f"{source}.src_trg_att.q_layer", f"{target}.encoder_attn.q_proj")
        fused(f"{source}.src_trg_att", ("k", "v"), f"{target}.encoder_attn.kv_proj")
        linear(f"{source}.src_trg_att.output_layer", f"{target}.encoder_attn.out_proj")
        linear(f"{source}.feed_forward.layer_norm", f"{target}.final_layer_norm")
        linear(f"{source}.feed_forward.pwff_layer.0", f"{target}.ffn.fc1")
        linear(f"{source}.feed_forward.pwff_layer.3", f"{target}.ffn.fc2")
    out["lm_head.weight"] = take("decoder.output_layer.weight")
    take.finish()
    return out


@register(TOOLKIT)
def convert(checkpoint: Path, config: Path | None = None, source_vocab: Path | None = None,
            target_vocab: Path | None = None) -> Converted:
    """A Joey NMT 2.x checkpoint, with the config.yaml and vocabularies beside it (or those given), as an hf_s2s
    model and tokenizer."""
    folder = checkpoint.parent
    options = read_config(config or folder / "config.yaml")
    sources = read_vocab(source_vocab or folder / "src_vocab.txt", "source", "--source-vocab")
    targets = read_vocab(target_vocab or folder / "trg_vocab.txt", "target", "--target-vocab")
    data = load_checkpoint(checkpoint, TOOLKIT)
    if not isinstance(data.get("model_state"), dict):
        raise CheckpointError(f"{checkpoint} lacks 'model_state': not a Joey NMT 2.x checkpoint")
    check_data(options.get("data") or {})
    model_options = options["model"]
    kind = (model_options.get("encoder") or {}).get("type", "recurrent")
    if kind == "recurrent":
        if (model_options.get("decoder") or {}).get("type", "recurrent") != "recurrent":
            raise refuse("model.decoder.type", model_options["decoder"]["type"], "a recurrent encoder converts with "
                         "a recurrent decoder only")
        hf_config = rnn_config(model_options, sources, targets)
        model = RNNSeq2SeqForConditionalGeneration(hf_config)
        state = rnn_state_dict(data["model_state"], hf_config)
    elif kind == "transformer":
        hf_config = transformer_config(model_options, sources, targets)
        model = TransformerSeq2SeqForConditionalGeneration(hf_config)
        state = transformer_state_dict(data["model_state"], hf_config)
    else:
        raise refuse("model.encoder.type", kind, "the converter handles 'recurrent' and 'transformer'")
    if sources.index(SPECIALS.pad) != hf_config.pad_token_id:
        raise CheckpointError("the source and target vocabularies put <pad> at different ids")
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise CheckpointError(f"conversion mismatch: missing {missing}, unexpected {unexpected}")
    model.eval()
    testing = {**TESTING_DEFAULTS, **(options.get("testing") or {})}
    model.generation_config = GenerationConfig(
        decoder_start_token_id=hf_config.decoder_start_token_id, bos_token_id=hf_config.bos_token_id,
        eos_token_id=hf_config.eos_token_id, pad_token_id=hf_config.pad_token_id,
        num_beams=testing["beam_size"],
        min_new_tokens=testing["min_output_length"],  # Joey forbids </s> before min_output_length tokens
    )
    if testing["beam_size"] > 1:
        # beam_alpha <= 0: hypotheses ranked by summed log-probability; Joey's GNMT penalty ((5 + n) / 6)^alpha for
        # alpha > 0 is not generate()'s n^alpha: the closest is kept, and docs/importers.md says it differs
        model.generation_config.length_penalty = 0.0 if testing["beam_alpha"] <= 0 else float(testing["beam_alpha"])
    model._set_default_generation_length()
    if testing.get("max_output_length", -1) > 0:  # at most that many steps, </s> included; no source-relative bound
        model.generation_config.max_new_tokens = testing["max_output_length"]
        model.generation_config.max_length = None
        model.generation_config.max_len_a = model.generation_config.max_len_b = None
    else:  # search.py: int(longest source of the batch, </s> included, x 1.5) steps; for a batch of one line:
        model.generation_config.max_len_a, model.generation_config.max_len_b = 1.5, 0
    tokenizer = translation_tokenizer(sources, targets, SPECIALS, source_eos=True)
    details = {"encoder_type": kind, "model": model_options,
               "testing": {k: testing[k] for k in ("beam_size", "beam_alpha", "min_output_length",
                                                   "max_output_length") if k in testing}}
    architecture = "rnn" if kind == "recurrent" else "transformer"
    return Converted(model=model, tokenizer=tokenizer, toolkit=TOOLKIT, architecture=architecture, details=details)


__all__ = ["convert"]
