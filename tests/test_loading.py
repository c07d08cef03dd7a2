"""Strict loading of saved folders (hf_s2s.models.loading) and the tools built on it: a folder whose weights do not match
its config, a corrupt weights file, a missing folder or tokenizer are refused with an error that says so, by the
library and by scripts/translate.py and push_to_hub; and writers refuse to overwrite a saved tokenizer or model."""

import io
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForSeq2SeqLM

import hf_s2s  # noqa: F401
from hf_s2s.cli import run_command
from hf_s2s.data.tokenization import TranslationTokenizers, train_tokenizer_from_texts
from hf_s2s.hub.publish import push_to_hub
from hf_s2s.models.loading import (
    ModelFolderError,
    load_config,
    load_model,
    load_tokenizer,
    looks_like_local_path,
)
from hf_s2s.training.arguments import load_model_config
from hf_s2s.training.run import check_arguments, parse_args, run
from tests.helpers import TINY
from tests.runs import train_args
from tests.saved_folders import TEXTS, save_tiny_model_folder, tiny_tokenizer

ROOT = Path(__file__).resolve().parent.parent
EXTRA_KEY = "model.extra_projection.weight"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A saved folder per family; the Transformer ties its output projection (no lm_head.weight in the file)."""
    tokenizer, base = tiny_tokenizer(), tmp_path_factory.mktemp("folders")
    return {model_type: save_tiny_model_folder(base / model_type, model_type, tokenizer) for model_type in TINY}


def broken_copy(folders, model_type: str, how: str, tmp_path: Path) -> tuple[Path, str]:
    """A copy of the ``model_type`` folder broken in one way; returns it and the text the refusal must name."""
    folder = shutil.copytree(folders[model_type], tmp_path / f"{model_type}-{how}")
    weights = load_file(folder / "model.safetensors")
    last = sorted(weights)[-1]
    if how == "other_family":
        other = next(m for m in TINY if m != model_type)
        shutil.copyfile(folders[other] / "config.json", folder / "config.json")
        return folder, "missing weights"
    if how == "missing":
        del weights[last]
    elif how == "unexpected":
        weights[EXTRA_KEY] = torch.zeros(2)
        last = EXTRA_KEY
    elif how == "mismatched":
        weights[last] = torch.zeros(3, 3)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder, f"{how} weights \\(.*{last}"


@pytest.mark.parametrize("how", ["missing", "unexpected", "mismatched", "other_family"])
@pytest.mark.parametrize("model_type", list(TINY))
def test_load_model_refuses_weights_that_do_not_match_the_config(folders, tmp_path, model_type, how):
    folder, named = broken_copy(folders, model_type, how, tmp_path)
    with pytest.raises(ModelFolderError, match=f"weights in {folder} do not match its config.json.*{named}"):
        load_model(folder)


def test_tied_output_projection_absent_from_the_file_is_not_refused(folders):
    folder = folders["transformer_seq2seq"]
    assert "lm_head.weight" not in load_file(folder / "model.safetensors")
    model = load_model(folder)
    expected = AutoModelForSeq2SeqLM.from_pretrained(folder)
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    for (name, tensor), (_, reference) in zip(model.state_dict().items(), expected.state_dict().items(), strict=True):
        torch.testing.assert_close(tensor, reference, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_corrupt_weights_file_is_named(folders, tmp_path, damage):
    folder = shutil.copytree(folders["rnn_seq2seq"], tmp_path / "model")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"not safetensors" * 8)
    with pytest.raises(ModelFolderError, match=f"{weights} is truncated or corrupt"):
        load_model(folder)


def test_missing_folder_and_missing_tokenizer_are_named(folders, tmp_path):
    with pytest.raises(ModelFolderError, match=f"model folder {tmp_path / 'runs/x/model'} does not exist"):
        load_model(tmp_path / "runs" / "x" / "model")
    with pytest.raises(ModelFolderError, match="not-a-folder-here is not a local folder"):
        load_model("not-a-folder-here")  # could be a Hub id: the message says it is neither
    folder = shutil.copytree(folders["rnn_seq2seq"], tmp_path / "no_tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    with pytest.raises(ModelFolderError, match=f"{folder} holds no tokenizer"):
        load_tokenizer(folder)


def run_script(name: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args], input=stdin,
                          capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_translate_script_refuses_a_broken_folder_instead_of_translating_with_random_weights(folders, tmp_path):
    folder, _ = broken_copy(folders, "transformer_seq2seq", "missing", tmp_path)
    completed = run_script("translate.py", str(folder), "--beams", "1", stdin="a b c\n")
    assert completed.returncode == 1 and completed.stdout == ""
    assert "error: the weights in" in completed.stderr and "missing weights" in completed.stderr
    assert "Traceback" not in completed.stderr


@pytest.mark.slow
@pytest.mark.parametrize("case", ["missing_folder", "no_tokenizer", "truncated"])
def test_translate_script_names_the_missing_or_corrupt_piece(folders, tmp_path, case):
    folder = shutil.copytree(folders["rnn_seq2seq"], tmp_path / "model")
    if case == "missing_folder":
        folder = tmp_path / "mistyped" / "model"
        expected = f"model folder {folder} does not exist"
    elif case == "no_tokenizer":
        (folder / "tokenizer.json").unlink()
        (folder / "tokenizer_config.json").unlink()
        expected = f"{folder} holds no tokenizer"
    else:
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[:100])
        expected = f"{folder / 'model.safetensors'} is truncated or corrupt"
    completed = run_script("translate.py", str(folder), stdin="a b c\n")
    assert completed.returncode == 1 and completed.stdout == ""
    assert f"error: {expected}" in completed.stderr and "Traceback" not in completed.stderr


@pytest.mark.parametrize("command", ["translate", "train"])
@pytest.mark.parametrize("linked", [True, False], ids=["symlinked", "plain"])
@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_a_tokenizer_file_that_is_not_json_is_named(folders, tmp_path, capsys, command, linked, name):
    """A tokenizer file of a folder (a symlink, as a Hub cache snapshot holds, or the file itself) that is not JSON is
    one error line naming the file, and the file a symlink points to (before: "Expecting value: line 1 column 1
    (char 0)", naming none)."""
    folder = shutil.copytree(folders["transformer_seq2seq"], tmp_path / "model")
    stray = tmp_path / "elsewhere" / "notes.txt"
    stray.parent.mkdir()
    stray.write_text("not JSON\n")
    (folder / name).unlink()
    if linked:
        (folder / name).symlink_to(stray)
    else:
        shutil.copyfile(stray, folder / name)
    (tmp_path / "input.txt").write_text("a b c\n")
    argv = [str(folder), "--input", str(tmp_path / "input.txt")] if command == "translate" else \
        train_args(tmp_path / "run", "--model_name_or_path", str(folder))
    with pytest.raises(SystemExit) as refused:
        run_command(command, argv)
    said = str(refused.value.code)
    where = f"{folder / name} \\(a symlink to {stray}\\)" if linked else f"{folder / name}"
    assert re.fullmatch(rf"error: {where} is not JSON \(Expecting value at line 1, column 1\): the folder's tokenizer "
                        r"cannot be read; copy the file again, or save the tokenizer again \(tokenizer.save_pretrained\)",
                        said), said
    assert capsys.readouterr().out == ""


def test_push_to_hub_refuses_a_folder_whose_weights_do_not_match(folders, tmp_path):
    folder, _ = broken_copy(folders, "rnn_seq2seq", "other_family", tmp_path)
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\nA card.\n")
    with pytest.raises(ModelFolderError, match="do not match its config.json"):
        push_to_hub(folder, "someone/x", dry_run=True, staging_dir=tmp_path / "staging")
    assert not (tmp_path / "staging").exists()  # refused before anything was written


def test_training_refuses_to_fine_tune_a_folder_whose_weights_do_not_match(folders, tmp_path):
    folder, _ = broken_copy(folders, "transformer_seq2seq", "missing", tmp_path)  # would train from random weights
    args = parse_args(["--dataset", "synthetic:reversal", "--source_lang", "src", "--target_lang", "tgt",
                       "--model_name_or_path", str(folder), "--max_train_samples", "8", "--max_steps", "1",
                       "--output_dir", str(tmp_path / "run"), "--report_to", "none", "--use_cpu", "true"])
    with pytest.raises(ModelFolderError, match="do not match its config.json"):
        run(*args)
    assert not list((tmp_path / "run").glob("checkpoint-*"))


@pytest.mark.slow
def test_train_tokenizer_refuses_a_model_folder_and_replaces_only_its_own_output(folders, tmp_path):
    folder = shutil.copytree(folders["rnn_seq2seq"], tmp_path / "model")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    args = ["--dataset", "synthetic:reversal", "--source_lang", "src", "--target_lang", "tgt", "--vocab_size", "280"]
    completed = run_script("train_tokenizer.py", *args, "--output_dir", str(folder))
    assert completed.returncode == 1, completed.stderr[-2000:]
    assert f"error: {folder} already holds files (attention_rnn_seq2seq.py, " in completed.stderr
    assert "pass --overwrite_output_dir" in completed.stderr
    # asked to overwrite, it still refuses: a new tokenizer beside the model's weights would not match them
    completed = run_script("train_tokenizer.py", *args, "--output_dir", str(folder), "--overwrite_output_dir")
    assert completed.returncode == 1 and (f"replaces only what hf-s2s train-tokenizer wrote into {folder}, byte for "
                                          "byte, and it holds no hf_s2s_output.json") in completed.stderr
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    # its own output it replaces, whole: a joint tokenizer after separate ones leaves no target_tokenizer.json
    out = tmp_path / "tokenizer"
    completed = run_script("train_tokenizer.py", *args, "--output_dir", str(out), "--separate_vocabs")
    assert completed.returncode == 0 and (out / "target_tokenizer.json").is_file(), completed.stderr[-2000:]
    completed = run_script("train_tokenizer.py", *args, "--output_dir", str(out), "--overwrite_output_dir")
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert not (out / "target_tokenizer.json").exists()
    assert type(load_tokenizer(out)).__name__ != "SeparateVocabTokenizer"  # loads as the joint one it now is


def test_a_name_that_can_only_be_a_path_is_told_from_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for path in ("./model", "~/model", "/abs/model", "runs/x/model", "corpus.tsv", "corpus.txt.gz", "data/corpus"):
        assert looks_like_local_path(path), path
    for hub_id in ("Helsinki-NLP/opus-mt-de-en", "wmt16", "bentrevett/multi30k", "t5-small"):
        assert not looks_like_local_path(hub_id), hub_id


MISSING = [  # flag, value (relative to the test's folder), what the one error line says
    ("--model_name_or_path", "./missing/model",
     r"--model_name_or_path \./missing/model: model folder missing/model does not exist \(a local path, not a Hub "),
    ("--model_name_or_path", "runs/x/model", r"--model_name_or_path runs/x/model: model folder runs/x/model does not"),
    ("--tokenizer_name_or_path", "./missing/tok", r"--tokenizer_name_or_path \./missing/tok: model folder missing/tok "
                                                  r"does not exist"),
    ("--dataset", "data/corpus", r"--dataset data/corpus does not exist \(a local path, not a Hub dataset name"),
    ("--dataset", "corpus.txt", r"--dataset corpus.txt does not exist \(a local path"),
    ("--dataset", "no/such/corpus", r"--dataset no/such/corpus does not exist \(a local path"),
    # a name that may be a Hub id: the message says it is neither a local path nor a Hub repo (tests are offline)
    ("--model_name_or_path", "someone/no-such-model", r"--model_name_or_path someone/no-such-model is not a local "
                                                      r"folder \(no such folder here\) and could not be loaded as a Hub"),
    ("--dataset", "someone/no-such-corpus", r"someone/no-such-corpus is neither a local corpus \(no such file or "
                                            r"folder here\) nor a Hub dataset that could be loaded"),
]


@pytest.mark.parametrize(("flag", "value", "message"), MISSING, ids=[f"{f}={v}" for f, v, _ in MISSING])
def test_training_names_a_missing_local_path_instead_of_a_hub_problem(tmp_path, monkeypatch, flag, value, message):
    """They said "Repo id must be in the form ..." or "Couldn't reach ... on the Hub" for a path that does not exist."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    with pytest.raises(SystemExit) as refused:
        run_command("train", train_args(tmp_path / "run", flag, value))
    code = str(refused.value.code)
    assert re.match("error: " + message, code) and "\n" not in code, code
    assert not (tmp_path / "run" / "tokenizer").exists()


def test_fine_tuning_with_another_vocabulary_is_refused_before_the_corpus_is_read(folders, tmp_path):
    """A tokenizer of another language pair with as many tokens as the model's fitted its config and trained
    without a word: the ids its embeddings learned now stand for other tokens."""
    model_dir = folders["transformer_seq2seq"]
    other = train_tokenizer_from_texts([text.translate(str.maketrans("abcdefghij", "klmnopqrst")) for text in TEXTS],
                                       vocab_size=280, min_frequency=1)
    assert len(other) == len(load_tokenizer(model_dir))  # the same size: the config check cannot tell them apart
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match=rf"--tokenizer_name_or_path {tmp_path / 'other'} is not the tokenizer of "
                                         rf"--model_name_or_path {model_dir} \(vocabularies of {len(other)} and "
                                         rf"{len(other)} tokens: \d+ token\(s\) at other ids or missing \('k' .* vs "
                                         r".*\): the model's embeddings belong to the ids of its own tokenizer"):
        run(*parse_args(train_args(tmp_path / "run", "--model_name_or_path", str(model_dir),
                                   "--tokenizer_name_or_path", str(tmp_path / "other"))))
    assert not (tmp_path / "run").exists()
    # the model's own tokenizer, saved elsewhere, is the same tokenizer
    load_tokenizer(model_dir).save_pretrained(tmp_path / "same")
    check_arguments(*parse_args(train_args(tmp_path / "run", "--model_name_or_path", str(model_dir),
                                           "--tokenizer_name_or_path", str(tmp_path / "same"))))


# ------------------------------------------------------------------------------ no code of a folder runs, no prompt
# A folder whose model_type neither hf_s2s nor transformers has and whose auto_map names code in the folder: left to
# choose (trust_remote_code unset), transformers asks "Do you wish to run the custom code? [y/N]" on stdin. Here
# stdin answers yes, so a load that asked would run the payload, which leaves a marker file.

FOREIGN_CODE = '''open({marker!r}, "w").close()
from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerFast


class ForeignConfig(PretrainedConfig):
    model_type = "foreign_seq2seq"


class ForeignModel(PreTrainedModel):
    config_class = ForeignConfig


class ForeignTokenizer(PreTrainedTokenizerFast):
    pass
'''
PROMPT = "Do you wish to run the custom code? [y/N]"


def save_foreign_folder(folder: Path, marker: Path) -> Path:
    """A tokenizer, a config and code of a model type neither hf_s2s nor transformers has, each Auto class mapped to
    the folder's foreign_code.py, which leaves ``marker`` when it runs."""
    tiny_tokenizer().save_pretrained(folder)
    (folder / "foreign_code.py").write_text(FOREIGN_CODE.format(marker=str(marker)))
    auto_map = {name: f"foreign_code.{cls}" for name, cls in [("AutoConfig", "ForeignConfig"),
                                                              ("AutoModel", "ForeignModel"),
                                                              ("AutoModelForSeq2SeqLM", "ForeignModel")]}
    (folder / "config.json").write_text(json.dumps({"model_type": "foreign_seq2seq", "auto_map": auto_map}))
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config.update(tokenizer_class="ForeignTokenizer",
                            auto_map={"AutoTokenizer": [None, "foreign_code.ForeignTokenizer"]})
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return folder


LOADERS = {
    "load_model": load_model,
    "load_tokenizer": load_tokenizer,
    "load_config": load_config,
    "TranslationTokenizers.from_pretrained": TranslationTokenizers.from_pretrained,
    "load_model_config": load_model_config,  # the training job's --model_name_or_path
}


@pytest.mark.parametrize("loader", list(LOADERS))
def test_a_folder_that_needs_its_own_code_is_refused_without_a_prompt(tmp_path, monkeypatch, capsys, loader):
    folder = save_foreign_folder(tmp_path / "foreign", tmp_path / "ran")
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 10))  # a person who would answer yes
    with pytest.raises(ModelFolderError) as refused:
        LOADERS[loader](str(folder))
    assert str(refused.value).startswith(f"{folder} needs code of its own to load")
    assert f"hf-s2s verify {folder}" in str(refused.value)
    assert PROMPT not in capsys.readouterr().out
    assert not (tmp_path / "ran").exists()
    # the folder's code is live: a load that trusts it runs it
    AutoConfig.from_pretrained(folder, trust_remote_code=True)
    assert (tmp_path / "ran").exists()


def run_in_a_terminal(argv: list[str], cwd: Path, typed: str, timeout: float = 240) -> tuple[int, str]:
    """Run ``argv`` with a real pseudo-terminal as its stdin, stdout and stderr (what a person at a shell gives
    it), ``typed`` already typed; returns its exit status and everything it printed."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(cwd / "hf_home"), "TOKENIZERS_PARALLELISM": "false"}
    pid, terminal = pty.fork()
    if pid == 0:  # the child: exec the command on the terminal
        os.chdir(cwd)
        os.execve(argv[0], argv, env)
    os.write(terminal, typed.encode())
    output, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not select.select([terminal], [], [], 1)[0]:
            continue
        try:
            chunk = os.read(terminal, 65536)
        except OSError:  # EIO: the command exited and closed the terminal
            break
        if not chunk:
            break
        output += chunk
    else:
        os.kill(pid, signal.SIGKILL)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    os.close(terminal)
    return status, output.decode(errors="replace").replace("\r\n", "\n")


TERMINAL_COMMANDS = {
    "translate": ["translate", "{folder}", "--input", "{source}"],
    "similarity": ["similarity", "{folder}", "--input", "{pairs}"],
    "serve": ["serve", "{folder}", "--port", "0"],
    "export-onnx": ["export-onnx", "{folder}", "{out}"],
    "push-to-hub": ["push-to-hub", "{folder}", "me/foreign", "--dry-run", "--staging-dir", "{out}"],
}


@pytest.mark.slow
@pytest.mark.parametrize("command", list(TERMINAL_COMMANDS))
def test_no_command_shows_the_run_custom_code_prompt_at_a_terminal(tmp_path, command):
    """At a terminal, with a person who types yes: the command ends with an error line naming the folder, and
    neither asks nor runs the folder's code."""
    folder = save_foreign_folder(tmp_path / "foreign", tmp_path / "ran")
    (folder / "README.md").write_text("A model of a type hf_s2s does not have.\n")  # push-to-hub needs a card
    (tmp_path / "source.txt").write_text("a b c\n")
    (tmp_path / "pairs.txt").write_text("a b c\tc b a\n")
    values = {"folder": folder, "source": tmp_path / "source.txt", "pairs": tmp_path / "pairs.txt",
              "out": tmp_path / "out"}
    argv = [str(Path(sys.executable).parent / "hf-s2s")] + [a.format(**values) for a in TERMINAL_COMMANDS[command]]
    status, output = run_in_a_terminal(argv, tmp_path, typed="y\n")
    assert PROMPT not in output
    assert status == 1 and f"error: {folder} needs code of its own to load" in output, output[-3000:]
    assert "Traceback" not in output
    assert not (tmp_path / "ran").exists()
