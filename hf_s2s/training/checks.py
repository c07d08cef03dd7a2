""":func:`check_arguments`: everything about a training job that can be checked before the long work starts (corpus,
tokenizer training, training, test decoding), so that a bad flag costs seconds, not a run. Each error names the
flag, the value and what is allowed.
"""

from ..data import corpus as data_lib
from ..data import tokenization
from ..data.filters import check_filters
from ..models.loading import TOKENIZER_FILES, load_tokenizer, local_folder
from .arguments import (
    FAMILIES,
    FILTER_FLAGS,
    LENGTH_BOUND_FLAGS,
    DataArguments,
    DecodingArguments,
    ModelArguments,
    SelectionArguments,
    TrainingArguments,
    build_config,
)
from .ema import EMA_FOLDER, check_ema_decay, check_ema_resume
from .run_dir import check_output_dir, check_resume, run_inputs
from .trainer import check_token_budget_batching


def check_arguments(model_args: ModelArguments, data_args: DataArguments, decoding_args: DecodingArguments,
                    selection_args: SelectionArguments, training_args: TrainingArguments) -> None:
    """Everything about the job that can be checked before the long work (corpus, tokenizer training,
    training, test decoding) starts, so that a bad flag costs seconds, not a run."""
    check_output_dir(training_args.output_dir, run_inputs(model_args, data_args, training_args),
                     training_args.overwrite_output_dir)
    check_inputs(model_args, data_args, selection_args, training_args)
    if data_args.streaming and training_args.max_steps <= 0:
        raise ValueError("--streaming reads a corpus of unknown length: give the number of steps with --max_steps")
    if data_args.max_tokens_per_batch is not None and data_args.max_tokens_per_batch < 1:
        raise ValueError(f"--max_tokens_per_batch must be a positive number of tokens, got "
                         f"{data_args.max_tokens_per_batch}")
    if data_args.max_tokens_per_batch is not None:
        check_token_budget_batching(training_args)
    check_streaming_batches(data_args, training_args)
    check_corpus_filters(data_args, training_args)
    for flag, length in (("--max_source_length", data_args.max_source_length),
                         ("--max_target_length", data_args.max_target_length)):
        if length is not None and length < 2:
            raise ValueError(f"{flag} must be at least 2 (room for one token and </s>), got {length}")
    if training_args.generation_max_length is not None and training_args.generation_max_length < 2:
        raise ValueError(f"--generation_max_length must be at least 2 (it counts the decoder start token: 2 leaves "
                         f"room for one generated token), got {training_args.generation_max_length}")
    last = selection_args.average_last_checkpoints
    if last > 1 and training_args.save_total_limit is not None and training_args.save_total_limit <= last:
        raise ValueError(f"--average_last_checkpoints {last} needs --save_total_limit above {last} (the best "
                         f"checkpoint is kept besides the newest), got {training_args.save_total_limit}")
    if selection_args.ema_decay is not None:
        check_ema_decay(selection_args.ema_decay)
    if data_args.preprocessing_num_workers is not None and data_args.preprocessing_num_workers < 1:
        raise ValueError(f"--preprocessing_num_workers must be a positive number of processes, got "
                         f"{data_args.preprocessing_num_workers}")
    for flag, limit in (("--max_train_samples", data_args.max_train_samples),
                        ("--max_eval_samples", data_args.max_eval_samples),
                        ("--max_test_samples", data_args.max_test_samples)):
        if limit is not None and limit < 1:
            raise ValueError(f"{flag} must be a positive number of pairs (or left out for all), got {limit}")
    decoding_args.test_beams()
    bound = decoding_args.length_bound()
    check_resume(training_args.output_dir, training_args.resume_from_checkpoint, training_args.overwrite_output_dir,
                 EMA_FOLDER)
    if training_args.resume_from_checkpoint is not None:
        check_ema_resume(training_args.resume_from_checkpoint, selection_args.ema_decay)
    check_evaluation(training_args)
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


def check_inputs(model_args: ModelArguments, data_args: DataArguments, selection_args: SelectionArguments,
                 training_args: TrainingArguments) -> None:
    """The model, tokenizer and corpus the run reads: a missing local path is named as one (not looked up on the
    Hub), the corpus must have the splits the run needs (where its file names tell, before it is read), a tokenizer
    to train must be trainable, and a tokenizer given for fine-tuning must be the model's own."""
    for flag, value in (("--model_name_or_path", model_args.model_name_or_path),
                        ("--tokenizer_name_or_path", model_args.tokenizer_name_or_path)):
        if value:
            local_folder(value, flag=flag)
    splits = data_lib.corpus_splits(data_args.dataset, data_args.source_lang, data_args.data_dir, flag="--dataset")
    if splits is not None:
        data_lib.check_splits(splits, data_args.dataset, needed_splits(selection_args, training_args))
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


def check_streaming_batches(data_args: DataArguments, training_args: TrainingArguments) -> None:
    """Token-budget batches of a stream (``--streaming --max_tokens_per_batch``): the stream cannot be read
    ahead of training to find a pair longer than the budget, so the length limits must keep every pair within
    it; the window is a positive number of pairs and only means something there; the stream is read in the
    main process."""
    if data_args.streaming and training_args.accelerator_config.dispatch_batches:
        raise ValueError("--streaming pads each process's batches to their own lengths: --accelerator_config "
                         "dispatch_batches (process 0 reading a batch per process and concatenating them) cannot "
                         "share them out; leave it out (each process then reads the stream and keeps its share)")
    window = data_args.streaming_window_pairs
    budget_on_stream = data_args.streaming and data_args.max_tokens_per_batch is not None
    if window is not None and not budget_on_stream:
        raise ValueError(f"--streaming_window_pairs {window} sets how much of a stream token-budget batches are "
                         "built from: it needs --streaming and --max_tokens_per_batch")
    if window is not None and window < 1:
        raise ValueError(f"--streaming_window_pairs must be a positive number of pairs, got {window}")
    if not budget_on_stream:
        return
    if training_args.dataloader_num_workers:
        raise ValueError(f"--streaming with --max_tokens_per_batch batches the stream in the main process: "
                         f"--dataloader_num_workers must be 0 (each worker would read the whole stream), got "
                         f"{training_args.dataloader_num_workers}")
    # per side, the tighter of the truncation limit (always set) and the length filter: (tokens, flag)
    source = min((limit, flag) for limit, flag in (
        (data_args.max_source_length, "--max_source_length"),
        (data_args.filter_max_source_tokens, "--filter_max_source_tokens")) if limit is not None)
    target = min((limit, flag) for limit, flag in (
        (data_args.max_target_length, "--max_target_length"),
        (data_args.filter_max_target_tokens, "--filter_max_target_tokens")) if limit is not None)
    if source[0] + target[0] > data_args.max_tokens_per_batch:
        raise ValueError(f"--max_tokens_per_batch {data_args.max_tokens_per_batch} on a stream must hold the "
                         f"longest pair the length limits let through, {source[0]} ({source[1]}) + {target[0]} "
                         f"({target[1]}) tokens: a stream is not read ahead to find longer ones; raise the budget or "
                         "lower the limits")


def check_corpus_filters(data_args: DataArguments, training_args: TrainingArguments) -> None:
    """The --filter_* values, and --filter_validation_and_test only with a filter to apply."""
    filters = data_args.pair_filters()
    check_filters(filters, FILTER_FLAGS)
    if data_args.filter_validation_and_test and not filters:
        raise ValueError("--filter_validation_and_test applies the --filter_* flags to the validation and test "
                         "splits, but none is set")
    if filters and data_args.streaming and training_args.dataloader_num_workers:
        raise ValueError(f"the corpus filters count what they remove from a stream in the process that reads it: "
                         f"with --streaming, --dataloader_num_workers must be 0, got "
                         f"{training_args.dataloader_num_workers}")


def needed_splits(selection_args: SelectionArguments, training_args: TrainingArguments) -> dict[str, str]:
    """The corpus splits the run cannot do without, each with what needs it (for :func:`hf_s2s.data.corpus.check_splits`)."""
    needed = {"train": "training"}
    if training_args.eval_strategy != "no":
        needed["validation"] = "evaluation (--eval_strategy is not 'no')"
    elif selection_args.ema_decay is not None:
        needed["validation"] = "choosing between the EMA and the raw weights after training (--ema_decay)"
    elif selection_args.average_last_checkpoints > 1:
        needed["validation"] = ("choosing between the checkpoint average and the last weights after training "
                                "(--average_last_checkpoints)")
    return needed


def check_evaluation(training_args: TrainingArguments) -> None:
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


__all__ = ["check_arguments", "needed_splits"]
