""":func:`check_arguments`: everything about a training job that can be checked before the long work starts (corpus,
tokenizer training, training, test decoding), so that a bad flag costs seconds, not a run. Each error names the
flag, the value and what is allowed.
"""

import math
from pathlib import Path

from datasets import Dataset

from ..data import corpus as data_lib
from ..data import tokenization
from ..data.filters import TOKEN_FILTER_FIELDS, check_filters
from ..data.regularization import check_regularization
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
    given_tokenizer,
    model_config_overrides,
    subword_samplers,
    tokenizer_arguments,
)
from .checkpoints import model_config_differences
from .ema import EMA_FOLDER, check_ema_decay, check_ema_resume
from .run_dir import check_output_dir, check_resume, run_inputs, tokenizer_arguments_match
from .selection import check_average_replaceable
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
    if not 0.0 <= training_args.rdrop_alpha < math.inf:
        raise ValueError(f"--rdrop_alpha (the weight of R-Drop's KL term) must be a finite number >= 0 (0: off), got "
                         f"{training_args.rdrop_alpha}")
    if not 0.0 <= training_args.save_interval_minutes < math.inf:
        raise ValueError(f"--save_interval_minutes must be a finite number of minutes >= 0 (0: checkpoints only at "
                         f"--save_strategy's points), got {training_args.save_interval_minutes}")
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
        check_average_replaceable(training_args.output_dir, selection_args.average_last_checkpoints)
    check_evaluation(training_args)
    if training_args.generation_config is not None:
        raise ValueError("--generation_config would replace the model's generation config for validation only, and "
                         "its special token ids with the tokenizer's: a run decodes with the model's own "
                         "(generation_config.json of --model_name_or_path), with --generation_max_length, "
                         "--generation_num_beams, --test_num_beams and the length bound flags on top; leave it out")
    config = build_config(model_args)
    if bound and config.model_type not in FAMILIES:
        raise ValueError(f"{' / '.join(LENGTH_BOUND_FLAGS)} set the length bound of the {list(FAMILIES)} families; "
                         f"a {config.model_type} model has none")
    if training_args.rdrop_alpha and config.model_type not in FAMILIES:
        raise ValueError(f"--rdrop_alpha is computed by the loss of the {list(FAMILIES)} families; a "
                         f"{config.model_type} model's loss has no R-Drop term: leave --rdrop_alpha out")
    if getattr(config, "position_embedding_type", None) == "learned":
        for flag, length in (("--generation_max_length", training_args.generation_max_length),
                             ("--max_source_length", data_args.max_source_length),
                             ("--max_target_length", data_args.max_target_length)):
            if length is not None and length > config.max_position_embeddings:
                raise ValueError(f"{flag} {length} is longer than the {config.max_position_embeddings} positions the "
                                 f"model's learned position table holds (max_position_embeddings)")
    if model_args.model_name_or_path:
        check_fine_tuning_config(model_args, config)
        check_fine_tuning_tokenizer(model_args)
    if model_args.model_name_or_path or model_args.tokenizer_name_or_path:
        check_given_tokenizer_arguments(model_args)
    if training_args.resume_from_checkpoint is not None:
        check_resumed_model(model_args, data_args, training_args)


def check_inputs(model_args: ModelArguments, data_args: DataArguments, selection_args: SelectionArguments,
                 training_args: TrainingArguments) -> None:
    """The model, tokenizer and corpus the run reads: a missing local path is named as one (not looked up on the
    Hub), the corpus must have the splits the run needs (where its file names tell, before it is read), and a
    tokenizer to train must be trainable."""
    for flag, value in (("--model_name_or_path", model_args.model_name_or_path),
                        ("--tokenizer_name_or_path", model_args.tokenizer_name_or_path),
                        ("--target_tokenizer_name_or_path", model_args.target_tokenizer_name_or_path)):
        if value and not tokenization.is_sentencepiece_model(value):
            local_folder(value, flag=flag)
    splits = data_lib.corpus_splits(data_args.dataset, data_args.source_lang, data_args.target_lang,
                                     data_args.data_dir, flag="--dataset")
    if splits is not None:
        data_lib.check_splits(splits, data_args.dataset, needed_splits(selection_args, training_args))
    if model_args.target_vocab_size is not None and not model_args.separate_vocabs:
        raise ValueError("--target_vocab_size is the target side of --separate_vocabs; pass --separate_vocabs too "
                         "(or leave it out for a joint vocabulary of --vocab_size)")
    if model_args.separate_vocabs and (model_args.tokenizer_name_or_path or model_args.model_name_or_path):
        raise ValueError("--separate_vocabs trains new tokenizers; with --tokenizer_name_or_path or "
                         "--model_name_or_path the given tokenizer decides the vocabularies: leave it out")
    if model_args.target_tokenizer_name_or_path and not model_args.tokenizer_name_or_path:
        raise ValueError("--target_tokenizer_name_or_path is the target side of --tokenizer_name_or_path; pass the "
                         "source side's tokenizer with --tokenizer_name_or_path too")
    given = model_args.tokenizer_name_or_path or model_args.model_name_or_path
    if given and model_args.tokenizer_library != "tokenizers":
        raise ValueError(f"--tokenizer_library {model_args.tokenizer_library} trains a new tokenizer; with "
                         "--tokenizer_name_or_path or --model_name_or_path the given tokenizer is used: leave it out")
    if not given:
        tokenization.check_training_arguments(
            model_args.vocab_size, model_args.tokenizer_type, not model_args.separate_vocabs,
            model_args.target_vocab_size, flags=("--vocab_size", "--target_vocab_size", "--tokenizer_type",
                                                 "--tokenizer_library"), library=model_args.tokenizer_library)
    if any(tokenization.is_sentencepiece_model(path) for path in (model_args.tokenizer_name_or_path,
                                                                  model_args.target_tokenizer_name_or_path) if path):
        given_tokenizer(model_args)  # a .model is read and converted here: a missing or unusable one is named now
    check_subword_regularization(model_args, data_args, training_args)


def check_subword_regularization(model_args: ModelArguments, data_args: DataArguments,
                                 training_args: TrainingArguments) -> None:
    """``--bpe_dropout`` / ``--unigram_alpha``: values in range, a subword model of the kind the flag samples (the
    tokenizer to train, or the given one, loaded here), a corpus in memory, and data loader workers that are started
    afresh each epoch (persistent workers would keep the first epoch's segmentations)."""
    if data_args.bpe_dropout is None and data_args.unigram_alpha is None:
        return
    check_regularization(data_args.bpe_dropout, data_args.unigram_alpha)
    flag = "--bpe_dropout" if data_args.bpe_dropout is not None else "--unigram_alpha"
    if data_args.streaming:
        raise ValueError(f"{flag} segments the sentences of a corpus read into memory anew in each epoch; it cannot be "
                         "combined with --streaming")
    filters = data_args.pair_filters()
    token_filters = [FILTER_FLAGS[name] for name in TOKEN_FILTER_FIELDS if getattr(filters, name) is not None]
    if token_filters:
        raise ValueError(f"{flag} segments each sentence anew in every epoch, so its token count changes; "
                         f"{', '.join(token_filters)} judge the fixed segmentation, and cannot be combined with it: "
                         "leave them out (--max_source_length and --max_target_length still cut what is too long)")
    if training_args.dataloader_persistent_workers and training_args.dataloader_num_workers > 0:
        raise ValueError(f"{flag} segments the sentences anew in each epoch, which persistent data loader workers "
                         "would not see: leave out --dataloader_persistent_workers")
    if model_args.tokenizer_name_or_path:
        subword_samplers(given_tokenizer(model_args), data_args)
    elif model_args.model_name_or_path:
        subword_samplers(load_tokenizer(model_args.model_name_or_path), data_args)
    else:
        wanted = "bpe" if data_args.bpe_dropout is not None else "unigram"
        if model_args.tokenizer_type != wanted:
            raise ValueError(f"{flag} regularizes {wanted} tokenizers, but --tokenizer_type is "
                             f"{model_args.tokenizer_type}: pass --tokenizer_type {wanted}, or "
                             f"{'--unigram_alpha' if wanted == 'bpe' else '--bpe_dropout'} instead")


def check_fine_tuning_tokenizer(model_args: ModelArguments) -> None:
    """Fine-tuning a model folder that holds its tokenizer with another ``--tokenizer_name_or_path`` is refused
    unless both map text to the same ids: the model's embeddings belong to its own tokenizer's ids, and a
    tokenizer of another language pair of the same size would train without a word. A folder without a tokenizer
    (``save_pretrained`` of the model alone) needs one given."""
    model, given = model_args.model_name_or_path, model_args.tokenizer_name_or_path
    folder = local_folder(model) if model else None
    holds_tokenizer = folder is not None and any((folder / name).is_file() for name in TOKENIZER_FILES)
    if folder is not None and not holds_tokenizer and not given:
        raise ValueError(f"--model_name_or_path {model} holds no tokenizer (no {' or '.join(TOKENIZER_FILES)}): "
                         f"pass the tokenizer the model was trained with as --tokenizer_name_or_path, or save it into "
                         f"the folder (tokenizer.save_pretrained)")
    if not holds_tokenizer or not given:
        return
    differences = tokenization.vocabulary_differences(given_tokenizer(model_args),
                                                      load_tokenizer(folder))
    if differences:
        raise ValueError(f"--tokenizer_name_or_path {given} is not the tokenizer of --model_name_or_path {model} "
                         f"({'; '.join(differences)}): the model's embeddings belong to the ids of its own tokenizer; "
                         f"leave out --tokenizer_name_or_path to fine-tune with it")


def check_fine_tuning_config(model_args: ModelArguments, config) -> None:
    """A fine-tuned model keeps its folder's ``config``: a ``--model_type`` or ``--model_config`` (given, or a
    ``--recipe``'s) that sets a field to another value than the folder has would be ignored without a word, so
    it is refused, naming the fields."""
    if "model_type" in model_args.given and model_args.model_type != config.model_type:
        raise ValueError(f"--model_type {model_args.model_type!r}, but --model_name_or_path "
                         f"{model_args.model_name_or_path} is a {config.model_type!r} model, and a "
                         f"fine-tuned model keeps its folder's config: leave out --model_type (a --recipe's "
                         f"counts too), or train a new model without --model_name_or_path")
    if not model_args.model_config:
        return
    overrides = model_config_overrides(model_args.model_config)
    config = config.to_dict()
    differing = [f"{name} {value!r} (the folder: {config.get(name)!r})" for name, value in overrides.items()
                 if config.get(name) != value]
    if differing:
        raise ValueError(f"--model_config sets {', '.join(differing)}, but a fine-tuned model keeps the config of "
                         f"--model_name_or_path {model_args.model_name_or_path}: leave these fields out of "
                         f"--model_config (a --recipe's model_config counts too), or train a new model without "
                         f"--model_name_or_path")


def check_given_tokenizer_arguments(model_args: ModelArguments) -> None:
    """With a given tokenizer (``--tokenizer_name_or_path``, else the fine-tuned folder's) the run trains
    none: ``--vocab_size`` and ``--tokenizer_type`` (given, or a ``--recipe``'s) with another value than that
    tokenizer has would be ignored without a word, so they are refused, naming the tokenizer's value and the
    given one."""
    asked = {name: getattr(model_args, name) for name in ("vocab_size", "tokenizer_type")
             if name in model_args.given}
    if not asked:
        return
    flag = "--tokenizer_name_or_path" if model_args.tokenizer_name_or_path else "--model_name_or_path"
    source = model_args.tokenizer_name_or_path or model_args.model_name_or_path
    tokenizer = given_tokenizer(model_args) if model_args.tokenizer_name_or_path else load_tokenizer(source)
    has = {"vocab_size": len(tokenizer), "tokenizer_type": tokenization.subword_model_type(tokenizer)}
    differing = [f"--{name} {value!r} (the tokenizer's: {has[name]!r})" for name, value in asked.items()
                 if has[name] is not None and value != has[name]]
    if not differing:
        return
    instead = ("a fine-tuned model keeps the tokenizer it was trained with: leave them out"
               if model_args.model_name_or_path else
               "leave them out, or leave out --tokenizer_name_or_path to train a tokenizer with them")
    raise ValueError(f"{', '.join(differing)}: the run uses the tokenizer of {flag} {source} as it is and "
                     f"trains none; {instead} (a --recipe's count too)")


# Shares of <unk> among the tokens of one side of the training split above which the tokenizer is said not to fit the
# corpus: a warning above the first; above the second (most tokens unknown: the model would learn to translate
# <unk>) a refusal. A given word-level tokenizer (a converted toolkit's) reaches them on text that is not tokenized
# and lowercased as the toolkit's was, on another language, or with --source_lang and --target_lang swapped.
UNKNOWN_SHARE_WARNING = 0.1
UNKNOWN_SHARE_LIMIT = 0.5


def check_tokenizer_covers_corpus(tokenized_train, tokenizer, source: str) -> str | None:
    """Refuse a tokenizer (``source`` says whose) that maps more than :data:`UNKNOWN_SHARE_LIMIT` of the tokenized
    training split's source or target tokens to <unk>; above :data:`UNKNOWN_SHARE_WARNING`, return the warning to
    log. A streamed split is not read for it."""
    if not isinstance(tokenized_train, Dataset):  # a stream has column_names too, and reading it reads it all
        return None
    shares = {"source": tokenization.unknown_token_share(tokenized_train["input_ids"], tokenizer.unk_token_id),
              "target": tokenization.unknown_token_share(tokenized_train["labels"],
                                                         tokenization.target_side(tokenizer).unk_token_id)}
    high = {side: share for side, share in shares.items() if share > UNKNOWN_SHARE_WARNING}
    if not high:
        return None
    said = (f"the tokenizer of {source} maps {' and '.join(f'{share:.0%} of the {side}' for side, share in high.items())} "
            f"tokens of the training split to <unk>: it does not fit this corpus (text tokenized or cased otherwise "
            f"than the tokenizer was made for, another language, or --source_lang and --target_lang swapped)")
    if max(high.values()) > UNKNOWN_SHARE_LIMIT:
        raise ValueError(f"{said}; the model would learn to translate <unk>: give a corpus in the tokenizer's "
                         f"languages, written as its vocabulary is")
    return said


# What a refused resume can do instead, as the refusals say it.
RESUME_OR_START_AGAIN = ("resume with the options the run was started with ({options}), or start a new run: leave out "
                         "--resume_from_checkpoint and choose another --output_dir (or pass --overwrite_output_dir to "
                         "replace this run)")


def resumed_tokenizer(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments):
    """The tokenizer a resumed run will use: the one given (``--tokenizer_name_or_path``, else the fine-tuned
    model's), or the one the run trained into ``<output_dir>/tokenizer``, refused when it was trained with other
    arguments (:func:`~hf_s2s.training.run_dir.tokenizer_arguments_match`) or is missing: the run would train
    another, with ids the checkpoint's embeddings do not belong to."""
    if model_args.tokenizer_name_or_path:
        return given_tokenizer(model_args)
    if model_args.model_name_or_path:
        return load_tokenizer(model_args.model_name_or_path)
    tokenizer_dir = Path(training_args.output_dir) / "tokenizer"
    if not tokenizer_arguments_match(tokenizer_dir, tokenizer_arguments(model_args, data_args)):
        raise ValueError(f"--resume_from_checkpoint {training_args.resume_from_checkpoint}: this run would train a new "
                         f"tokenizer, as {tokenizer_dir} is missing; the checkpoint was trained with its own: pass "
                         f"--tokenizer_name_or_path {training_args.resume_from_checkpoint} to resume with it")
    return load_tokenizer(tokenizer_dir)


def check_resumed_model(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> None:
    """A resumed run builds its model from its own options and loads the checkpoint's weights into it: refuse,
    naming every difference, a model of another configuration (another --model_config, --recipe, --model_type or
    --model_name_or_path; Trainer would fail with a size mismatch, or load weights of the same shapes into a
    different model) and a tokenizer that maps text to other ids than the checkpoint's."""
    checkpoint = training_args.resume_from_checkpoint
    tokenizer = resumed_tokenizer(model_args, data_args, training_args)
    if any((Path(checkpoint) / name).is_file() for name in TOKENIZER_FILES):
        differences = tokenization.vocabulary_differences(tokenizer, load_tokenizer(checkpoint))
        if differences:
            options = "--tokenizer_name_or_path, --model_name_or_path"
            raise ValueError(f"--resume_from_checkpoint {checkpoint} was trained with another tokenizer than this run "
                             f"uses (this run's vs the checkpoint's: {'; '.join(differences)}); "
                             f"{RESUME_OR_START_AGAIN.format(options=options)}")
    differences = model_config_differences(checkpoint, build_config(model_args, tokenizer))
    if differences:
        options = "--model_type, --model_config, --recipe, --model_name_or_path"
        raise ValueError(f"--resume_from_checkpoint {checkpoint} holds a model of another configuration than this run "
                         f"builds: {'; '.join(differences)}; {RESUME_OR_START_AGAIN.format(options=options)}")


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
    """The validation BLEU of each evaluation is computed on generated translations. (That keeping the best checkpoint
    needs evaluations is checked as the command line is parsed, before transformers builds its arguments:
    :func:`hf_s2s.training.arguments.check_best_model_strategies`.)"""
    if not training_args.predict_with_generate and training_args.eval_strategy != "no":
        raise ValueError("--predict_with_generate false: the validation BLEU of each evaluation is computed on "
                         "generated translations; keep it true, or pass --eval_strategy no (and "
                         "--load_best_model_at_end false) to train without validation")


__all__ = ["check_arguments", "check_resumed_model", "check_tokenizer_covers_corpus", "needed_splits"]
