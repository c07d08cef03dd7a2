"""The main job: corpus -> tokenizer -> model -> Seq2SeqTrainer -> test-set evaluation -> Hub-ready folder.

``scripts/train.py`` is a thin command line over :func:`run`. Everything runs unchanged under
``accelerate launch`` (Trainer handles the processes); the test-set evaluation and the files written at the
end happen on the main process only.
"""

import json
import logging
import os
import platform
import time
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path

import torch
import transformers
from torch.utils.data import DataLoader
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    EarlyStoppingCallback,
    HfArgumentParser,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)
from transformers.trainer_utils import seed_worker

from . import data as data_lib
from . import tokenization
from .ema import EMA_FOLDER, EMACallback, check_ema_decay
from .hub import family_defaults, write_model_card
from .loading import load_model
from .metrics import build_compute_metrics, compute_translation_metrics
from .model_selection import AVERAGED_FOLDER, average_last_checkpoints, current_validation_bleu, validate_ema
from .modeling_common import LENGTH_BOUND_FIELDS
from .plotting import plot_alignment
from .run_dir import (
    RunLock,
    check_output_dir,
    check_resume,
    hypotheses_path,
    prepare_output_dir,
    record_tokenizer_arguments,
    run_inputs,
    tokenizer_arguments_match,
)
from .sampling import LengthGroupedEpochSampler, TokenBudgetBatchSampler
from .translate import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_LENGTH_PENALTY,
    alignment,
    length_bound_arguments,
    translate,
)

logger = logging.getLogger(__name__)

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"  # shipped inside the package (package data)
FAMILIES = ("transformer_seq2seq", "rnn_seq2seq")
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
        metadata={"help": "a named recipe shipped in hf_s2s/recipes/ (or a JSON file): defaults for every argument"},
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
    """A named recipe shipped in hf_s2s/recipes/ (``transformer_small``) or a JSON file."""
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
        return AutoConfig.from_pretrained(model_args.model_name_or_path)
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
        if target is not tokenizer and "share_encoder_decoder_embeddings" in family_defaults(model_args.model_type):
            # one id means different tokens in the two vocabularies: the tables must be separate
            if overrides.setdefault("share_encoder_decoder_embeddings", False):
                raise ValueError("--model_config sets share_encoder_decoder_embeddings=true, but the tokenizer has "
                                 "separate source and target vocabularies; leave it out (or false)")
    return AutoConfig.for_model(model_args.model_type, **overrides)


def build_model(model_args: ModelArguments, tokenizer):
    """A new model of the chosen family sized to ``tokenizer``, or a saved one to fine-tune. A tokenizer with
    separate vocabularies sizes the decoder's (``decoder_vocab_size``) by its target side."""
    target = tokenization.target_side(tokenizer)
    if model_args.model_name_or_path:
        model = load_model(model_args.model_name_or_path)  # strict: weights must match the config
    else:
        model = AutoModelForSeq2SeqLM.from_config(build_config(model_args, tokenizer))
    tokenization.check_tokenizer_fits_model(tokenizer, model.config, target)
    return model


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
    if model_args.target_vocab_size is not None and not model_args.separate_vocabs:
        raise ValueError("--target_vocab_size is the target side of --separate_vocabs; pass --separate_vocabs too "
                         "(or leave it out for a joint vocabulary of --vocab_size)")
    if model_args.separate_vocabs and (model_args.tokenizer_name_or_path or model_args.model_name_or_path):
        raise ValueError("--separate_vocabs trains new tokenizers; with --tokenizer_name_or_path or "
                         "--model_name_or_path the given tokenizer decides the vocabularies: leave it out")
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
    last = data_args.average_last_checkpoints
    if last > 1 and training_args.save_total_limit is not None and training_args.save_total_limit <= last:
        raise ValueError(f"--average_last_checkpoints {last} needs --save_total_limit above {last} (the best "
                         f"checkpoint is kept besides the newest), got {training_args.save_total_limit}")
    if data_args.ema_decay is not None:
        check_ema_decay(data_args.ema_decay)
        resume = training_args.resume_from_checkpoint
        if resume and not (Path(resume) / EMA_FOLDER / "model.safetensors").is_file():
            raise ValueError(f"--ema_decay: {resume} holds no EMA weights ({EMA_FOLDER}/); it was saved by a run "
                             "without --ema_decay, so the average cannot be continued")
    for flag, limit in (("--max_train_samples", data_args.max_train_samples),
                        ("--max_eval_samples", data_args.max_eval_samples),
                        ("--max_test_samples", data_args.max_test_samples)):
        if limit is not None and limit < 1:
            raise ValueError(f"{flag} must be a positive number of pairs (or left out for all), got {limit}")
    parse_test_beams(data_args)
    bound = length_bound_arguments(data_args.max_len_a, data_args.max_len_b, data_args.no_length_bound,
                                   LENGTH_BOUND_FLAGS)
    check_resume(training_args.output_dir, training_args.resume_from_checkpoint, data_args.overwrite_output_dir)
    if not training_args.predict_with_generate and training_args.eval_strategy != "no":
        raise ValueError("--predict_with_generate false: the validation BLEU of each evaluation is computed on "
                         "generated translations; keep it true, or pass --eval_strategy no (and "
                         "--load_best_model_at_end false) to train without validation")
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


def describe_machine() -> str:
    """The accelerator or CPU the run trained on, in words, for results.json and model cards."""
    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores (CPU only)"


def smooth_labels_in_model(trainer: Seq2SeqTrainer) -> None:
    """Move Trainer's label smoothing into the model (``config.label_smoothing``, the same loss as Trainer's
    ``LabelSmoother``): with its own smoothing on, Trainer pops the labels before calling the model, which then never
    runs its padding-free loss path. The training arguments keep the factor, so what is saved and reported says it.
    Another family's model (fine-tuning a MarianMT, say) has no such field: Trainer keeps smoothing for it."""
    if trainer.model.config.model_type not in FAMILIES:
        return
    trainer.model.config.label_smoothing = trainer.args.label_smoothing_factor
    trainer.label_smoother = None


def check_token_budget_batching(training_args: Seq2SeqTrainingArguments) -> None:
    """Token-budget batches give each process its own share of every batch: accelerate's ``split_batches`` or
    ``dispatch_batches`` (process 0 cutting batches up) would cut them again."""
    split = {name for name in ("split_batches", "dispatch_batches") if getattr(training_args.accelerator_config, name)}
    if split:
        raise ValueError(f"--max_tokens_per_batch gives each process its own share of every batch; it cannot be "
                         f"combined with --accelerator_config {sorted(split)} (process 0 cutting batches up)")


class CountingSeq2SeqTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer that counts the source + target tokens (padding excluded) of the batches it trains on, so
    training speed is measured on what was trained: streamed corpora and resumed runs included.

    Its training order is a pure function of (seed, epoch) (:mod:`hf_s2s.sampling`), so a run resumed in any
    epoch trains on the same batches as the uninterrupted run; with ``max_tokens_per_batch`` the batches are
    token-budget batches (:class:`~hf_s2s.sampling.TokenBudgetBatchSampler`)."""

    def __init__(self, *args, max_tokens_per_batch: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_tokens_per_batch = max_tokens_per_batch
        # counted on the batches' device and read once, by train_tokens: a read per step would stall a GPU
        self._train_tokens: torch.Tensor | int = 0
        self.epoch_sampler = None  # the sampler of the current training data loader, told the epoch

    def _sampler_seed(self) -> int:
        return self.args.data_seed if self.args.data_seed is not None else self.args.seed

    def _get_train_sampler(self, train_dataset=None):
        """``group_by_length`` as Trainer does it, but shuffled by the sampler's own per-epoch generator."""
        train_dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.args.train_sampling_strategy != "group_by_length" or not hasattr(train_dataset, "column_names"):
            return super()._get_train_sampler(train_dataset)
        length_column = self.args.length_column_name  # Trainer's convention: a precomputed length column
        self.epoch_sampler = LengthGroupedEpochSampler(
            train_dataset[length_column] if length_column in train_dataset.column_names
            else [len(ids) for ids in train_dataset["input_ids"]],
            self.args.train_batch_size * self.args.gradient_accumulation_steps, seed=self._sampler_seed())
        return self.epoch_sampler

    def get_train_dataloader(self) -> DataLoader:
        if self.max_tokens_per_batch is None:
            return super().get_train_dataloader()
        check_token_budget_batching(self.args)
        dataset = self._remove_unused_columns(self.train_dataset, description="Training")
        self.epoch_sampler = TokenBudgetBatchSampler(
            [len(ids) for ids in dataset["input_ids"]], [len(ids) for ids in dataset["labels"]],
            self.max_tokens_per_batch, seed=self._sampler_seed(), num_processes=self.args.world_size,
            rank=self.args.process_index, accumulation_steps=self.args.gradient_accumulation_steps)
        args = self.args  # the data loader settings Trainer's own training loader takes
        loader = self.accelerator.prepare(DataLoader(
            dataset, batch_sampler=self.epoch_sampler, collate_fn=self.data_collator,
            num_workers=args.dataloader_num_workers, pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers, prefetch_factor=args.dataloader_prefetch_factor,
            multiprocessing_context=args.dataloader_multiprocessing_context, in_order=args.dataloader_in_order,
            worker_init_fn=partial(seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index)))
        # accelerate deals a batch sampler's batches out round-robin across processes (BatchSamplerShard); ours
        # yields this process's share already, so the wrapper passes everything through, as Trainer does for
        # its own rank-aware BatchRebalanceSampler.
        shard = loader.batch_sampler
        if shard is not self.epoch_sampler:
            shard.num_processes, shard.process_index = 1, 0
        return loader

    def _run_epoch(self, *args, epoch: int, **kwargs):
        # Trainer's own set_epoch does not reach a sampler under accelerate's shard wrapper in the epoch a
        # multi-process run resumes in (SkipBatchSampler(BatchSamplerShard(...)) hides it): tell it directly.
        if self.epoch_sampler is not None:
            self.epoch_sampler.set_epoch(epoch)
        return super()._run_epoch(*args, epoch=epoch, **kwargs)

    @property
    def train_tokens(self) -> int:
        """Source + target tokens (padding excluded) this process has trained on."""
        return int(self._train_tokens)

    def training_step(self, model, inputs, num_items_in_batch=None):
        self._train_tokens = self._train_tokens + inputs["attention_mask"].sum() + (inputs["labels"] != -100).sum()
        return super().training_step(model, inputs, num_items_in_batch)

    def _issue_warnings_after_load(self, load_result):
        """Restoring a checkpoint (the best one at the end, or on resume) loads the state dict non-strictly;
        tied weights (``lm_head.weight``, the embeddings) are left out of every checkpoint by save_pretrained
        and come back through the tie, so only other missing keys are worth a warning."""
        tied = getattr(self.model, "all_tied_weights_keys", None) or {}
        missing = [key for key in load_result.missing_keys if key not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))


def evaluate_test_set(model, tokenizer, test_pairs, data_args, output_dir: Path) -> tuple[dict, list[dict]]:
    """Translate the test split with each beam size; returns the scores, each with the decoding settings it
    was measured with, and sample translations. The translations behind each score are written to
    ``hypotheses_path(output_dir, key)``. Decoding follows ``model.generation_config`` (the settings the saved
    folder carries) and ``translate``'s default batch size, so ``scripts/translate.py`` on the folder gives the
    same translations."""
    pairs = [example["translation"] for example in test_pairs]
    sources = [pair[data_args.source_lang] for pair in pairs]
    references = [pair[data_args.target_lang] for pair in pairs]
    scores, samples = {}, []
    for num_beams in parse_test_beams(data_args):
        decoding = {"num_beams": num_beams, "max_length": model.generation_config.max_length,
                    "length_penalty": DEFAULT_LENGTH_PENALTY, "batch_size": DEFAULT_BATCH_SIZE,
                    "max_source_length": data_args.max_source_length,
                    # the source-relative length bound the saved generation config carries (absent in other families)
                    **{name: getattr(model.generation_config, name) for name in LENGTH_BOUND_FIELDS
                       if hasattr(model.generation_config, name)}}
        start = time.perf_counter()
        texts = [h[0].text for h in translate(model, tokenizer, sources, scores=False, **decoding)]
        result = compute_translation_metrics(texts, references)
        result["decode_seconds"] = round(time.perf_counter() - start, 2)
        result["decoding"] = decoding
        key = "greedy" if num_beams == 1 else f"beam{num_beams}"
        scores[key] = result
        hypotheses_path(output_dir, key).write_text("".join(f"{text}\n" for text in texts))
        if not samples:
            samples = [{"source": s, "reference": r, "hypothesis": h}
                       for s, r, h in list(zip(sources, references, texts, strict=True))[: data_args.num_sample_translations]]
    return scores, samples


def run(model_args: ModelArguments, data_args: DataArguments, training_args: Seq2SeqTrainingArguments,
        callbacks: list | None = None) -> dict:
    """Train and evaluate; returns the results written to ``results.json`` (an empty dict on processes other
    than the main one). ``callbacks`` are added to the Trainer's.

    The arguments are checked first. The main process then locks ``output_dir`` for the whole run and refuses
    a folder that holds another run (see :mod:`hf_s2s.run_dir`); the other processes of an ``accelerate
    launch`` write only where the main process lets them (after ``main_process_first``), so one lock per
    launch suffices, and when the main process is refused the launcher stops them."""
    check_arguments(model_args, data_args, training_args)
    if training_args.process_index != 0:
        return _train_and_evaluate(model_args, data_args, training_args, callbacks)
    with RunLock(training_args.output_dir):
        logger.info("locked %s for this run", training_args.output_dir)
        prepare_output_dir(training_args.output_dir, overwrite=data_args.overwrite_output_dir,
                           resume=training_args.resume_from_checkpoint is not None)
        return _train_and_evaluate(model_args, data_args, training_args, callbacks)


def _train_and_evaluate(model_args: ModelArguments, data_args: DataArguments,
                        training_args: Seq2SeqTrainingArguments, callbacks: list | None) -> dict:
    transformers.set_seed(training_args.seed)
    output_dir = Path(training_args.output_dir)
    last = data_args.average_last_checkpoints
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples,
              "test": data_args.max_test_samples}
    corpus = data_lib.load_translation_corpus(
        data_args.dataset, source_lang=data_args.source_lang, target_lang=data_args.target_lang,
        data_dir=data_args.data_dir, dataset_config=data_args.dataset_config, streaming=data_args.streaming,
    )
    needed = {"train": "training"}
    if training_args.eval_strategy != "no":
        needed["validation"] = "evaluation (--eval_strategy is not 'no')"
    data_lib.check_splits(corpus, data_args.dataset, needed)
    for split, limit in limits.items():
        if limit is not None and split in corpus:
            corpus[split] = corpus[split].take(limit) if data_args.streaming else \
                corpus[split].select(range(min(limit, len(corpus[split]))))

    if model_args.tokenizer_name_or_path or model_args.model_name_or_path:
        tokenizer = tokenization.load_tokenizer(model_args.tokenizer_name_or_path or model_args.model_name_or_path)
    else:
        with training_args.main_process_first(desc="train tokenizer"):
            tokenizer_dir = output_dir / "tokenizer"
            # Reused only by a resumed run (run() refuses other runs' folders), and only when trained alike.
            tokenizer_arguments = {
                "tokenizer_type": model_args.tokenizer_type, "vocab_size": model_args.vocab_size,
                "separate_vocabs": model_args.separate_vocabs, "target_vocab_size": model_args.target_vocab_size,
                "dataset": data_args.dataset, "dataset_config": data_args.dataset_config,
                "data_dir": data_args.data_dir, "source_lang": data_args.source_lang,
                "target_lang": data_args.target_lang, "max_train_samples": data_args.max_train_samples,
            }
            if training_args.process_index == 0 and not tokenizer_arguments_match(tokenizer_dir, tokenizer_arguments):
                tokenizers = tokenization.train_translation_tokenizers(
                    corpus["train"], source_lang=data_args.source_lang, target_lang=data_args.target_lang,
                    vocab_size=model_args.vocab_size, model_type=model_args.tokenizer_type,
                    joint=not model_args.separate_vocabs, target_vocab_size=model_args.target_vocab_size,
                )
                tokenizers.save_pretrained(tokenizer_dir)
                record_tokenizer_arguments(tokenizer_dir, tokenizer_arguments)
            tokenizer = tokenization.load_tokenizer(tokenizer_dir)

    model = build_model(model_args, tokenizer)
    # checked in check_arguments; validation, test decoding and the saved generation config use them
    for name, value in length_bound_arguments(data_args.max_len_a, data_args.max_len_b, data_args.no_length_bound,
                                              LENGTH_BOUND_FLAGS).items():
        setattr(model.generation_config, name, value)
    num_parameters = model.num_parameters()
    logger.info("model: %s with %s parameters", model.config.model_type, f"{num_parameters:,}")

    with training_args.main_process_first(desc="tokenize"):
        tokenized = data_lib.tokenize_corpus(
            corpus, tokenizer, source_lang=data_args.source_lang, target_lang=data_args.target_lang,
            max_source_length=data_args.max_source_length, max_target_length=data_args.max_target_length,
        )
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    callbacks = list(callbacks or [])
    if data_args.early_stopping_patience and training_args.load_best_model_at_end:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=data_args.early_stopping_patience))
    if data_args.ema_decay is not None:
        callbacks.append(EMACallback(data_args.ema_decay, resume_from=training_args.resume_from_checkpoint))
    trainer = CountingSeq2SeqTrainer(
        model=model, args=training_args, train_dataset=tokenized["train"],
        eval_dataset=tokenized.get("validation"), data_collator=collator, processing_class=tokenizer,
        compute_metrics=build_compute_metrics(tokenizer), callbacks=callbacks,
        max_tokens_per_batch=data_args.max_tokens_per_batch,
    )
    smooth_labels_in_model(trainer)
    start = time.perf_counter()
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    # Validation (generation + BLEU each epoch) is timed by Trainer; training speed leaves it out.
    eval_seconds = sum(entry.get("eval_runtime", 0.0) for entry in trainer.state.log_history)
    train_seconds = time.perf_counter() - start - eval_seconds
    epochs_done = trainer.state.epoch
    # reduced on the device the count lives on (NCCL reduces no CPU tensors)
    train_tokens = int(trainer.accelerator.reduce(torch.as_tensor(trainer._train_tokens, device=trainer.args.device),
                                                  reduction="sum"))
    averaging = average_last_checkpoints(trainer, last) if last > 1 else None
    ema = validate_ema(trainer, data_args.ema_decay, averaging) if data_args.ema_decay is not None else None

    results = {}
    if trainer.is_world_process_zero():
        final_dir = output_dir / "model"
        model = trainer.model
        # The saved folder decodes as the test set was decoded below: its default is the largest beam tested.
        if training_args.generation_max_length is not None:
            model.generation_config.max_length = training_args.generation_max_length
        model.generation_config.num_beams = max(parse_test_beams(data_args), default=1)
        tokenizer.model_max_length = data_args.max_source_length  # longer sources are truncated, as in training
        trainer.save_model(final_dir)  # best checkpoint when load_best_model_at_end
        tokenizer.save_pretrained(final_dir)
        for candidate in (output_dir / AVERAGED_FOLDER, output_dir / EMA_FOLDER):  # the other weights decode alike
            if candidate.is_dir():
                model.generation_config.save_pretrained(candidate)
                tokenizer.save_pretrained(candidate)
        test_scores, samples = evaluate_test_set(model, tokenizer, corpus["test"], data_args, output_dir) \
            if "test" in corpus else ({}, [])
        best_validation = current_validation_bleu(trainer, averaging, ema)
        results = {
            "model_type": model.config.model_type,
            "dataset": data_args.dataset,
            "source_lang": data_args.source_lang,
            "target_lang": data_args.target_lang,
            "recipe": data_args.recipe,
            "max_tokens_per_batch": data_args.max_tokens_per_batch,  # None: batches of sentences
            "num_parameters": num_parameters,
            "train_seconds": round(train_seconds, 1),  # training steps only, validation excluded
            "validation_seconds": round(eval_seconds, 1),
            "train_tokens": train_tokens,  # source + target tokens trained on, padding excluded
            "train_tokens_per_second": round(train_tokens / train_seconds, 1),
            "epochs": epochs_done,
            "train_loss": train_result.training_loss,
            "best_validation_bleu": best_validation,
            "checkpoint_averaging": averaging,
            "ema": ema,
            "test": test_scores,
            "device": str(trainer.args.device),
            "machine": describe_machine(),
            "torch_threads": torch.get_num_threads(),
            "world_size": training_args.world_size,
            "training_arguments": {k: v for k, v in training_args.to_dict().items()
                                   if k in ("learning_rate", "num_train_epochs", "per_device_train_batch_size",
                                            "label_smoothing_factor", "lr_scheduler_type", "warmup_steps", "seed",
                                            "adam_beta2", "weight_decay")},
            "model_config": model.config.to_diff_dict(),
        }
        results_json = json.dumps(results, indent=2, default=str)
        (final_dir / "results.json").write_text(results_json)
        write_model_card(final_dir)  # README.md filled from the results.json just written
        (output_dir / "results.json").write_text(results_json)
        if samples:
            save_alignment_plot(model, tokenizer, samples[0]["source"], output_dir / "alignment.png")
        with open(output_dir / "samples.txt", "w") as f:
            for s in samples:
                f.write(f"SRC: {s['source']}\nREF: {s['reference']}\nHYP: {s['hypothesis']}\n\n")
    # Shut the process group down once every process is here: a process that exits with gloo still running
    # can abort ("terminate called without an active exception"), failing a run that had finished.
    trainer.accelerator.wait_for_everyone()
    if training_args.world_size > 1:
        let_gloo_workers_finish()
    trainer.accelerator.end_training()
    return results


def let_gloo_workers_finish(seconds: float = 1.0) -> None:
    """Called after the final barrier, before the process group is destroyed. The barrier's work object is freed by
    a gloo worker thread after the barrier returns, and freeing it frees tensors owned by Python, which needs the
    GIL. If the process group is destroyed meanwhile (by ``end_training``, or when DDP's Reducer is released as the
    run returns), its destructor joins that worker while holding the GIL: a deadlock seen about once in ten
    2-process runs on a busy 2-core machine (py-spy: the main thread in ~ProcessGroupGloo -> std::thread::join, the
    worker in ~AsyncBarrierWork -> decref_pyobject). Sleeping releases the GIL so the worker finishes first."""
    time.sleep(seconds)


def save_alignment_plot(model, tokenizer, sentence: str, path: Path) -> Path | None:
    """Heatmap of the attention the model pays to ``sentence`` while translating it (greedy); None for a
    model without attention (RNN ``attention_type="none"``)."""
    if getattr(model.config, "attention_type", None) == "none":
        logger.info("no alignment plot: the model has no attention")
        return None
    weights, source_tokens, target_tokens = alignment(model, tokenizer, sentence)
    return plot_alignment(weights, source_tokens, target_tokens, path, title=sentence)


__all__ = ["ModelArguments", "DataArguments", "parse_args", "run", "load_recipe", "build_model"]
