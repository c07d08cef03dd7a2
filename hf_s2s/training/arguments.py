"""The training job's arguments, one dataclass per thing they configure: the model and its tokenizer
(:class:`ModelArguments`), the corpus (:class:`DataArguments`), the test-set decoding (:class:`DecodingArguments`),
which weights the run keeps (:class:`SelectionArguments`), and transformers' ``Seq2SeqTrainingArguments`` with what
hf_s2s adds about the run as a whole (:class:`TrainingArguments`). Also the job's defaults, named recipes and
parsing (:func:`parse_args`, into :class:`JobArguments`). What can be checked before the long work starts is in
:mod:`hf_s2s.training.checks`.
"""

import argparse
import json
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import NamedTuple

import torch
from transformers import AutoConfig, HfArgumentParser, Seq2SeqTrainingArguments

from ..data import tokenization
from ..data.filters import PairFilters
from ..data.regularization import SubwordSampler
from ..data.sampling import DEFAULT_STREAMING_WINDOW_PAIRS
from ..inference.translate import length_bound_arguments
from ..models.families import FAMILIES as _FAMILY_REGISTRY
from ..models.families import get_family
from ..models.loading import ModelFolderError, load_config, local_folder
from .ema import EMA_FOLDER

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"  # shipped inside the package (package data)
FAMILIES = tuple(_FAMILY_REGISTRY)  # the model_type of each family
LENGTH_BOUND_FLAGS = ("--max_len_a", "--max_len_b", "--no_length_bound")


@dataclass
class ModelArguments:
    model_type: str = field(default="transformer_seq2seq", metadata={"help": f"model family: one of {FAMILIES}"})
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "fine-tune a saved model folder (or Hub id) instead of training from scratch"}
    )
    model_config: str | None = field(
        default=None, metadata={"help": "JSON object of config fields that differ from the family's defaults"}
    )
    tokenizer_name_or_path: str | None = field(
        default=None, metadata={"help": "use this tokenizer instead of training one on the training split: a tokenizer "
                                        "folder, a Hub id, or a SentencePiece .model file (its own ids are kept)"}
    )
    target_tokenizer_name_or_path: str | None = field(
        default=None, metadata={"help": "with --tokenizer_name_or_path (then the source side's): the target side's "
                                        "tokenizer, a folder or a SentencePiece .model: separate vocabularies"}
    )
    tokenizer_type: str = field(default="bpe", metadata={"help": "tokenizer trained when none is given: bpe or unigram"})
    tokenizer_library: str = field(
        default="tokenizers", metadata={"help": "what trains that tokenizer: tokenizers (🤗) or sentencepiece (needs "
                                                "pip install 'hf_s2s[sentencepiece]'); either is saved as "
                                                "tokenizer.json"}
    )
    vocab_size: int = field(default=8000, metadata={"help": "vocabulary size of the trained tokenizer (with "
                                                            "--separate_vocabs: the source vocabulary's)"})
    separate_vocabs: bool = field(
        default=False, metadata={"help": "train one vocabulary per language instead of a joint one; the saved "
                                         "tokenizer encodes text_target= with the target vocabulary (as MarianMT's)"}
    )
    target_vocab_size: int | None = field(
        default=None, metadata={"help": "with --separate_vocabs: the target vocabulary's size (default --vocab_size)"}
    )
    # The fields given (on the command line or by a --recipe, or set to another value than their default), as
    # opposed to left at their defaults: a value equal to the default tells neither. Not a flag (init=False);
    # set here and by parse_args, read by the checks of a fine-tuned folder.
    given: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self):
        self.given = frozenset(f.name for f in fields(self) if f.init and getattr(self, f.name) != f.default)


@dataclass
class DataArguments:
    dataset: str = field(
        default="multi30k",
        metadata={"help": "multi30k, synthetic:reversal, synthetic:reordering, a corpus folder, a .jsonl/.tsv file "
                          "pattern, or a Hub dataset name"},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset config name"})
    streaming: bool = field(
        default=False, metadata={"help": "read the corpus lazily instead of loading it into memory (needs --max_steps)"}
    )
    data_dir: str | None = field(default=None, metadata={"help": "folder holding the default corpus (Multi30k)"})
    source_lang: str = field(default="de")
    target_lang: str = field(default="en")
    max_source_length: int = field(default=128, metadata={
        "help": "longer sources are truncated (and counted); --filter_max_source_tokens drops them instead"})
    max_target_length: int = field(default=128, metadata={
        "help": "longer targets are truncated (and counted); --filter_max_target_tokens drops them instead"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training pairs"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only the first N validation pairs"})
    max_test_samples: int | None = field(default=None, metadata={"help": "use only the first N test pairs"})
    bpe_dropout: float | None = field(default=None, metadata={
        "help": "BPE-dropout (Provilkov et al. 2020): segment every training sentence anew in each epoch, leaving out "
                "each BPE merge with this probability (0.1 in the paper); BPE tokenizers. Validation, test and the "
                "saved tokenizer keep the deterministic segmentation"})
    unigram_alpha: float | None = field(default=None, metadata={
        "help": "subword sampling (Kudo 2018): segment every training sentence anew in each epoch, drawing among all "
                "segmentations with probability proportional to P(x)**alpha (0.1 to 0.5 usual; sentencepiece's alpha "
                "with nbest_size -1); Unigram tokenizers. Validation, test and the saved tokenizer keep the best one"})
    max_tokens_per_batch: int | None = field(
        default=None,
        metadata={"help": "fill each training batch to this many padded source + target tokens per process (length "
                          "buckets, shuffled; as fairseq --max-tokens) instead of --per_device_train_batch_size "
                          "sentences; replaces --train_sampling_strategy; with --streaming, built window by "
                          "window (--streaming_window_pairs)"},
    )
    preprocessing_num_workers: int | None = field(default=None, metadata={
        "help": "processes that tokenize a corpus read into memory (datasets' map num_proc; run_translation.py's "
                "flag); default: one"})
    filter_max_source_tokens: int | None = field(default=None, metadata={
        "help": "drop (not truncate) training pairs whose source is longer than N tokens of the run's tokenizer, "
                "</s> included; counted per split in results.json"})
    filter_max_target_tokens: int | None = field(default=None, metadata={
        "help": "drop (not truncate) training pairs whose target is longer than N tokens of the run's tokenizer, "
                "</s> included"})
    filter_max_length_ratio: float | None = field(default=None, metadata={
        "help": "drop training pairs whose longer side has more than R times the tokens of the shorter (tokens "
                "of the run's tokenizer, </s> included)"})
    filter_identical: bool = field(default=False, metadata={
        "help": "drop training pairs whose source and target are the same text (up to whitespace)"})
    filter_duplicates: bool = field(default=False, metadata={
        "help": "drop training pairs that repeat an earlier pair of their split (both sides, up to whitespace), "
                "keeping the first"})
    filter_validation_and_test: bool = field(default=False, metadata={
        "help": "apply the --filter_* flags to the validation and test splits too (by default they are kept "
                "whole)"})
    streaming_window_pairs: int | None = field(default=None, metadata={
        "help": "with --streaming and --max_tokens_per_batch: pairs read ahead, sorted by length and cut into "
                f"batches at a time; memory grows with it (default {DEFAULT_STREAMING_WINDOW_PAIRS:,})"})

    def sample_limits(self) -> dict[str, int | None]:
        """The number of pairs to use of each split (None: all)."""
        return {"train": self.max_train_samples, "validation": self.max_eval_samples, "test": self.max_test_samples}

    def pair_filters(self) -> PairFilters:
        return PairFilters(max_source_tokens=self.filter_max_source_tokens,
                           max_target_tokens=self.filter_max_target_tokens,
                           max_length_ratio=self.filter_max_length_ratio, identical=self.filter_identical,
                           duplicates=self.filter_duplicates)

    def filtered_splits(self) -> tuple[str, ...]:
        """The splits the --filter_* flags apply to."""
        return ("train", "validation", "test") if self.filter_validation_and_test else ("train",)

    @property
    def streaming_window(self) -> int:
        """Pairs of a stream batched together (``--streaming_window_pairs``, or its default)."""
        return self.streaming_window_pairs or DEFAULT_STREAMING_WINDOW_PAIRS


# --filter_* flag of each PairFilters field, and of the splits they apply to, for their errors
FILTER_FLAGS = {"max_source_tokens": "--filter_max_source_tokens",
                "max_target_tokens": "--filter_max_target_tokens",
                "max_length_ratio": "--filter_max_length_ratio",
                "identical": "--filter_identical",
                "duplicates": "--filter_duplicates",
                "splits": "--filter_validation_and_test"}


@dataclass
class DecodingArguments:
    """How the test set is decoded after training; the saved folder's generation config decodes the same way."""

    test_num_beams: str = field(
        default="1,5",
        metadata={"help": "beam sizes for the final test evaluation; the largest becomes the saved model's default"},
    )
    max_len_a: float | None = field(default=None, metadata={
        "help": "length bound of validation and test decoding, saved in the generation config: output tokens per "
                "source token (fairseq's --max-len-a); default: the model's generation config (1.3 when new)"})
    max_len_b: int | None = field(default=None, metadata={
        "help": "tokens added to the length bound (--max-len-b); default: the model's generation config (5 when new)"})
    no_length_bound: bool = field(default=False, metadata={"help": "decode without the source-relative length bound"})
    num_sample_translations: int = field(default=20, metadata={"help": "test translations written to samples.txt"})

    def test_beams(self) -> list[int]:
        """The beam sizes of ``--test_num_beams`` ("1,5" -> [1, 5]); an empty value decodes no test set."""
        sizes = [b.strip() for b in self.test_num_beams.split(",") if b.strip()]
        if not all(b.isdigit() and int(b) >= 1 for b in sizes) or len(set(sizes)) != len(sizes):
            raise ValueError(f"--test_num_beams must be distinct beam sizes of at least 1 separated by commas (e.g. "
                             f"1,5), got {self.test_num_beams!r}")
        return [int(b) for b in sizes]

    def length_bound(self) -> dict:
        """The generation config fields the length bound flags set (none when they are left out); refuses negative,
        non-finite and absurd values (translate's limits), naming the flag."""
        return length_bound_arguments(self.max_len_a, self.max_len_b, self.no_length_bound, LENGTH_BOUND_FLAGS)


@dataclass
class SelectionArguments:
    """Which weights the run keeps: the best checkpoint (early stopping on its validation BLEU), the average of the last
    checkpoints, or the EMA of the weights, each kept only when it validates better."""

    early_stopping_patience: int | None = field(
        default=3, metadata={"help": "stop after this many evaluations without a better BLEU; 0 disables"}
    )
    average_last_checkpoints: int = field(
        default=0,
        metadata={"help": "after training, average the weights of the last N epoch checkpoints and keep the average "
                          "if its validation BLEU beats the best single checkpoint's (0 or 1: no averaging)"},
    )
    ema_decay: float | None = field(
        default=None,
        metadata={"help": "keep an exponential moving average of the weights with this decay per step (e.g. 0.999; "
                          "fairseq --ema-decay), saved in ema/ and in each checkpoint; the run keeps it if its "
                          "validation BLEU beats the raw (best or averaged) model's"},
    )

    @property
    def ema_folder(self) -> str | None:
        """The EMA's folder, in the output folder and in each checkpoint; None without ``--ema_decay``."""
        return EMA_FOLDER if self.ema_decay is not None else None


@dataclass
class TrainingArguments(Seq2SeqTrainingArguments):
    """transformers' ``Seq2SeqTrainingArguments``, and what the job adds about the run as a whole and its loss."""

    recipe: str | None = field(
        default=None,
        metadata={"help": "a named recipe shipped in hf_s2s/training/recipes/ (or a JSON file): defaults for every argument"},
    )
    rdrop_alpha: float = field(
        default=0.0,
        metadata={"help": "R-Drop (Liang et al. 2021): each training batch runs twice with independent dropout, and "
                          "the loss adds this weight x the symmetric KL between the two passes' output distributions "
                          "to the mean of their (label-smoothed) cross-entropies; 0 is off. The paper's weight for "
                          "IWSLT14 de-en is 5. A step costs more than twice the compute and about twice the "
                          "activation memory (docs/training.md)"},
    )
    save_interval_minutes: float = field(
        default=15.0,
        metadata={"help": "also write a checkpoint whenever this many minutes passed since the previous one, so that an "
                          "interruption loses at most that much training however long an epoch takes: a point to "
                          "resume from, deleted once a later checkpoint is written (never counted by "
                          "--save_total_limit nor averaged); 0: only --save_strategy's checkpoints"},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "delete the earlier run in --output_dir (checkpoints, model/, tokenizer/, results.json, ...) "
                          "and start again; without it such a folder is refused unless --resume_from_checkpoint. "
                          "Refused when a path the run reads (model, tokenizer, corpus, recipe) lies inside --output_dir"},
    )


ARGUMENT_GROUPS = (ModelArguments, DataArguments, DecodingArguments, SelectionArguments, TrainingArguments)


class JobArguments(NamedTuple):
    """Every argument of the job, by what it configures; ``run(*job)`` and ``check_arguments(*job)`` take them."""

    model: ModelArguments
    data: DataArguments
    decoding: DecodingArguments
    selection: SelectionArguments
    training: TrainingArguments


def default_training_arguments() -> dict:
    """Defaults of the main job that differ from Seq2SeqTrainingArguments' own."""
    return {
        "output_dir": "runs/transformer-multi30k-de-en",
        "predict_with_generate": True,
        "eval_strategy": "epoch",
        "save_strategy": "epoch",
        "save_total_limit": 5,
        "load_best_model_at_end": True,
        "metric_for_best_model": "bleu",
        "greater_is_better": True,
        "train_sampling_strategy": "group_by_length",
        "lr_scheduler_type": "inverse_sqrt",
        "warmup_steps": 400,
        "label_smoothing_factor": 0.1,
        "per_device_train_batch_size": 64,
        "per_device_eval_batch_size": 128,
        "generation_max_length": 128,
        "report_to": ["tensorboard"],
        # pinned memory only speeds up copies to an accelerator; without one torch warns on every epoch
        "dataloader_pin_memory": torch.accelerator.is_available(),
        "logging_steps": 50,
        **mixed_precision_default(),
    }


def mixed_precision_default() -> dict:
    """bf16 where the GPU supports it, else fp16 on a GPU, else full precision (CPU). Flags override it."""
    if not torch.cuda.is_available():
        return {}
    return {"bf16": True} if torch.cuda.is_bf16_supported() else {"fp16": True}


def load_recipe(name_or_path: str) -> dict:
    """A named recipe shipped in hf_s2s/training/recipes/ (``transformer_small``) or a JSON file."""
    path = Path(name_or_path)
    if not path.is_file():
        path = RECIPES_DIR / f"{name_or_path}.json"
    if not path.is_file():
        available = sorted(p.stem for p in RECIPES_DIR.glob("*.json"))
        raise ValueError(f"unknown recipe {name_or_path!r}; available recipes: {available} (or a path to a JSON file)")
    try:
        recipe = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"recipe {path} is not valid JSON: {error}") from None
    if not isinstance(recipe, dict):
        raise ValueError(f"recipe {path} must hold a JSON object of argument names and values, got {recipe!r}")
    if isinstance(recipe.get("model_config"), dict):
        recipe["model_config"] = json.dumps(recipe["model_config"])
    return recipe


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> JobArguments:
    """Parse the command line (default: ``sys.argv[1:]``) over :data:`ARGUMENT_GROUPS`; a ``--recipe`` provides
    defaults that explicit flags override. ``prog`` names the command in ``--help``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = HfArgumentParser(ARGUMENT_GROUPS, prog=prog)
    defaults = default_training_arguments()
    # A first pass finds --recipe; --help is left out of it, so that the help shows the recipe's defaults.
    first_pass, _ = parser.parse_known_args([arg for arg in argv if arg not in ("-h", "--help")])
    recipe = load_recipe(first_pass.recipe) if first_pass.recipe else {}
    unknown = sorted(set(recipe) - argument_names())
    if unknown:
        raise ValueError(f"recipe {first_pass.recipe!r} sets unknown argument(s) {unknown}")
    defaults.update(recipe)
    parser.set_defaults(**defaults)
    given = given_arguments(parser, argv) | set(recipe)
    if not {"-h", "--help"} & set(argv):
        check_best_model_strategies(parser.parse_known_args(argv)[0], given)
    job = JobArguments(*parser.parse_args_into_dataclasses(args=argv))
    job.model.given |= given
    return job


def check_best_model_strategies(parsed: argparse.Namespace, given: set[str]) -> None:
    """``--load_best_model_at_end`` (true by default here) needs a validation to choose by and a checkpoint saved at
    each one. Checked on the parsed command line before transformers builds its arguments, whose own refusal names
    ``--load_best_model_at_end`` and prints enum reprs over three lines, a flag the user may never have given; this
    one names the flags given, and says which values are the defaults. ``given``: the arguments the command line or
    a ``--recipe`` set."""
    if not parsed.load_best_model_at_end:
        return

    def flag(name: str) -> str:
        value = getattr(parsed, name)
        return f"--{name} {getattr(value, 'value', value)}" + ("" if name in given else " (the default)")

    best = "--load_best_model_at_end" + ("" if "load_best_model_at_end" in given else " (true by default)")
    evaluation, saving = (str(getattr(value, "value", value)) for value in (parsed.eval_strategy, parsed.save_strategy))
    if evaluation == "no":
        raise ValueError(f"{best} keeps the checkpoint of the best validation BLEU, and early stopping "
                         "(--early_stopping_patience) stops on it, but --eval_strategy no never validates: pass "
                         "--load_best_model_at_end false to train without validation (early stopping is then off too), "
                         "or evaluate with --eval_strategy epoch")
    if saving not in ("best", evaluation):
        raise ValueError(f"{best} keeps the checkpoint of the best validation BLEU, so a checkpoint must be saved at "
                         f"every validation: {flag('save_strategy')} and {flag('eval_strategy')} differ; give them the "
                         "same strategy, or --save_strategy best, or pass --load_best_model_at_end false")


def argument_names() -> set[str]:
    """Every argument of the job (the fields of :data:`ARGUMENT_GROUPS` that are flags)."""
    return {f.name for group in ARGUMENT_GROUPS for f in fields(group) if f.init}


def given_arguments(parser: HfArgumentParser, argv: list[str]) -> set[str]:
    """The arguments ``argv`` names, whatever their values (a value equal to the default included): argparse
    sets an argument the command line leaves out only where the namespace lacks it, so a namespace holding a
    marker for every argument keeps the marker for those."""
    names = argument_names()
    marker = object()
    parsed, _ = parser.parse_known_args(argv, namespace=argparse.Namespace(**dict.fromkeys(names, marker)))
    return {name for name in names if getattr(parsed, name) is not marker}


def build_config(model_args: ModelArguments, tokenizer=None):
    """The model's config: a saved model's, or the family's defaults with ``--model_config`` on top, sized to
    ``tokenizer``. Without a tokenizer (the check before one is trained) it is sized to ``--vocab_size``."""
    if model_args.model_name_or_path:
        return load_model_config(model_args.model_name_or_path)
    if model_args.model_type not in FAMILIES:
        raise ValueError(f"`model_type` must be one of {list(FAMILIES)}, got {model_args.model_type!r}")
    overrides = model_config_overrides(model_args.model_config) if model_args.model_config else {}
    overrides.setdefault("vocab_size", len(tokenizer) if tokenizer is not None else model_args.vocab_size)
    if tokenizer is not None:
        target = tokenization.target_side(tokenizer)
        overrides.update(tokenization.special_token_ids(tokenizer, target))
        if target is not tokenizer and "share_encoder_decoder_embeddings" in get_family(model_args.model_type).defaults():
            # one id means different tokens in the two vocabularies: the tables must be separate
            if overrides.setdefault("share_encoder_decoder_embeddings", False):
                raise ValueError("--model_config sets share_encoder_decoder_embeddings=true, but the tokenizer has "
                                 "separate source and target vocabularies; leave it out (or false)")
    return AutoConfig.for_model(model_args.model_type, **overrides)


def model_config_overrides(model_config: str) -> dict:
    """The config fields ``--model_config`` sets (a JSON object), refused with the JSON error otherwise."""
    try:
        overrides = json.loads(model_config)
    except json.JSONDecodeError as error:
        raise ValueError(f"--model_config is not valid JSON ({error}): {model_config!r}") from None
    if not isinstance(overrides, dict):
        raise ValueError(f"--model_config must be a JSON object of config fields, got {model_config!r}")
    return overrides


def tokenizer_arguments(model_args: ModelArguments, data_args: DataArguments) -> dict:
    """What a trained tokenizer depends on, recorded beside it: a resumed run reuses it only when these match."""
    library = {"tokenizer_library": model_args.tokenizer_library} \
        if model_args.tokenizer_library != "tokenizers" else {}
    return {
        **library,  # recorded only when not the default, so that runs recorded before the option resume alike
        "tokenizer_type": model_args.tokenizer_type, "vocab_size": model_args.vocab_size,
        "separate_vocabs": model_args.separate_vocabs, "target_vocab_size": model_args.target_vocab_size,
        "dataset": data_args.dataset, "dataset_config": data_args.dataset_config,
        "data_dir": data_args.data_dir, "source_lang": data_args.source_lang,
        "target_lang": data_args.target_lang, "max_train_samples": data_args.max_train_samples,
        # the text filters decide what the tokenizer learns from (None: none; an older record has no such key)
        "text_filters": sorted(name for name in ("identical", "duplicates")
                               if getattr(data_args.pair_filters(), name)) or None,
    }


def subword_samplers(tokenizer, data_args: DataArguments) -> tuple[SubwordSampler, SubwordSampler]:
    """The source and target samplers of ``--bpe_dropout`` / ``--unigram_alpha``; a ValueError naming the flag when
    the tokenizer's model is not the one the flag samples."""
    kwargs = dict(bpe_dropout=data_args.bpe_dropout, unigram_alpha=data_args.unigram_alpha)
    source = SubwordSampler(tokenizer, side="source tokenizer", **kwargs)
    target = tokenization.target_side(tokenizer)
    return source, source if target is tokenizer else SubwordSampler(target, side="target tokenizer", **kwargs)


def given_tokenizer(model_args: ModelArguments):
    """``--tokenizer_name_or_path`` (with ``--target_tokenizer_name_or_path``: separate vocabularies) loaded."""
    return tokenization.load_given_tokenizer(
        model_args.tokenizer_name_or_path, model_args.target_tokenizer_name_or_path,
        flags=("--tokenizer_name_or_path", "--target_tokenizer_name_or_path"))


def load_model_config(name_or_path: str):
    """The config of ``--model_name_or_path``: a local folder's (a missing folder, or one without config.json, is an
    error naming the flag) or a Hub model's (an error saying that it is neither when the Hub cannot give it)."""
    folder = local_folder(name_or_path, flag="--model_name_or_path")
    if folder is not None and not (folder / "config.json").is_file():
        inside = (f" (a training run's folder: its model is {folder / 'model'})"
                  if (folder / "model" / "config.json").is_file() else "")
        raise ModelFolderError(f"--model_name_or_path {name_or_path} holds no config.json: not a saved model "
                               f"folder{inside}")
    try:
        return load_config(name_or_path)
    except OSError as error:
        if folder is not None:
            raise
        reason = " ".join(str(error).split())  # transformers' message runs over lines; the error is one
        raise ModelFolderError(f"--model_name_or_path {name_or_path} is not a local folder (no such folder here) and "
                               f"could not be loaded as a Hub model: {reason}") from error


__all__ = ["ARGUMENT_GROUPS", "FILTER_FLAGS", "check_best_model_strategies", "DataArguments", "DecodingArguments", "JobArguments",
           "ModelArguments", "SelectionArguments", "TrainingArguments", "build_config", "default_training_arguments",
           "given_arguments", "given_tokenizer", "load_recipe", "model_config_overrides", "parse_args",
           "subword_samplers", "tokenizer_arguments"]
