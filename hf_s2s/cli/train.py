"""Train and evaluate a translation model.

    hf-s2s train --recipe transformer_small            # Multi30k de->en, small Transformer
    hf-s2s train --recipe rnn_bahdanau_gru --output_dir runs/gru
    accelerate launch --multi_gpu --num_processes 2 scripts/train.py --recipe transformer_small

Every Seq2SeqTrainingArguments flag works too (``--help`` lists them); a recipe gives defaults, flags override.
"""

import logging
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import NoReturn

import transformers

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.hub.results import summary_line
from hf_s2s.training.checks import check_arguments
from hf_s2s.training.machines import LaunchRefused
from hf_s2s.training.run import parse_args, run
from hf_s2s.training.run_dir import interrupted_run_message

PACKAGE_DIR = Path(hf_s2s.__file__).resolve().parent


def is_user_error(error: BaseException) -> bool:
    """A ValueError or OSError raised by hf_s2s's own code: its checks (a refused flag, folder or corpus line, a
    checkpoint that does not read, a full disk) say what is wrong and what to do, so the command prints them as one
    ``error:`` line, as the other commands do. The same types raised inside a library (torch, transformers) keep
    their traceback: there the message alone may not tell what happened."""
    frames = traceback.extract_tb(error.__traceback__)
    return isinstance(error, OSError | ValueError) and bool(frames) and \
        Path(frames[-1].filename).resolve().is_relative_to(PACKAGE_DIR)


def typed_command(argv: list[str], prog: str | None) -> list[str] | None:
    """The command line that started this run, as the user typed it and can type it again: the interpreter's own
    arguments (``python scripts/train.py ...``, ``python -m hf_s2s.cli train ...``) when they end with ``argv``; an
    installed ``hf-s2s`` by the name the user typed (:func:`typed_script`) rather than as the interpreter its first
    line names; ``prog`` and ``argv`` when this process was not started with them (``main`` called from Python).
    None under a launcher (``accelerate launch``, ``torchrun``: ``LOCAL_RANK`` set), whose command this process does
    not see."""
    if "LOCAL_RANK" in os.environ:
        return None
    typed = list(sys.orig_argv)
    if typed[len(typed) - len(argv):] != argv:
        return [*(prog or "hf-s2s train").split(), *argv]
    if len(typed) > 1 and typed[1] == sys.argv[0] and os.path.basename(sys.argv[0]) == "hf-s2s":
        return [typed_script(sys.argv[0]), *typed[2:]]
    return typed


def typed_script(path: str) -> str:
    """How the user names the console script at ``path`` (the path the shell ran): ``hf-s2s`` when that name finds
    it on ``PATH`` (typed so, the shell passes the path it found), else ``path`` as the shell was given it (a
    virtual environment's ``.venv/bin/hf-s2s``, not activated)."""
    found = shutil.which("hf-s2s")
    return "hf-s2s" if found is not None and os.path.exists(path) and os.path.samefile(found, path) else path


def stopped(message: str) -> NoReturn:
    """End the command after Ctrl-C with ``message`` on stderr (from the launch's first process only) and the
    shell's status for a command stopped so, 130 (128 + SIGINT)."""
    if os.environ.get("RANK", "0") == "0":
        print(f"stopped (Ctrl-C): {message}", file=sys.stderr)
    sys.exit(130)


def main(argv=None, prog=None):
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # a refused flag or output folder is one line, before anything is read or trained
        job = parse_args(argv, prog=prog)
        check_arguments(*job)
    except (ImportError, OSError, ValueError) as error:  # parsing and checks only (a missing optional package too):
        # every such error is the user's
        sys.exit(f"error: {error}")
    except KeyboardInterrupt:
        stopped("the run stopped before it started")
    command = typed_command(argv, prog)
    try:
        results = run(*job, arguments_checked=True, command=command)
    except (OSError, ValueError) as error:  # a corpus line, a locked folder, a full disk, ...
        if not is_user_error(error):
            raise
        if isinstance(error, LaunchRefused) and os.environ.get("LOCAL_RANK", "0") != "0":
            sys.exit(1)  # every process of the launch raised it: the first of each machine says it
        sys.exit(f"error: {error}")
    except KeyboardInterrupt:  # Ctrl-C: where the run got to and the command that goes on, not a traceback
        stopped(interrupted_run_message(job.training.output_dir, job.selection.ema_folder, command))
    if results:
        print(summary_line(results))
        print(f"model, tokenizer and results.json in {job.training.output_dir}/model")
