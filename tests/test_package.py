"""The package as a user installs it: the Auto registrations, a quiet `import hf_s2s`, and the wheel built from this
checkout installed into a fresh virtual environment, driven through its `hf-s2s` entry points."""

import importlib
import json
import os
import shutil
import signal
import site
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

import hf_s2s
from hf_s2s.cli import COMMANDS
from hf_s2s.cli import main as cli_main
from tests.helpers import TINY
from tests.saved_folders import save_tiny_model_folder
from tests.server_process import start_server_process

ROOT = Path(__file__).resolve().parent.parent


def test_import_registers_both_families_idempotently():
    importlib.reload(hf_s2s)  # registering a second time must not raise
    for model_type, config_cls, base_cls, lm_cls in [
        ("rnn_seq2seq", hf_s2s.RNNSeq2SeqConfig, hf_s2s.RNNSeq2SeqModel, hf_s2s.RNNSeq2SeqForConditionalGeneration),
        ("transformer_seq2seq", hf_s2s.TransformerSeq2SeqConfig, hf_s2s.TransformerSeq2SeqModel,
         hf_s2s.TransformerSeq2SeqForConditionalGeneration),
    ]:
        config = AutoConfig.for_model(model_type)
        assert type(config).__name__ == config_cls.__name__
        assert AutoModel._model_mapping[type(config)].__name__ == base_cls.__name__
        assert AutoModelForSeq2SeqLM._model_mapping[type(config)].__name__ == lm_cls.__name__


# --- What `import hf_s2s` costs every command ---------------------------------------------------------------

# Optional backends: each is imported inside the one function that uses it (ONNX and CTranslate2 export, plots,
# LoRA), never by `import hf_s2s`, which every hf-s2s command runs.
OPTIONAL_BACKENDS = ("torchao", "onnx", "onnxruntime", "onnxscript", "ctranslate2", "peft", "matplotlib")


def import_alone(statement: str, folder: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run `statement` in a fresh interpreter (this one, from the checkout). Returns the process, whose stdout and
    stderr are the import's alone, and which of OPTIONAL_BACKENDS were in sys.modules after it (written to a file
    in `folder`)."""
    loaded_file = folder / "loaded.json"
    probe = (f"{statement}\nimport json, sys\nbackends = {OPTIONAL_BACKENDS!r}\n"
             "open(sys.argv[1], 'w').write(json.dumps([name for name in backends if name in sys.modules]))")
    completed = subprocess.run([sys.executable, "-c", probe, str(loaded_file)], cwd=ROOT, capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    return completed, json.loads(loaded_file.read_text())


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """`import hf_s2s` and its command dispatcher (what every hf-s2s command runs before its own module) in a fresh
    interpreter: the process and the optional backends it left loaded."""
    return import_alone("import hf_s2s, hf_s2s.cli", tmp_path_factory.mktemp("import"))


@pytest.mark.slow
def test_import_prints_nothing(imported):
    """Not a line on stdout or stderr: whatever `import hf_s2s` prints, every command prints. (With torchao
    installed, transformers' own modeling_utils imports it, and torchao 0.18 and torch log warnings at that import:
    transformers_compat has to keep them off the terminal.)"""
    completed, _ = imported
    assert completed.stdout == "" and completed.stderr == "", completed.stdout + completed.stderr


@pytest.mark.slow
def test_import_loads_no_optional_backend_that_transformers_does_not(imported, tmp_path):
    """None of OPTIONAL_BACKENDS is in sys.modules after `import hf_s2s`, except what importing the transformers
    classes hf_s2s builds on already loads in this environment (transformers.modeling_utils imports torchao
    whenever it is installed, through transformers/quantizers/quantizer_torchao.py)."""
    _, loaded = imported
    _, by_transformers = import_alone("from transformers import GenerationMixin, PreTrainedModel", tmp_path)
    assert set(loaded) <= set(by_transformers), (
        f"import hf_s2s loads {sorted(set(loaded) - set(by_transformers))}: import it in the function that uses it")


# --- The wheel, installed the ordinary way ------------------------------------------------------------------

# What a tiny `hf-s2s train` run must not print: warnings that ask nothing of the user (issue 15).
SPURIOUS_WARNINGS = ("pin_memory", "missing keys", "Both `max_new_tokens`")


def dependency_folders() -> list[str]:
    """The folders this interpreter imports its installed distributions from (torch, transformers, ...): its
    site-packages, the system's too where they are visible, and the user's site-packages where enabled."""
    user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    return [folder for folder in [*site.getsitepackages(), *user] if Path(folder).is_dir()]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built from this checkout, installed into a fresh virtual environment outside the repository.
    Returns the venv's bin folder, the environment to run it with (no PYTHONPATH: the venv's hf_s2s must be the
    one imported) and a working folder elsewhere.

    The venv reaches torch and the other dependencies through a .pth file naming the running interpreter's
    site-packages, so no network is needed. Not `--system-site-packages`: when pytest itself runs in a venv, that
    flag reaches the base interpreter, which has none of them. A .pth file's folder lines are only appended to
    sys.path (the .pth files inside those folders, such as this checkout's editable install, are not run), and
    after the venv's own site-packages: before the wheel is installed the venv cannot import hf_s2s at all."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"  # a copy, so that building leaves no build/ or egg-info in the checkout
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "runs", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache", ".venv"))
    wheels = root / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "--wheel-dir", str(wheels), str(source)], check=True, capture_output=True, cwd=root)
    wheel = next(wheels.glob("hf_s2s-*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    bin_dir = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    venv_python = str(bin_dir / "python")
    venv_site = subprocess.run([venv_python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True, env=env, cwd=root).stdout.strip()
    (Path(venv_site) / "hf_s2s_test_dependencies.pth").write_text("\n".join(dependency_folders()) + "\n")
    unseen = subprocess.run([venv_python, "-c", "import torch, transformers; import hf_s2s"], capture_output=True,
                            text=True, env=env, cwd=root)
    assert unseen.stderr.endswith("No module named 'hf_s2s'\n"), (
        f"before the wheel, the venv must import torch and transformers but not hf_s2s:\n{unseen.stderr}")
    # --no-index: the dependencies must already be there (through the .pth file); nothing is fetched. An hf_s2s
    # the .pth folders hold is left alone (pip does not uninstall outside the venv it installs into).
    installing = subprocess.run([sys.executable, "-m", "pip", "--python", venv_python, "install", "-q", "--no-index",
                                 str(wheel)], capture_output=True, text=True, cwd=root)
    assert installing.returncode == 0, f"pip could not install the wheel offline:\n{installing.stderr}"
    work = root / "work"
    work.mkdir()
    return bin_dir, env, work


def run_installed(installed, *command, stdin=None):
    bin_dir, env, work = installed
    completed = subprocess.run([str(bin_dir / command[0]), *command[1:]], cwd=work, env=env, input=stdin,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, f"{command} failed:\n{completed.stderr[-4000:]}"
    return completed


@pytest.mark.slow
def test_wheel_ships_the_recipes_and_the_card_template(installed):
    """The installed package is the venv's, not this checkout's, and carries its package data."""
    venv = installed[0].parent
    script = ("import json, hf_s2s, hf_s2s.hub.card as hub, hf_s2s.training.run as t; print(json.dumps([hf_s2s.__file__, "
              "sorted(p.stem for p in t.RECIPES_DIR.glob('*.json')), hub.CARD_TEMPLATE.is_file()]))")
    module_file, recipes, has_template = json.loads(run_installed(installed, "python", "-c", script).stdout)
    assert Path(module_file).is_relative_to(venv)
    assert recipes == sorted(p.stem for p in (ROOT / "hf_s2s" / "training" / "recipes").glob("*.json")) and recipes
    assert has_template


@pytest.mark.slow
def test_entry_points_train_translate_and_push_from_the_wheel(installed):
    """`hf-s2s train` (a shipped recipe found by name, overridden down to a tiny job), then `hf-s2s translate`
    and `hf-s2s push-to-hub --dry-run` on its folder, all from the installed wheel; the run's log holds none
    of the spurious warnings."""
    work = installed[2]
    trained = run_installed(
        installed, "hf-s2s", "train", "--recipe", "transformer_small", "--dataset", "synthetic:reversal",
        "--source_lang", "src", "--target_lang", "tgt", "--vocab_size", "280",
        "--model_config", json.dumps(TINY["transformer_seq2seq"]), "--max_train_samples", "32",
        "--max_eval_samples", "8", "--max_test_samples", "4", "--num_train_epochs", "2",
        "--per_device_train_batch_size", "16", "--per_device_eval_batch_size", "8", "--warmup_steps", "1",
        "--generation_max_length", "16", "--test_num_beams", "1", "--output_dir", "run", "--report_to", "none",
        "--disable_tqdm", "true", "--logging_steps", "1",
    )
    log = trained.stdout + trained.stderr
    assert "test greedy: BLEU" in trained.stdout  # the result
    assert "'eval_bleu'" in log  # validation scores
    results = json.loads((work / "run" / "model" / "results.json").read_text())
    assert results["recipe"] == "transformer_small" and results["epochs"] == 2
    for warning in SPURIOUS_WARNINGS:
        assert warning not in log, f"spurious warning {warning!r} in the log:\n{log}"

    translated = run_installed(installed, "hf-s2s", "translate", "run/model", "--beams", "2", "--max-new-tokens", "5",
                               stdin="a b c\nd e\n")
    assert len(translated.stdout.splitlines()) == 2
    assert "Both `max_new_tokens`" not in translated.stderr

    run_installed(installed, "hf-s2s", "push-to-hub", "run/model", "me/tiny", "--dry-run", "--staging-dir", "hub")
    card = (work / "hub" / "README.md").read_text()
    assert "transformer_small" in card and (work / "hub" / "model.safetensors").is_file()


@pytest.mark.slow
def test_serve_from_the_wheel(installed):
    """`hf-s2s serve` from the installed wheel (with the serve extra) answers a translation and serves the attention
    explorer's page from the package data, then stops on SIGTERM."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    bin_dir, env, work = installed
    assert "--max-batch-tokens" in run_installed(installed, "hf-s2s", "serve", "--help").stdout
    folder = save_tiny_model_folder(work / "served", "transformer_seq2seq")
    process, url = start_server_process([str(folder)], work, executable=[str(bin_dir / "hf-s2s")], env=env)
    try:
        response = httpx.post(f"{url}/translate", json={"sentences": ["a b c", "d"], "num_beams": 2}, timeout=60)
        assert response.status_code == 200 and len(response.json()["translations"]) == 2
        static = ROOT / "hf_s2s" / "serving" / "static"
        for path, name in (("", "index.html"), ("static/explorer.js", "explorer.js"),
                           ("static/explorer.css", "explorer.css")):
            served = httpx.get(f"{url}/{path}")
            assert served.status_code == 200 and served.text == (static / name).read_text(), path
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_subcommand_help_lists_its_flags_with_defaults(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main([command, "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    assert help_text.startswith(f"usage: hf-s2s {command} ")
    if command != "results-table":  # its only argument is the list of files
        assert "(default: " in help_text
    if command == "train":  # all three argument groups, not only the recipe pre-parse's
        assert all(flag in help_text for flag in ("--model_type", "--recipe", "--learning_rate", "--separate_vocabs"))


def test_unknown_subcommand_names_the_commands(capsys):
    assert cli_main(["trian"]) == 2
    error = capsys.readouterr().err
    assert "unknown command 'trian'" in error and "train, translate, score, train-tokenizer" in error
