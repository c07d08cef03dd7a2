"""Sharing on the Hub: the model card the training job writes, the dry-run Hub folder (complete, safetensors
only, the release's own code byte for byte), its refusal of incomplete folders and of any other code (issue 24's
five payloads and a changed comment alike, pushed only with --allow-modified-code after their diff), the upload
calls, and loading + translating from the folder in a fresh process where hf_s2s cannot be imported (Auto classes
and the shipped translation pipeline)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import ModelCard, metadata_load
from huggingface_hub.repocard_data import model_index_to_eval_results
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_s2s
import hf_s2s.hub.publish as hub
from hf_s2s.cli import run_command
from hf_s2s.hub.card import render_model_card
from hf_s2s.hub.code_integrity import PACKAGE_DIR, compare_with_releases
from hf_s2s.hub.publish import (
    HubFolderError,
    build_hub_folder,
    check_hub_folder,
    push_to_hub,
)
from hf_s2s.models import modeling_common
from hf_s2s.models.families import FAMILIES, PIPELINE_FILE
from hf_s2s.training.run import RECIPES_DIR, parse_args, run
from tests.helpers import TINY, random_tiny_model, run_without_hf_s2s
from tests.saved_folders import save_tiny_model_folder

ROOT = Path(__file__).resolve().parent.parent
VERSION = hf_s2s.__version__
SOURCES = ["a b c d e", "f g", "h i j"]  # different lengths: the batch is padded
GENERATE = {"max_new_tokens": 10, "do_sample": False}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A few training steps per family through the real training job (so the card is its own doing)."""
    runs = {}
    for model_type, model_config in TINY.items():
        output_dir = tmp_path_factory.mktemp(model_type)
        args = parse_args([
            "--dataset", "synthetic:reversal", "--source_lang", "src", "--target_lang", "tgt", "--vocab_size", "280",
            "--model_type", model_type, "--model_config", json.dumps(model_config),
            "--max_train_samples", "64", "--max_test_samples", "8", "--max_steps", "4",
            "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false",
            "--output_dir", str(output_dir), "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true",
            "--per_device_train_batch_size", "16", "--per_device_eval_batch_size", "8", "--learning_rate", "3e-3",
            "--warmup_steps", "1", "--generation_max_length", "12", "--test_num_beams", "1,2",
            "--num_sample_translations", "1",
        ])
        results = run(*args)
        runs[model_type] = (output_dir / "model", results)
    return runs


@pytest.fixture(scope="module")
def hub_folders(trained, tmp_path_factory):
    """The dry-run folder of each family, built by the command-line script."""
    folders = {}
    for model_type, (model_dir, _) in trained.items():
        staging = tmp_path_factory.mktemp("hub") / model_type
        completed = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "push_to_hub.py"), str(model_dir), f"someone/tiny-{model_type}",
             "--dry-run", "--staging-dir", str(staging)],
            capture_output=True, text=True, timeout=180,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        assert str(staging) in completed.stdout
        folders[model_type] = staging
    return folders


@pytest.fixture(scope="module")
def random_model_dirs(trained, tmp_path_factory):
    """Per family, a random model whose greedy outputs differ from sentence to sentence (four training steps only
    teach a tiny model to repeat one token, which would make equality tests toothless), with
    the run's tokenizer and results.json: a folder the Hub folder is built from like any trained one."""
    dirs = {}
    for model_type, (model_dir, _) in trained.items():
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = random_tiny_model(model_type, len(tokenizer), init_std=0.1, tie_word_embeddings=False)
        target = tmp_path_factory.mktemp("random") / model_type
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
        shutil.copyfile(model_dir / "results.json", target / "results.json")
        dirs[model_type] = target
    return dirs


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def translate_ids(model, tokenizer, **kwargs):
    batch = tokenizer(SOURCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model.generate(**batch, **GENERATE, **kwargs).tolist()


# ---------------------------------------------------------------------------------------------- model card


@pytest.mark.slow
@pytest.mark.parametrize("model_type", list(TINY))
def test_training_run_fills_the_card_from_results_json(trained, model_type):
    model_dir, results = trained[model_type]
    card = ModelCard.load(model_dir / "README.md")
    on_disk = json.loads((model_dir / "results.json").read_text())
    assert card.content == render_model_card(on_disk)  # the card is a function of results.json alone
    metadata = card.data.to_dict()
    assert metadata["license"] == "apache-2.0" and metadata["library_name"] == "transformers"
    assert model_type in metadata["tags"] and "translation" in metadata["tags"]
    assert metadata["pipeline_tag"] == "translation"
    # model-index holds exactly the measured scores, one entry per decoding method and metric
    _, eval_results = model_index_to_eval_results(metadata["model-index"])
    measured = {(f"{r.metric_type}", r.metric_name): r.metric_value for r in eval_results}
    expected = {}
    for key, scores in results["test"].items():
        label = "greedy" if key == "greedy" else f"beam search, {key[4:]} beams"
        expected[("bleu", f"BLEU ({label})")] = round(scores["bleu"], 2)
        expected[("chrf", f"chrF ({label})")] = round(scores["chrf"], 2)
    assert measured == expected
    assert {r.metric_config for r in eval_results if r.metric_type == "bleu"} == \
        {s["bleu_signature"] for s in results["test"].values()}
    # the human part: the signature, the architecture and how to load it
    assert results["test"]["greedy"]["bleu_signature"] in card.text
    assert "trust_remote_code=True" in card.text and "## Architecture" in card.text
    assert "| `d_model` | 32 |" in card.text if model_type == "transformer_seq2seq" else "| `cell_type` | gru |" in card.text
    assert "{{" not in card.content and "{%" not in card.content  # every template field filled
    # the length limits each score was decoded with, as results.json records them
    greedy = results["test"]["greedy"]["decoding"]
    assert (f"| greedy | max_length {greedy['max_length']}, at most {greedy['max_len_a']} x source + "
            f"{greedy['max_len_b']} tokens |") in card.text


@pytest.mark.slow
def test_card_metadata_parses_with_the_hub_helpers_and_multi30k_is_cited(trained, tmp_path):
    _, results = trained["transformer_seq2seq"]
    multi30k = {**results, "dataset": "multi30k", "source_lang": "de", "target_lang": "en"}
    text = render_model_card(multi30k, repo_id="someone/transformer-multi30k-de-en")
    path = tmp_path / "README.md"
    path.write_text(text)
    metadata = metadata_load(path)  # what the Hub reads: plain YAML front matter
    assert metadata == yaml.safe_load(text.split("---")[1])
    assert metadata["language"] == ["de", "en"]
    assert metadata["datasets"] == ["bentrevett/multi30k"]
    assert metadata["model-index"][0]["name"] == "transformer-multi30k-de-en"
    card = ModelCard(text)  # ModelCard parses and checks the metadata (eval results included) on construction
    assert card.data.eval_results[0].dataset_type == "bentrevett/multi30k"
    assert "Elliott, Desmond" in text and "{M}ulti30{K}" in text and "W16-3210" in text  # Elliott et al. 2016
    assert 'repo = "someone/transformer-multi30k-de-en"' in text
    # ...and a synthetic run neither claims a language nor cites Multi30k
    synthetic = render_model_card(results)
    assert "Elliott" not in synthetic and "language:" not in synthetic.split("---")[1]


@pytest.mark.parametrize(("config", "text"), [
    ({"attention_type": "luong_general"}, "decoder with Luong general attention (arXiv:1508.04025);"),
    ({"attention_type": "scaled_dot", "attention_heads": 4},
     "decoder with scaled dot-product attention (Vaswani et al. 2017, arXiv:1706.03762) with 4 heads;"),
])
def test_card_describes_the_rnn_attention(config, text):
    assert text in FAMILIES["rnn_seq2seq"].describe(FAMILIES["rnn_seq2seq"].full_config(config))


RECIPES = sorted(path.stem for path in RECIPES_DIR.glob("*.json"))


def recipe_run(name: str | None, **changes) -> dict:
    """The results.json keys a card's name is made of, as the training job records them for ``--recipe name``
    (None: no recipe, the job's own defaults); ``changes`` over them."""
    job = parse_args(["--recipe", name] if name else [])
    return {"model_type": job.model.model_type, "model_config": {}, "recipe": job.training.recipe,
            "dataset": job.data.dataset, "source_lang": job.data.source_lang, "target_lang": job.data.target_lang,
            "num_parameters": 1000, "test": {"greedy": {"bleu": 30.0, "bleu_lowercase": 31.0, "chrf": 50.0}},
            **changes}


def card_names(results: dict) -> tuple[str, str]:
    """The card's title and its model-index name."""
    text = render_model_card(results)
    title = re.search(r"^# (.+)$", text.split("---", 2)[2], flags=re.MULTILINE).group(1)
    return title, yaml.safe_load(text.split("---")[1])["model-index"][0]["name"]


def test_every_recipe_run_carries_its_own_recipe_s_name_and_no_other():
    """The card (title and model-index) of a run is named after the run's own recipe: the main job's
    (transformer_small) is not the reference Transformer's (transformer_multi30k) though both are Transformers on
    Multi30k de-en. Each reference recipe's name is the one its committed card in model_cards/ carries; a run
    without a recipe, or with a JSON file of the user's, carries none of them."""
    names = {}
    for recipe in RECIPES:
        title, indexed = card_names(recipe_run(recipe))
        assert title == indexed and recipe.replace("_", "-") in title, (recipe, title, indexed)
        committed = ROOT / "model_cards" / f"{title}.md"
        assert committed.is_file() and f"\n# {title}\n" in committed.read_text(), (recipe, title)
        names[recipe] = title
    assert names["transformer_small"] == "transformer-small-multi30k-de-en"
    assert len(set(names.values())) == len(RECIPES)
    for model_type in FAMILIES:  # no recipe: the family's registered name, which no recipe's run carries
        title, indexed = card_names(recipe_run(None, model_type=model_type))
        assert title == indexed == f"{model_type.replace('_', '-')}-multi30k-de-en"
        assert title not in names.values()
    own = recipe_run(None, recipe="/home/me/recipes/my_transformer.json")
    assert card_names(own) == ("my-transformer-multi30k-de-en",) * 2
    text = render_model_card(own)
    assert "Recipe: `/home/me/recipes/my_transformer.json`.\n" in text  # not a file shipped in hf_s2s/
    assert "Recipe: `transformer_small` (`hf_s2s/training/recipes/transformer_small.json`)." in \
        render_model_card(recipe_run("transformer_small"))
    # a repository's name wins, as before
    assert "\n# x\n" in render_model_card(recipe_run("transformer_small"), repo_id="someone/x")


def test_card_refuses_results_that_are_not_a_training_run():
    with pytest.raises(ValueError, match="model_config"):
        render_model_card({"model_type": "transformer_seq2seq"})
    with pytest.raises(ValueError, match="model_type.*one of"):
        render_model_card({"model_type": "bert", "model_config": {}})


@pytest.mark.slow
def test_make_model_card_script_regenerates_the_card(trained, tmp_path):
    model_dir, _ = trained["rnn_seq2seq"]
    output = tmp_path / "card.md"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_model_card.py"), str(model_dir / "results.json"),
                    "--output", str(output)], check=True, capture_output=True, timeout=120)
    assert output.read_text() == (model_dir / "README.md").read_text()


def test_make_model_card_never_replaces_its_results_and_other_files_only_with_overwrite(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"model_type": "transformer_seq2seq", "model_config": {}, "dataset": "multi30k",
                                   "source_lang": "de", "target_lang": "en"}))
    readme = tmp_path / "README.md"
    readme.write_text("the user's own README\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    (tmp_path / "link.json").symlink_to(results)
    for output, overwrite, message in (
            (results, [], "is the results file the card is made from"),
            (results, ["--overwrite"], "is the results file the card is made from"),
            (tmp_path / "link.json", ["--overwrite"], "is the results file the card is made from"),
            (readme, [], "already exists: refusing to replace it; choose another --output or pass --overwrite")):
        with pytest.raises(SystemExit) as refused:
            run_command("make-model-card", [str(results), "--output", str(output), *overwrite])
        assert str(refused.value.code) == f"error: --output {output} {message}" + (
            "; give another --output" if "results file" in message else "")
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.is_symlink()} == before
    assert run_command("make-model-card", [str(results), "--output", str(readme), "--overwrite"]) == 0
    assert readme.read_text() == render_model_card(json.loads(results.read_text()))
    assert results.read_bytes() == before["results.json"]


# ---------------------------------------------------------------------------------------------- Hub folder


@pytest.mark.slow
@pytest.mark.parametrize("model_type", list(TINY))
def test_dry_run_folder_is_complete_safetensors_only_and_its_code_is_the_releases(hub_folders, model_type):
    folder = hub_folders[model_type]
    files = {p.name for p in folder.iterdir()}
    expected = set(hub.REQUIRED_FILES) | set(FAMILIES[model_type].code_files) | {"results.json"}
    assert files == expected  # nothing missing and nothing extra (no training_args.bin, no optimizer state)
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    config = json.loads((folder / "config.json").read_text())
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM"}
    for reference in config["auto_map"].values():
        assert (folder / f"{reference.split('.')[0]}.py").is_file()
    assert set(config["custom_pipelines"]) == {"translation", "text2text-generation"}
    for name in files:
        if name.endswith(".py"):
            assert not re.search(r"^\s*(from|import)\s+hf_s2s", (folder / name).read_text(), re.M), name
            assert (folder / name).read_bytes() == (PACKAGE_DIR / name).read_bytes(), name
    report = compare_with_releases(folder)
    assert report.is_release and report.identical_releases == [hf_s2s.__version__]
    assert check_hub_folder(folder) == sorted(files)
    card = ModelCard.load(folder / "README.md")
    assert 'repo = "someone/tiny-' in card.text  # the card names the repository it is uploaded to


@pytest.mark.slow
@pytest.mark.parametrize("piece", ["model.safetensors", "tokenizer.json", "generation_config.json", "README.md",
                                   "modeling_common.py", "config_checks.py", "pipeline_seq2seq.py"])
def test_check_refuses_a_folder_that_lacks_a_piece(hub_folders, tmp_path, piece):
    folder = shutil.copytree(hub_folders["rnn_seq2seq"], tmp_path / "folder")
    (folder / piece).unlink()
    with pytest.raises(HubFolderError, match=re.escape(piece)):
        check_hub_folder(folder)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["rnn_seq2seq", "transformer_seq2seq"])
def test_check_refuses_a_folder_without_its_attention_module(hub_folders, tmp_path, model_type):
    folder = shutil.copytree(hub_folders[model_type], tmp_path / "folder")
    (folder / f"attention_{model_type}.py").unlink()
    with pytest.raises(HubFolderError, match=f"missing code file attention_{model_type}.py"):
        check_hub_folder(folder)


@pytest.mark.slow
def test_check_refuses_pickles_changed_code_and_incomplete_config(hub_folders, tmp_path):
    source = hub_folders["transformer_seq2seq"]
    folder = shutil.copytree(source, tmp_path / "pickled")
    (folder / "training_args.bin").write_bytes(b"\x80\x04")
    with pytest.raises(HubFolderError, match="training_args.bin is a pickle"):
        check_hub_folder(folder)

    folder = shutil.copytree(source, tmp_path / "changed")
    append(folder / "modeling_common.py", "\nimport urllib.request\nexec('1')\n")
    with pytest.raises(HubFolderError, match=re.escape(
            f"its code is not hf_s2s {VERSION}'s (modeling_common.py differs from hf_s2s {VERSION}'s): only a "
            f"release's own code, byte for byte, is shared without review; to push this code, pass "
            "--allow-modified-code, which prints its diff against the release first")):
        check_hub_folder(folder)

    folder = shutil.copytree(source, tmp_path / "no_auto_map")
    config = json.loads((folder / "config.json").read_text())
    del config["auto_map"]["AutoModel"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(HubFolderError, match="auto_map lacks AutoModel"):
        check_hub_folder(folder)

    # a folder that would not load without hf_s2s is refused even when its code changes are allowed
    folder = shutil.copytree(source, tmp_path / "absolute_import")
    modeling = folder / "modeling_transformer_seq2seq.py"
    modeling.write_text(modeling.read_text().replace("from .modeling_common import", "from hf_s2s.models.modeling_common import"))
    with pytest.raises(HubFolderError, match=r"modeling_transformer_seq2seq.py:\d+ imports hf_s2s"):
        check_hub_folder(folder, allow_modified_code=True)


@pytest.mark.slow
def test_check_refuses_code_loaded_from_another_repository(hub_folders, tmp_path):
    """An auto_map entry may name another repository's code (``namespace/repo--module.Class``): the folder's own
    files being the release's would then vouch for nothing."""
    folder = shutil.copytree(hub_folders["rnn_seq2seq"], tmp_path / "folder")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"]["AutoModelForSeq2SeqLM"] = "someone/else--modeling.Model"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(HubFolderError, match=re.escape(
            "config.json auto_map AutoModelForSeq2SeqLM loads another repository's code (someone/else--modeling.Model)")):
        check_hub_folder(folder, allow_modified_code=True)


# The five payloads of issue 24, each of which passed the syntax-tree heuristic that checked the code before; two ran
# a shell command when the folder was loaded with trust_remote_code. Here each only defines a function nobody calls:
# what is tested is that no change to the code, whatever it does, is shared unreviewed.
PAYLOADS = {
    "operator_attrgetter_globals": (
        "import operator\n\n\ndef _payload():\n"
        "    builtins = operator.attrgetter('__globals__')(_payload)['__builtins__']\n"
        "    return builtins['__import__']('o' + 's').system('true')\n"),
    "typing_get_type_hints_string_annotation": (
        "import typing\n\n\ndef _annotated(x: \"__import__('os').system('true')\"):\n    return x\n\n\n"
        "def _payload():\n    return typing.get_type_hints(_annotated)\n"),
    "logging_dictconfig_factory": (
        "import logging.config\n\n\ndef _payload():\n"
        "    logging.config.dictConfig({'version': 1, 'handlers': {'h': {'()': 'subprocess.call', 'args': ['true']}}})\n"),
    "torch_save_anywhere": (
        "import torch\n\n\ndef _payload():\n    torch.save({'x': 1}, '/tmp/anywhere.pt')\n"),
    "numpy_read_array_allow_pickle": (
        "import numpy\n\n\ndef _payload(stream):\n    return numpy.lib.format.read_array(stream, allow_pickle=True)\n"),
}
PAYLOAD_FILE = "modeling_rnn_seq2seq.py"


@pytest.mark.slow
@pytest.mark.parametrize("change", [*PAYLOADS, "comment"])
def test_check_refuses_any_change_to_the_code_and_passes_it_only_allowed_with_the_diff(hub_folders, tmp_path,
                                                                                       capsys, change):
    """Integrity, not heuristics: a payload and a changed comment are refused alike, and pass only with
    allow_modified_code, which prints their diff against the release's file to stderr."""
    folder = shutil.copytree(hub_folders["rnn_seq2seq"], tmp_path / "folder")
    text = PAYLOADS.get(change, "# a comment changed by hand\n")
    append(folder / PAYLOAD_FILE, "\n" + text)
    with pytest.raises(HubFolderError, match=re.escape(f"({PAYLOAD_FILE} differs from hf_s2s {VERSION}'s)")):
        check_hub_folder(folder)
    assert capsys.readouterr().err == ""  # refused: nothing printed as if it were pushed
    assert PAYLOAD_FILE in check_hub_folder(folder, allow_modified_code=True)
    err = capsys.readouterr().err
    assert err.startswith(f"--allow-modified-code: the code below is not hf_s2s {VERSION}'s; you vouch for it")
    assert f"--- hf_s2s {VERSION}/{PAYLOAD_FILE}\n+++ {folder}/{PAYLOAD_FILE}\n" in err
    added = [line[1:] for line in err.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == ["", *text.splitlines()]  # exactly the change, line for line


@pytest.mark.slow
@pytest.mark.parametrize("payload", ["operator_attrgetter_globals", "torch_save_anywhere"])
def test_check_refuses_code_the_release_does_not_ship_and_shows_it_in_full(hub_folders, tmp_path, capsys, payload):
    """An extra .py file, imported by nothing, is still served by the Hub: refused, and shown whole when allowed."""
    folder = shutil.copytree(hub_folders["rnn_seq2seq"], tmp_path / "folder")
    (folder / "helpers_nothing_imports.py").write_text(PAYLOADS[payload])
    with pytest.raises(HubFolderError, match=re.escape(f"helpers_nothing_imports.py is not a file of hf_s2s {VERSION}")):
        check_hub_folder(folder)
    check_hub_folder(folder, allow_modified_code=True)
    err = capsys.readouterr().err
    assert f"--- /dev/null\n+++ {folder}/helpers_nothing_imports.py\n" in err
    assert "".join(f"+{line}\n" for line in PAYLOADS[payload].splitlines()) in err


@pytest.mark.slow
def test_check_refuses_compiled_code(hub_folders, tmp_path):
    folder = shutil.copytree(hub_folders["rnn_seq2seq"], tmp_path / "folder")
    (folder / "fast_kernels.so").write_bytes(b"\x7fELF")
    with pytest.raises(HubFolderError, match="fast_kernels.so is compiled code"):
        check_hub_folder(folder, allow_modified_code=True)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A saved random tiny RNN folder with a card: what push-to-hub builds from, without a training run."""
    model_dir = save_tiny_model_folder(tmp_path_factory.mktemp("tiny") / "model", "rnn_seq2seq")
    (model_dir / "README.md").write_text(
        "---\nlicense: apache-2.0\nlibrary_name: transformers\ntags: [translation]\n---\nA tiny test model.\n")
    return model_dir


@pytest.mark.parametrize("payload", list(PAYLOADS))
def test_a_payload_in_the_model_folders_own_code_never_ships(tiny_model_dir, tmp_path, payload):
    """push-to-hub saves the model again with the installed hf_s2s: the model folder's copy of the code, payload
    and all, is left behind, and the Hub folder holds the release's code."""
    model_dir = shutil.copytree(tiny_model_dir, tmp_path / "model")
    append(model_dir / PAYLOAD_FILE, "\n" + PAYLOADS[payload])
    folder = push_to_hub(model_dir, "someone/x", dry_run=True, staging_dir=tmp_path / "hub")
    assert compare_with_releases(folder).identical_releases == [VERSION]
    assert "_payload" not in (folder / PAYLOAD_FILE).read_text()


def modified_install(tmp_path: Path, payload: str) -> Path:
    """A copy of the hf_s2s package (its release manifest included) whose modeling file holds ``payload``: what
    an edited or tampered installation is. Returns the folder to put on PYTHONPATH."""
    site = tmp_path / "site"
    shutil.copytree(Path(hf_s2s.__file__).parent, site / "hf_s2s", ignore=shutil.ignore_patterns("__pycache__"))
    append(site / "hf_s2s" / PACKAGE_DIR.name / PAYLOAD_FILE, "\n" + payload)
    return site


@pytest.mark.slow
@pytest.mark.parametrize("payload", list(PAYLOADS))
def test_push_to_hub_dry_run_refuses_a_payload_in_the_installed_code_and_shows_it_with_the_flag(
        tiny_model_dir, tmp_path, payload):
    """The only way code reaches a Hub folder is the installed hf_s2s's files: a payload there is refused by
    `hf-s2s push-to-hub --dry-run`, and built only with --allow-modified-code, which prints it to stderr first (in
    full: the installation holds no copy of the release's file to compare with)."""
    site = modified_install(tmp_path, PAYLOADS[payload])
    script = f"""
import contextlib, io, json
import hf_s2s
from hf_s2s.cli import run_command
results = {{"hf_s2s": hf_s2s.__file__}}
for name, flags in (("refused", []), ("allowed", ["--allow-modified-code"])):
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            status = run_command("push-to-hub", [{str(tiny_model_dir)!r}, "someone/x", "--dry-run", "--staging-dir",
                                                 {str(tmp_path)!r} + "/" + name, *flags])
        except SystemExit as exit:
            status = exit.code
    results[name] = {{"status": status, "stderr": err.getvalue(), "stdout": out.getvalue()}}
print(json.dumps(results))
"""
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}
    completed = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    assert Path(results["hf_s2s"]).parent == site / "hf_s2s"  # the modified installation, not this checkout
    refused, allowed = results["refused"], results["allowed"]
    assert refused["status"].startswith(
        f"error: Hub folder {tmp_path / 'refused'} is not ready to share: its code is not hf_s2s {VERSION}'s "
        f"({PAYLOAD_FILE} differs from hf_s2s {VERSION}'s): only a release's own code, byte for byte, is shared "
        "without review; to push this code, pass --allow-modified-code, which prints its diff against the release "
        f"first; the installed hf_s2s is not its release either: {site / 'hf_s2s' / 'hub' / 'code_manifest.json'} does not "
        f"record the code of hf_s2s {VERSION} in {site / 'hf_s2s' / 'models'} ({PAYLOAD_FILE} differs): regenerate it with")
    assert "_payload" not in refused["stderr"]
    assert allowed["status"] == 0
    assert allowed["stdout"] == f"dry run: the folder that would be uploaded is {tmp_path / 'allowed'}\n"
    err = allowed["stderr"]
    assert (f"# {PAYLOAD_FILE}: the installed hf_s2s does not hold hf_s2s {VERSION}'s copy of it either, so it is "
            f"shown in full\n--- /dev/null\n+++ {tmp_path / 'allowed'}/{PAYLOAD_FILE}\n") in err
    assert "".join(f"+{line}\n" for line in PAYLOADS[payload].splitlines()) in err


@pytest.mark.slow
def test_refused_code_is_never_uploaded_and_allowed_code_is_after_its_diff(trained, tmp_path, monkeypatch, capsys):
    """Without the flag the build stops before any Hub call; with it, the diff is printed before the upload."""
    calls = []

    class RecordingApi:
        def __init__(self, token=None):
            calls.append(("init", capsys.readouterr().err))

        def create_repo(self, repo_id, **kwargs):
            calls.append(("create_repo",))

        def upload_folder(self, repo_id, folder_path, **kwargs):
            calls.append(("upload_folder", (Path(folder_path) / PIPELINE_FILE).read_text()))
            return "https://huggingface.co/someone/x/commit/abc"

    save_pretrained = modeling_common.Seq2SeqPreTrainedMixin.save_pretrained

    def save_with_a_changed_pipeline(model, save_directory, *args, **kwargs):  # an installed hf_s2s edited by hand
        saved = save_pretrained(model, save_directory, *args, **kwargs)
        append(Path(save_directory) / PIPELINE_FILE, "# changed\n")
        return saved

    monkeypatch.setattr(modeling_common.Seq2SeqPreTrainedMixin, "save_pretrained", save_with_a_changed_pipeline)
    monkeypatch.setattr(hub, "HfApi", RecordingApi)
    with pytest.raises(HubFolderError, match=f"{PIPELINE_FILE} differs from hf_s2s {VERSION}'s"):
        push_to_hub(trained["rnn_seq2seq"][0], "someone/x")
    assert calls == []
    push_to_hub(trained["rnn_seq2seq"][0], "someone/x", allow_modified_code=True)
    (_, printed), create, (_, uploaded) = calls
    assert f"--- hf_s2s {VERSION}/{PIPELINE_FILE}\n" in printed and "\n+# changed\n" in printed
    assert create == ("create_repo",) and uploaded.endswith("# changed\n")


def model_files(model_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(model_dir)): p.read_bytes() for p in sorted(model_dir.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_dry_run_never_deletes_the_run_folder_that_holds_the_model(trained, tmp_path):
    run_dir = shutil.copytree(trained["rnn_seq2seq"][0].parent, tmp_path / "run")
    before = model_files(run_dir)
    completed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "push_to_hub.py"), str(run_dir / "model"), "someone/x", "--dry-run",
         "--staging-dir", str(run_dir)],
        capture_output=True, text=True, timeout=180,
    )
    assert completed.returncode == 1 and "Traceback" not in completed.stderr
    assert f"error: the staging folder {run_dir} contains the model folder {run_dir / 'model'}" in completed.stderr
    assert model_files(run_dir) == before


@pytest.mark.slow
@pytest.mark.parametrize("staging", ["model", "inside", "non_empty"])
def test_staging_folder_must_be_new_or_empty_and_apart_from_the_model(trained, tmp_path, staging):
    model_dir = shutil.copytree(trained["rnn_seq2seq"][0], tmp_path / "model")
    folder = {"model": model_dir, "inside": model_dir / "hub", "non_empty": tmp_path / "mine"}[staging]
    if staging == "non_empty":
        folder.mkdir()
        (folder / "notes.txt").write_text("the user's own file")
    before = model_files(tmp_path)
    expected = {"model": "is the model folder", "inside": "is inside the model folder",
                "non_empty": "is not empty \\(it holds notes.txt\\); nothing is deleted"}[staging]
    with pytest.raises(HubFolderError, match=f"the staging folder {folder} {expected}"):
        push_to_hub(model_dir, "someone/x", dry_run=True, staging_dir=folder)
    assert model_files(tmp_path) == before


@pytest.mark.slow
def test_an_existing_empty_staging_folder_is_used(trained, tmp_path):
    (tmp_path / "staging").mkdir()
    folder = push_to_hub(trained["rnn_seq2seq"][0], "someone/x", dry_run=True, staging_dir=tmp_path / "staging")
    assert folder == tmp_path / "staging" and (folder / "model.safetensors").is_file()


@pytest.mark.slow
def test_build_refuses_a_model_without_card_source(trained, tmp_path):
    model_dir = shutil.copytree(trained["transformer_seq2seq"][0], tmp_path / "model")
    (model_dir / "results.json").unlink()
    (model_dir / "README.md").unlink()
    with pytest.raises(HubFolderError, match="neither results.json, README.md nor conversion.json"):
        build_hub_folder(model_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_push_to_hub_creates_the_repo_and_uploads_the_checked_folder(trained, tmp_path, monkeypatch):
    calls = []

    class RecordingApi:  # stands in for HfApi: the Hub is not reachable from the tests
        def __init__(self, token=None):
            calls.append(("init", token))

        def create_repo(self, repo_id, **kwargs):
            calls.append(("create_repo", repo_id, kwargs))

        def upload_folder(self, repo_id, folder_path, **kwargs):
            uploaded = sorted(p.name for p in Path(folder_path).iterdir())
            calls.append(("upload_folder", repo_id, uploaded, kwargs["repo_type"]))
            return "https://huggingface.co/someone/x/commit/abc"

    monkeypatch.setattr(hub, "HfApi", RecordingApi)
    url = push_to_hub(trained["rnn_seq2seq"][0], "someone/x", private=True, token="t0k")
    assert url.endswith("/commit/abc")
    assert calls[0] == ("init", "t0k")
    assert calls[1] == ("create_repo", "someone/x", {"repo_type": "model", "private": True, "exist_ok": True})
    assert calls[2][:2] == ("upload_folder", "someone/x") and calls[2][3] == "model"
    assert calls[2][2] == sorted(set(hub.REQUIRED_FILES) | set(FAMILIES["rnn_seq2seq"].code_files) | {"results.json"})
    with pytest.raises(ValueError, match="namespace/name"):
        push_to_hub(trained["rnn_seq2seq"][0], "no-namespace", dry_run=True, staging_dir=tmp_path)


# ------------------------------------------------------------------------- fresh environment without hf_s2s


@pytest.mark.slow
@pytest.mark.compat  # also run by CI on the oldest supported releases
@pytest.mark.parametrize("model_type", list(TINY))
def test_folder_loads_and_translates_the_same_without_hf_s2s(random_model_dirs, model_type, tmp_path):
    model_dir = random_model_dirs[model_type]
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    expected_greedy = translate_ids(model, tokenizer)
    expected_beam = translate_ids(model, tokenizer, num_beams=2)
    expected_texts = tokenizer.batch_decode(expected_greedy, skip_special_tokens=True)
    assert len({tuple(row) for row in expected_greedy}) > 1  # the equality below has teeth
    folder = build_hub_folder(model_dir, tmp_path / "hub", repo_id="someone/tiny")
    result = run_without_hf_s2s(
        f"""
        import json, torch
        from transformers import AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
        folder = {str(folder)!r}
        sources = {SOURCES!r}
        # AutoTokenizer reads config.json first; without trust_remote_code it would ask on stdin. The tokenizer
        # itself needs no code: it loads the same with trust_remote_code=False.
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        plain_tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
        assert plain_tokenizer(sources)["input_ids"] == tokenizer(sources)["input_ids"]
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        base = AutoModel.from_pretrained(folder, trust_remote_code=True)
        batch = tokenizer(sources, return_tensors="pt", padding=True)
        with torch.no_grad():
            greedy = model.generate(**batch, **{GENERATE!r}).tolist()
            beam = model.generate(**batch, **{GENERATE!r}, num_beams=2).tolist()
        translator = pipeline("translation", model=folder, trust_remote_code=True)
        text2text = pipeline("text2text-generation", model=folder, trust_remote_code=True)
        print(json.dumps({{
            "greedy": greedy, "beam": beam, "module": type(model).__module__, "base": type(base).__name__,
            "translation": [r["translation_text"] for r in translator(sources, batch_size=2, **{GENERATE!r})],
            "text2text": [r["generated_text"] for r in text2text(sources, batch_size=3, **{GENERATE!r})],
        }}))
        """,
        cwd=tmp_path,
    )
    assert "hf_s2s" not in result["module"] and result["module"].startswith("transformers_modules")
    assert result["base"] in ("TransformerSeq2SeqModel", "RNNSeq2SeqModel")
    assert result["greedy"] == expected_greedy
    assert result["beam"] == expected_beam
    assert result["translation"] == expected_texts
    assert result["text2text"] == expected_texts


@pytest.mark.slow
@pytest.mark.compat  # also run by CI on the oldest supported releases
@pytest.mark.parametrize("model_type", list(TINY))
def test_translation_pipeline_loads_the_folders_a_save_writes_without_hf_s2s(trained, random_model_dirs, model_type,
                                                                             tmp_path):
    """``pipeline("translation", model=folder, trust_remote_code=True)`` needs ``custom_pipelines`` in config.json and
    the pipeline module in the folder (transformers 5 removed the task). Every save writes both, so the folder the
    training job writes works as it is, not only the Hub staging folder, and gives what hf_s2s's model generates."""
    folders = {"trained": trained[model_type][0], "saved": random_model_dirs[model_type]}
    expected = {}
    for name, folder in folders.items():
        model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        expected[name] = tokenizer.batch_decode(translate_ids(model, tokenizer), skip_special_tokens=True)
    result = run_without_hf_s2s(
        f"""
        import json
        from transformers import pipeline
        translations = {{}}
        for name, folder in {({name: str(folder) for name, folder in folders.items()})!r}.items():
            translator = pipeline("translation", model=folder, trust_remote_code=True)
            translations[name] = [r["translation_text"] for r in translator({SOURCES!r}, **{GENERATE!r})]
        print(json.dumps(translations))
        """,
        cwd=tmp_path,
    )
    assert result == expected
