"""The output folder of a training run: one run at a time, never mixed with an earlier run.

transformers' example scripts refused an ``output_dir`` that already held something unless
``--overwrite_output_dir`` was given; ``TrainingArguments`` no longer carries that flag, so the main job
enforces it here. A folder that holds a run (checkpoints, ``model/``, ``tokenizer/``, ``results.json``, ...)
is reused only to resume that run (``--resume_from_checkpoint``) or, with ``--overwrite_output_dir``, after
the earlier run's files are removed, so that its checkpoints cannot be rotated into or averaged with the new
ones. A lock file keeps two runs from writing into one folder at the same time.

Two folders are refused before anything is read: one that is itself a saved model (a run would write its
results beside weights it did not train), and, with ``--overwrite_output_dir``, one that holds a path the run
reads (its model, tokenizer, corpus or recipe would be deleted with the earlier run).
"""

import fcntl
import json
import os
import re
import shutil
from pathlib import Path

from .checkpoints import list_checkpoints
from .data import DATA_DIR_ENV

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
    still holds the old one). Taking the lock is also the check that the folder can be written to."""

    def __init__(self, output_dir: str | Path):
        self.path = Path(output_dir) / LOCK_NAME
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
            holder = lock_file.read().strip() or "unknown"
            lock_file.close()
            raise RuntimeError(
                f"--output_dir {self.path.parent} is in use by another training run (process {holder}); wait for it "
                f"to end or choose another --output_dir"
            ) from None
        lock_file.truncate(0)
        lock_file.write(f"{os.getpid()}\n")
        lock_file.flush()
        self._file = lock_file
        return self

    def __exit__(self, *exc_info) -> None:
        fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()
        self._file = None


def check_resume(output_dir: str | Path, resume_from_checkpoint: str | None, overwrite: bool) -> None:
    """A run resumes in its own folder, from one of its checkpoints: that is where its tokenizer (checked by
    :func:`tokenizer_arguments_match`) and the checkpoints that rotation and averaging see are."""
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


def run_inputs(model_args, data_args, training_args) -> dict[str, str]:
    """The local paths the run reads, each keyed by the flag (or variable) and value that name it; Hub ids, named
    recipes and built-in corpora are not paths and are left out. A ``{split}`` pattern stands for the folder of its
    files. (``--resume_from_checkpoint`` is not listed: :func:`check_resume` refuses it with
    ``--overwrite_output_dir``.)"""
    dataset = data_args.dataset
    named = {"--model_name_or_path": model_args.model_name_or_path,
             "--tokenizer_name_or_path": model_args.tokenizer_name_or_path,
             "--recipe": data_args.recipe, "--data_dir": data_args.data_dir,
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


def prepare_output_dir(output_dir: str | Path, *, overwrite: bool, resume: bool) -> None:
    """Refuse to start a run in a folder that holds another run, unless it resumes that run (see
    :func:`check_resume`) or ``overwrite`` is set, in which case the earlier run's files are deleted first.
    Call it holding the folder's :class:`RunLock`."""
    output_dir = Path(output_dir)
    earlier = run_files(output_dir)
    if not earlier or resume:
        return
    names = ", ".join(p.name for p in earlier[:6]) + (", ..." if len(earlier) > 6 else "")
    if not overwrite:
        raise ValueError(
            f"--output_dir {output_dir} already holds a training run ({names}); pass --overwrite_output_dir to "
            f"delete it and start again, --resume_from_checkpoint to continue it, or choose another --output_dir"
        )
    for path in earlier:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


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
    differences = [f"{key}: {recorded.get(key)!r} there, {value!r} now" for key, value in arguments.items()
                   if recorded.get(key) != value]
    if differences:
        raise ValueError(
            f"the tokenizer in {tokenizer_dir} was trained with other arguments than this run asks for "
            f"({'; '.join(differences)}); resume with the arguments of the run, or start a new run in another "
            f"--output_dir (or with --overwrite_output_dir)"
        )
    return True


def record_tokenizer_arguments(tokenizer_dir: str | Path, arguments: dict) -> None:
    (Path(tokenizer_dir) / TOKENIZER_RECORD).write_text(json.dumps(arguments, indent=2) + "\n")
