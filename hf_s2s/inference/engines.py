"""Decoding engines: one interface over the ways a saved model folder translates sentences, for the commands that
translate (``hf-s2s translate --engine``, ``hf-s2s serve --engine``).

- ``torch``: the model itself through ``generate()`` (:func:`hf_s2s.inference.translate.translate`), in float32,
  bfloat16, or with int8 weights (:func:`hf_s2s.inference.int8.quantize_int8`); either family.
- ``ctranslate2``: the Transformer family exported to CTranslate2 when the engine starts, into a temporary folder
  that is removed once CTranslate2 has read it (:func:`hf_s2s.inference.ctranslate2.translate_ctranslate2`); float32
  or int8 weights. CTranslate2 has no RNN models: an RNN folder is refused before its weights are loaded.

An engine completes a request's decoding options from its model's generation config (:meth:`Engine.options`, which
refuses what cannot be decoded, and what the engine decodes otherwise than generate()), then translates lists of
sentences with them (:meth:`Engine.translate`). Both steps are the ones every path shares: the options are
:class:`hf_s2s.inference.decoding.DecodingOptions`, completed by :func:`hf_s2s.inference.translate.resolve_options`,
and the input lines go through :func:`hf_s2s.inference.decoding.decode_lines`. Options that compare equal decode
alike, so a server may put their sentences in one batch. Adding an engine means adding a class to :data:`ENGINES`.

Batch invariance: a sentence's translation does not depend on the sentences decoded beside it in float32 (torch,
tested in ``tests/test_translate.py``) and on CTranslate2 (float32 and int8: its int8 GEMMs quantize each row on its
own). It can under torch's bfloat16 and int8: dynamic int8 quantization scales a layer's input by its largest value
over the whole batch, and bfloat16 rounds sums whose order depends on the batch's shape.
"""

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from ..models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from ..models.loading import load_model
from ..models.modeling_common import DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B
from .ctranslate2 import ctranslate2_options, export_ctranslate2, import_ctranslate2, translate_ctranslate2
from .decoding import DecodingOptions
from .ensemble import read_for_decoding
from .int8 import quantize_int8
from .translate import (
    DEFAULT_BATCH_SIZE,
    Hypothesis,
    _source_limit,
    alignment,
    check_models_support,
    check_translation,
    length_bound_arguments,
    translate,
)

# Weight types a torch engine decodes in (--dtype); int8 is asked for with --int8, as for hf-s2s translate.
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class Alignment:
    """The cross-attention that produced each target token of a sentence's best translation: the last decoder
    layer's, averaged over heads (as ``hf-s2s translate --plot-alignment`` draws it)."""

    source_tokens: list[str]
    target_tokens: list[str]
    weights: list[list[float]]  # (target tokens, source tokens), each row sums to 1


class Engine:
    """A model folder ready to translate. Subclasses load it (``__init__``) and decode (:meth:`_translate`); the
    option handling, the source limit and the description are shared. ``config`` and ``generation_config`` are the
    folder's, so an engine completes options as the model would."""

    name: ClassVar[str]

    def __init__(self, folder: str | Path, tokenizer, config, generation_config, weights: str):
        self.folder = str(folder)
        self.tokenizer = tokenizer
        self.config = config
        self.generation_config = generation_config
        self.weights = weights  # what the engine decodes with, for /models and reports: "float32", "int8", ...

    @property
    def model_type(self) -> str:
        return self.config.model_type

    def source_limit(self) -> int | None:
        """The most source tokens a sentence is read with (``translate`` cuts longer ones): the tokenizer's
        ``model_max_length`` or a learned position table, whichever is shorter; None: no limit."""
        return _source_limit(self.tokenizer, None, [self.config])[0]

    def options(self, *, num_beams: int | None = None, num_return_sequences: int = 1, max_len_a: float | None = None,
                max_len_b: int | None = None, no_length_bound: bool = False, max_new_tokens: int | None = None,
                length_penalty: float | None = None) -> DecodingOptions:
        """Complete options from the generation config as ``translate`` completes them (``num_beams`` None: its beam
        count; ``max_new_tokens`` None: its ``max_new_tokens`` or ``max_length``; ``length_penalty`` None: its length
        penalty; the length bound not given: its ``max_len_a``/``max_len_b``; ``no_length_bound``: none; its minimum
        lengths) and refuse, with a ValueError naming the option, what ``translate`` would refuse and what this engine
        decodes otherwise than generate()."""
        bound = length_bound_arguments(max_len_a, max_len_b, no_length_bound,
                                       flags=("max_len_a", "max_len_b", "no_length_bound"))
        return self._options(num_beams=num_beams, num_return_sequences=num_return_sequences,
                             max_new_tokens=max_new_tokens, length_penalty=length_penalty, **bound)

    def _options(self, **call) -> DecodingOptions:
        """``call``'s options (generate()'s names) completed and checked for this engine."""
        return check_translation(self, **call)

    def _configured_bound(self) -> dict:
        """The generation config's length bound, as generate() completes it (a folder saved without it: the
        defaults)."""
        return {name: getattr(self.generation_config, name, default)
                for name, default in (("max_len_a", DEFAULT_MAX_LEN_A), ("max_len_b", DEFAULT_MAX_LEN_B))}

    def translate(self, sentences: list[str], options: DecodingOptions, *, batch_size: int = DEFAULT_BATCH_SIZE,
                  scores: bool = False) -> list[list[Hypothesis]]:
        """Each sentence's ``options.num_return_sequences`` best hypotheses, best first, decoded in length-sorted
        batches of ``batch_size``; blank sentences give blank hypotheses; scores only with ``scores``."""
        return self._translate(sentences, options, batch_size, scores)

    def _translate(self, sentences, options, batch_size, scores):
        raise NotImplementedError

    def check_alignment(self) -> None:
        """A ValueError where the engine or its model gives no alignments."""
        raise ValueError(f"the {self.name} engine gives no alignments; decode with the torch engine (--engine torch) "
                         "for them")

    def alignment(self, sentence: str, options: DecodingOptions) -> Alignment:
        """The alignment of ``sentence``'s best translation (:meth:`check_alignment` says where there is none)."""
        self.check_alignment()
        raise NotImplementedError

    def describe(self) -> dict:
        """What ``GET /models`` and reports say about the engine."""
        return {"folder": self.folder, "model_type": self.model_type, "engine": self.name, "weights": self.weights,
                "source_limit": self.source_limit(), "num_beams": self.generation_config.num_beams or 1,
                **self._configured_bound()}


class TorchEngine(Engine):
    """The model through ``generate()``: ``dtype`` "float32" or "bfloat16", or int8 weights (``int8``, float32
    only); ``threads``: torch's intra-op threads (None: torch's default), a process-wide setting."""

    name = "torch"

    def __init__(self, folder: str | Path, *, dtype: str = "float32", int8: bool = False, threads: int | None = None):
        if dtype not in TORCH_DTYPES:
            raise ValueError(f"dtype (--dtype) must be one of {', '.join(TORCH_DTYPES)} for the torch engine, got "
                             f"{dtype!r}")
        if int8 and dtype != "float32":
            raise ValueError(f"int8 (--int8) quantizes float32 weights; it cannot be combined with --dtype {dtype}")
        read = read_for_decoding([folder])  # tokenizer and config checked before the weights load
        model = load_model(folder)
        if dtype != "float32":
            model = model.to(TORCH_DTYPES[dtype])
        if int8:
            quantize_int8(model, inplace=True)
        self.model = model.eval()
        if threads is not None:
            torch.set_num_threads(threads)
        super().__init__(folder, read.tokenizer, model.config, model.generation_config,
                         "int8" if int8 else dtype)

    def _translate(self, sentences, options, batch_size, scores):
        return translate(self.model, self.tokenizer, sentences, batch_size=batch_size, scores=scores,
                         **options.decoding_kwargs())

    def check_alignment(self) -> None:
        check_models_support([self.config], alignment=True)  # an RNN without attention has none

    def alignment(self, sentence: str, options: DecodingOptions) -> Alignment:
        best = {**options.generate_kwargs(), "num_return_sequences": 1}  # translate()'s first translation
        weights, source_tokens, target_tokens = alignment(self.model, self.tokenizer, sentence, **best)
        return Alignment(source_tokens, target_tokens, weights.float().tolist())


@dataclass
class _ExportedModel:
    """What decoding reads of a model whose weights live in CTranslate2: its config and generation config."""

    config: object
    generation_config: object


class CTranslate2Engine(Engine):
    """A Transformer folder exported to CTranslate2 on start (the weights as saved, or ``int8``), decoding on the
    CPU with ``threads`` threads per batch (CTranslate2's ``intra_threads``; None: its default, the cores up to 4)."""

    name = "ctranslate2"

    def __init__(self, folder: str | Path, *, dtype: str = "float32", int8: bool = False, threads: int | None = None):
        ctranslate2 = import_ctranslate2()
        if dtype != "float32":
            raise ValueError(f"the ctranslate2 engine decodes float32 or int8 (--int8) weights, not {dtype} (--dtype): "
                             f"its CPU types here are {', '.join(sorted(ctranslate2.get_supported_compute_types('cpu')))}")
        read = read_for_decoding([folder])
        config = read.configs[0]
        if config.model_type != TransformerSeq2SeqConfig.model_type:
            raise ValueError(f"the ctranslate2 engine runs the Transformer family only, and {folder} is a "
                             f"{config.model_type} model: CTranslate2 has no RNN models; use the torch engine "
                             "(--engine torch) for it")
        model = load_model(folder)
        self.model = _ExportedModel(model.config, model.generation_config)
        with tempfile.TemporaryDirectory(prefix="hf_s2s_ct2_") as exported:
            export_ctranslate2(model, exported, tokenizer=read.tokenizer, quantization="int8" if int8 else None)
            self.translator = ctranslate2.Translator(exported, device="cpu", intra_threads=threads or 0)
        super().__init__(folder, read.tokenizer, model.config, model.generation_config, "int8" if int8 else "float32")

    def _options(self, **call) -> DecodingOptions:
        return ctranslate2_options(self.model, **call)

    def _translate(self, sentences, options, batch_size, scores):
        return translate_ctranslate2(self.translator, self.model, self.tokenizer, sentences, batch_size=batch_size,
                                     scores=scores, **options.decoding_kwargs())


# --engine NAME -> the engine's class
ENGINES: dict[str, type[Engine]] = {engine.name: engine for engine in (TorchEngine, CTranslate2Engine)}


def load_engine(folder: str | Path, engine: str = "torch", *, dtype: str = "float32", int8: bool = False,
                threads: int | None = None) -> Engine:
    """The engine ``engine`` (a key of :data:`ENGINES`) serving ``folder``; a ValueError names an unknown engine,
    and each engine refuses what it cannot run before loading weights where it can."""
    if engine not in ENGINES:
        raise ValueError(f"engine (--engine) must be one of {', '.join(ENGINES)}, got {engine!r}")
    return ENGINES[engine](folder, dtype=dtype, int8=int8, threads=threads)


__all__ = ["ENGINES", "TORCH_DTYPES", "Alignment", "CTranslate2Engine", "DecodingOptions", "Engine", "TorchEngine",
           "load_engine"]
