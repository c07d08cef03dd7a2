"""The training job, phase by phase: data -> tokenizer -> model -> train -> select -> save -> evaluate -> report.

:func:`run` checks the arguments, locks the output folder and calls :func:`run_phases`, which reads as the list of
phases; each phase is a function of the arguments it needs (:mod:`hf_s2s.training.arguments`), testable alone.
``hf-s2s train`` is a thin command line over :func:`run`. Everything runs unchanged under ``accelerate launch``
(Trainer handles the processes), on one machine or several (:mod:`hf_s2s.training.machines`: what the main process
prepares reaches every machine); the phases from saving on (the model folder, the test-set evaluation, the files
written at the end) happen on the main process only.
"""

import json
import logging
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from datasets import Dataset
from transformers import (
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    EarlyStoppingCallback,
    GenerationConfig,
    TrainerCallback,
)

from ..data import corpus as data_lib
from ..data import tokenization
from ..data.encoding import tokenize_corpus
from ..data.filters import CorpusFilter
from ..data.regularization import RegularizedTrainSet
from ..hub.card import write_model_card
from ..hub.results import DecodingScores, RunResults
from ..inference.decoding import DEFAULT_LENGTH_PENALTY
from ..inference.plots import plot_alignment
from ..inference.translate import DEFAULT_BATCH_SIZE, alignment, translate
from ..metrics import build_compute_metrics, compute_translation_metrics
from ..models.loading import load_model, load_tokenizer
from ..models.modeling_common import LENGTH_BOUND_FIELDS
from ..models.output_record import output_problem, record_output
from .arguments import (
    FILTER_FLAGS,
    RECIPES_DIR,
    DataArguments,
    DecodingArguments,
    JobArguments,
    ModelArguments,
    SelectionArguments,
    TrainingArguments,
    build_config,
    default_training_arguments,
    given_tokenizer,
    load_recipe,
    parse_args,
    subword_samplers,
    tokenizer_arguments,
)
from .callbacks import SlowdownWarning, TimedCheckpoints
from .checkpoints import AVERAGE_COMMAND, TRAINER_STATE
from .checks import check_arguments, check_tokenizer_covers_corpus, needed_splits
from .ema import EMA_FOLDER, EMACallback
from .generation_settings import GenerationSettings, settle_generation_configs
from .machines import check_same_on_every_machine, claimed_output_dir, share_folder
from .run_dir import (
    hypotheses_path,
    naming_a_full_disk,
    record_tokenizer_arguments,
    tokenizer_arguments_match,
)
from .selection import AVERAGED_FOLDER, Selection, select_weights
from .trainer import CountingSeq2SeqTrainer, close_progress_bars, move_loss_into_model

logger = logging.getLogger(__name__)


def run(model_args: ModelArguments, data_args: DataArguments, decoding_args: DecodingArguments,
        selection_args: SelectionArguments, training_args: TrainingArguments, callbacks: list | None = None,
        arguments_checked: bool = False, command: list[str] | None = None) -> dict:
    """Train and evaluate (``run(*parse_args(argv))``); returns the results written to ``results.json``, as its dict
    (an empty dict on processes other than the main one). ``callbacks`` are added to the Trainer's.

    The arguments are checked first (``check_arguments``), unless the caller did (``arguments_checked``: the command
    line does, to report a refusal as one line; the checks read checkpoint files and tokenizers, not worth doing
    twice). The process that writes ``output_dir`` (the main process; under ``--save_on_each_node``, the first
    process of each machine, in its own folder) then locks it for the whole run and refuses a folder that holds
    another run (see :mod:`hf_s2s.training.run_dir`); the other processes of an ``accelerate launch`` write only
    where that process lets them, so one lock per folder suffices, and a refusal stops every process
    (:func:`hf_s2s.training.machines.claimed_output_dir`). ``command``: the command line that started the run,
    which that refusal prints back with the flag to resume or start again
    (:func:`hf_s2s.training.run_dir.earlier_run_message`)."""
    args = JobArguments(model_args, data_args, decoding_args, selection_args, training_args)
    if not arguments_checked:
        check_arguments(*args)
    with claimed_output_dir(training_args, selection_args.ema_folder, command):
        results = run_phases(args, callbacks)
    return results.to_dict() if results is not None else {}


def run_phases(args: JobArguments, callbacks: list | None = None) -> RunResults | None:
    """The job on one process of a launch, phase by phase; the results on the main process, None on the others."""
    model_args, data_args, decoding_args, selection_args, training_args = args
    transformers.set_seed(training_args.seed)
    corpus_filter = build_corpus_filter(data_args)
    corpus = load_corpus(data_args, selection_args, training_args, corpus_filter)
    tokenizer = prepare_tokenizer(model_args, data_args, training_args, corpus["train"])
    model, generation = prepare_model(model_args, decoding_args, training_args, tokenizer)
    num_parameters = model.num_parameters()  # counted before a launch's wrapper (FSDP) may shard the model
    trainer = build_trainer(model, tokenizer, corpus, args, callbacks, corpus_filter)
    training = train(trainer, selection_args)
    if corpus_filter.filters and data_args.streaming:
        corpus_filter.log()  # what training read of the stream
    selection = select_weights(trainer, selection_args)
    results = None
    if trainer.is_world_process_zero():
        output_dir = Path(training_args.output_dir)
        with naming_a_full_disk(output_dir, selection_args.ema_folder):
            model_dir = save_model_folder(trainer, tokenizer, generation.saved, data_args, training_args)
            test, samples = evaluate_test_set(
                trainer.model, tokenizer, test_examples(corpus, tokenizer, corpus_filter), data_args, decoding_args,
                output_dir) if "test" in corpus else ({}, [])
        results = collect_results(trainer, num_parameters, training, selection, test, data_args, training_args,
                                  corpus_filter)
        with naming_a_full_disk(output_dir, selection_args.ema_folder):
            write_results(results, samples, model_dir, output_dir)
            if samples:
                save_alignment_plot(trainer.model, tokenizer, samples[0]["source"], output_dir / "alignment.png")
    finish(trainer)
    return results


# --- data ---------------------------------------------------------------------------------------------------------


def build_corpus_filter(data_args: DataArguments) -> CorpusFilter:
    """The --filter_* flags, for the splits they apply to (every phase that reads the corpus applies its
    part)."""
    return CorpusFilter(data_args.pair_filters(), data_args.filtered_splits(), data_args.source_lang,
                        data_args.target_lang, flags=FILTER_FLAGS)


def load_corpus(data_args: DataArguments, selection_args: SelectionArguments, training_args: TrainingArguments,
                corpus_filter: CorpusFilter | None = None):
    """The corpus, cut to ``--max_*_samples``, then the text filters of ``corpus_filter`` applied (before a
    tokenizer is trained on it); refused, naming the split and what needs it, when it lacks a split the run
    needs (:func:`hf_s2s.training.checks.needed_splits`): found here for a corpus whose splits only reading
    tells, before a tokenizer is trained or a model built."""
    corpus = data_lib.load_translation_corpus(
        data_args.dataset, source_lang=data_args.source_lang, target_lang=data_args.target_lang,
        data_dir=data_args.data_dir, dataset_config=data_args.dataset_config, streaming=data_args.streaming,
    )
    data_lib.check_splits(corpus, data_args.dataset, needed_splits(selection_args, training_args))
    for split, limit in data_args.sample_limits().items():
        if limit is not None and split in corpus:
            corpus[split] = corpus[split].take(limit) if data_args.streaming else \
                corpus[split].select(range(min(limit, len(corpus[split]))))
    return corpus_filter.filter_texts(corpus) if corpus_filter is not None else corpus


# --- tokenizer ----------------------------------------------------------------------------------------------------


def tokenizer_source(model_args: ModelArguments) -> str:
    """Whose tokenizer the run uses, in words."""
    given = model_args.tokenizer_name_or_path or model_args.model_name_or_path
    return given or "the run (trained on its training split)"


def prepare_tokenizer(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments,
                      train_split):
    """The given tokenizer (``--tokenizer_name_or_path``, a folder or a SentencePiece ``.model``, with
    ``--target_tokenizer_name_or_path`` for a separate target side; else the fine-tuned model's), or one trained on
    ``train_split`` into ``<output_dir>/tokenizer`` (:func:`train_run_tokenizer`). Under a launch over several
    machines, refused unless every machine has the same one."""
    if model_args.tokenizer_name_or_path:
        tokenizer = given_tokenizer(model_args)
    elif model_args.model_name_or_path:
        tokenizer = load_tokenizer(model_args.model_name_or_path)
    else:
        tokenizer = train_run_tokenizer(model_args, data_args, training_args, train_split)
    given = model_args.tokenizer_name_or_path or model_args.model_name_or_path
    check_same_on_every_machine(tokenization.tokenizer_digest(tokenizer), training_args, "the tokenizer",
                                f"give every machine the same files at {given}" if given else
                                "the shared --output_dir must show every machine the tokenizer/ process 0 wrote")
    return tokenizer


def train_run_tokenizer(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments,
                        train_split):
    """The tokenizer the run trains on ``train_split``, on the main process only, into ``<output_dir>/tokenizer``,
    from where every machine reads it (:func:`hf_s2s.training.machines.share_folder` writes it on the machines that
    keep their own folder). A resumed run reuses the tokenizer it trained, only when it asks for the same one (run()
    refuses other runs' folders)."""
    tokenizer_dir = Path(training_args.output_dir) / "tokenizer"
    arguments = tokenizer_arguments(model_args, data_args)
    if training_args.process_index == 0 and not tokenizer_arguments_match(tokenizer_dir, arguments):
        tokenizers = tokenization.train_translation_tokenizers(
            train_split, source_lang=data_args.source_lang, target_lang=data_args.target_lang,
            vocab_size=model_args.vocab_size, model_type=model_args.tokenizer_type,
            joint=not model_args.separate_vocabs, target_vocab_size=model_args.target_vocab_size,
            library=model_args.tokenizer_library, flags=("--vocab_size", "--target_vocab_size"),
        )
        tokenizers.save_pretrained(tokenizer_dir)
        record_tokenizer_arguments(tokenizer_dir, arguments)
    share_folder(tokenizer_dir, training_args)
    return load_tokenizer(tokenizer_dir)


# --- model --------------------------------------------------------------------------------------------------------


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


def prepare_model(model_args: ModelArguments, decoding_args: DecodingArguments, training_args: TrainingArguments,
                  tokenizer) -> tuple[Any, GenerationSettings]:
    """:func:`build_model`, and the generation configs the run decodes with and saves, settled before training
    (:func:`hf_s2s.training.generation_settings.settle_generation_configs`: refused there when they cannot be saved).
    The model validates with ``training``, the one its checkpoints hold; the saved folder gets ``saved``. What the
    run changes in a fine-tuned folder's own settings is said in a warning."""
    model = build_model(model_args, tokenizer)
    source = model_args.model_name_or_path
    generation = settle_generation_configs(model.generation_config, decoding_args, training_args,
                                           source=source or "the new model")
    if source and generation.changes:
        logger.warning("the generation config of %s is changed for this run: %s", source, "; ".join(generation.changes))
    model.generation_config = generation.training
    logger.info("model: %s with %s parameters", model.config.model_type, f"{model.num_parameters():,}")
    return model, generation


# --- train --------------------------------------------------------------------------------------------------------


def build_trainer(model, tokenizer, corpus, args: JobArguments, callbacks: list | None = None,
                  corpus_filter: CorpusFilter | None = None) -> CountingSeq2SeqTrainer:
    """The tokenized corpus (the token filters of ``corpus_filter`` applied) and the trainer around ``model``:
    ``callbacks``, then the job's own (:func:`job_callbacks`), and label smoothing and R-Drop in the model's own
    loss."""
    data_args, selection_args, training_args = args.data, args.selection, args.training
    with training_args.main_process_first(desc="tokenize"):
        tokenized = tokenize_corpus(
            corpus, tokenizer, source_lang=data_args.source_lang, target_lang=data_args.target_lang,
            max_source_length=data_args.max_source_length, max_target_length=data_args.max_target_length,
            num_proc=data_args.preprocessing_num_workers, corpus_filter=corpus_filter,
        )
    if corpus_filter is not None and corpus_filter.filters and not data_args.streaming:
        corpus_filter.log()
    # every machine reads and encodes its own copy of the corpus (a stream is not counted before it is read)
    check_same_on_every_machine({split: len(pairs) for split, pairs in tokenized.items() if isinstance(pairs, Dataset)},
                                training_args, "the number of pairs of each split, encoded",
                                "give every machine the same corpus (--dataset, --data_dir or $HF_S2S_DATA_DIR)")
    poorly_covered = check_tokenizer_covers_corpus(tokenized["train"], tokenizer, tokenizer_source(args.model))
    if poorly_covered:
        logger.warning(poorly_covered)
    train_dataset = regularized_train_set(tokenized["train"], corpus["train"], tokenizer, data_args,
                                          training_args.data_seed if training_args.data_seed is not None
                                          else training_args.seed)
    callbacks = [*(callbacks or []), *job_callbacks(selection_args, training_args)]
    trainer = CountingSeq2SeqTrainer(
        model=model, args=training_args, train_dataset=train_dataset,
        eval_dataset=tokenized.get("validation"), data_collator=DataCollatorForSeq2Seq(
            tokenizer, model=model, label_pad_token_id=-100), processing_class=tokenizer,
        compute_metrics=build_compute_metrics(tokenizer), callbacks=callbacks,
        max_tokens_per_batch=data_args.max_tokens_per_batch, streaming_window=data_args.streaming_window,
    )
    move_loss_into_model(trainer)
    return trainer


def job_callbacks(selection_args: SelectionArguments, training_args: TrainingArguments) -> list[TrainerCallback]:
    """The callbacks the job adds to Trainer's, in the order they run: early stopping when the best checkpoint is
    kept, the EMA of the weights when asked for, the timed checkpoints (after the EMA's, which writes a checkpoint's
    ema/ before the timed checkpoint it supersedes is deleted), and on the CPU the slowdown warning."""
    callbacks = []
    if selection_args.early_stopping_patience and training_args.load_best_model_at_end:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=selection_args.early_stopping_patience))
    if selection_args.ema_decay is not None:
        callbacks.append(EMACallback(selection_args.ema_decay, resume_from=training_args.resume_from_checkpoint))
    if training_args.save_interval_minutes > 0:
        callbacks.append(TimedCheckpoints(training_args.save_interval_minutes))
    if training_args.device.type == "cpu":
        callbacks.append(SlowdownWarning())
    return callbacks


def regularized_train_set(tokenized_train, train_pairs, tokenizer, data_args: DataArguments, seed: int):
    """The training split as the trainer reads it: ``tokenized_train`` itself, or, with ``--bpe_dropout`` or
    ``--unigram_alpha``, a :class:`~hf_s2s.data.regularization.RegularizedTrainSet` that segments each sentence anew
    in every epoch (seeded with ``seed``, epoch and example). Only training batches: validation keeps the deterministic
    segmentation."""
    if data_args.bpe_dropout is None and data_args.unigram_alpha is None:
        return tokenized_train
    source, target = subword_samplers(tokenizer, data_args)
    pairs = [(pair[data_args.source_lang], pair[data_args.target_lang]) for pair in train_pairs["translation"]]
    return RegularizedTrainSet(tokenized_train, pairs, source, target, seed, data_args.max_source_length,
                               data_args.max_target_length)


@dataclass
class Training:
    """What training measured (for results.json)."""

    seconds: float  # the training steps only: the validations during training are left out
    validation_seconds: float
    tokens: int  # source + target tokens trained on, padding excluded, every process together
    epochs: float
    loss: float  # mean training loss
    resumed_from_step: int | None = None  # --resume_from_checkpoint's step: the times and tokens are this session's


def train(trainer: CountingSeq2SeqTrainer, selection_args: SelectionArguments) -> Training:
    """Train (resuming from ``--resume_from_checkpoint``); a full disk is named with the checkpoints left intact."""
    resumed_from_step = _checkpoint_step(trainer.args.resume_from_checkpoint)
    start = time.perf_counter()
    with naming_a_full_disk(trainer.args.output_dir, selection_args.ema_folder):  # checkpoints, ema/ at the end, logs
        try:
            result = trainer.train(resume_from_checkpoint=trainer.args.resume_from_checkpoint)
        except KeyboardInterrupt:
            close_progress_bars(trainer)  # what the command prints next starts a line of its own, and stays last
            raise
    # Validation (generation + BLEU each epoch) is timed by Trainer; training speed leaves it out. A resumed run's
    # log holds the earlier sessions' validations too: only this session's count against this session's time.
    validation_seconds = sum(entry.get("eval_runtime", 0.0) for entry in trainer.state.log_history
                             if entry.get("step", 0) > (resumed_from_step or 0))
    return Training(seconds=time.perf_counter() - start - validation_seconds, validation_seconds=validation_seconds,
                    resumed_from_step=resumed_from_step,
                    tokens=trainer.all_processes_train_tokens(), epochs=trainer.state.epoch,
                    loss=result.training_loss)


def _checkpoint_step(checkpoint) -> int | None:
    """The global step of the checkpoint a run resumes from (``--resume_from_checkpoint``: a folder), or None."""
    if not isinstance(checkpoint, (str, Path)) or not checkpoint:
        return None
    state = Path(checkpoint) / TRAINER_STATE
    return json.loads(state.read_text())["global_step"] if state.is_file() else None


# --- save ---------------------------------------------------------------------------------------------------------


def save_model_folder(trainer, tokenizer, generation_config: GenerationConfig, data_args: DataArguments,
                      training_args: TrainingArguments) -> Path:
    """Save the weights the run keeps, with the tokenizer, into ``<output_dir>/model`` and return it. The folder
    decodes as the test set is decoded: with ``generation_config`` (:class:`GenerationSettings`' ``saved``, checked
    to save before training: ``save_pretrained`` writes it before the weights) and sources truncated to
    ``--max_source_length`` as in training; ``averaged/`` and ``ema/`` get the same settings."""
    output_dir = Path(training_args.output_dir)
    model_dir = output_dir / "model"
    model = trainer.model
    model.generation_config = generation_config
    tokenizer.model_max_length = data_args.max_source_length
    trainer.save_model(model_dir)  # best checkpoint when load_best_model_at_end
    tokenizer.save_pretrained(model_dir)
    for candidate in (output_dir / AVERAGED_FOLDER, output_dir / EMA_FOLDER):  # the other weights decode alike
        if candidate.is_dir():
            # an average as its averaging recorded it is recorded again with these settings, so that a
            # resumed run may replace it (selection.check_average_replaceable)
            recorded = candidate.name == AVERAGED_FOLDER and not output_problem(candidate, AVERAGE_COMMAND)
            model.generation_config.save_pretrained(candidate)
            tokenizer.save_pretrained(candidate)
            if recorded:
                record_output(candidate, AVERAGE_COMMAND)
    return model_dir


# --- evaluate -----------------------------------------------------------------------------------------------------


def test_examples(corpus, tokenizer, corpus_filter: CorpusFilter):
    """The test split the test set is scored on: the pairs the filters kept when they apply to it (its text
    filters were applied as it loaded; the token filters judge it here, as tokenize_corpus judges the splits
    it encodes)."""
    if not (corpus_filter.applies_to("test") and corpus_filter.filters.on_tokens):
        return corpus["test"]
    pairs = corpus_filter.keep_by_tokens([example["translation"] for example in corpus["test"]], tokenizer)
    return [{"translation": pair} for pair in pairs]


def evaluate_test_set(model, tokenizer, test_pairs, data_args: DataArguments, decoding_args: DecodingArguments,
                      output_dir: Path) -> tuple[dict[str, DecodingScores], list[dict]]:
    """Translate the test split with each beam size; returns the scores, each with the decoding settings it
    was measured with, and sample translations. The translations behind each score are written to
    ``hypotheses_path(output_dir, key)``. Decoding follows ``model.generation_config`` (the settings the saved
    folder carries) and ``translate``'s default batch size, so ``hf-s2s translate`` on the folder gives the
    same translations."""
    pairs = [example["translation"] for example in test_pairs]
    sources = [pair[data_args.source_lang] for pair in pairs]
    references = [pair[data_args.target_lang] for pair in pairs]
    scores, samples = {}, []
    config = model.generation_config
    # the length limit the folder decodes with: a max_new_tokens (kept only without --generation_max_length) wins
    length = {"max_new_tokens": config.max_new_tokens} if config.max_new_tokens is not None else \
        {"max_length": config.max_length}
    # the folder's length penalty, as hf-s2s translate completes it (a converted Joey NMT folder carries 0)
    length_penalty = DEFAULT_LENGTH_PENALTY if config.length_penalty is None else config.length_penalty
    for num_beams in decoding_args.test_beams():
        decoding = {"num_beams": num_beams, **length,
                    "length_penalty": length_penalty, "batch_size": DEFAULT_BATCH_SIZE,
                    "max_source_length": data_args.max_source_length,
                    # the source-relative length bound the saved generation config carries (absent in other families)
                    **{name: getattr(model.generation_config, name) for name in LENGTH_BOUND_FIELDS
                       if hasattr(model.generation_config, name)}}
        start = time.perf_counter()
        texts = [h[0].text for h in translate(model, tokenizer, sources, scores=False, **decoding)]
        metrics = compute_translation_metrics(texts, references)
        key = "greedy" if num_beams == 1 else f"beam{num_beams}"
        scores[key] = DecodingScores(**metrics, decode_seconds=round(time.perf_counter() - start, 2),
                                     decoding=decoding)
        hypotheses_path(output_dir, key).write_text("".join(f"{text}\n" for text in texts))
        if not samples:
            samples = [{"source": s, "reference": r, "hypothesis": h} for s, r, h in
                       list(zip(sources, references, texts, strict=True))[: decoding_args.num_sample_translations]]
    return scores, samples


# --- report -------------------------------------------------------------------------------------------------------

# The training arguments results.json (and so the model card) records.
RECORDED_TRAINING_ARGUMENTS = ("learning_rate", "num_train_epochs", "per_device_train_batch_size",
                               "label_smoothing_factor", "rdrop_alpha", "lr_scheduler_type", "warmup_steps", "seed",
                               "adam_beta2", "weight_decay")


def collect_results(trainer, num_parameters: int, training: Training, selection: Selection,
                    test: dict[str, DecodingScores], data_args: DataArguments,
                    training_args: TrainingArguments, corpus_filter: CorpusFilter | None = None) -> RunResults:
    """The run's results, as results.json records them."""
    model = trainer.model
    return RunResults(
        model_type=model.config.model_type, dataset=data_args.dataset, source_lang=data_args.source_lang,
        target_lang=data_args.target_lang, recipe=training_args.recipe,
        max_tokens_per_batch=data_args.max_tokens_per_batch,
        corpus_filters=corpus_filter.report() if corpus_filter is not None else None,
        num_parameters=num_parameters,
        train_seconds=round(training.seconds, 1), validation_seconds=round(training.validation_seconds, 1),
        train_tokens=training.tokens, train_tokens_per_second=round(training.tokens / training.seconds, 1),
        resumed_from_step=training.resumed_from_step,
        epochs=training.epochs, train_loss=training.loss, best_validation_bleu=selection.validation_bleu,
        checkpoint_averaging=selection.averaging, ema=selection.ema, test=test, device=str(trainer.args.device),
        machine=describe_machine(), torch_threads=torch.get_num_threads(), world_size=training_args.world_size,
        training_arguments={name: value for name, value in training_args.to_dict().items()
                            if name in RECORDED_TRAINING_ARGUMENTS},
        model_config=model.config.to_diff_dict(),
    )


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


def write_results(results: RunResults, samples: list[dict], model_dir: Path, output_dir: Path) -> None:
    """results.json in the model folder (with the model card it fills) and the output folder, and samples.txt."""
    results_json = results.to_json()
    (model_dir / "results.json").write_text(results_json)
    write_model_card(model_dir)  # README.md filled from the results.json just written
    (output_dir / "results.json").write_text(results_json)
    with open(output_dir / "samples.txt", "w") as f:
        for s in samples:
            f.write(f"SRC: {s['source']}\nREF: {s['reference']}\nHYP: {s['hypothesis']}\n\n")


def save_alignment_plot(model, tokenizer, sentence: str, path: Path) -> Path | None:
    """Heatmap of the attention the model pays to ``sentence`` while translating it (greedy); None for a
    model without attention (RNN ``attention_type="none"``)."""
    if getattr(model.config, "attention_type", None) == "none":
        logger.info("no alignment plot: the model has no attention")
        return None
    weights, source_tokens, target_tokens = alignment(model, tokenizer, sentence)
    return plot_alignment(weights, source_tokens, target_tokens, path, title=sentence)


def finish(trainer) -> None:
    """Shut the process group down once every process is here: a process that exits with gloo still running can
    abort ("terminate called without an active exception"), failing a run that had finished."""
    trainer.accelerator.wait_for_everyone()
    if trainer.args.world_size > 1:
        let_gloo_workers_finish()
    trainer.accelerator.end_training()


def let_gloo_workers_finish(seconds: float = 1.0) -> None:
    """Called after the final barrier, before the process group is destroyed. The barrier's work object is freed by
    a gloo worker thread after the barrier returns, and freeing it frees tensors owned by Python, which needs the
    GIL. If the process group is destroyed meanwhile (by ``end_training``, or when DDP's Reducer is released as the
    run returns), its destructor joins that worker while holding the GIL: a deadlock seen about once in ten
    2-process runs on a busy 2-core machine (py-spy: the main thread in ~ProcessGroupGloo -> std::thread::join, the
    worker in ~AsyncBarrierWork -> decref_pyobject). Sleeping releases the GIL so the worker finishes first."""
    time.sleep(seconds)


# The arguments live in hf_s2s.training.arguments; the job's callers import them from here too.
__all__ = ["DataArguments", "DecodingArguments", "ModelArguments", "RECIPES_DIR", "SelectionArguments",
           "TrainingArguments", "build_model", "check_arguments", "default_training_arguments", "load_recipe",
           "parse_args", "run", "run_phases"]
