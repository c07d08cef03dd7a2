"""The output folder of a training run: one run at a time, never mixed with an earlier run.

transformers' example scripts refused an ``output_dir`` that already held something unless
``--overwrite_output_dir`` was given; ``TrainingArguments`` no longer carries that flag, so the main job
enforces it here. A folder that holds a run (checkpoints, ``model/``, ``tokenizer/``, ``results.json``, ...)
is reused only to resume that run (``--resume_from_checkpoint``) or, with ``--overwrite_output_dir``, after
the earlier run's files are removed, so that its checkpoints cannot be rotated into or averaged with the new
ones. A lock file keeps two runs from writing into one folder at the same time.

A full disk while the run writes (a checkpoint, the final model) is a :class:`DiskFullError` that names the file
being written and the checkpoints left intact (:func:`naming_a_full_disk`).

Two folders are refused before anything is read: one that is itself a saved model (a run would write its
results beside weights it did not train), and, with ``--overwrite_output_dir``, one that holds a path the run
reads (its model, tokenizer, corpus or recipe would be deleted with the earlier run).
"""

import errno
import fcntl
import json
import os
import re
import shlex
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..data.corpus import DATA_DIR_ENV
from .checkpoints import (
    TRAINER_STATE,
    check_resume_checkpoint,
    checkpoint_files,
    checkpoint_problem,
    file_problem,
    latest_intact_checkpoint,
    list_checkpoints,
)

LOCK_NAME = ".hf_s2s_train.lock"
# What a training run writes into its output folder besides checkpoint-<step>/ folders. (TensorBoard logs go
# to runs/<date>/, a new folder for each run, so they cannot mix; a runs/ folder may also be the user's own.)
RUN_FILES = ("model", "tokenizer", "averaged", "ema", "results.json", "samples.txt", "alignment.png")
HYPOTHESES_PATTERN = re.compile(r"test_hypotheses\.[a-z0-9]+\.txt")
# What save_pretrained writes and a run never writes at the root of its output folder: a folder holding one of
# these is a saved model (a copy of ema/, say), not a run's folder.
MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
               "pytorch_model.bin.index.json")
# Beside the trained tokenizer: the arguments it was trained with, checked when a resumed run reuses it.
TOKENIZER_RECORD = "hf_s2s_tokenizer_arguments.json"


def hypotheses_path(output_dir: str | Path, decoding: str) -> Path:
    """Where the run writes the test translations behind ``results.json``'s score ``decoding`` ("greedy",
    "beam5"), one per line in test-set order."""
    return Path(output_dir) / f"test_hypotheses.{decoding}.txt"


def run_files(output_dir: str | Path) -> list[Path]:
    """The files and folders of an earlier training run in ``output_dir`` (empty when it holds none)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [output_dir / name for name in RUN_FILES if (output_dir / name).exists()]
    found += sorted(p for p in output_dir.iterdir() if HYPOTHESES_PATTERN.fullmatch(p.name))
    return list_checkpoints(output_dir) + found


class RunLock:
    """An exclusive ``flock`` on ``<output_dir>/.hf_s2s_train.lock`` for the life of a run.

    The kernel releases the lock when the holding process ends, killed or not, so a crashed run never leaves
    the folder locked; the file itself stays (deleting it would let a third run lock a new file while a second
    still holds the old one). Taking the lock is also the check that the folder can be written to.

    The file names the holder: its process id, and ``launch`` when given, an id of the launch over several
    machines that took it, by which the other machines tell whether they see this folder
    (:func:`launch_holding`)."""

    def __init__(self, output_dir: str | Path, launch: str | None = None):
        self.path = Path(output_dir) / LOCK_NAME
        self.launch = launch
        self._file = None

    def __enter__(self) -> "RunLock":
        if self.path.parent.exists() and not self.path.parent.is_dir():
            raise ValueError(f"--output_dir {self.path.parent} is a file, not a folder")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock_file = open(self.path, "a+")
        except OSError as error:
            raise ValueError(f"--output_dir {self.path.parent} cannot be written to: {error}") from error
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.seek(0)
            holder = (lock_file.read().split() or ["unknown"])[0]
            lock_file.close()
            raise BlockingIOError(  # an OSError: hf-s2s train reports it in one line
                f"--output_dir {self.path.parent} is in use by another training run (process {holder}); wait for it "
                f"to end or choose another --output_dir"
            ) from None
        lock_file.truncate(0)
        lock_file.write(f"{os.getpid()} {self.launch}\n" if self.launch else f"{os.getpid()}\n")
        lock_file.flush()
        os.fsync(lock_file.fileno())  # to the server of a network disk, where the other machines read the launch
        self._file = lock_file
        return self

    def __exit__(self, *exc_info) -> None:
        fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()
        self._file = None


def launch_holding(output_dir: str | Path) -> str | None:
    """The launch id (:class:`RunLock`'s ``launch``) written into ``output_dir``'s lock file by the run that locked
    it last; None when there is none (no lock file, or a lock taken without one)."""
    try:
        words = (Path(output_dir) / LOCK_NAME).read_text().split()
    except OSError:
        return None
    return words[1] if len(words) > 1 else None


def check_resume(output_dir: str | Path, resume_from_checkpoint: str | None, overwrite: bool,
                 ema_folder: str | None = None) -> None:
    """A run resumes in its own folder, from one of its checkpoints: that is where its tokenizer (checked by
    :func:`tokenizer_arguments_match`) and the checkpoints that rotation and averaging see are. Every file of the
    checkpoint must read (:func:`hf_s2s.training.checkpoints.check_resume_checkpoint`; ``ema_folder`` too, when given)."""
    if resume_from_checkpoint is None:
        return
    checkpoint = Path(resume_from_checkpoint)
    if not (checkpoint / "trainer_state.json").is_file():
        raise ValueError(f"--resume_from_checkpoint {checkpoint} is not a checkpoint folder (it holds no "
                         f"trainer_state.json); give a <output_dir>/checkpoint-<step> folder of the run")
    if checkpoint.resolve().parent != Path(output_dir).resolve():
        raise ValueError(f"--resume_from_checkpoint {checkpoint} is not one of the checkpoints of --output_dir "
                         f"{output_dir}: a run resumes in its own folder, where its tokenizer and checkpoints are")
    if overwrite:
        raise ValueError("--overwrite_output_dir would delete the checkpoint that --resume_from_checkpoint resumes "
                         "from: pass only one of them")
    check_resume_checkpoint(checkpoint, ema_folder)


# --- A full disk while the run writes ----------------------------------------------------------------------------

# What a full disk looks like: ENOSPC (or a full quota) from Python or safetensors, or the error torch.save's zip
# writer raises when a write comes up short ("[enforce fail at inline_container.cc:...] . unexpected pos N vs M",
# "PytorchStreamWriter failed writing file ...: file write failed").
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_MESSAGES = ("No space left on device", "Disk quota exceeded", "unexpected pos", "file write failed")
# The files of a checkpoint in the order Trainer writes them (rng_state_<rank>.pth with several processes); the
# EMA's on_save writes ema/ after them.
CHECKPOINT_WRITE_ORDER = ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state*.pth", TRAINER_STATE)


class DiskFullError(OSError):
    """The disk filled while the run wrote into its output folder; the message names the file, the checkpoints
    left intact and what to do."""


def is_disk_full(error: BaseException | None) -> bool:
    """Whether ``error``, or an error it was raised from, is a full disk or quota."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
            return True
        if any(text in str(error) for text in DISK_FULL_MESSAGES):  # safetensors' own error type included
            return True
        error = error.__cause__ or error.__context__
    return False


def _file_being_written(output_dir: Path, error: BaseException, ema_folder: str | None) -> Path | None:
    """The file the run was writing when the disk filled: the one the error names (torch's writer and safetensors
    name none); else, when the newest checkpoint is incomplete, its file that does not read, or the first one missing
    in write order (:data:`CHECKPOINT_WRITE_ORDER`, then the EMA's); else the output folder's most recently modified
    file (a full disk leaves the file it cut short newest)."""
    if getattr(error, "filename", None):
        return Path(error.filename)
    checkpoints = list_checkpoints(output_dir)
    if checkpoints:
        newest = checkpoints[-1]
        damaged = next((path for path in checkpoint_files(newest, ema_folder) if file_problem(path)), None)
        if damaged is not None:
            return damaged
        if not (newest / TRAINER_STATE).is_file():
            missing = next((name for name in CHECKPOINT_WRITE_ORDER if not any(newest.glob(name))), None)
            return newest / missing.replace("*", "") if missing else newest
        if ema_folder is not None and not (newest / ema_folder / "model.safetensors").is_file():
            return newest / ema_folder / "model.safetensors"
    files = [path for path in output_dir.rglob("*") if path.is_file() and path.name != LOCK_NAME]
    return max(files, key=lambda path: path.stat().st_mtime_ns, default=None)


def disk_full_message(output_dir: str | Path, error: BaseException, ema_folder: str | None = None) -> str:
    """What :class:`DiskFullError` says: the file being written (:func:`_file_being_written`), which checkpoints are
    intact (every file reads, and the EMA's is there when ``ema_folder``) and the one to resume from."""
    output_dir = Path(output_dir)
    writing = _file_being_written(output_dir, error, ema_folder)
    intact = [checkpoint for checkpoint in list_checkpoints(output_dir)
              if not (writing is not None and writing.is_relative_to(checkpoint))
              and (ema_folder is None or (checkpoint / ema_folder / "model.safetensors").is_file())
              and checkpoint_problem(checkpoint, ema_folder) is None]
    message = f"the disk is full ({error}) while writing {writing or output_dir}"
    if intact:
        return (f"{message}; the checkpoints written before it are intact ({', '.join(c.name for c in intact)}): free "
                f"space, then resume with --resume_from_checkpoint {intact[-1]}")
    return f"{message}; no checkpoint of the run is complete: free space, then start the run again"


@contextmanager
def naming_a_full_disk(output_dir: str | Path, ema_folder: str | None = None) -> Iterator[None]:
    """Turn a full disk inside the block (the run writing into ``output_dir``) into a :class:`DiskFullError` saying
    so (:func:`disk_full_message`); other errors pass unchanged. ``ema_folder``: the run keeps an EMA there."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as error:
        if not is_disk_full(error):
            raise
        raise DiskFullError(disk_full_message(output_dir, error, ema_folder)) from error


def run_inputs(model_args, data_args, training_args) -> dict[str, str]:
    """The local paths the run reads, each keyed by the flag (or variable) and value that name it; Hub ids, named
    recipes and built-in corpora are not paths and are left out. A ``{split}`` pattern stands for the folder of its
    files. (``--resume_from_checkpoint`` is not listed: :func:`check_resume` refuses it with
    ``--overwrite_output_dir``.)"""
    dataset = data_args.dataset
    named = {"--model_name_or_path": model_args.model_name_or_path,
             "--tokenizer_name_or_path": model_args.tokenizer_name_or_path,
             "--target_tokenizer_name_or_path": model_args.target_tokenizer_name_or_path,
             "--recipe": training_args.recipe, "--data_dir": data_args.data_dir,
             "--deepspeed": training_args.deepspeed if isinstance(training_args.deepspeed, str) else None}
    if dataset == "multi30k" and data_args.data_dir is None:
        named[f"${DATA_DIR_ENV}"] = os.environ.get(DATA_DIR_ENV)
    elif dataset != "multi30k" and not dataset.startswith("synthetic:"):
        named["--dataset"] = dataset
    paths = {}
    for flag, value in named.items():
        # a {split} pattern reads files in the folder before it
        path = (os.path.dirname(value.partition("{split}")[0]) or ".") if value and "{split}" in value else value
        if path and os.path.lexists(os.path.expanduser(path)):
            paths[f"{flag}={value}" if flag.startswith("$") else f"{flag} {value}"] = path
    return paths


def _lies_inside(path: str | Path, folder: str | Path) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it, as the file system reaches it: by its name, by where its
    symlinks lead, or through a symlink on the way (a link inside ``folder`` counts: deleting the folder's
    contents would remove it)."""
    folders = [Path(os.path.abspath(folder)), Path(os.path.realpath(folder))]
    path = Path(os.path.abspath(os.path.expanduser(path)))
    reached = [path, Path(os.path.realpath(path))]
    reached += [Path(os.path.realpath(step.parent)) / step.name for step in (path, *path.parents[:-1])]
    return any(step.is_relative_to(inside) for step in reached for inside in folders)


def check_output_dir(output_dir: str | Path, inputs: dict[str, str], overwrite: bool) -> None:
    """Refuse, before anything is read, an ``output_dir`` that is a saved model folder (:data:`MODEL_FILES`), and
    with ``overwrite`` one that any of ``inputs`` lies inside ("flag value" -> the path the run reads, as
    :func:`run_inputs` gives them): a run never deletes what it reads, nor writes its results beside weights it
    did not train."""
    output_dir = Path(output_dir)
    held = [name for name in MODEL_FILES if (output_dir / name).exists()]
    if held:
        raise ValueError(f"--output_dir {output_dir} is a saved model folder (it holds {', '.join(held)}): a run "
                         f"would write its results beside weights it did not train; choose another --output_dir "
                         f"(the run saves its model in <output_dir>/model)")
    if not overwrite:
        return
    for named, path in inputs.items():
        if _lies_inside(path, output_dir):
            raise ValueError(f"{named} lies inside --output_dir {output_dir}, which --overwrite_output_dir "
                             f"clears of the earlier run, and this run reads it: move it out of {output_dir}, or "
                             f"choose another --output_dir")


def prepare_output_dir(output_dir: str | Path, *, overwrite: bool, resume: bool,
                       ema_folder: str | None = None, command: list[str] | None = None) -> None:
    """Refuse to start a run in a folder that holds another run, unless it resumes that run (see
    :func:`check_resume`) or ``overwrite`` is set, in which case the earlier run's files are deleted first.
    Call it holding the folder's :class:`RunLock`. The refusal says what to do (:func:`earlier_run_message`):
    ``command`` is the command line that started this run, printed back with the flag to add."""
    output_dir = Path(output_dir)
    earlier = run_files(output_dir)
    if not earlier or resume:
        return
    if not overwrite:
        raise ValueError(earlier_run_message(output_dir, earlier, ema_folder, command))
    for path in earlier:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def earlier_run_message(output_dir: Path, earlier: list[Path], ema_folder: str | None = None,
                        command: list[str] | None = None) -> str:
    """Why a run is refused in ``output_dir``, which holds ``earlier`` (:func:`run_files`), and which way on
    applies: a run that stopped before its end (no ``results.json``: Ctrl-C, a closed laptop, a crash) resumes
    from its newest intact checkpoint (one with the EMA's weights when ``ema_folder``), or, stopped before its
    first, starts again; a finished run starts again. Each way is the ``command`` that did not run, with the
    one flag added (:func:`command_with`)."""
    names = ", ".join(p.name for p in earlier[:6]) + (", ..." if len(earlier) > 6 else "")
    again = f"start again, deleting it: {command_with(command, '--overwrite_output_dir')}"
    elsewhere = "or choose another --output_dir"
    if (output_dir / "results.json").exists():
        finished = f"--output_dir {output_dir} already holds a finished training run ({names})"
        return f"{finished}; to {again}; {elsewhere}"
    stopped = f"--output_dir {output_dir} holds a training run that stopped before it finished ({names})"
    newest = latest_intact_checkpoint(output_dir, ema_folder=ema_folder)
    if newest is None:
        return f"{stopped} and has no complete checkpoint to resume from; to {again}; {elsewhere}"
    resume = command_with(command, "--resume_from_checkpoint", str(newest))
    return f"{stopped}; {RESUME_WAY}: {resume}; to {again}; {elsewhere}"


def interrupted_run_message(output_dir: str | Path, ema_folder: str | None = None,
                            command: list[str] | None = None) -> str:
    """What ``hf-s2s train`` says when Ctrl-C stops a run in ``output_dir``: where its newest intact
    checkpoint is (one with the EMA's weights when ``ema_folder``) and the ``command`` that resumes from it;
    without one, the command that starts again (deleting what the run wrote, when it wrote anything), as a
    rerun's refusal (:func:`earlier_run_message`) would print it."""
    output_dir = Path(output_dir)
    newest = latest_intact_checkpoint(output_dir, ema_folder=ema_folder) if output_dir.is_dir() else None
    if newest is not None:
        return (f"the run stopped before it finished; its newest complete checkpoint is {newest}; "
                f"{RESUME_WAY}: {command_with(command, '--resume_from_checkpoint', str(newest))}")
    if run_files(output_dir):
        return ("the run stopped before its first complete checkpoint; to start again, deleting what it "
                f"wrote: {command_with(command, '--overwrite_output_dir')}")
    return f"the run stopped before it wrote anything; to start again: {command_with(command)}"


# How the messages that print a way on introduce the command that resumes (tests find the command after it).
RESUME_WAY = "to resume it from its newest checkpoint"
# The flags that choose how a run meets an earlier one in its folder: at most one of them, with its value (a
# checkpoint folder; a boolean, which --overwrite_output_dir may leave out).
_WAY_FLAGS = {"--resume_from_checkpoint": "path", "--overwrite_output_dir": "boolean"}
_BOOLEAN_WORDS = {"true", "false", "yes", "no", "t", "f", "y", "n", "1", "0"}


def command_with(command: list[str] | None, *flag: str) -> str:
    """``command``, the command line that started a run, as the user can type it again with ``flag`` (and its
    value) added, and without the flags of :data:`_WAY_FLAGS` it held (a run cannot both resume and start
    again); "pass FLAG" when the command is not known (under a launcher), "the same command" without a
    flag."""
    if not command:
        return "pass " + " ".join(flag) if flag else "the same command"
    kept, index = [], 0
    while index < len(command):
        word, index = command[index], index + 1
        name = word.split("=", 1)[0]
        if name not in _WAY_FLAGS:
            kept.append(word)
        elif "=" not in word and index < len(command) and (
                _WAY_FLAGS[name] == "path" or command[index].lower() in _BOOLEAN_WORDS):
            index += 1  # the flag's value
    return shlex.join([*kept, *flag])


def tokenizer_arguments_match(tokenizer_dir: str | Path, arguments: dict) -> bool:
    """Whether the tokenizer in ``tokenizer_dir`` was trained with ``arguments`` (what this run asks for).
    False when there is no tokenizer yet; an error naming every difference when it was trained otherwise, or
    when nothing records how it was trained."""
    tokenizer_dir = Path(tokenizer_dir)
    if not (tokenizer_dir / "tokenizer.json").is_file():
        return False
    record = tokenizer_dir / TOKENIZER_RECORD
    if not record.is_file():
        raise ValueError(
            f"{tokenizer_dir} holds a tokenizer without {TOKENIZER_RECORD}, so this run cannot tell whether it was "
            f"trained with {arguments}; to use it as it is, pass --tokenizer_name_or_path {tokenizer_dir}"
        )
    recorded = json.loads(record.read_text())
    differences = [f"{key}: {recorded.get(key)!r} there, {arguments.get(key)!r} now"
                   for key in [*arguments, *(key for key in recorded if key not in arguments)]
                   if recorded.get(key) != arguments.get(key)]
    if differences:
        raise ValueError(
            f"the tokenizer in {tokenizer_dir} was trained with other arguments than this run asks for "
            f"({'; '.join(differences)}); resume with the arguments of the run, or start a new run in another "
            f"--output_dir (or with --overwrite_output_dir)"
        )
    return True


def record_tokenizer_arguments(tokenizer_dir: str | Path, arguments: dict) -> None:
    (Path(tokenizer_dir) / TOKENIZER_RECORD).write_text(json.dumps(arguments, indent=2) + "\n")
