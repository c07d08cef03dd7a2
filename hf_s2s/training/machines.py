"""A launch over several machines (``accelerate launch --num_machines N --machine_rank R ...``): what the launch's main
process prepares reaches every machine before it is read, whether or not the machines share a disk.

- **The tokenizer the run trains** is trained once, by the launch's main process (process 0), and sent to every
  process as the bytes of its files (:func:`share_folder`). Training it again on each machine would cost that time
  again and would have to come out the same, which a multi-threaded trainer does not promise.
- **The corpus** is read by every machine itself (``--dataset``, ``--data_dir`` or ``$HF_S2S_DATA_DIR`` there) and
  encoded into that machine's ``datasets`` cache, its first process first (transformers'
  ``main_process_first(local=True)``): a corpus is too big to send, and encoding it is cheap next to training.
  What each machine read for itself is checked equal across the launch (:func:`check_same_on_every_machine`: the
  pairs of each split held in memory, and the tokenizer): a machine that read another corpus would train on other
  batches, or wait at the end of an epoch for a batch the others never make.
- **The output folder** is written as transformers' ``should_save`` has it (``--save_on_each_node``), and the
  layout that flag stands for is checked on disk (:func:`claimed_output_dir`):

  - one folder the machines share (a network disk; the default): process 0 alone locks and writes it (tokenizer,
    checkpoints, ``model/``, ``results.json``, ...), and the other machines read what it wrote. (By Trainer's own
    convention each process also writes its random state, ``rng_state_<rank>.pth``, into each checkpoint.)
  - a folder per machine (``--save_on_each_node true``): the first process of each machine locks and writes its
    own, which ends with what that machine needs to resume: the tokenizer and the checkpoints (and ``averaged/`` and
    ``ema/``, which every process reads back after training). The run's records (``model/``, ``results.json``,
    the test translations, the samples) are written once, by process 0.

  A launch whose flag does not fit its folders is refused on every machine before anything is read or deleted.

Every function here is called by every process of the launch (each is a collective), and does nothing more than
its one-process work in a run of one process.
"""

import logging
import secrets
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from accelerate.utils import DistributedType, broadcast_object_list, gather_object

from .arguments import TrainingArguments
from .run_dir import RunLock, launch_holding, prepare_output_dir

logger = logging.getLogger(__name__)


class LaunchRefused(ValueError):
    """A refusal that every process of a launch raises alike (the same line on every machine): ``hf-s2s train`` prints
    it from the first process of each machine only."""


def is_other_machines_first(training_args: TrainingArguments) -> bool:
    """Whether this process is the first of its machine (local process 0) on a machine other than process 0's."""
    return training_args.local_process_index == 0 and training_args.process_index != 0


@contextmanager
def claimed_output_dir(training_args: TrainingArguments, ema_folder: str | None = None,
                       command: list[str] | None = None) -> Iterator[None]:
    """Hold ``--output_dir`` for the run: locked (:class:`~hf_s2s.training.run_dir.RunLock`) and cleared of, or
    refused for, an earlier run (:func:`~hf_s2s.training.run_dir.prepare_output_dir`; ``ema_folder`` and
    ``command`` go to it) by each process that writes it. In a launch, process 0 locks its folder first, naming
    the launch in the lock file; the first process of each other machine then sees that name (one shared folder)
    or not (a folder of its own, which it locks and prepares itself with ``--save_on_each_node``). A refusal on any
    process, or folders that do not fit ``--save_on_each_node`` (:func:`check_layout`), is raised on every
    process, so that every machine stops with the same one line."""
    output_dir = training_args.output_dir
    with ExitStack() as held:

        def lock(launch: str | None = None) -> None:
            held.enter_context(RunLock(output_dir, launch))
            logger.info("locked %s for this run", output_dir)

        def prepare() -> None:
            prepare_output_dir(output_dir, overwrite=training_args.overwrite_output_dir,
                               resume=training_args.resume_from_checkpoint is not None, ema_folder=ema_folder,
                               command=command)

        def claim() -> None:
            lock()
            prepare()

        if training_args.world_size == 1:
            claim()
            yield
            return
        main = training_args.process_index == 0
        launch = secrets.token_hex(8) if main else None
        error = _attempt(lambda: lock(launch)) if main else None
        launch, refusal = broadcast_object_list([launch, _message(error)])
        if refusal is not None:
            raise error if error is not None else LaunchRefused(f"process 0 of the launch was refused: {refusal}")
        sees_main = launch_holding(output_dir) == launch if is_other_machines_first(training_args) else None
        check_layout(gather_object([(training_args.process_index, sees_main)]), training_args)
        resumed = training_args.resume_from_checkpoint
        check_same_on_every_machine(Path(resumed).name if resumed else None, training_args,
                                    "--resume_from_checkpoint", "resume every machine from the same step")
        # Only now is anything deleted (--overwrite_output_dir): the launch is known to fit its folders.
        if main:
            error = _attempt(prepare)
        elif sees_main is False:
            error = _attempt(claim)
        raise_first_refusal(error, training_args)
        yield


def check_layout(seen: list[tuple[int, bool | None]], training_args: TrainingArguments) -> None:
    """Refuse a launch whose output folders do not fit ``--save_on_each_node``. ``seen``: for each process, whether
    the first process of a machine other than process 0's sees process 0's folder (None for the other processes).
    Without the flag, Trainer saves on process 0 only: a machine with a folder of its own would keep no checkpoint
    to resume from (or load the best one from). With it, the first process of every machine saves: machines sharing
    one folder would each write the same checkpoint files; and a model sharded by FSDP or DeepSpeed has its whole
    weights gathered on process 0 only."""
    output_dir = training_args.output_dir
    separate = [index for index, sees_main in seen if sees_main is False]
    shared = [index for index, sees_main in seen if sees_main is True]
    if separate and not training_args.save_on_each_node:
        raise LaunchRefused(
            f"--output_dir: the machine(s) of process(es) {', '.join(map(str, separate))} have a folder of their own "
            f"there, not the one process 0 writes, and without --save_on_each_node only process 0 saves: those "
            f"machines would keep no checkpoint or tokenizer to resume from. Give every machine a folder of its own "
            f"with --save_on_each_node true, or the same shared folder (a network disk)")
    if shared and training_args.save_on_each_node:
        raise LaunchRefused(
            f"--save_on_each_node: the machine(s) of process(es) {', '.join(map(str, shared))} share --output_dir "
            f"{output_dir} with process 0, and each machine would write the same checkpoint files into it; leave "
            f"--save_on_each_node out with a shared folder (it is for a folder per machine)")
    sharding = training_args.distributed_state.distributed_type
    if separate and sharding in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        raise LaunchRefused(
            f"--save_on_each_node with {sharding.value}: the model's whole weights are gathered on process 0 only, so "
            f"the checkpoints of the machine(s) of process(es) {', '.join(map(str, separate))} would hold none; give "
            f"every machine the same shared --output_dir (a network disk)")


def share_folder(folder: str | Path, training_args: TrainingArguments) -> None:
    """After process 0 has written ``folder`` (inside ``--output_dir``: the tokenizer the run trained), make it
    readable on every process: its files go to every process as bytes, and the first process of each machine that
    keeps a folder of its own (``should_save``) writes those it lacks, and refuses ones that differ (a resumed run's
    copy from another run). Returns once every process may read ``folder``."""
    if training_args.world_size == 1:
        return
    folder = Path(folder)
    [files] = broadcast_object_list([folder_files(folder) if training_args.process_index == 0 else None])
    error = None
    if training_args.should_save and training_args.process_index != 0:
        error = _attempt(lambda: write_missing_files(folder, files))
    raise_first_refusal(error, training_args)  # also the barrier: every copy is written


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by its path relative to it."""
    return {path.relative_to(folder).as_posix(): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def write_missing_files(folder: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` (:func:`folder_files` of process 0's ``folder``) into this machine's ``folder``: those it
    lacks; one that is there with other bytes is refused, nothing being overwritten."""
    for name, data in files.items():
        path = folder / name
        if path.is_file() and path.read_bytes() != data:
            raise ValueError(f"{path} on this machine differs from process 0's {name}: the folder holds another run's "
                             f"{folder.name}; resume each machine from a folder of the same run, or start again "
                             f"with --overwrite_output_dir")
    for name, data in files.items():
        path = folder / name
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


def check_same_on_every_machine(value: Any, training_args: TrainingArguments, what: str, fix: str) -> None:
    """Refuse, on every process, a launch in which some process holds another ``value`` (something each machine
    read for itself: a count, a digest) than process 0: "``what`` differs between the machines of the launch
    (...): ``fix``"."""
    if training_args.world_size == 1:
        return
    refusal = difference_refusal(gather_object([value]), what, fix)
    if refusal:
        raise LaunchRefused(refusal)


def difference_refusal(values: list, what: str, fix: str) -> str | None:
    """What :func:`check_same_on_every_machine` says when ``values`` (one per process, in process order) are not all
    process 0's; None when they are."""
    index = next((index for index, other in enumerate(values) if other != values[0]), None)
    if index is None:
        return None
    return (f"{what} differs between the machines of the launch ({values[0]!r} on process 0, {values[index]!r} on "
            f"process {index}): {fix}")


def raise_first_refusal(error: OSError | ValueError | None, training_args: TrainingArguments) -> None:
    """After a step where each process may have been refused (``error``: this process's refusal, or None): raise on
    every process when any was, its own error on a refused process and the first refusal, naming the process, on
    the others. Every process must call it (it gathers from all)."""
    refusals = [(index, message) for index, message in gather_object([(training_args.process_index,
                                                                        _message(error))]) if message]
    if error is not None:
        raise error
    if refusals:
        index, message = refusals[0]
        raise LaunchRefused(f"process {index} of the launch was refused: {message}")


def _attempt(action: Callable[[], Any]) -> OSError | ValueError | None:
    """Run ``action``; the refusal it raises (the run's checks raise ValueError and OSError), else None."""
    try:
        action()
    except (OSError, ValueError) as error:
        return error
    return None


def _message(error: BaseException | None) -> str | None:
    return str(error) if error is not None else None


__all__ = ["LaunchRefused", "check_layout", "check_same_on_every_machine", "claimed_output_dir", "difference_refusal",
           "raise_first_refusal", "share_folder"]
