"""Arguments and callbacks for tiny runs of the training job (tests of training, resuming, EMA, run folders)."""

import json

from transformers import AutoTokenizer, TrainerCallback

from hf_s2s.data import corpus as data_lib
from hf_s2s.data.encoding import tokenize_corpus
from hf_s2s.data.sampling import StreamTokenBudgetBatches
from hf_s2s.training.run import parse_args, run
from tests.helpers import TINY, single_thread


def tiny_args(output_dir, model_type="transformer_seq2seq", *extra):
    return parse_args(tiny_argv(output_dir, model_type, *extra))


def trained_vocabulary(extra) -> list[str]:
    """``--vocab_size 280`` for a run that trains its tokenizer; none where ``extra`` gives one (the run refuses a
    --vocab_size that differs from the given tokenizer's)."""
    given = {"--tokenizer_name_or_path", "--model_name_or_path"} & set(map(str, extra))
    return [] if given else ["--vocab_size", "280"]


def tiny_argv(output_dir, model_type="transformer_seq2seq", *extra) -> list[str]:
    """The command line of :func:`tiny_args`, for ``hf-s2s train``."""
    return [
        "--dataset", "synthetic:reversal", "--source_lang", "src", "--target_lang", "tgt", *trained_vocabulary(extra),
        "--model_type", model_type, "--model_config", json.dumps(TINY[model_type]),
        "--max_train_samples", "256", "--max_eval_samples", "32", "--max_test_samples", "16",
        "--output_dir", str(output_dir), "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true",
        "--per_device_train_batch_size", "32", "--per_device_eval_batch_size", "16", "--learning_rate", "3e-3",
        "--warmup_steps", "4", "--num_train_epochs", "2", "--generation_max_length", "16",
        "--test_num_beams", "1,2", "--num_sample_translations", "3", "--logging_steps", "1", *extra,
    ]


def train_args(output_dir, *extra):
    return [
        "--dataset", "synthetic:reversal", "--source_lang", "src", "--target_lang", "tgt", *trained_vocabulary(extra),
        "--model_config", json.dumps(TINY["transformer_seq2seq"]), "--max_train_samples", "16",
        "--max_test_samples", "2", "--max_steps", "1", "--eval_strategy", "no", "--save_strategy", "no",
        "--load_best_model_at_end", "false", "--test_num_beams", "1", "--generation_max_length", "8",
        "--output_dir", str(output_dir), "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true", *extra,
    ]


def train_tiny_folder(output_dir, model_type="transformer_seq2seq", **config):
    """The ``model`` folder of a tiny model (``TINY`` sizes, ``config`` over them) trained by the training job on the
    synthetic reversal task ("c a f" -> "f a c") for 188 steps, on one thread: ~40 s on a loaded 2-core machine. Its
    greedy translations differ from sentence to sentence and are partly right (one of five, about)."""
    if model_type == "transformer_seq2seq":
        config = {"init_std": 0.1, **config}  # from 0.02, the tied table needs hundreds of steps to stop repeating
    arguments = parse_args([
        "--dataset", "synthetic:reversal", "--source_lang", "src", "--target_lang", "tgt", "--vocab_size", "280",
        "--model_type", model_type, "--model_config", json.dumps({**TINY[model_type], **config}),
        "--max_train_samples", "1500", "--max_test_samples", "8", "--num_train_epochs", "4",
        "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false",
        "--output_dir", str(output_dir), "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true",
        "--per_device_train_batch_size", "32", "--per_device_eval_batch_size", "8", "--learning_rate", "5e-3",
        "--warmup_steps", "10", "--label_smoothing_factor", "0", "--generation_max_length", "20",
        "--test_num_beams", "1", "--num_sample_translations", "0",
    ])
    with single_thread():
        run(*arguments)
    return output_dir / "model"


class CrashAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt(f"simulated kill at step {self.step}")


class ForceBestMetric(TrainerCallback):
    """Pretends the best single checkpoint scored ``value`` on validation, so the averaging decision is forced."""

    def __init__(self, value):
        self.value = value

    def on_train_end(self, args, state, control, **kwargs):
        state.best_metric = self.value


def steps_of_one_stream_pass(tokenizer_dir, pairs: int, max_tokens: int, window: int, max_length: int = 128,
                             seed: int = 42) -> int:
    """Optimizer steps of one process in one pass through the first ``pairs`` pairs of the synthetic reversal
    task streamed in token-budget batches (one process with ``max_tokens``, or several with their share of
    it), encoded with the run's tokenizer and truncated to ``max_length`` as the job does."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    corpus = data_lib.load_translation_corpus("synthetic:reversal", source_lang="src", target_lang="tgt")
    tokenized = tokenize_corpus({"train": corpus["train"].select(range(pairs))}, tokenizer, "src", "tgt",
                                max_source_length=max_length, max_target_length=max_length)["train"]
    return len(list(StreamTokenBudgetBatches(list(tokenized), max_tokens, seed=seed, window=window).one_pass(0)))
