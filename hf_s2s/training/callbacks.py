"""Two Trainer callbacks of the training job about a run's time:

- :class:`TimedCheckpoints` writes a checkpoint whenever ``--save_interval_minutes`` passed since the previous one,
  so that an interruption loses at most that much training, however long an epoch takes on the machine;
- :class:`SlowdownWarning` says once, on the main process, when steps have become far slower than the run's own
  earlier steps, why that may be (torch's threads against a CPU that other work keeps busy) and what to pass.
"""

import logging
import shutil
import statistics
import time
from collections import deque
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .checkpoints import (
    TIMED_CHECKPOINT_MARKER,
    TRAINER_STATE,
    checkpoint_step,
    is_timed_checkpoint,
    list_checkpoints,
)

logger = logging.getLogger(__name__)


def main_process_decides(decision: bool, device) -> bool:
    """``decision`` as the main process took it, on every process of a launch (a collective: every process calls
    it at the same step). A checkpoint is a collective too: every process must save at the same step, and clocks
    differ between processes."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return decision
    flag = torch.tensor([int(decision)], device=device)  # on the device: NCCL broadcasts no CPU tensor
    torch.distributed.broadcast(flag, src=0)
    return bool(flag.item())


class TimedCheckpoints(TrainerCallback):
    """A checkpoint whenever ``minutes`` passed since the previous one (of the save strategy's or its own), on top of
    the ``--save_strategy``'s. A timed checkpoint is only a point to resume from: it is marked as such
    (:data:`~hf_s2s.training.checkpoints.TIMED_CHECKPOINT_MARKER`, written before its first file) and deleted as soon
    as a later checkpoint is complete, so the checkpoints that outlive it are those the run writes without it:

    - ``--save_total_limit`` counts the run's own checkpoints: Trainer's rotation counts every checkpoint folder, so
      while timed ones are on disk the limit it reads is raised by their number (the newest checkpoint and the best
      one stay protected by Trainer as always);
    - ``--average_last_checkpoints`` averages the same checkpoints as without it (it leaves timed ones out);
    - ``load_best_model_at_end`` is unchanged: a timed checkpoint is never evaluated, and Trainer's best checkpoint
      is one of the strategy's;
    - a run resumed from a timed checkpoint is resumed mid-epoch, which Trainer does exactly (the batches of the
      epoch are a function of the seed and the epoch), and deletes it once it writes a newer one.

    The main process's clock decides, for every process (:func:`main_process_decides`). ``clock``: seconds, for
    tests."""

    def __init__(self, minutes: float, clock=time.monotonic):
        self.seconds = minutes * 60
        self.clock = clock
        self.limit = None  # the --save_total_limit asked for
        self.last_save = None  # when the previous checkpoint was written, by the clock
        self.timed_step = None  # the step whose checkpoint this callback asked for, until it is written

    def on_train_begin(self, args, state, control, **kwargs):
        self.limit = args.save_total_limit
        self.last_save = self.clock()
        self._count_timed_checkpoints(args)  # a resumed run's earlier ones

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_save or control.should_training_stop or args.save_strategy == "no":
            return  # a checkpoint comes at this step anyway, or training ends, or the run keeps none
        if not main_process_decides(self.clock() - self.last_save >= self.seconds, args.device):
            return
        if args.should_save:
            folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / TIMED_CHECKPOINT_MARKER).write_text(
                f"Written by hf-s2s train because --save_interval_minutes {self.seconds / 60:g} passed since the "
                "previous checkpoint: a point to resume from, deleted once a later checkpoint is written.\n")
            self._count_timed_checkpoints(args)
        self.timed_step = state.global_step
        control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        self.last_save = self.clock()
        timed, self.timed_step = self.timed_step == state.global_step, None
        if not args.should_save:
            return
        saved = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if not timed:  # the strategy's checkpoint, written again over a timed one of the same step: it stays
            (saved / TIMED_CHECKPOINT_MARKER).unlink(missing_ok=True)
        for checkpoint in list_checkpoints(args.output_dir):
            if is_timed_checkpoint(checkpoint) and checkpoint_step(checkpoint) < state.global_step:
                # superseded by the checkpoint just written; incomplete from its first deletion on, so that a
                # run stopped meanwhile is never told to resume from it
                (checkpoint / TRAINER_STATE).unlink(missing_ok=True)
                shutil.rmtree(checkpoint)
        self._count_timed_checkpoints(args)

    def _count_timed_checkpoints(self, args) -> None:
        """Raise the limit Trainer's rotation reads by the timed checkpoints on disk (see the class); only the
        processes that save rotate."""
        if self.limit is None or self.limit <= 0 or not args.should_save:
            return
        timed = [c for c in list_checkpoints(args.output_dir) if is_timed_checkpoint(c)]
        args.save_total_limit = self.limit + len(timed)


class SlowdownWarning(TrainerCallback):
    """One warning, on the main process of a CPU run, when training steps have become far slower than the run's
    own earlier steps: the lower median of the last ``window`` steps (slow only when most of them are) at least
    ``factor`` times the fastest such median so far, and at least ``min_seconds``. The usual cause on a machine
    shared with other work is torch's threads: an OpenMP pool of several threads stalls whenever another process
    takes one of its cores (``hf-s2s bench`` runs one thread for that reason), and one thread per run avoids it. A
    step is timed from its start to its end (forward, backward, optimizer), without evaluation or saving.
    ``clock``: seconds, for tests."""

    def __init__(self, window: int = 10, factor: float = 4.0, min_seconds: float = 1.0, clock=time.perf_counter):
        self.window, self.factor, self.min_seconds, self.clock = window, factor, min_seconds, clock
        self.recent = deque(maxlen=window)  # seconds of the last steps
        self.fastest = None  # the fastest median of a window so far, s
        self.started = None
        self.warned = False

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = self.clock()

    def on_step_end(self, args, state, control, **kwargs):
        if self.started is None or self.warned or not state.is_world_process_zero:
            return
        self.recent.append(self.clock() - self.started)
        if len(self.recent) < self.window:
            return
        median = statistics.median_low(self.recent)
        self.fastest = median if self.fastest is None else min(self.fastest, median)
        if median >= self.factor * self.fastest and median >= self.min_seconds:
            self.warned = True
            logger.warning(slowdown_message(median, self.fastest, self.window, torch.get_num_threads()))


def slowdown_message(median: float, fastest: float, window: int, threads: int) -> str:
    """What :class:`SlowdownWarning` says: how much slower, why it may be, and what to do."""
    slowed = (f"training slowed down: steps take {median:.1f} s (median of the last {window}), {median / fastest:.0f}x "
              f"this run's own {fastest:.2f} s earlier")
    if threads == 1:
        return f"{slowed}: other work on the machine may be taking the core of this run's one torch thread"
    return (f"{slowed}: its {threads} torch threads may be waiting for a CPU that other work keeps busy (a pool of "
            f"threads stalls whenever another process takes one of its cores); on a shared machine, one thread per "
            f"run avoids it: stop with Ctrl-C and run the command it prints with OMP_NUM_THREADS=1 in front")


__all__ = ["SlowdownWarning", "TimedCheckpoints", "main_process_decides", "slowdown_message"]
