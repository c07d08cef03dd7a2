"""The main job: corpus -> tokenizer -> model -> Seq2SeqTrainer -> test-set evaluation -> Hub-ready folder.

``scripts/train.py`` is a thin command line over :func:`run`; the job's arguments, and the checks run before
anything is read, are in :mod:`hf_s2s.training.arguments`. Everything runs unchanged under
``accelerate launch`` (Trainer handles the processes); the test-set evaluation and the files written at the
end happen on the main process only.
"""

import json
import logging
import os
import platform
import time
from functools import partial
from pathlib import Path

import torch
import transformers
from torch.utils.data import DataLoader
from transformers import (
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    EarlyStoppingCallback,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)
from transformers.trainer_utils import seed_worker

from ..data import corpus as data_lib
from ..data import tokenization
from ..data.sampling import LengthGroupedEpochSampler, TokenBudgetBatchSampler
from ..hub.card import write_model_card
from ..inference.plots import plot_alignment
from ..inference.translate import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_LENGTH_PENALTY,
    alignment,
    length_bound_arguments,
    translate,
)
from ..metrics import build_compute_metrics, compute_translation_metrics
from ..models.loading import load_model, load_tokenizer
from ..models.modeling_common import LENGTH_BOUND_FIELDS
from .arguments import (
    FAMILIES,
    LENGTH_BOUND_FLAGS,
    RECIPES_DIR,
    DataArguments,
    ModelArguments,
    build_config,
    check_arguments,
    check_token_budget_batching,
    default_training_arguments,
    load_recipe,
    needed_splits,
    parse_args,
    parse_test_beams,
)
from .ema import EMA_FOLDER, EMACallback
from .run_dir import (
    RunLock,
    hypotheses_path,
    naming_a_full_disk,
    prepare_output_dir,
    record_tokenizer_arguments,
    tokenizer_arguments_match,
)
from .selection import AVERAGED_FOLDER, average_last_checkpoints, current_validation_bleu, validate_ema

logger = logging.getLogger(__name__)


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


class CountingSeq2SeqTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer that counts the source + target tokens (padding excluded) of the batches it trains on, so
    training speed is measured on what was trained: streamed corpora and resumed runs included.

    Its training order is a pure function of (seed, epoch) (:mod:`hf_s2s.data.sampling`), so a run resumed in any
    epoch trains on the same batches as the uninterrupted run; with ``max_tokens_per_batch`` the batches are
    token-budget batches (:class:`~hf_s2s.data.sampling.TokenBudgetBatchSampler`)."""

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
        callbacks: list | None = None, arguments_checked: bool = False) -> dict:
    """Train and evaluate; returns the results written to ``results.json`` (an empty dict on processes other
    than the main one). ``callbacks`` are added to the Trainer's.

    The arguments are checked first (``check_arguments``), unless the caller did (``arguments_checked``: the command
    line does, to report a refusal as one line; the checks read checkpoint files and tokenizers, not worth doing
    twice). The main process then locks ``output_dir`` for the whole run and refuses a folder that holds another run
    (see :mod:`hf_s2s.training.run_dir`); the other processes of an ``accelerate launch`` write only where the main process
    lets them (after ``main_process_first``), so one lock per launch suffices, and when the main process is refused
    the launcher stops them."""
    if not arguments_checked:
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
    data_lib.check_splits(corpus, data_args.dataset, needed_splits(data_args, training_args))
    for split, limit in limits.items():
        if limit is not None and split in corpus:
            corpus[split] = corpus[split].take(limit) if data_args.streaming else \
                corpus[split].select(range(min(limit, len(corpus[split]))))

    if model_args.tokenizer_name_or_path or model_args.model_name_or_path:
        tokenizer = load_tokenizer(model_args.tokenizer_name_or_path or model_args.model_name_or_path)
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
    ema_folder = EMA_FOLDER if data_args.ema_decay is not None else None
    with naming_a_full_disk(output_dir, ema_folder=ema_folder):  # checkpoints, ema/ at the end, logs
        train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    # Validation (generation + BLEU each epoch) is timed by Trainer; training speed leaves it out.
    eval_seconds = sum(entry.get("eval_runtime", 0.0) for entry in trainer.state.log_history)
    train_seconds = time.perf_counter() - start - eval_seconds
    epochs_done = trainer.state.epoch
    # reduced on the device the count lives on (NCCL reduces no CPU tensors)
    train_tokens = int(trainer.accelerator.reduce(torch.as_tensor(trainer._train_tokens, device=trainer.args.device),
                                                  reduction="sum"))
    with naming_a_full_disk(output_dir, ema_folder):  # averaged/
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
        with naming_a_full_disk(output_dir, ema_folder):
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
        with naming_a_full_disk(output_dir, ema_folder):
            write_results(results, samples, final_dir, output_dir)
            if samples:
                save_alignment_plot(model, tokenizer, samples[0]["source"], output_dir / "alignment.png")
    # Shut the process group down once every process is here: a process that exits with gloo still running
    # can abort ("terminate called without an active exception"), failing a run that had finished.
    trainer.accelerator.wait_for_everyone()
    if training_args.world_size > 1:
        let_gloo_workers_finish()
    trainer.accelerator.end_training()
    return results


def write_results(results: dict, samples: list[dict], final_dir: Path, output_dir: Path) -> None:
    """results.json in the model folder (with the model card it fills) and the output folder, and samples.txt."""
    results_json = json.dumps(results, indent=2, default=str)
    (final_dir / "results.json").write_text(results_json)
    write_model_card(final_dir)  # README.md filled from the results.json just written
    (output_dir / "results.json").write_text(results_json)
    with open(output_dir / "samples.txt", "w") as f:
        for s in samples:
            f.write(f"SRC: {s['source']}\nREF: {s['reference']}\nHYP: {s['hypothesis']}\n\n")


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


# The arguments live in hf_s2s.training.arguments; the job's callers import them from here too.
__all__ = ["ModelArguments", "DataArguments", "RECIPES_DIR", "check_arguments", "default_training_arguments",
           "parse_args", "run", "load_recipe", "build_model"]
