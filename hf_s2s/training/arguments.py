"""The main job's arguments: :class:`ModelArguments` and :class:`DataArguments` beside transformers'
``Seq2SeqTrainingArguments``, the job's defaults, named recipes, parsing (:func:`parse_args`), and
:func:`check_arguments`, everything about a job that can be checked before the long work starts (corpus, tokenizer
training, training, test decoding), so that a bad flag costs seconds, not a run. Each error names the flag, the
value and what is allowed.
"""

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
from transformers import AutoConfig, HfArgumentParser, Seq2SeqTrainingArguments

from ..data import corpus as data_lib
from ..data import tokenization
from ..inference.translate import length_bound_arguments
from ..models.families import FAMILIES as _FAMILY_REGISTRY
from ..models.families import get_family
from ..models.loading import TOKENIZER_FILES, ModelFolderError, load_tokenizer, local_folder
from .ema import EMA_FOLDER, check_ema_decay, check_ema_resume
from .run_dir import check_output_dir, check_resume, run_inputs

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
        default=None, metadata={"help": "use this tokenizer instead of training one on the training split"}
    )
    tokenizer_type: str = field(default="bpe", metadata={"help": "tokenizer trained when none is given: bpe or unigram"})
    vocab_size: int = field(default=8000, metadata={"help": "vocabulary size of the trained tokenizer (with "
                                                            "--separate_vocabs: the source vocabulary's)"})
    separate_vocabs: bool = field(
        default=False, metadata={"help": "train one vocabulary per language instead of a joint one; the saved "
                                         "tokenizer encodes text_target= with the target vocabulary (as MarianMT's)"}
    )
    target_vocab_size: int | None = field(
        default=None, metadata={"help": "with --separate_vocabs: the target vocabulary's size (default --vocab_size)"}
    )


@dataclass
class DataArguments:
    recipe: str | None = field(
        default=None,
        metadata={"help": "a named recipe shipped in hf_s2s/training/recipes/ (or a JSON file): defaults for every argument"},
    )
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
    max_source_length: int = field(default=128, metadata={"help": "longer sources are truncated (and counted)"})
    max_target_length: int = field(default=128, metadata={"help": "longer targets are truncated (and counted)"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training pairs"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only the first N validation pairs"})
    max_test_samples: int | None = field(default=None, metadata={"help": "use only the first N test pairs"})
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
    max_tokens_per_batch: int | None = field(
        default=None,
        metadata={"help": "fill each training batch to this many padded source + target tokens per process (length "
                          "buckets, shuffled; as fairseq --max-tokens) instead of --per_device_train_batch_size "
                          "sentences; replaces --train_sampling_strategy"},
    )
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
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "delete the earlier run in --output_dir (checkpoints, model/, tokenizer/, results.json, ...) "
                          "and start again; without it such a folder is refused unless --resume_from_checkpoint. "
                          "Refused when a path the run reads (model, tokenizer, corpus, recipe) lies inside --output_dir"},
    )
    num_sample_translations: int = field(default=20, metadata={"help": "test translations written to samples.txt"})


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


def parse_args(argv: list[str] | None = None, prog: str | None = None):
    """Parse the command line over (ModelArguments, DataArguments, Seq2SeqTrainingArguments); a ``--recipe``
    provides defaults that explicit flags override. ``prog`` names the command in ``--help``."""
    parser = HfArgumentParser((ModelArguments, DataArguments, Seq2SeqTrainingArguments), prog=prog)
    defaults = default_training_arguments()
    # add_help=False: --help must reach the full parser below, not stop at this recipe pre-parse
    pre, _ = HfArgumentParser(DataArguments, add_help=False).parse_known_args(argv)
    if pre.recipe:
        recipe = load_recipe(pre.recipe)
        known = {f.name for cls in (ModelArguments, DataArguments, Seq2SeqTrainingArguments) for f in fields(cls)}
        unknown = sorted(set(recipe) - known)
        if unknown:
            raise ValueError(f"recipe {pre.recipe!r} sets unknown argument(s) {unknown}")
        defaults.update(recipe)
    parser.set_defaults(**defaults)
    return parser.parse_args_into_dataclasses(args=argv)


def build_config(model_args: ModelArguments, tokenizer=None):
    """The model's config: a saved model's, or the family's defaults with ``--model_config`` on top, sized to
    ``tokenizer``. Without a tokenizer (the check before one is trained) it is sized to ``--vocab_size``."""
    if model_args.model_name_or_path:
        return load_model_config(model_args.model_name_or_path)
    if model_args.model_type not in FAMILIES:
        raise ValueError(f"`model_type` must be one of {list(FAMILIES)}, got {model_args.model_type!r}")
    try:
        overrides = json.loads(model_args.model_config) if model_args.model_config else {}
    except json.JSONDecodeError as error:
        raise ValueError(f"--model_config is not valid JSON ({error}): {model_args.model_config!r}") from None
    if not isinstance(overrides, dict):
        raise ValueError(f"--model_config must be a JSON object of config fields, got {model_args.model_config!r}")
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


def load_model_config(name_or_path: str):
    """The config of ``--model_name_or_path``: a local folder's (a missing folder, or one without config.json, is an
    error naming the flag) or a Hub model's (an error saying that it is neither when the Hub cannot give it)."""
    folder = local_folder(name_or_path, flag="--model_name_or_path")
    if folder is not None and not (folder / "config.json").is_file():
        raise ModelFolderError(f"--model_name_or_path {name_or_path} holds no config.json: not a saved model folder")
    try:
        return AutoConfig.from_pretrained(name_or_path)
    except OSError as error:
        if folder is not None:
            raise
        reason = " ".join(str(error).split())  # transformers' message runs over lines; the error is one
        raise ModelFolderError(f"--model_name_or_path {name_or_path} is not a local folder (no such folder here) and "
                               f"could not be loaded as a Hub model: {reason}") from error


def parse_test_beams(data_args: DataArguments) -> list[int]:
    """The beam sizes of ``--test_num_beams`` ("1,5" -> [1, 5]); an empty value decodes no test set."""
    sizes = [b.strip() for b in data_args.test_num_beams.split(",") if b.strip()]
    if not all(b.isdigit() and int(b) >= 1 for b in sizes) or len(set(sizes)) != len(sizes):
        raise ValueError(f"--test_num_beams must be distinct beam sizes of at least 1 separated by commas (e.g. 1,5), "
                         f"got {data_args.test_num_beams!r}")
    return [int(b) for b in sizes]


def check_arguments(model_args: ModelArguments, data_args: DataArguments,
                    training_args: Seq2SeqTrainingArguments) -> None:
    """Everything about the job that can be checked before the long work (corpus, tokenizer training,
    training, test decoding) starts, so that a bad flag costs seconds, not a run."""
    check_output_dir(training_args.output_dir, run_inputs(model_args, data_args, training_args),
                     data_args.overwrite_output_dir)
    check_inputs(model_args, data_args, training_args)
    if data_args.streaming and training_args.max_steps <= 0:
        raise ValueError("--streaming reads a corpus of unknown length: give the number of steps with --max_steps")
    if data_args.max_tokens_per_batch is not None and (data_args.streaming or data_args.max_tokens_per_batch < 1):
        raise ValueError(f"--max_tokens_per_batch must be a positive number of tokens on a corpus read into memory "
                         f"(not --streaming), got {data_args.max_tokens_per_batch}"
                         f"{' with --streaming' if data_args.streaming else ''}")
    if data_args.max_tokens_per_batch is not None:
        check_token_budget_batching(training_args)
    for flag, length in (("--max_source_length", data_args.max_source_length),
                         ("--max_target_length", data_args.max_target_length)):
        if length is not None and length < 2:
            raise ValueError(f"{flag} must be at least 2 (room for one token and </s>), got {length}")
    if training_args.generation_max_length is not None and training_args.generation_max_length < 2:
        raise ValueError(f"--generation_max_length must be at least 2 (it counts the decoder start token: 2 leaves "
                         f"room for one generated token), got {training_args.generation_max_length}")
    last = data_args.average_last_checkpoints
    if last > 1 and training_args.save_total_limit is not None and training_args.save_total_limit <= last:
        raise ValueError(f"--average_last_checkpoints {last} needs --save_total_limit above {last} (the best "
                         f"checkpoint is kept besides the newest), got {training_args.save_total_limit}")
    if data_args.ema_decay is not None:
        check_ema_decay(data_args.ema_decay)
    for flag, limit in (("--max_train_samples", data_args.max_train_samples),
                        ("--max_eval_samples", data_args.max_eval_samples),
                        ("--max_test_samples", data_args.max_test_samples)):
        if limit is not None and limit < 1:
            raise ValueError(f"{flag} must be a positive number of pairs (or left out for all), got {limit}")
    parse_test_beams(data_args)
    # refuses negative, non-finite and absurd values (translate's limits), naming the flag
    bound = length_bound_arguments(data_args.max_len_a, data_args.max_len_b, data_args.no_length_bound,
                                   LENGTH_BOUND_FLAGS)
    check_resume(training_args.output_dir, training_args.resume_from_checkpoint, data_args.overwrite_output_dir,
                 EMA_FOLDER)
    if training_args.resume_from_checkpoint is not None:
        check_ema_resume(training_args.resume_from_checkpoint, data_args.ema_decay)
    check_evaluation(data_args, training_args)
    config = build_config(model_args)
    if bound and config.model_type not in FAMILIES:
        raise ValueError(f"{' / '.join(LENGTH_BOUND_FLAGS)} set the length bound of the {list(FAMILIES)} families; "
                         f"a {config.model_type} model has none")
    if getattr(config, "position_embedding_type", None) == "learned":
        for flag, length in (("--generation_max_length", training_args.generation_max_length),
                             ("--max_source_length", data_args.max_source_length),
                             ("--max_target_length", data_args.max_target_length)):
            if length is not None and length > config.max_position_embeddings:
                raise ValueError(f"{flag} {length} is longer than the {config.max_position_embeddings} positions the "
                                 f"model's learned position table holds (max_position_embeddings)")


def check_inputs(model_args: ModelArguments, data_args: DataArguments,
                 training_args: Seq2SeqTrainingArguments) -> None:
    """The model, tokenizer and corpus the run reads: a missing local path is named as one (not looked up on the
    Hub), the corpus must have the splits the run needs (where its file names tell, before it is read), a tokenizer
    to train must be trainable, and a tokenizer given for fine-tuning must be the model's own."""
    for flag, value in (("--model_name_or_path", model_args.model_name_or_path),
                        ("--tokenizer_name_or_path", model_args.tokenizer_name_or_path)):
        if value:
            local_folder(value, flag=flag)
    splits = data_lib.corpus_splits(data_args.dataset, data_args.source_lang, data_args.data_dir, flag="--dataset")
    if splits is not None:
        data_lib.check_splits(splits, data_args.dataset, needed_splits(data_args, training_args))
    if model_args.target_vocab_size is not None and not model_args.separate_vocabs:
        raise ValueError("--target_vocab_size is the target side of --separate_vocabs; pass --separate_vocabs too "
                         "(or leave it out for a joint vocabulary of --vocab_size)")
    if model_args.separate_vocabs and (model_args.tokenizer_name_or_path or model_args.model_name_or_path):
        raise ValueError("--separate_vocabs trains new tokenizers; with --tokenizer_name_or_path or "
                         "--model_name_or_path the given tokenizer decides the vocabularies: leave it out")
    if not (model_args.tokenizer_name_or_path or model_args.model_name_or_path):
        tokenization.check_training_arguments(
            model_args.vocab_size, model_args.tokenizer_type, not model_args.separate_vocabs,
            model_args.target_vocab_size, flags=("--vocab_size", "--target_vocab_size", "--tokenizer_type"))
    check_fine_tuning_tokenizer(model_args)


def check_fine_tuning_tokenizer(model_args: ModelArguments) -> None:
    """Fine-tuning a model folder that holds its tokenizer with another ``--tokenizer_name_or_path`` is refused
    unless both map text to the same ids: the model's embeddings belong to its own tokenizer's ids, and a
    tokenizer of another language pair of the same size would train without a word."""
    model, given = model_args.model_name_or_path, model_args.tokenizer_name_or_path
    folder = local_folder(model) if model and given else None
    if folder is None or not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return
    differences = tokenization.vocabulary_differences(load_tokenizer(given), load_tokenizer(folder))
    if differences:
        raise ValueError(f"--tokenizer_name_or_path {given} is not the tokenizer of --model_name_or_path {model} "
                         f"({'; '.join(differences)}): the model's embeddings belong to the ids of its own tokenizer; "
                         f"leave out --tokenizer_name_or_path to fine-tune with it")


def needed_splits(data_args: DataArguments, training_args: Seq2SeqTrainingArguments) -> dict[str, str]:
    """The corpus splits the run cannot do without, each with what needs it (for :func:`hf_s2s.data.corpus.check_splits`)."""
    needed = {"train": "training"}
    if training_args.eval_strategy != "no":
        needed["validation"] = "evaluation (--eval_strategy is not 'no')"
    elif data_args.ema_decay is not None:
        needed["validation"] = "choosing between the EMA and the raw weights after training (--ema_decay)"
    elif data_args.average_last_checkpoints > 1:
        needed["validation"] = ("choosing between the checkpoint average and the last weights after training "
                                "(--average_last_checkpoints)")
    return needed


def check_evaluation(data_args: DataArguments, training_args: Seq2SeqTrainingArguments) -> None:
    """Options that stand on the validation BLEU of each evaluation need evaluations. As transformers refuses
    ``load_best_model_at_end`` with mismatched strategies and ``EarlyStoppingCallback`` without evaluation (an
    AssertionError after the tokenizer was trained), the job refuses them together with ``--eval_strategy no``."""
    if not training_args.predict_with_generate and training_args.eval_strategy != "no":
        raise ValueError("--predict_with_generate false: the validation BLEU of each evaluation is computed on "
                         "generated translations; keep it true, or pass --eval_strategy no (and "
                         "--load_best_model_at_end false) to train without validation")
    if training_args.eval_strategy == "no" and training_args.load_best_model_at_end:
        raise ValueError("--load_best_model_at_end (true by default) keeps the checkpoint of the best validation "
                         "BLEU, and early stopping (--early_stopping_patience) stops on it, but --eval_strategy no "
                         "never validates: pass --load_best_model_at_end false to train without validation (early "
                         "stopping is then off too), or evaluate with --eval_strategy epoch")


def check_token_budget_batching(training_args: Seq2SeqTrainingArguments) -> None:
    """Token-budget batches give each process its own share of every batch: accelerate's ``split_batches`` or
    ``dispatch_batches`` (process 0 cutting batches up) would cut them again."""
    split = {name for name in ("split_batches", "dispatch_batches") if getattr(training_args.accelerator_config, name)}
    if split:
        raise ValueError(f"--max_tokens_per_batch gives each process its own share of every batch; it cannot be "
                         f"combined with --accelerator_config {sorted(split)} (process 0 cutting batches up)")


__all__ = ["DataArguments", "ModelArguments", "build_config", "check_arguments", "load_recipe", "parse_args",
           "parse_test_beams"]
