"""Decoding engines: the one registry of the ways a saved model folder translates sentences (:data:`ENGINES`), which
every path picks its engine from by name: ``hf-s2s translate --engine``, ``hf-s2s serve --engine``, the serving
benchmark and the Python API (:func:`open_engine`, :func:`load_engine`).

- ``torch``: the model itself through ``generate()`` (:func:`hf_s2s.inference.translate.translate_with_options`),
  with float32, bfloat16 or int8 weights (:func:`hf_s2s.inference.int8.quantize_int8`); either family, one folder or
  an ensemble of several.
- ``ctranslate2``: the Transformer family exported to CTranslate2 when the engine loads, into a temporary folder that
  is removed once CTranslate2 has read it (:func:`hf_s2s.inference.ctranslate2.translate_ctranslate2_with_options`);
  float32 or int8 weights.
- ``onnx``: either family exported to ONNX when the engine loads, into a temporary folder removed once onnxruntime has
  read it, and decoded by the runtime an export ships (:class:`hf_s2s.inference.onnx_runtime.OnnxSeq2Seq`); float32.
  A folder ``hf-s2s export-onnx`` wrote is decoded as it is, without exporting again.

An engine is made in two steps. Opening it (the class, or :func:`open_engine`) reads the folder's tokenizer, config
and generation config, no weights, and refuses what the engine cannot run (a family, a weight type, an ensemble);
from then on :meth:`Engine.options` completes a call's decoding options from the generation config, once, checks
them, and refuses by name, before anything is decoded, what the engine does not implement. Loading it
(:meth:`Engine.load`) reads the weights (and exports them), and :meth:`Engine.translate` decodes lists of sentences
with options it was handed, which it does not check again; the input lines go through
:func:`hf_s2s.inference.decoding.decode_lines` on every engine. Options that compare equal decode alike, so a server
may put their sentences in one batch. Adding an engine means adding a class to :data:`ENGINES`.

Batch invariance: a sentence's translation does not depend on the sentences decoded beside it in float32 (torch,
tested in ``tests/test_translate.py``, and the ONNX runtime) and on CTranslate2 (float32 and int8: its int8 GEMMs
quantize each row on its own). It can under torch's bfloat16 and int8: dynamic int8 quantization scales a layer's
input by its largest value over the whole batch, and bfloat16 rounds sums whose order depends on the batch's shape.
"""

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from ..models.configuration_rnn_seq2seq import RNNSeq2SeqConfig
from ..models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from ..models.loading import load_tokenizer
from ..models.term_constraints import Glossary
from . import onnx_runtime
from .analysis import check_has_encoder_attention
from .ctranslate2 import (
    CTRANSLATE2_SETTINGS,
    check_ctranslate2_options,
    export_ctranslate2,
    import_ctranslate2,
    translate_ctranslate2_with_options,
)
from .decoding import BOUND, DecodingOptions, length_bound_call, source_limit
from .ensemble import Seq2SeqEnsemble, load_for_decoding, read_for_decoding
from .forced import ForcedTranslation, force_decode, force_hypotheses
from .int8 import quantize_int8
from .lexical import ShortlistFile
from .onnx import export_onnx, import_exporter
from .translate import (
    DEFAULT_BATCH_SIZE,
    Hypothesis,
    attentions,
    check_models_support,
    generation_settings,
    model_max_length,
    options_for,
    position_limit,
    translate_with_options,
)

# Weight types (--dtype, --int8) and the torch dtype each loads in; an engine names those it decodes.
WEIGHTS = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int8": torch.float32}
TORCH_DTYPES = {name: dtype for name, dtype in WEIGHTS.items() if name != "int8"}  # --dtype's choices
# model type -> the family as a refusal names it
FAMILIES = {TransformerSeq2SeqConfig.model_type: "Transformer", RNNSeq2SeqConfig.model_type: "RNN"}


@dataclass
class Alignment:
    """The cross-attention that produced each target token of a sentence's best translation: the last decoder
    layer's, averaged over heads (as ``hf-s2s translate --plot-alignment`` draws it); with every layer's and head's
    weights when they were asked for (:meth:`Engine.alignment`)."""

    source_tokens: list[str]
    target_tokens: list[str]
    weights: list[list[float]]  # (target tokens, source tokens), each row sums to 1
    cross_attentions: list | None = None  # (decoder layers, heads, target tokens, source tokens)
    encoder_attentions: list | None = None  # (encoder layers, heads, source tokens, source tokens); None: an RNN


class Engine:
    """Model folders opened to translate (see the module docstring). A subclass declares what it decodes in its class
    attributes, reads what it needs of the folders without weights in ``__init__`` (then calls :meth:`_opened`),
    loads in :meth:`_load` and decodes in :meth:`_translate`; completing the options, the source limit and the
    description are shared."""

    name: ClassVar[str]  # --engine NAME
    label: ClassVar[str]  # the engine as its refusals name it
    weight_types: ClassVar[tuple[str, ...]]  # the keys of WEIGHTS it decodes
    families: ClassVar[dict[str, str]] = FAMILIES  # the model types it runs (FAMILIES' entries)
    why_not: ClassVar[str] = ""  # why it runs no other family, for the refusal
    # the generation settings and hf_s2s options (decoding.SETTINGS, decoding.OWN_OPTIONS) it decodes as generate()
    # does; None: all of them (generate() itself)
    implements: ClassVar[tuple[str, ...] | None]
    ensembles: ClassVar[bool] = False  # whether it decodes several folders as one model
    # Set by --engine auto (hf_s2s.inference.engine_choice): refuse options the engine decodes otherwise than
    # generate() even where it decodes them when named (CTranslate2's beam search); and why it was chosen.
    exact: bool = False
    choice: str | None = None

    def __init__(self, folders: str | Path | Sequence[str | Path], *, weights: str = "float32",
                 threads: int | None = None):
        self.names = [str(folder) for folder in ([folders] if isinstance(folders, str | Path) else folders)]
        self.folder = self.names[0]
        if len(self.names) != 1 and not self.ensembles:
            raise ValueError(f"{self.label} decodes one model folder, got {len(self.names)} (an ensemble: decode it "
                             "with the torch engine, --engine torch)")
        if weights not in self.weight_types:
            raise ValueError(f"{self.label} decodes {' or '.join(self.weight_types)} weights, not {weights} (--dtype, "
                             f"--int8): use another engine for {weights} weights (--engine torch)")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads (--threads) must be a whole number >= 1, got {threads!r}")
        self.weights = weights  # what the engine decodes with, for /models and reports
        self.threads = threads
        self.loaded = False

    def _opened(self, tokenizer, model_type: str, generation_settings: dict, configs=None,
                position_table: int | None = None, max_position_embeddings: int | None = None) -> None:
        """What every engine reads of its folder before any weights: the tokenizer, the model type (refused unless
        in ``families``), the generation config (as ``DecodingOptions.resolve`` reads it), and either the models'
        ``configs`` or, for an export that has none, its learned position table's rows (``position_table``; None:
        none) and ``max_position_embeddings``."""
        if model_type not in self.families:
            raise ValueError(f"{self.label} runs the {' and '.join(self.families.values())} family only, and "
                             f"{self.folder} is a {model_type} model{self.why_not}; use the torch engine (--engine "
                             "torch) for it")
        self.tokenizer, self.model_type, self.generation_settings = tokenizer, model_type, generation_settings
        self.configs = configs
        if configs is not None:
            position_table = min((rows for rows in map(position_limit, configs) if rows is not None), default=None)
        self.position_table, self.max_position_embeddings = position_table, max_position_embeddings

    @property
    def config(self):
        """The (first) model's config, for what a client is told of the model (``GET /models``); None for an export,
        which has none."""
        return self.configs[0] if self.configs is not None else None

    # -------------------------------------------------------------------------------------------- options

    def options(self, *, num_beams: int | None = None, num_return_sequences: int | None = 1,
                max_new_tokens: int | None = None, length_penalty: float | None = None, max_len_a: float | None = None,
                max_len_b: int | None = None, no_length_bound: bool = False, coverage_penalty: float = 0.0,
                shortlist: bool = False, glossary: Glossary | None = None) -> DecodingOptions:
        """The decoding options of a call, completed from the folder's generation config as generate() completes them
        (a value None: the config's; ``num_return_sequences`` is 1 unless given None, as translate()'s;
        ``max_len_a``/``max_len_b`` None: the config's bound, ``no_length_bound``: none) and checked, once: a
        ValueError names an impossible option, and what this engine decodes otherwise than generate(). Needs no
        weights: a command line calls it before loading. ``shortlist``: decode over the folder's vocabulary shortlist
        (``shortlist.safetensors``, read and checked here, and read again when its file changes); ``glossary``: its
        target terms must appear (each entry checked here against the tokenizer and the length the model may
        write)."""
        call = dict(num_beams=num_beams, num_return_sequences=num_return_sequences, max_new_tokens=max_new_tokens,
                    length_penalty=length_penalty, coverage_penalty=coverage_penalty, shortlist=shortlist,
                    glossary=glossary,
                    **length_bound_call(max_len_a, max_len_b, no_length_bound))
        if self.configs is not None:
            options = options_for(self.generation_settings, self.configs, self.names, engine=self.label,
                                  implements=self.implements, **call)
        else:  # an export: its position table from its manifest
            options = DecodingOptions.resolve(self.generation_settings, engine=self.label, implements=self.implements,
                                              max_position_embeddings=self.max_position_embeddings,
                                              position_limit=self.position_table, model=self.folder, **call)
        self.check_options(options)
        return options

    def check_options(self, options: DecodingOptions) -> None:
        """What this engine refuses of complete options beyond the settings it does not implement."""

    # -------------------------------------------------------------------------------------------- decoding

    def load(self) -> "Engine":
        """Read the weights (and export them, for the engines that decode an export); returns the engine."""
        if not self.loaded:
            self._load()
            self.loaded = True
        return self

    def _load(self) -> None:
        raise NotImplementedError

    def source_limit(self) -> int | None:
        """The most source tokens a sentence is read with (longer ones are cut): the tokenizer's ``model_max_length``
        or a learned position table, whichever is shorter; None: no limit."""
        return source_limit(model_max_length(self.tokenizer), None, self.position_table)[0]

    def translate(self, sentences: list[str], options: DecodingOptions, *, batch_size: int = DEFAULT_BATCH_SIZE,
                  scores: bool = False, encoded: list[list[int]] | None = None) -> list[list[Hypothesis]]:
        """Each sentence's ``options.num_return_sequences`` best hypotheses, best first, decoded in length-sorted
        batches of ``batch_size`` with ``options`` from :meth:`options`; blank sentences give blank hypotheses;
        scores only with ``scores``. ``encoded``: each sentence's source ids by the engine's tokenizer, when the
        caller has them already (a server tokenizes a request when it arrives): not tokenized again."""
        if not self.loaded:
            raise RuntimeError(f"{self.label} for {self.folder} is not loaded: call load() first")
        return self._translate(sentences, options, batch_size, scores, encoded)

    def _translate(self, sentences, options, batch_size, scores, encoded):
        raise NotImplementedError

    def check_alignment(self) -> None:
        """A ValueError where the engine or its model gives no alignments (before loading)."""
        raise ValueError(f"{self.label} gives no alignments; decode with the torch engine (--engine torch) for them")

    def check_encoder_attention(self) -> None:
        """A ValueError where the engine or its model gives no encoder self-attention (before loading)."""
        raise ValueError(f"{self.label} gives no encoder attention; decode with the torch engine (--engine torch) for "
                         "it")

    def alignment(self, sentence: str, options: DecodingOptions, output_attentions: bool = False) -> Alignment:
        """The alignment of ``sentence``'s best translation (:meth:`check_alignment` says where there is none), with
        every layer's and head's weights if ``output_attentions``."""
        self.check_alignment()
        raise NotImplementedError

    def check_forced(self) -> None:
        """A ValueError where the engine cannot read given translations (forced decoding; before loading)."""
        raise ValueError(f"{self.label} does not read given translations (forced decoding: scores of given "
                         "translations, the attention of each n-best hypothesis); use the torch engine (--engine torch)")

    def force_decode(self, sources: list[str], targets: list, *, batch_size: int = DEFAULT_BATCH_SIZE,
                     output_attentions: bool = False) -> list[ForcedTranslation]:
        """Each (source, target) pair read under teacher forcing (:func:`hf_s2s.inference.forced.force_decode`):
        the target tokens' log-probabilities, and every attention weight with ``output_attentions``."""
        self.check_forced()
        raise NotImplementedError

    def force_hypotheses(self, sentences: list[str], options: DecodingOptions, *,
                         batch_size: int = DEFAULT_BATCH_SIZE) -> list[list[ForcedTranslation]]:
        """Each sentence's ``options.num_return_sequences`` hypotheses, best first, read under teacher forcing with
        the attention that produced them (:func:`hf_s2s.inference.forced.force_hypotheses`); none for a blank
        sentence."""
        self.check_alignment()
        raise NotImplementedError

    def describe(self) -> dict:
        """What ``GET /models`` and reports say about the engine."""
        return {"folder": self.folder, "model_type": self.model_type, "engine": self.name, "weights": self.weights,
                "engine_choice": self.choice, "source_limit": self.source_limit(),
                "num_beams": self.generation_settings.get("num_beams") or 1,
                **{name: self.generation_settings.get(name) for name in BOUND}}


class TorchEngine(Engine):
    """The model through ``generate()``: float32, bfloat16 or int8 weights (dynamic quantization of float32 ones);
    several folders decode as an ensemble. ``threads``: torch's intra-op threads (None: torch's default), a
    process-wide setting."""

    name = "torch"
    label = "the torch engine"
    weight_types = ("float32", "bfloat16", "int8")
    implements = None
    ensembles = True

    def __init__(self, folders, *, weights: str = "float32", threads: int | None = None):
        super().__init__(folders, weights=weights, threads=threads)
        self.read = read_for_decoding(self.names)  # tokenizers, configs and generation config, checked; no weights
        configs = self.read.configs
        self._opened(self.read.tokenizer, configs[0].model_type, generation_settings(self.read.generation_config),
                     configs)
        # the (first) folder's shortlist, read when options first ask for it and again when its file changes
        self.shortlist_file = ShortlistFile(self.folder, configs[0], self.tokenizer)

    def _load(self) -> None:
        model, _ = load_for_decoding(self.names, self.read)
        if self.weights == "bfloat16":
            model = model.to(torch.bfloat16)
        if self.weights == "int8":  # the loaded float32 weights are not needed afterwards
            members = model.members if isinstance(model, Seq2SeqEnsemble) else [model]
            for member in members:
                quantize_int8(member, inplace=True)
        self.model = model.eval()
        if self.threads is not None:
            torch.set_num_threads(self.threads)

    def check_options(self, options: DecodingOptions) -> None:
        if options.shortlist:
            if self.weights == "int8":
                raise ValueError("--shortlist gathers rows of the float output layer, which --int8 quantizes: give "
                                 "one of them")
            self.shortlist_file.current()
        if options.glossary is not None:
            options.glossary.check(self.tokenizer, options.max_new_tokens)

    def _translate(self, sentences, options, batch_size, scores, encoded):
        return translate_with_options(self.model, self.tokenizer, sentences, options, batch_size=batch_size,
                                      scores=scores,
                                      shortlist=self.shortlist_file.shortlist if options.shortlist else None,
                                      encoded=encoded)

    def check_alignment(self) -> None:
        if len(self.names) > 1:
            raise ValueError(f"an alignment is one model's attention; got {len(self.names)} model folders")
        check_models_support(self.configs, self.names, alignment=True)  # an RNN without attention has none

    def check_encoder_attention(self) -> None:
        if len(self.names) > 1:
            raise ValueError(f"encoder attention is one model's; got {len(self.names)} model folders")
        check_has_encoder_attention(self.configs[0], self.folder)

    def check_forced(self) -> None:
        if len(self.names) > 1:
            raise ValueError(f"forced decoding reads one model; got {len(self.names)} model folders")

    def force_decode(self, sources: list[str], targets: list, *, batch_size: int = DEFAULT_BATCH_SIZE,
                     output_attentions: bool = False) -> list[ForcedTranslation]:
        self.check_forced()
        if output_attentions:
            self.check_alignment()
        return force_decode(self.model, self.tokenizer, sources, targets, batch_size=batch_size,
                            output_attentions=output_attentions)

    def force_hypotheses(self, sentences: list[str], options: DecodingOptions, *,
                         batch_size: int = DEFAULT_BATCH_SIZE) -> list[list[ForcedTranslation]]:
        self.check_alignment()
        if options.glossary is not None or options.shortlist or options.coverage_penalty:
            raise ValueError("the attention of a hypothesis is read from a translation decoded without a glossary, a "
                             "shortlist and the coverage penalty, which these options ask for: leave them out")
        return force_hypotheses(self.model, self.tokenizer, sentences, batch_size=batch_size,
                                **options.generate_kwargs())

    def alignment(self, sentence: str, options: DecodingOptions, output_attentions: bool = False) -> Alignment:
        best = {**options.generate_kwargs(), "num_return_sequences": 1}  # translate()'s first translation
        found = attentions(self.model, self.tokenizer, sentence, **best)
        result = Alignment(found.source_tokens, found.target_tokens, found.alignment().float().tolist())
        if output_attentions:
            result.cross_attentions = found.cross_attentions.float().tolist()
            if found.encoder_attentions is not None:
                result.encoder_attentions = found.encoder_attentions.float().tolist()
        return result


@dataclass
class _ExportedModel:
    """What decoding reads of a model whose weights live in another engine: its config and generation config."""

    config: object
    generation_config: object


class CTranslate2Engine(Engine):
    """A Transformer folder exported to CTranslate2 when loaded (the weights as saved, or ``int8``), decoding on the
    CPU with ``threads`` threads per batch (CTranslate2's ``intra_threads``; None: its default, the cores up to 4)."""

    name = "ctranslate2"
    label = "the ctranslate2 engine"
    weight_types = ("float32", "int8")
    families = {TransformerSeq2SeqConfig.model_type: "Transformer"}
    why_not = ": CTranslate2 has no RNN models"
    implements = CTRANSLATE2_SETTINGS

    def __init__(self, folders, *, weights: str = "float32", threads: int | None = None):
        super().__init__(folders, weights=weights, threads=threads)
        import_ctranslate2()
        self.read = read_for_decoding(self.names)
        self._opened(self.read.tokenizer, self.read.configs[0].model_type,
                     generation_settings(self.read.generation_config), self.read.configs)

    def check_options(self, options: DecodingOptions) -> None:
        check_ctranslate2_options(options)
        if self.exact and options.num_beams > 1 and options.early_stopping is not True:
            raise ValueError(f"{self.label} ends beam search once num_beams hypotheses are done, as "
                             "generate(early_stopping=True), not as generate() with early_stopping "
                             f"{options.early_stopping!r}: decode it with the torch engine (--engine torch), or set "
                             "early_stopping=True in the generation config")

    def _load(self) -> None:
        ctranslate2 = import_ctranslate2()
        model, _ = load_for_decoding(self.names, self.read)
        self.model = _ExportedModel(model.config, model.generation_config)
        with tempfile.TemporaryDirectory(prefix="hf_s2s_ct2_") as exported:
            export_ctranslate2(model, exported, tokenizer=self.tokenizer,
                               quantization="int8" if self.weights == "int8" else None)
            self.translator = ctranslate2.Translator(exported, device="cpu", intra_threads=self.threads or 0)

    def _translate(self, sentences, options, batch_size, scores, encoded):
        return translate_ctranslate2_with_options(self.translator, self.model, self.tokenizer, sentences, options,
                                                  batch_size=batch_size, scores=scores, encoded=encoded)


class OnnxEngine(Engine):
    """Either family exported to ONNX when loaded and decoded by the runtime an export ships
    (:class:`hf_s2s.inference.onnx_runtime.OnnxSeq2Seq`: greedy and beam search as generate() decodes them, numpy and
    onnxruntime), or a folder ``hf-s2s export-onnx`` wrote (it holds ``onnx_manifest.json``), decoded as it is.
    ``threads``: onnxruntime's intra-op threads (None: its default)."""

    name = "onnx"
    label = onnx_runtime.ENGINE
    weight_types = ("float32",)
    implements = onnx_runtime.ONNX_SETTINGS

    def __init__(self, folders, *, weights: str = "float32", threads: int | None = None):
        super().__init__(folders, weights=weights, threads=threads)
        folder = Path(self.folder)
        self.exported = (folder / onnx_runtime.MANIFEST_FILE).is_file()
        if self.exported:  # the export's generation config is complete (it holds the bound it decodes with)
            manifest = json.loads((folder / onnx_runtime.MANIFEST_FILE).read_text())
            settings = json.loads((folder / "generation_config.json").read_text())
            self._opened(load_tokenizer(folder), manifest["model_type"], settings,
                         position_table=manifest.get("position_limit"),
                         max_position_embeddings=manifest.get("max_position_embeddings"))
        else:
            import_exporter()
            self.read = read_for_decoding(self.names)
            self._opened(self.read.tokenizer, self.read.configs[0].model_type,
                         generation_settings(self.read.generation_config), self.read.configs)
        self.special_tokens = onnx_runtime.SpecialTokens.from_config(self.generation_settings)

    def check_options(self, options: DecodingOptions) -> None:
        onnx_runtime.check_runtime_options(options, self.special_tokens)

    def _load(self) -> None:
        if self.exported:
            self.runtime = onnx_runtime.OnnxSeq2Seq(self.folder, threads=self.threads)
            return
        model, _ = load_for_decoding(self.names, self.read)
        with tempfile.TemporaryDirectory(prefix="hf_s2s_onnx_") as exported:
            export_onnx(model, exported, tokenizer=self.tokenizer)
            self.runtime = onnx_runtime.OnnxSeq2Seq(exported, threads=self.threads)
            self.runtime.tokenizers  # read now: the folder goes when the block ends  # noqa: B018

    def _translate(self, sentences, options, batch_size, scores, encoded):
        results = self.runtime.translate_with_options(sentences, options, batch_size=batch_size, scores=scores,
                                                      encoded=encoded)
        return [[Hypothesis(text, score) for text, score in hypotheses] for hypotheses in results]


# --engine NAME -> the engine's class: the one registry every path picks its engine from
ENGINES: dict[str, type[Engine]] = {engine.name: engine for engine in (TorchEngine, CTranslate2Engine, OnnxEngine)}


def weight_type(dtype: str = "float32", int8: bool = False) -> str:
    """The weight type (a key of :data:`WEIGHTS`) of the flags ``--dtype`` and ``--int8``."""
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype (--dtype) must be one of {', '.join(TORCH_DTYPES)}, got {dtype!r}")
    if int8 and dtype != "float32":
        raise ValueError(f"int8 (--int8) quantizes float32 weights; it cannot be combined with --dtype {dtype}")
    return "int8" if int8 else dtype


def open_engine(folders: str | Path | Sequence[str | Path], engine: str = "torch", *, dtype: str = "float32",
                int8: bool = False, threads: int | None = None) -> Engine:
    """The engine ``engine`` (a key of :data:`ENGINES`) opened on ``folders`` (one folder, or several for an ensemble
    where the engine decodes one): the folders read and checked, no weights loaded yet (:meth:`Engine.load`). A
    ValueError names an unknown engine, and each engine refuses what it cannot run."""
    if engine not in ENGINES:
        raise ValueError(f"engine (--engine) must be one of {', '.join(ENGINES)}, got {engine!r}")
    return ENGINES[engine](folders, weights=weight_type(dtype, int8), threads=threads)


def load_engine(folders: str | Path | Sequence[str | Path], engine: str = "torch", *, dtype: str = "float32",
                int8: bool = False, threads: int | None = None) -> Engine:
    """:func:`open_engine`, loaded: ready to translate."""
    return open_engine(folders, engine, dtype=dtype, int8=int8, threads=threads).load()


__all__ = ["ENGINES", "TORCH_DTYPES", "WEIGHTS", "Alignment", "CTranslate2Engine", "DecodingOptions", "Engine",
           "OnnxEngine", "TorchEngine", "load_engine", "open_engine", "weight_type"]
