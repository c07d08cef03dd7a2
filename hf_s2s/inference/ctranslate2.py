"""Export of the Transformer family to CTranslate2, and decoding token ids with the exported model.

CTranslate2 (https://github.com/OpenNMT/CTranslate2) is a C++ inference engine for Transformer translation
models; it has no RNN models. :func:`export_ctranslate2` writes a CTranslate2 model directory from an hf_s2s
``TransformerSeq2SeqForConditionalGeneration`` by filling ``ctranslate2.specs.TransformerSpec`` with the model's
own weights (no detour through a MarianMT conversion): pre-LN or post-LN, sinusoidal or learned positions,
scaled or unscaled embeddings, one shared or two separate vocabularies, tied or untied output layer.

What has to be translated between the two conventions (checked against CTranslate2 4.8's sources):

- Positions. CTranslate2's built-in sinusoidal encoding divides the frequency exponent by (D/2 - 1) and starts
  at position 1; ``sinusoidal_positions`` divides by D/2 and starts at position 0 (sines, then cosines). Both
  kinds of position are therefore exported as a table (``position_encodings/encodings``), computed by the model's
  own position module: learned tables as they are, sinusoidal ones for ``SINUSOIDAL_POSITIONS`` positions (a
  longer input is refused by CTranslate2 with "No position encodings are defined for positions >= ...").
- Fused projections. CTranslate2 wants self-attention Q, K, V as one matrix in that order (``qkv_proj``) and
  cross-attention K, V as one (``kv_proj``): the layouts hf_s2s already uses.
- The vocabulary. CTranslate2 is driven with token strings. With a tokenizer, they are its tokens (ids in
  order; a separate target vocabulary becomes ``target_vocabulary.json``); without one, each id written as a
  string ("0", "1", ...), so that callers can drive the model with ids (:func:`translate_ids`).
- Special tokens. The decoder starts from ``decoder_start_token_id`` and stops at ``eos_token_id`` (generation
  config first, then model config, as ``generate()`` reads them). CTranslate2 appends its unknown token to a
  vocabulary that lacks it (one row more than the weights), so the unknown token is the tokenizer's, or else the
  padding token's string.

:func:`translate_ctranslate2` translates sentences with the exported model as ``translate()`` does with the model: the
options completed from the folder's generation config by the same function
(:func:`hf_s2s.inference.translate.resolve_options`, the length bound and the minimum and maximum lengths included),
what CTranslate2 decodes otherwise than generate() refused by name (:func:`check_ctranslate2_options`), and the same
input lines (:func:`hf_s2s.inference.decoding.decode_lines`). The ctranslate2 engine of :mod:`hf_s2s.inference.engines`
(``hf-s2s translate --engine ctranslate2``, ``hf-s2s serve --engine ctranslate2``) resolves its options itself and
decodes with :func:`translate_ctranslate2_with_options`.

ctranslate2 is an optional dependency (``pip install 'hf_s2s[ctranslate2]'``); this module imports it only when
called.
"""

import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from ..data.tokenization import target_side
from ..models.modeling_common import DEFAULT_GENERATION_MAX_LENGTH, source_length_bound
from ..models.modeling_transformer_seq2seq import TransformerSeq2SeqForConditionalGeneration
from ..models.output_record import check_output_folder, clear_output, record_output
from .decoding import DecodingOptions, decode_lines
from .translate import DEFAULT_BATCH_SIZE, Hypothesis, _source_limit, resolve_options, tokenizer_encoder

# Positions a sinusoidal model's exported table holds at least (max_position_embeddings if more), source and target
# alike: CTranslate2 truncates inputs to 1024 tokens by default, so every input it accepts by default has them.
SINUSOIDAL_POSITIONS = 1024
COMMAND = "export-ctranslate2"  # the command whose output the folder's record names
OVERWRITE_FLAG = "overwrite=True (--overwrite_output_dir)"
# The generation settings (hf_s2s.inference.decoding.SETTINGS) CTranslate2 decodes as generate() does, with greedy
# search only (ctranslate2_options): CTranslate2's no_repeat_ngram_size and repetition_penalty choose other tokens.
CTRANSLATE2_SETTINGS = ("suppress_tokens",)
ENGINE = "the ctranslate2 engine"


def import_ctranslate2():
    """The ctranslate2 module, or an ImportError saying how to install it."""
    try:
        import ctranslate2
    except ImportError as error:
        raise ImportError("exporting to CTranslate2 needs the ctranslate2 package: pip install 'hf_s2s[ctranslate2]'"
                          ) from error
    return ctranslate2


def check_export_options(output_dir: str | Path, quantization: str | None = None, overwrite: bool = False,
                         model_dir: str | Path | None = None) -> None:
    """Refuse what would make an export fail or destroy files, before any work: an unknown ``quantization``
    (ctranslate2's names), an ``output_dir`` that is a file, is the model folder ``model_dir`` itself (its
    config.json would be replaced), or holds files, unless ``overwrite`` and they are an earlier export's,
    unchanged (:mod:`hf_s2s.models.output_record`), which the export then replaces."""
    import_ctranslate2()
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    if quantization is not None and quantization not in ACCEPTED_MODEL_TYPES:
        raise ValueError(f"quantization (--quantization) must be one of {', '.join(ACCEPTED_MODEL_TYPES)} "
                         f"(ctranslate2's names), or None to keep the model's dtype; got {quantization!r}")
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"output_dir {output_dir} is a file, not a folder")
    if model_dir is not None and output_dir.resolve() == Path(model_dir).resolve():
        raise ValueError(f"output_dir {output_dir} is the model folder itself: the export would replace its "
                         "config.json; choose another folder")
    check_output_folder(output_dir, COMMAND, OVERWRITE_FLAG, overwrite)


# ---------------------------------------------------------------------------------------------------- the spec


def _tensor(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """A copy of a weight for CTranslate2's spec. A copy, because ctranslate2's int8/int16 quantization scales and
    rounds float32 weights in place through a numpy view: the model's own weights would be changed by the export.
    A quantized or otherwise non-float tensor cannot be exported."""
    if type(tensor) not in (torch.Tensor, nn.Parameter) or not tensor.is_floating_point():
        raise ValueError(f"{name} is a {type(tensor).__name__} of dtype {tensor.dtype}: only plain floating-point "
                         "weights can be exported; export the model before quantizing it (CTranslate2 quantizes "
                         "itself: quantization='int8')")
    return tensor.detach().to("cpu", memory_format=torch.contiguous_format, copy=True)


def _set_linear(spec, linear: nn.Module, name: str) -> None:
    if not isinstance(linear, nn.Linear):
        raise ValueError(f"{name} is a {type(linear).__name__}, not an nn.Linear: only plain float layers can be "
                         "exported; export the model before quantizing it (CTranslate2 quantizes itself)")
    spec.weight = _tensor(linear.weight, f"{name}.weight")
    if linear.bias is not None:
        spec.bias = _tensor(linear.bias, f"{name}.bias")


def _set_layer_norm(spec, norm: nn.LayerNorm, name: str) -> None:
    spec.gamma = _tensor(norm.weight, f"{name}.weight")
    spec.beta = _tensor(norm.bias, f"{name}.bias")


def _set_attention(spec, attention: nn.Module, norm: nn.LayerNorm, name: str) -> None:
    """CTranslate2's attention: ``linear`` is [fused Q K V, output] for self-attention and [Q, fused K V, output]
    for cross-attention; its ``layer_norm`` is the sublayer's (before it under pre-LN, after the residual add
    under post-LN)."""
    inputs = ("qkv_proj",) if not attention.is_cross_attention else ("q_proj", "kv_proj")
    for linear_spec, projection in zip(spec.linear, (*inputs, "out_proj"), strict=True):
        _set_linear(linear_spec, getattr(attention, projection), f"{name}.{projection}")
    _set_layer_norm(spec.layer_norm, norm, f"{name}_layer_norm")


def _set_feed_forward(spec, layer: nn.Module, name: str) -> None:
    _set_linear(spec.linear_0, layer.ffn.fc1, f"{name}.ffn.fc1")
    _set_linear(spec.linear_1, layer.ffn.fc2, f"{name}.ffn.fc2")
    _set_layer_norm(spec.layer_norm, layer.final_layer_norm, f"{name}.final_layer_norm")


def _set_stack(spec, stack: nn.Module, embeddings: nn.Embedding, name: str) -> None:
    """What encoder and decoder share: token table, embedding scale, position table and the final pre-LN norm."""
    table_spec = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    table_spec.weight = _tensor(embeddings.weight, f"{name}.embed_tokens.weight")
    spec.scale_embeddings = float(stack.embed_scale)  # 1.0: CTranslate2 leaves the embeddings unscaled
    positions = stack.embed_positions
    num_positions = positions.max_positions
    if not positions.learned:
        num_positions = max(num_positions, SINUSOIDAL_POSITIONS)
    with torch.no_grad():  # the model's own position module, so the layouts agree by construction
        table = positions(num_positions, 0, embeddings.weight.device).to(embeddings.weight.dtype)  # (P, D)
    spec.position_encodings.encodings = _tensor(table, f"{name}.embed_positions")
    if stack.layer_norm is not None:
        _set_layer_norm(spec.layer_norm, stack.layer_norm, f"{name}.layer_norm")


def _special_token_id(model: nn.Module, name: str) -> int:
    """``name`` as ``generate()`` reads it: the generation config's, else the model config's; one id."""
    value = getattr(model.generation_config, name, None)
    if value is None:
        value = getattr(model.config, name, None)
    if isinstance(value, list | tuple):
        if len(value) != 1:
            raise ValueError(f"{name} is {value}: a CTranslate2 model has one end token; set one id")
        value = value[0]
    if value is None:
        raise ValueError(f"{name} is not set in the model's generation or model config; CTranslate2 needs it")
    return int(value)


def export_vocabularies(model: nn.Module, tokenizer=None) -> tuple[list[str], list[str]]:
    """(source tokens, target tokens), token i being id i: the tokenizer's (its target side for the target), or
    the ids as strings without a tokenizer. Each must cover the model's table exactly, without repeats."""
    config = model.config
    sizes = {"source": config.vocab_size, "target": config.target_vocab_size}
    if tokenizer is None:
        return [str(i) for i in range(sizes["source"])], [str(i) for i in range(sizes["target"])]
    vocabularies = []
    for side, side_tokenizer in (("source", tokenizer), ("target", target_side(tokenizer))):
        if len(side_tokenizer) != sizes[side]:
            field = "vocab_size" if side == "source" else "decoder_vocab_size (or vocab_size)"
            raise ValueError(f"the tokenizer's {side} vocabulary has {len(side_tokenizer)} tokens but the model's "
                             f"{field} is {sizes[side]}: CTranslate2 needs one token per embedding row; export with "
                             "the tokenizer the model was trained with")
        tokens = side_tokenizer.convert_ids_to_tokens(list(range(sizes[side])))
        if None in tokens or len(set(tokens)) != len(tokens):
            raise ValueError(f"the tokenizer's {side} vocabulary has gaps or repeated tokens among ids "
                             f"0..{sizes[side] - 1}; CTranslate2 maps each token string to one id")
        vocabularies.append(tokens)
    return vocabularies[0], vocabularies[1]


def build_ctranslate2_spec(model: TransformerSeq2SeqForConditionalGeneration, tokenizer=None):
    """A validated ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights, vocabularies and special
    tokens (nothing written yet). An RNN model, an activation CTranslate2 lacks, missing special tokens or a
    tokenizer that does not fit are a ValueError naming the problem."""
    import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    if not isinstance(model, TransformerSeq2SeqForConditionalGeneration):
        raise ValueError(f"only the Transformer family (TransformerSeq2SeqForConditionalGeneration) can be exported "
                         f"to CTranslate2, got {type(model).__name__}: CTranslate2 has no RNN models")
    config = model.config
    activations = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}
    if config.activation_function not in activations:
        raise ValueError(f"activation_function={config.activation_function!r} has no CTranslate2 counterpart; "
                         f"exportable: {', '.join(activations)}")
    special_ids = {name: _special_token_id(model, name) for name in ("decoder_start_token_id", "eos_token_id")}
    source_tokens, target_tokens = export_vocabularies(model, tokenizer)

    pre_norm = config.norm_position == "pre"
    activation = activations[config.activation_function]
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(config.encoder_layers, config.encoder_attention_heads,
                                                pre_norm=pre_norm, activation=activation),
        transformer_spec.TransformerDecoderSpec(config.decoder_layers, config.decoder_attention_heads,
                                                pre_norm=pre_norm, activation=activation),
    )
    encoder, decoder = model.get_encoder(), model.get_decoder()
    _set_stack(spec.encoder, encoder, encoder.embed_tokens, "encoder")
    for index, (layer_spec, layer) in enumerate(zip(spec.encoder.layer, encoder.layers, strict=True)):
        name = f"encoder.layers.{index}"
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_layer_norm, f"{name}.self_attn")
        _set_feed_forward(layer_spec.ffn, layer, name)
    _set_stack(spec.decoder, decoder, decoder.embed_tokens, "decoder")
    for index, (layer_spec, layer) in enumerate(zip(spec.decoder.layer, decoder.layers, strict=True)):
        name = f"decoder.layers.{index}"
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_layer_norm, f"{name}.self_attn")
        _set_attention(layer_spec.attention, layer.encoder_attn, layer.encoder_attn_layer_norm, f"{name}.encoder_attn")
        _set_feed_forward(layer_spec.ffn, layer, name)
    _set_linear(spec.decoder.projection, model.lm_head, "lm_head")  # tied: CTranslate2 aliases equal tensors

    unk_token = getattr(tokenizer, "unk_token", None) or target_tokens[config.pad_token_id]
    if unk_token not in source_tokens or unk_token not in target_tokens:
        raise ValueError(f"the unknown token {unk_token!r} must be in both vocabularies: CTranslate2 would append it "
                         "to a vocabulary that lacks it (one token more than the model has rows)")
    spec.config.unk_token = unk_token
    spec.config.bos_token = target_tokens[config.bos_token_id if config.bos_token_id is not None
                                          else special_ids["decoder_start_token_id"]]
    spec.config.eos_token = target_tokens[special_ids["eos_token_id"]]
    spec.config.decoder_start_token = target_tokens[special_ids["decoder_start_token_id"]]
    spec.config.layer_norm_epsilon = encoder.layers[0].self_attn_layer_norm.eps
    spec.register_source_vocabulary(source_tokens)
    spec.register_target_vocabulary(target_tokens)
    spec.validate()
    return spec


def export_ctranslate2(model: TransformerSeq2SeqForConditionalGeneration, output_dir: str | Path, tokenizer=None,
                       quantization: str | None = None, overwrite: bool = False) -> Path:
    """Write ``model`` as a CTranslate2 model directory (model.bin, config.json, vocabulary files) to
    ``output_dir`` and return its path; load it with ``ctranslate2.Translator(output_dir)``.

    tokenizer: the model's tokenizer, whose tokens become the vocabulary (a ``SeparateVocabTokenizer`` gives
    separate source and target vocabularies); None writes the ids as strings ("0", "1", ...), for callers that
    drive CTranslate2 with ids (:func:`translate_ids`). quantization: CTranslate2's weight type ("int8",
    "int8_float32", "int16", "float16", ...; None keeps the model's dtype). Everything that can be wrong (the
    options, the model, the tokenizer) is refused before anything is written; an ``output_dir`` holding files is
    refused unless ``overwrite`` is set and it holds only an earlier export, unchanged, which is then replaced
    (:mod:`hf_s2s.models.output_record`)."""
    output_dir = Path(output_dir)
    check_export_options(output_dir, quantization, overwrite, model_dir=_local_model_dir(model))
    spec = build_ctranslate2_spec(model, tokenizer)
    spec.optimize(quantization=quantization)
    if overwrite:  # the whole earlier export goes: a stale shared_vocabulary.json would shadow new separate ones
        clear_output(output_dir, COMMAND, OVERWRITE_FLAG)
    output_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(output_dir))
    record_output(output_dir, COMMAND)
    return output_dir


def exported_translator(model: TransformerSeq2SeqForConditionalGeneration, quantization: str | None = None,
                        device: str = "cpu", intra_threads: int = 1, inter_threads: int = 1):
    """A ``ctranslate2.Translator`` of ``model`` exported without a tokenizer (drive it with :func:`translate_ids`),
    through a temporary folder removed once the model is loaded (CTranslate2 reads it whole): for benchmarks and
    tests that compare the engine with ``generate()`` on a model in memory. intra_threads: CTranslate2's threads
    per translation; inter_threads: translations run in parallel."""
    ctranslate2 = import_ctranslate2()
    with tempfile.TemporaryDirectory(prefix="hf_s2s_ct2_") as folder:
        export_ctranslate2(model, folder, quantization=quantization)
        return ctranslate2.Translator(folder, device=device, intra_threads=intra_threads, inter_threads=inter_threads)


def _local_model_dir(model: nn.Module) -> Path | None:
    """The folder ``model`` was loaded from, when it was loaded from a local folder."""
    path = Path(getattr(model, "name_or_path", "") or "")
    return path if str(path) and path.is_dir() else None


# ---------------------------------------------------------------------------------------------------- decoding


def translate_ids(translator, input_ids: torch.Tensor | Sequence[Sequence[int]], attention_mask=None,
                  num_beams: int = 1, max_new_tokens: int = DEFAULT_GENERATION_MAX_LENGTH - 1, min_new_tokens: int = 0, tokenizer=None,
                  length_penalty: float = 1.0) -> list[list[int]]:
    """Translate a batch of source ids with an exported model (a ``ctranslate2.Translator``): greedy
    (``num_beams=1``) or beam search, returning each sentence's generated target ids as ``generate()`` counts its
    new tokens: the end token included when it was produced, the decoder start token not.

    input_ids: (B, T_src) ids (a tensor or lists); attention_mask: (B, T_src), 0 on padding (left or right),
    whose positions are dropped; None: every position is a token. max_new_tokens / min_new_tokens: as in
    ``generate()`` (CTranslate2's ``max_decoding_length`` / ``min_decoding_length``); the default maximum is what
    hf_s2s models' generation config allows (128 decoder positions, the start token included). tokenizer: the one the model
    was exported with (ids <-> its tokens); None for a model exported without one (ids written as strings).
    Inputs are never truncated (CTranslate2's ``max_input_length`` is switched off)."""
    for name, value, low in (("num_beams", num_beams, 1), ("max_new_tokens", max_new_tokens, 1),
                             ("min_new_tokens", min_new_tokens, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    if min_new_tokens > max_new_tokens:
        raise ValueError(f"min_new_tokens ({min_new_tokens}) must be <= max_new_tokens ({max_new_tokens})")
    rows = input_ids.tolist() if torch.is_tensor(input_ids) else [list(row) for row in input_ids]
    if attention_mask is not None:
        masks = attention_mask.tolist() if torch.is_tensor(attention_mask) else attention_mask
        rows = [[token for token, keep in zip(row, mask, strict=True) if keep] for row, mask in zip(rows, masks,
                                                                                                  strict=True)]
    if tokenizer is None:
        source = [[str(token) for token in row] for row in rows]
    else:
        source = [tokenizer.convert_ids_to_tokens(row) for row in rows]
    results = translator.translate_batch(
        source, beam_size=num_beams, max_decoding_length=max_new_tokens, min_decoding_length=min_new_tokens,
        length_penalty=length_penalty, return_end_token=True, max_input_length=0,
    )
    hypotheses = [result.hypotheses[0] for result in results]
    if tokenizer is None:
        return [[int(token) for token in tokens] for tokens in hypotheses]
    target = target_side(tokenizer)
    return [target.convert_tokens_to_ids(tokens) for tokens in hypotheses]


def check_ctranslate2_options(options: DecodingOptions) -> None:
    """Refuse, by name, options CTranslate2 decodes otherwise than generate() with beam search: a minimum length or
    suppressed tokens (CTranslate2 removes the tokens before it normalizes the probabilities, generate() after, so
    other hypotheses win) and an early_stopping set to False or "never" (CTranslate2 ends a sentence once num_beams
    hypotheses have finished: generate()'s early_stopping=True; unset, it is CTranslate2's own search). The generation
    settings it does not implement are refused while the options are resolved (``CTRANSLATE2_SETTINGS``)."""
    if options.num_beams > 1:
        beam_only = [f"{name}={value!r}" for name, value, refused in (
            ("min_new_tokens", options.min_new_tokens, options.min_new_tokens > 0),
            ("suppress_tokens", list(options.suppress_tokens), bool(options.suppress_tokens)),
            ("early_stopping", options.early_stopping, options.early_stopping in (False, "never"))) if refused]
        if beam_only:
            raise ValueError(f"{ENGINE} decodes beam search (num_beams={options.num_beams}) otherwise than generate() "
                             f"with {', '.join(beam_only)} (from the generation config or the call; min_length counts "
                             "as min_new_tokens): decode with num_beams 1 (--beams 1), or with generate() (--engine "
                             "torch)")


def ctranslate2_options(model, **call) -> DecodingOptions:
    """``call``'s options (generate()'s names) completed from ``model``'s generation config as for generate()
    (:func:`hf_s2s.inference.translate.resolve_options`), refusing, by name, a generation setting other than
    ``CTRANSLATE2_SETTINGS`` and what :func:`check_ctranslate2_options` refuses."""
    options = resolve_options(model, engine=ENGINE, implements=CTRANSLATE2_SETTINGS, **call)
    check_ctranslate2_options(options)
    return options


def translate_ctranslate2(translator, model, tokenizer, sentences: list[str], *, batch_size: int = DEFAULT_BATCH_SIZE,
                          max_source_length: int | None = None, scores: bool = True,
                          **call) -> list[list[Hypothesis]]:
    """:func:`hf_s2s.inference.translate.translate` on an exported model (a ``ctranslate2.Translator`` of ``model``
    exported with ``tokenizer``): the same options (``call``: ``num_beams``, ``max_new_tokens``, ``max_len_a``, ...,
    generate()'s names), completed from ``model``'s generation config by the same function and refused where
    CTranslate2 decodes otherwise (:func:`ctranslate2_options`; ``model`` may be any object with the exported model's
    ``config`` and ``generation_config``), then :func:`translate_ctranslate2_with_options`."""
    return translate_ctranslate2_with_options(translator, model, tokenizer, sentences, ctranslate2_options(model, **call),
                                              batch_size=batch_size, max_source_length=max_source_length, scores=scores)


def translate_ctranslate2_with_options(translator, model, tokenizer, sentences: list[str], options: DecodingOptions, *,
                                       batch_size: int = DEFAULT_BATCH_SIZE, max_source_length: int | None = None,
                                       scores: bool = True, encoded: list[list[int]] | None = None
                                       ) -> list[list[Hypothesis]]:
    """Each sentence's ``options.num_return_sequences`` best hypotheses, with options already resolved for CTranslate2
    (:func:`ctranslate2_options`, or the ctranslate2 engine's), which are not checked again; the input lines as every
    engine reads them (:func:`hf_s2s.inference.decoding.decode_lines`: blank lines, cut sources, length-sorted
    batches; ``encoded``: each sentence's source ids when the caller has them already).

    The source-relative length bound, which CTranslate2 lacks (its ``max_decoding_length`` holds for a whole batch):
    a row may generate its bound minus one token, then ends as generate() forces it to, with </s>. Greedy search
    decodes a batch in one call at its longest bound, each row stopped at its own by CTranslate2's step callback (a
    row is decoded once); beam search, whose hypotheses depend on the length allowed, is decoded in groups of rows of
    one bound. A row's tokens therefore never depend on the other sentences of its batch.

    Scores are CTranslate2's: greedy, the sum of the token log-probabilities (as ``translate``'s); beam search,
    CTranslate2's length-normalized score. Greedy tokens are ``generate()``'s; beam search's are
    ``generate(..., early_stopping=True)``'s (CTranslate2 ends a sentence once ``num_beams`` hypotheses are done)."""
    limit, reason = _source_limit(tokenizer, max_source_length, [model.config])
    target = target_side(tokenizer)
    suppressed = [[token] for token in target.convert_ids_to_tokens(list(options.suppress_tokens))]
    settings = {"beam_size": options.num_beams, "num_hypotheses": options.num_return_sequences,
                "return_end_token": True, "return_scores": scores, "max_input_length": 0,
                "suppress_sequences": suppressed or None,
                # greedy scores as translate() gives them: the plain sum (CTranslate2 divides by the length otherwise)
                "length_penalty": options.length_penalty if options.num_beams > 1 else 0.0}
    blank = [Hypothesis("", 0.0 if scores else None)] * options.num_return_sequences

    def decode_rows(sources: list[list[int]], rows: list[int], free: list[int]) -> dict[int, list]:
        """CTranslate2's results for ``sources[row]``, each row of ``rows`` with at most ``free[row]`` tokens, in one
        call. Its ``max_decoding_length`` holds for the whole call, so under greedy search a row with less room is
        stopped at its own through the step callback (its tokens and score are those a call of its own length
        gives); beam search (no callback) decodes rows of one length together."""
        rooms = [free[row] for row in rows]
        most = max(rooms)
        callback = None
        if min(rooms) < most:  # greedy only: the caller groups beam search's rows by their room
            def callback(step) -> bool:  # True stops this row, its token of this step kept (step counts from 0)
                return step.step + 1 >= rooms[step.batch_id]
        output = translator.translate_batch([tokenizer.convert_ids_to_tokens(sources[row]) for row in rows],
                                            max_decoding_length=most,
                                            min_decoding_length=min(options.min_new_tokens, min(rooms)),
                                            callback=callback, **settings)
        return dict(zip(rows, output, strict=True))

    def decode(sources: list[list[int]]) -> list[list[Hypothesis]]:
        # each row's room before its forced </s> (bound - 1, the bound raised to an explicit minimum as generate()
        # raises it), or the absolute limit where that comes first
        free = [options.max_new_tokens] * len(sources)
        if options.max_len_a is not None or options.max_len_b is not None:
            bounds = source_length_bound(torch.tensor([len(ids) for ids in sources]), options.max_len_a,
                                         options.max_len_b).clamp(min=1 + options.min_new_tokens)
            free = [min(int(bound) - 1, options.max_new_tokens) for bound in bounds.tolist()]
        decoded = {}
        pending = [row for row in range(len(sources)) if free[row] > 0]  # 0: a bound of one token, </s> alone
        if options.num_beams == 1 and pending:  # one call, each row stopped at its own room
            decoded = decode_rows(sources, pending, free)
        else:  # beam search's hypotheses depend on the length allowed: one call per room
            for length in sorted({free[row] for row in pending}):
                decoded.update(decode_rows(sources, [row for row in pending if free[row] == length], free))
        results = [list(blank) for _ in sources]
        for row, output in decoded.items():
            texts = tokenizer.batch_decode([target.convert_tokens_to_ids(tokens) for tokens in output.hypotheses],
                                           skip_special_tokens=True)
            values = output.scores if scores else [None] * len(texts)
            results[row] = [Hypothesis(text, value) for text, value in zip(texts, values, strict=True)]
        return results

    return decode_lines(sentences, tokenizer_encoder(tokenizer), decode, limit=limit, reason=reason,
                        batch_size=batch_size, blank=blank, encoded=encoded)


__all__ = ["CTRANSLATE2_SETTINGS", "SINUSOIDAL_POSITIONS", "build_ctranslate2_spec", "check_ctranslate2_options",
           "check_export_options", "ctranslate2_options", "export_ctranslate2", "export_vocabularies",
           "exported_translator", "translate_ctranslate2", "translate_ctranslate2_with_options", "translate_ids"]
