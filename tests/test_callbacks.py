"""The training job's callbacks about time (hf_s2s.training.callbacks): checkpoints written whenever
--save_interval_minutes passed, which leave a run exactly as its --save_strategy alone leaves it (the same
checkpoints kept under --save_total_limit, the same best model, the same average, the same weights) and resume
exactly; the one warning when steps slow far below the run's own speed; and the main process deciding for all."""

import datetime
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from hf_s2s.training.callbacks import SlowdownWarning, main_process_decides
from hf_s2s.training.checkpoints import TIMED_CHECKPOINT_MARKER, is_timed_checkpoint, list_checkpoints
from hf_s2s.training.run import job_callbacks, run
from tests.runs import CrashAt, tiny_args

# 256 pairs in batches of 32: 8 steps an epoch, 3 epochs; validated and saved each epoch, the best checkpoint
# restored at the end, the last 2 averaged, an EMA kept (in each checkpoint), at most 3 checkpoints kept. Dropout
# makes every step draw random numbers, which a save must not disturb.
EPOCHS = ("--num_train_epochs", "3", "--save_total_limit", "3", "--average_last_checkpoints", "2",
          "--ema_decay", "0.9", "--test_num_beams", "1", "--model_config", json.dumps({"d_model": 32, "encoder_layers": 1,
                                                                 "decoder_layers": 1, "encoder_attention_heads": 2,
                                                                 "decoder_attention_heads": 2, "encoder_ffn_dim": 64,
                                                                 "decoder_ffn_dim": 64, "dropout": 0.1}))
NO_TIMED = ("--save_interval_minutes", "0")
EVERY_STEP = ("--save_interval_minutes", "1e-9")  # due at every step: a timed checkpoint after each one


class WatchCheckpoints(TrainerCallback):
    """Before each step, the checkpoint folders of the run: (step, [(name, timed)])."""

    def __init__(self):
        self.seen = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.seen.append((state.global_step, [(c.name, is_timed_checkpoint(c))
                                              for c in list_checkpoints(args.output_dir)]))


# Timing and the place of the run: what two runs of the same training differ in.
NOT_COMPARED = {"train_seconds", "validation_seconds", "train_tokens_per_second", "decode_seconds"}


def compared(results: dict) -> dict:
    return {key: compared(value) if isinstance(value, dict) else value for key, value in results.items()
            if key not in NOT_COMPARED}


@pytest.fixture(scope="module")
def by_epoch(tmp_path_factory):
    """The run with the strategy's checkpoints only: its results and output folder."""
    output_dir = tmp_path_factory.mktemp("by_epoch")
    return run(*tiny_args(output_dir, "transformer_seq2seq", *EPOCHS, *NO_TIMED)), output_dir


def assert_same_run(output_dir: Path, results: dict, by_epoch, resumed: bool = False) -> None:
    """The run in ``output_dir`` ended as the run without timed checkpoints: the same checkpoints, results
    (the best model, the average) and weights, bit for bit. A ``resumed`` run's token count and mean loss are
    those of the steps it trained itself."""
    expected_results, expected_dir = by_epoch
    assert [c.name for c in list_checkpoints(output_dir)] == [c.name for c in list_checkpoints(expected_dir)] == [
        "checkpoint-8", "checkpoint-16", "checkpoint-24"]
    assert not list(output_dir.glob(f"*/{TIMED_CHECKPOINT_MARKER}"))
    own = {"train_tokens", "train_loss", "resumed_from_step"} if resumed else set()
    assert {key: value for key, value in compared(results).items() if key not in own} == \
        {key: value for key, value in compared(expected_results).items() if key not in own}
    assert results["checkpoint_averaging"]["checkpoints"] == ["checkpoint-16", "checkpoint-24"]
    assert results["ema"]["validation_bleu"] is not None
    expected = load_file(expected_dir / "model" / "model.safetensors")
    weights = load_file(output_dir / "model" / "model.safetensors")
    assert weights.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(weights[key], expected[key], rtol=0, atol=0, msg=key)


@pytest.mark.slow
def test_timed_checkpoints_bound_the_lost_steps_and_leave_the_run_as_its_strategy_leaves_it(tmp_path, by_epoch):
    """With a checkpoint due after every step, each step starts with the previous step's checkpoint on disk (at
    most one timed one, and never more than --save_total_limit of the strategy's); the run ends with the
    checkpoints, best model, average and weights of the run without them."""
    watch = WatchCheckpoints()
    results = run(*tiny_args(tmp_path, "transformer_seq2seq", *EPOCHS, *EVERY_STEP), callbacks=[watch])
    assert [step for step, _ in watch.seen] == list(range(24))
    for step, folders in watch.seen[1:]:
        assert (f"checkpoint-{step}", step % 8 != 0) in folders, (step, folders)  # the step before: resumable
        assert sum(timed for _, timed in folders) <= 1 and sum(not timed for _, timed in folders) <= 3, folders
    assert watch.seen[-1][1] == [("checkpoint-8", False), ("checkpoint-16", False), ("checkpoint-23", True)]
    assert_same_run(tmp_path, results, by_epoch)


@pytest.mark.slow
def test_a_run_resumed_from_a_timed_checkpoint_ends_as_the_uninterrupted_one(tmp_path, by_epoch):
    """Killed in its second epoch, the run resumes from the timed checkpoint of the step before (mid-epoch, its EMA
    with it) and ends with the checkpoints and weights of the uninterrupted run: the timed checkpoint it resumed
    from is deleted once a newer one is written."""
    with pytest.raises(KeyboardInterrupt):
        run(*tiny_args(tmp_path, "transformer_seq2seq", *EPOCHS, *EVERY_STEP), callbacks=[CrashAt(11)])
    assert [(c.name, is_timed_checkpoint(c)) for c in list_checkpoints(tmp_path)] == [
        ("checkpoint-8", False), ("checkpoint-10", True)]
    assert (tmp_path / "checkpoint-10" / "ema" / "model.safetensors").is_file()  # the EMA continues from it
    resumed = run(*tiny_args(tmp_path, "transformer_seq2seq", *EPOCHS, *EVERY_STEP,
                             "--resume_from_checkpoint", str(tmp_path / "checkpoint-10")))
    assert_same_run(tmp_path, resumed, by_epoch, resumed=True)
    # its times are this session's: the validations of the log before step 10 (epoch 1's) ran in the first one
    log = json.loads((list_checkpoints(tmp_path)[-1] / "trainer_state.json").read_text())["log_history"]
    ours = sum(entry["eval_runtime"] for entry in log if "eval_runtime" in entry and entry["step"] > 10)
    assert any("eval_runtime" in entry and entry["step"] <= 10 for entry in log)
    assert resumed["resumed_from_step"] == 10 and resumed["train_seconds"] > 0
    assert resumed["validation_seconds"] == pytest.approx(ours, abs=0.06)
    assert "resumed_from_step" not in by_epoch[0]


def test_save_interval_minutes_must_be_a_number_of_minutes(tmp_path):
    for value in ("-1", "inf", "nan"):
        with pytest.raises(ValueError, match=f"--save_interval_minutes must be a finite number of minutes >= 0 .*"
                                             f"got {value}"):
            run(*tiny_args(tmp_path / "run", "transformer_seq2seq", "--save_interval_minutes", value))
        assert not (tmp_path / "run").exists()


# --- the slowdown warning -------------------------------------------------------------------------------------


class Clock:
    """A clock the test moves."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_steps(watch: SlowdownWarning, clock: Clock, seconds: list[float]) -> None:
    args, state, control = TrainingArguments(output_dir="unused", report_to=[]), TrainerState(), TrainerControl()
    for step_seconds in seconds:
        watch.on_step_begin(args, state, control)
        clock.now += step_seconds
        watch.on_step_end(args, state, control)
        clock.now += 5.0  # evaluation or saving between steps: not a step's time


@pytest.mark.parametrize("threads", [1, 2])
def test_one_warning_when_steps_slow_far_below_the_run_s_own_speed(caplog, threads, monkeypatch):
    """0.26 s steps that become 8 s (what two threads did on the shared 2-core machine): one warning, once the
    median of the last 10 steps is 4x the fastest earlier median, that says why and what to pass; nothing for a
    run that is only noisy, nor for steps that stay under a second."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    clock = Clock()
    watch = SlowdownWarning(clock=clock)
    with caplog.at_level(logging.WARNING, logger="hf_s2s.training.callbacks"):
        run_steps(watch, clock, [0.26, 0.3, 0.2] * 10 + [0.5, 0.9, 0.26] * 10)  # noisy, never slow for long
        assert not caplog.records
        run_steps(watch, clock, [8.0] * 5)
        assert not caplog.records  # 5 slow steps of the last 10: the median is not there yet
        run_steps(watch, clock, [8.0] * 30)
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert message.startswith("training slowed down: steps take 8.0 s (median of the last 10), ")
    if threads == 2:
        assert "its 2 torch threads may be waiting for a CPU that other work keeps busy" in message
        assert message.endswith("stop with Ctrl-C and run the command it prints with OMP_NUM_THREADS=1 in front")
    else:
        assert "OMP_NUM_THREADS" not in message and "one torch thread" in message
    caplog.clear()
    small = SlowdownWarning(clock=(clock := Clock()))
    with caplog.at_level(logging.WARNING, logger="hf_s2s.training.callbacks"):
        run_steps(small, clock, [0.01] * 20 + [0.5] * 20)  # 50x slower, but a tiny model's half second
    assert not caplog.records


def test_the_job_adds_timed_checkpoints_after_the_ema_and_watches_a_cpu_run_s_speed(tmp_path):
    """By default a run checkpoints every 15 minutes besides its strategy, after the EMA has written its weights
    into a checkpoint (the timed checkpoint it supersedes is deleted only then), and a CPU run is watched."""
    job = tiny_args(tmp_path, "transformer_seq2seq", "--ema_decay", "0.9")
    callbacks = job_callbacks(job.selection, job.training)
    assert [type(c).__name__ for c in callbacks] == [
        "EarlyStoppingCallback", "EMACallback", "TimedCheckpoints", "SlowdownWarning"]
    assert callbacks[2].seconds == 15 * 60
    job = tiny_args(tmp_path, "transformer_seq2seq", *NO_TIMED)
    assert "TimedCheckpoints" not in [type(c).__name__ for c in job_callbacks(job.selection, job.training)]


# --- several processes: the main process decides ---------------------------------------------------------------


# The other process of a launch, rank 1: its decisions, one character each ("1": due), and what it was told.
RANK_1 = """import sys
import torch
import torch.distributed as dist
from hf_s2s.training.callbacks import main_process_decides
dist.init_process_group("gloo", init_method=sys.argv[1], rank=1, world_size=2)
print([main_process_decides(due == "1", torch.device("cpu")) for due in sys.argv[2]], flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_process_takes_the_main_process_s_decision(tmp_path):
    """Two processes whose clocks disagree save at the same steps, those the main process's clock chose: a
    checkpoint is written by every process together. This process is the main one; one other joins it."""
    ours, theirs = [False, True, False, True], [True, True, False, False]
    init = f"file://{tmp_path / 'init'}"
    other = subprocess.Popen([sys.executable, "-c", RANK_1, init, "".join("1" if due else "0" for due in theirs)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
    torch.distributed.init_process_group("gloo", init_method=init, rank=0, world_size=2,
                                         timeout=datetime.timedelta(minutes=8))
    try:
        decided = [main_process_decides(due, torch.device("cpu")) for due in ours]
    finally:
        torch.distributed.destroy_process_group()
    out, err = other.communicate(timeout=300)
    assert other.returncode == 0, err[-3000:]
    assert decided == ours and out.strip() == str(ours)
    assert main_process_decides(True, torch.device("cpu")) and not main_process_decides(False, "cpu")  # one process
