"""The output folder of a training run (hf_s2s.training.run_dir): what the main job refuses before anything is read or
trained, so that a run never deletes what it reads (--overwrite_output_dir with an input inside --output_dir) and
never writes its results beside another model's weights (--output_dir a saved model folder). A refused run leaves
the folder as it was, without even its lock file."""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hf_s2s.cli import run_command
from hf_s2s.cli.train import typed_command
from hf_s2s.training.checkpoints import is_timed_checkpoint
from hf_s2s.training.run import parse_args, run
from hf_s2s.training.run_dir import LOCK_NAME, RESUME_WAY, interrupted_run_message
from tests.helpers import default_ctrl_c
from tests.runs import train_args
from tests.saved_folders import save_tiny_model_folder, tiny_tokenizer

ROOT = Path(__file__).resolve().parent.parent


def earlier_run(folder):
    """What a finished run leaves in its output folder (model/, tokenizer/, a checkpoint, results.json), and a
    corpus and a recipe of the user's beside them."""
    save_tiny_model_folder(folder / "model", "transformer_seq2seq")
    tiny_tokenizer().save_pretrained(folder / "tokenizer")
    (folder / "checkpoint-8").mkdir()
    (folder / "checkpoint-8" / "trainer_state.json").write_text("{}")
    (folder / "results.json").write_text("{}")
    (folder / "data").mkdir()
    (folder / "data" / "train.tsv").write_text("".join(f"a b {i}\t{i} b a\n" for i in range(16)))
    (folder / "recipe.json").write_text(json.dumps({"learning_rate": 1e-3}))
    return folder


def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): (os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else None)
            for p in folder.rglob("*")}


INPUTS = {  # flag -> its value inside the earlier run's folder
    "--model_name_or_path": "model",
    "--tokenizer_name_or_path": "tokenizer",
    "--data_dir": "data",
    "--dataset": "data/train.tsv",
    "--recipe": "recipe.json",
}


@pytest.mark.parametrize("flag", [*INPUTS, "--dataset {split}"])
def test_overwrite_is_refused_when_the_run_reads_from_its_output_dir(tmp_path, flag):
    out = earlier_run(tmp_path / "run")
    before = snapshot(out)
    name = "--dataset" if flag.startswith("--dataset") else flag
    value = str(out / ("data/{split}.tsv" if flag == "--dataset {split}" else INPUTS[flag]))
    with pytest.raises(ValueError, match=re.escape(f"{name} {value} lies inside --output_dir {out}, which "
                                                   "--overwrite_output_dir clears of the earlier run")):
        run(*parse_args(train_args(out, name, value, "--overwrite_output_dir", "true")))
    assert snapshot(out) == before  # nothing deleted, not even the lock file made
    assert LOCK_NAME not in before


def test_inside_is_decided_through_symlinks(tmp_path):
    out = earlier_run(tmp_path / "run")
    (tmp_path / "link").symlink_to(out, target_is_directory=True)
    before = snapshot(out)
    # the output folder named through a link, the model by its own path
    with pytest.raises(ValueError, match=r"--model_name_or_path .* lies inside --output_dir"):
        run(*parse_args(train_args(tmp_path / "link", "--model_name_or_path", str(out / "model"),
                                   "--overwrite_output_dir", "true")))
    # the tokenizer named through a link into the output folder
    with pytest.raises(ValueError, match=r"--tokenizer_name_or_path .* lies inside --output_dir"):
        run(*parse_args(train_args(out, "--tokenizer_name_or_path", str(tmp_path / "link" / "tokenizer"),
                                   "--overwrite_output_dir", "true")))
    assert snapshot(out) == before
    # a link inside the output folder (deleting the run's model/ would remove it) to a model kept elsewhere
    shutil.move(out / "model", tmp_path / "kept")
    (out / "model").symlink_to(tmp_path / "kept", target_is_directory=True)
    before = snapshot(out)
    with pytest.raises(ValueError, match=r"--model_name_or_path .* lies inside --output_dir"):
        run(*parse_args(train_args(out, "--model_name_or_path", str(out / "model"), "--overwrite_output_dir", "true")))
    assert snapshot(out) == before


def test_command_refuses_in_one_line_before_anything_is_read(tmp_path, capsys):
    out = earlier_run(tmp_path / "run")
    before = snapshot(out)
    with pytest.raises(SystemExit) as refused:
        run_command("train", train_args(out, "--model_name_or_path", str(out / "model"), "--overwrite_output_dir",
                                        "true"))
    message = str(refused.value.code)
    assert message.startswith(f"error: --model_name_or_path {out / 'model'} lies inside --output_dir {out}")
    assert "\n" not in message
    assert snapshot(out) == before


@pytest.mark.parametrize("overwrite", [[], ["--overwrite_output_dir", "true"]])
def test_a_saved_model_folder_is_refused_as_output_dir(tmp_path, overwrite):
    """A copy of a run's ema/ (config.json, model.safetensors, tokenizer): results.json written at its root would
    describe a new run beside the old weights, and push-to-hub would publish the pair."""
    folder = save_tiny_model_folder(tmp_path / "ema_copy", "transformer_seq2seq")
    before = snapshot(folder)
    with pytest.raises(ValueError, match=rf"--output_dir {folder} is a saved model folder \(it holds config.json, "
                                         r"model.safetensors\)"):
        run(*parse_args(train_args(folder, *overwrite)))
    assert snapshot(folder) == before


# --- hf-s2s train: a user error is one `error:` line, whenever it is found ----------------------------------------


def not_utf8_corpus(folder):
    folder.mkdir()
    for split in ("train", "test"):
        (folder / f"{split}.src").write_bytes("a b c\nd \xe9 f\n".encode("latin-1"))
        (folder / f"{split}.tgt").write_text("c b a\nf e d\n")
    return folder


@pytest.mark.parametrize("case", ["reused-folder", "not-utf8", "unknown-recipe"])
def test_command_reports_a_user_error_found_while_running_in_one_line(tmp_path, case):
    """A folder holding a run and a corpus line that is not UTF-8 are found once run() has started (under the lock,
    and while the corpus loads); they are refused in one line as the start-up checks are, never as a traceback."""
    out = tmp_path / "run"
    flags, expected = {
        "reused-folder": ([], rf"--output_dir {out} already holds a finished training run \("),
        "not-utf8": (["--dataset", str(tmp_path / "corpus")], rf"{tmp_path / 'corpus' / 'train.src'}, line 2: not UTF-8"),
        "unknown-recipe": (["--recipe", "no_such_recipe"], r"unknown recipe 'no_such_recipe'; available recipes"),
    }[case]
    if case == "reused-folder":
        earlier_run(out)
    if case == "not-utf8":
        not_utf8_corpus(tmp_path / "corpus")
    with pytest.raises(SystemExit) as refused:
        run_command("train", train_args(out, *flags))
    message = str(refused.value.code)
    assert re.match("error: " + expected, message) and "\n" not in message, message


def test_only_hf_s2s_own_errors_are_user_errors():
    """What the command prints as one line: a ValueError or OSError that hf_s2s's own code raised; the same types
    raised inside a library keep their traceback."""
    from hf_s2s.cli.train import is_user_error
    from hf_s2s.training.run_dir import check_resume

    with pytest.raises(ValueError) as own:
        check_resume("runs/x", "not-a-checkpoint", overwrite=False)
    with pytest.raises(ValueError) as library:
        json.loads("{")
    with pytest.raises(KeyError) as other:
        {}["x"]
    assert is_user_error(own.value)
    assert not is_user_error(library.value) and not is_user_error(other.value)


# --- A folder holding a run: the refusal says whether to resume or start again, with the command ------------


def stopped_run(folder, checkpoints=()):
    """What a run stopped before its end leaves (no results.json): its tokenizer and the given checkpoints,
    each with the trainer state written last (a checkpoint named with a "!" is cut short: it holds no trainer
    state)."""
    tiny_tokenizer().save_pretrained(folder / "tokenizer")
    for name in checkpoints:
        (folder / name.rstrip("!")).mkdir()
        if not name.endswith("!"):
            (folder / name / "trainer_state.json").write_text("{}")
    return folder


@pytest.mark.parametrize("case", ["finished", "stopped-with-checkpoints", "stopped-before-a-checkpoint"])
def test_a_refused_folder_names_the_way_on_with_the_command_to_type(tmp_path, case):
    """A finished run starts again; one stopped before its end resumes from its newest complete checkpoint
    (the newest one, cut short while it was written, is passed over) or, with none, starts again. Each way is
    printed as the command that was refused with one flag added (outside an interpreter started with it:
    hf-s2s train)."""
    out = tmp_path / "run"
    if case == "finished":
        earlier_run(out)
    else:
        checkpoints = ["checkpoint-4", "checkpoint-8", "checkpoint-12!"]
        stopped_run(out, checkpoints if case == "stopped-with-checkpoints" else [])
    before = snapshot(out)
    args = train_args(out)
    with pytest.raises(SystemExit) as refused:
        run_command("train", args)
    message = str(refused.value.code)
    again = f"to start again, deleting it: {shlex.join(['hf-s2s', 'train', *args, '--overwrite_output_dir'])}"
    resume = shlex.join(["hf-s2s", "train", *args, "--resume_from_checkpoint", str(out / "checkpoint-8")])
    expected = {
        "finished": f"already holds a finished training run (checkpoint-8, model, tokenizer, results.json); "
                    f"{again}",
        "stopped-with-checkpoints": f"holds a training run that stopped before it finished (checkpoint-4, "
                                    f"checkpoint-8, checkpoint-12, tokenizer); to resume it from its newest "
                                    f"checkpoint: {resume}; {again}",
        "stopped-before-a-checkpoint": f"holds a training run that stopped before it finished (tokenizer) "
                                       f"and has no complete checkpoint to resume from; {again}",
    }[case]
    assert message == f"error: --output_dir {out} {expected}; or choose another --output_dir"
    assert snapshot(out) == {**before, LOCK_NAME: f"{os.getpid()}\n".encode()}  # only the lock was taken


STOPPED = "stopped (Ctrl-C): "  # how the line a stopped run prints starts


def start_and_interrupt(command: list[str], written: Path | Callable[[], bool], log: Path,
                        env: dict | None = None) -> subprocess.Popen:
    """Start ``command`` and press Ctrl-C (SIGINT) as soon as it has written ``written`` (or ``written()`` holds);
    press it again, as a user
    would, while the run goes on 30 s later. Once in a CI run of thousands of tests the run went on after the first
    press (its 40 steps then finished; given 100000 it was still running 120 s later), which 26 presses at varied
    moments on this machine never did. One way CPython loses a press: a SIGINT that arrives while a finalizer
    (``__del__``) runs becomes a KeyboardInterrupt inside it, which is dropped ("Exception ignored in ..."); the CI
    output kept no log to tell. What the tests here check is what the run does with the KeyboardInterrupt it gets.
    Once the run has printed its line it got the press: it is left to end (on a loaded machine the interpreter's
    shutdown took over 30 s, and a press then killed it)."""
    done = written if callable(written) else written.exists
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr,
                                   env={**(env or os.environ), "OMP_NUM_THREADS": "1"}, preexec_fn=default_ctrl_c)
    while not done() and process.poll() is None:
        time.sleep(0.02)
    for _ in range(4):
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
            break
        except subprocess.TimeoutExpired:
            if STOPPED in log.read_text():
                break  # the press was taken: the run is ending, slowly on a loaded machine; another press would
                # reach it while the interpreter shuts down (Python's own handler gone) and kill it (status -2)
    process.wait(timeout=300)
    assert process.returncode != 0, f"the run ended before it was interrupted:\n{log.read_text()[-3000:]}"
    return process


def printed_command(stderr: str, way: str) -> list[str]:
    """The command a refusal, or the line of a stopped run, prints after ``way`` ("to resume it from its
    newest checkpoint")."""
    found = re.search(rf"{way}: (.*?)(; to start again|; or choose|$)", stderr, flags=re.MULTILINE)
    assert found, stderr[-3000:]
    return shlex.split(found.group(1))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("stopped", ["after-the-tokenizer", "after-a-checkpoint"])
def test_an_interrupted_run_run_again_prints_a_command_that_works(tmp_path, stopped):
    """The README's first command stopped with Ctrl-C and typed again: the refusal prints the typed command
    with --resume_from_checkpoint and the newest complete checkpoint when there is one, else with
    --overwrite_output_dir, and that command finishes the run (the folder holding a run, only resuming or
    deleting it lets it start)."""
    out = tmp_path / "run"
    saving = ["--save_strategy", "steps", "--save_steps", "2"] if stopped == "after-a-checkpoint" else []
    command = [sys.executable, str(ROOT / "scripts" / "train.py"),
               *train_args(out, "--max_steps", "40", "--max_train_samples", "64",
                           "--per_device_train_batch_size", "4", *saving)]
    written = out / ("checkpoint-2/trainer_state.json" if saving
                     else "tokenizer/hf_s2s_tokenizer_arguments.json")
    # Stopped after the tokenizer, the run is given steps it cannot finish before the Ctrl-C: with 40 it once ended
    # (model, test decoding and all) after the first press was dropped (start_and_interrupt). The refusal depends on
    # what the folder holds, not on the command that wrote it, so the command typed again is unchanged.
    interrupted = command if saving else [*command, "--max_steps", "100000"]
    start_and_interrupt(interrupted, written, tmp_path / "interrupted.log")
    assert not (out / "results.json").exists()
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 1
    if saving:
        newest = max((p for p in out.glob("checkpoint-*") if (p / "trainer_state.json").is_file()),
                     key=lambda p: int(p.name.split("-")[1]))
        way = printed_command(again.stderr, "to resume it from its newest checkpoint")
        assert way == [*command, "--resume_from_checkpoint", str(newest)]
    else:
        assert "has no complete checkpoint to resume from" in again.stderr
        way = printed_command(again.stderr, "to start again, deleting it")
        assert way == [*command, "--overwrite_output_dir"]
    done = subprocess.run(way, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    epochs = json.loads((out / "results.json").read_text())["epochs"]
    assert epochs == 40 * 4 / 64  # every step of --max_steps


def has_a_timed_checkpoint(out: Path) -> Callable[[], bool]:
    return lambda: any(is_timed_checkpoint(p.parent) for p in out.glob("checkpoint-*/trainer_state.json"))


# How a user starts the training, and the environment it runs in: the installed hf-s2s found on PATH (this
# Python's virtual environment, activated), the checkout's script, the package's module.
SPELLINGS = {
    "hf-s2s train": (["hf-s2s", "train"], {"PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                                   os.environ.get("PATH", "")])}),
    "python scripts/train.py": ([sys.executable, str(ROOT / "scripts" / "train.py")], {}),
    "python -m hf_s2s.cli train": ([sys.executable, "-m", "hf_s2s.cli", "train"], {}),
}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("stopped", "spelling"), [
    ("after-the-tokenizer", "hf-s2s train"), ("after-a-checkpoint", "python scripts/train.py"),
    ("after-a-timed-checkpoint", "python -m hf_s2s.cli train")])
def test_ctrl_c_ends_a_run_with_one_line_naming_the_way_on_and_status_130(tmp_path, stopped, spelling):
    """Ctrl-C during training is no traceback: one line says where the newest complete checkpoint is and
    prints the command that resumes from it (the command the rerun's refusal prints, whose working is tested
    above), or, stopped before a checkpoint, the one that starts again; the status is 130, as for any
    command a shell stops with Ctrl-C. The line is the last one, on a line of its own after the progress bar
    (which is closed first, not glued to it nor drawn again after it), and the command is spelled as the user
    typed it. A timed checkpoint (--save_interval_minutes, mid-epoch) is one to resume from. A run started with
    --overwrite_output_dir resumes without it (the two are refused together)."""
    out = tmp_path / "run"
    saving = {"after-the-tokenizer": [], "after-a-checkpoint": ["--save_strategy", "steps", "--save_steps", "2"],
              # 32 steps an epoch, a checkpoint after every step
              "after-a-timed-checkpoint": ["--save_strategy", "epoch", "--save_interval_minutes", "1e-9",
                                           "--per_device_train_batch_size", "2"]}[stopped]
    typed, env = SPELLINGS[spelling]
    command = [*typed, *train_args(out, "--max_steps", "100000", "--max_train_samples", "64",
                                   "--per_device_train_batch_size", "4", *saving, "--disable_tqdm", "false"),
               "--overwrite_output_dir"]
    written = {"after-the-tokenizer": out / "tokenizer/hf_s2s_tokenizer_arguments.json",
               "after-a-checkpoint": out / "checkpoint-2/trainer_state.json",
               "after-a-timed-checkpoint": has_a_timed_checkpoint(out)}[stopped]
    log = tmp_path / "interrupted.log"
    process = start_and_interrupt(command, written, log, env={**os.environ, **env})
    stderr = log.read_text()
    assert process.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    before, last, after = stderr.rsplit("\n", 2)
    assert after == "" and "\r" not in last and stderr.count("stopped (Ctrl-C)") == 1, stderr[-3000:]
    if saving:
        assert re.search(r"\d+/100000 \[", before)  # the training's progress bar was drawn (steps were taken)
        newest = max((p for p in out.glob("checkpoint-*") if (p / "trainer_state.json").is_file()),
                     key=lambda p: int(p.name.split("-")[1]))
        assert is_timed_checkpoint(newest) == (stopped == "after-a-timed-checkpoint" and
                                               int(newest.name.split("-")[1]) % 32 != 0)
        assert last.startswith(f"stopped (Ctrl-C): the run stopped before it finished; its newest complete "
                               f"checkpoint is {newest}; "), last
        assert printed_command(last, "to resume it from its newest checkpoint") == [
            *command[:-1], "--resume_from_checkpoint", str(newest)]
    else:
        assert last.startswith("stopped (Ctrl-C): the run stopped before its first complete checkpoint"), last
        assert printed_command(last, "to start again, deleting what it wrote") == command


@pytest.mark.parametrize("case", ["on PATH", "not on PATH", "module", "script"])
def test_the_printed_command_is_spelled_as_the_user_typed_it(tmp_path, monkeypatch, case):
    """The command a stopped or refused run prints is the one the user typed: an installed hf-s2s by its name
    when that name finds it (the shell passes the interpreter the path it found), else by the path the user
    gave (a virtual environment not activated); python -m hf_s2s.cli train and python scripts/train.py as
    written. Never another spelling of the same command, which may not run where the user is."""
    script = tmp_path / "venv" / "bin" / "hf-s2s"
    script.parent.mkdir(parents=True)
    script.write_text("#!/usr/bin/env python\n")
    script.chmod(0o755)
    argv = ["--recipe", "transformer_small", "--seed", "3"]
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv("PATH", str(script.parent) if case == "on PATH" else str(tmp_path / "elsewhere"))
    orig_argv, sys_argv, expected = {
        "on PATH": (["/usr/bin/python3", str(script), "train", *argv], [str(script), "train", *argv],
                    ["hf-s2s", "train", *argv]),
        "not on PATH": (["/usr/bin/python3", str(script), "train", *argv], [str(script), "train", *argv],
                        [str(script), "train", *argv]),
        "module": (["python", "-m", "hf_s2s.cli", "train", *argv],
                   [str(ROOT / "hf_s2s" / "cli" / "__main__.py"), "train", *argv],
                   ["python", "-m", "hf_s2s.cli", "train", *argv]),
        "script": (["python3", "scripts/train.py", *argv], ["scripts/train.py", *argv],
                   ["python3", "scripts/train.py", *argv]),
    }[case]
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(sys, "argv", sys_argv)
    assert typed_command(argv, "hf-s2s train") == expected


def test_a_resumed_run_stopped_again_prints_one_way_on_with_its_newest_checkpoint(tmp_path):
    """The command a stopped run prints holds the flag of the way on alone: a resumed run (or one started with
    --overwrite_output_dir, in either spelling) stopped again resumes from its newest complete checkpoint, not
    from the one it was resumed from, and without the flag its resume would be refused with."""
    out = stopped_run(tmp_path / "run", ["checkpoint-4", "checkpoint-8", "checkpoint-12!"])
    base = ["hf-s2s", "train", "--output_dir", str(out)]
    for ways in (["--resume_from_checkpoint", str(out / "checkpoint-4")], ["--overwrite_output_dir"],
                 ["--overwrite_output_dir", "True"], ["--overwrite_output_dir=true"]):
        message = interrupted_run_message(out, command=[*base, *ways, "--seed", "3"])
        assert printed_command(message, RESUME_WAY) == [
            *base, "--seed", "3", "--resume_from_checkpoint", str(out / "checkpoint-8")], ways
