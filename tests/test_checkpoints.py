"""Checkpoint averaging refuses what would silently be wrong or destroy work: an output folder that already holds
files (asked to overwrite, it replaces only an earlier average, unchanged, whole; never a trained model's folder,
whose results.json and card would describe other weights),
checkpoints of different configs or sizes (an error naming what differs), and a checkpoint whose weights do not
match its config."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import hf_s2s  # noqa: F401
from hf_s2s.cli import run_command
from hf_s2s.models.loading import ModelFolderError
from hf_s2s.training.checkpoints import average_checkpoints, file_problem, find_checkpoints
from tests.saved_folders import save_tiny_model_folder, separate_vocabulary_folders, tiny_tokenizer

ROOT = Path(__file__).resolve().parent.parent
MODEL_TYPE = "transformer_seq2seq"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Two checkpoints of one tiny model (different weights, same config) and variants of other configs."""
    tokenizer, base = tiny_tokenizer(), tmp_path_factory.mktemp("checkpoints")
    variants = {"first": {}, "second": {}, "gelu": {"activation_function": "gelu"},
                "unscaled": {"scale_embedding": False}, "wider": {"encoder_ffn_dim": 128, "decoder_ffn_dim": 128}}
    return {name: save_tiny_model_folder(base / name, MODEL_TYPE, tokenizer, seed=seed, **config)
            for seed, (name, config) in enumerate(variants.items())}


@pytest.fixture
def trained_model_dir(checkpoints, tmp_path):
    """A model folder as a training run leaves it: weights, tokenizer, results.json and a card."""
    folder = shutil.copytree(checkpoints["first"], tmp_path / "run" / "model")
    (folder / "results.json").write_text(json.dumps({"test": {"greedy": {"bleu": 30.0}}}))
    (folder / "README.md").write_text("# the card of the trained model\n")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_average_refuses_an_output_folder_holding_a_model_and_leaves_it_intact(checkpoints, trained_model_dir):
    before = snapshot(trained_model_dir)
    with pytest.raises(FileExistsError, match=rf"{trained_model_dir} already holds files \(README.md, .*\): "
                                              r"refusing to write into it; .* pass --overwrite_output_dir"):
        average_checkpoints([checkpoints["first"], checkpoints["second"]], trained_model_dir)
    assert snapshot(trained_model_dir) == before


def test_average_refuses_to_write_into_one_of_its_checkpoints_even_when_asked_to_overwrite(checkpoints, tmp_path):
    inputs = [shutil.copytree(checkpoints[name], tmp_path / name) for name in ("first", "second")]
    before = snapshot(inputs[1])
    with pytest.raises(ValueError, match=f"the output folder {inputs[1]} is one of the checkpoints"):
        average_checkpoints(inputs, inputs[1], overwrite=True)
    assert snapshot(inputs[1]) == before


@pytest.mark.slow
def test_average_script_refuses_without_a_traceback_and_overwrites_only_an_earlier_average(checkpoints,
                                                                                          trained_model_dir):
    """The script, run as a process, refuses a trained model's folder with an error line; the command (the same
    code, run here in-process, where a refusal is the SystemExit that prints that line) refuses it with
    --overwrite_output_dir too, writes an average, replaces its own average whole, and keeps a file it did not write."""
    inputs = ["--checkpoints", str(checkpoints["first"]), str(checkpoints["second"]), "--output"]
    before = snapshot(trained_model_dir)
    completed = subprocess.run([sys.executable, str(ROOT / "scripts" / "average_checkpoints.py"), *inputs,
                                str(trained_model_dir)], capture_output=True, text=True, timeout=180)
    assert completed.returncode == 1 and "Traceback" not in completed.stderr
    assert f"error: {trained_model_dir} already holds files" in completed.stderr, completed.stderr[-2000:]
    assert snapshot(trained_model_dir) == before
    with pytest.raises(SystemExit, match=re.escape(
            f"error: --overwrite_output_dir (overwrite=True) replaces only what hf-s2s average-checkpoints wrote into "
            f"{trained_model_dir}, byte for byte, and it holds no hf_s2s_output.json")):
        run_command("average-checkpoints", [*inputs, str(trained_model_dir), "--overwrite_output_dir"])
    assert snapshot(trained_model_dir) == before
    averaged = trained_model_dir.parent / "averaged"
    for flags in ([], ["--overwrite_output_dir"]):  # written, then replaced whole
        assert run_command("average-checkpoints", [*inputs, str(averaged), *flags]) == 0
    first, second = (load_file(checkpoints[name] / "model.safetensors") for name in ("first", "second"))
    mean = load_file(averaged / "model.safetensors")
    assert set(mean) == set(first)
    for key in first:
        torch.testing.assert_close(mean[key], (first[key] + second[key]) / 2)
    (averaged / "results.json").write_text("{}")  # an evaluation of the average: the next overwrite keeps it
    with pytest.raises(SystemExit, match=re.escape("results.json (not written by hf-s2s average-checkpoints)")):
        run_command("average-checkpoints", [*inputs, str(averaged), "--overwrite_output_dir"])
    assert (averaged / "results.json").read_text() == "{}"


@pytest.mark.parametrize(("variant", "named"), [
    ("gelu", "activation_function \\('relu' vs 'gelu'\\)"),
    ("unscaled", "scale_embedding \\(True vs False\\)"),
    ("wider", "decoder_ffn_dim \\(64 vs 128\\), encoder_ffn_dim \\(64 vs 128\\)"),
])
def test_average_refuses_checkpoints_of_different_configs_naming_the_fields(checkpoints, tmp_path, variant, named):
    with pytest.raises(ValueError, match=f"{checkpoints[variant]} and {checkpoints['first']} are different models, "
                                         f"their config.json differ in {named}"):
        average_checkpoints([checkpoints["first"], checkpoints[variant]], tmp_path / "averaged")
    assert not (tmp_path / "averaged").exists()


def test_checkpoints_saved_by_another_hf_s2s_release_average_like_one_run(checkpoints, tmp_path):
    """config.json records the release that wrote it (hf_s2s_version), as it records transformers': a run resumed
    after an upgrade has checkpoints of both, and they are still one model."""
    older = shutil.copytree(checkpoints["second"], tmp_path / "older")
    config = json.loads((older / "config.json").read_text())
    assert "hf_s2s_version" in config
    (older / "config.json").write_text(json.dumps({**config, "hf_s2s_version": "0.1.0"}))
    average_checkpoints([checkpoints["first"], older], tmp_path / "averaged")
    assert (tmp_path / "averaged" / "model.safetensors").is_file()


@pytest.mark.parametrize("value, averages", [(None, True), (0, True), (2, False)])
def test_a_field_added_by_a_later_release_reads_as_its_default(checkpoints, tmp_path, value, averages):
    """A run resumed after an upgrade that added a config field (source_unk_aliases, default 0) has checkpoints
    whose config.json lacks it and checkpoints that hold it: the missing field is the class' default, so they
    average as one run; a value other than the default is still another model."""
    older, newer = (shutil.copytree(checkpoints[name], tmp_path / name) for name in ("first", "second"))
    config = json.loads((older / "config.json").read_text())
    assert config.get("source_unk_aliases", 0) == 0
    (older / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "source_unk_aliases"}))
    if value is not None:
        newer_config = json.loads((newer / "config.json").read_text())
        unk = {"unk_token_id": newer_config.get("unk_token_id") or 1} if value else {}  # what aliases read as
        (newer / "config.json").write_text(json.dumps({**newer_config, "source_unk_aliases": value, **unk}))
    if averages:
        average_checkpoints([older, newer], tmp_path / "averaged")
        assert (tmp_path / "averaged" / "model.safetensors").is_file()
    else:
        with pytest.raises(ValueError, match=re.escape("differ in source_unk_aliases (0 vs 2)")):
            average_checkpoints([older, newer], tmp_path / "averaged")


def test_average_refuses_weights_of_a_different_size_under_an_equal_config(checkpoints, tmp_path):
    second = shutil.copytree(checkpoints["second"], tmp_path / "second")
    shutil.copyfile(checkpoints["wider"] / "model.safetensors", second / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\..*ffn.*has shape \(128,.*\) in .*second but \(64,.*\) in .*different "
                                         "sizes"):
        average_checkpoints([checkpoints["first"], second], tmp_path / "averaged")
    assert not (tmp_path / "averaged").exists()


def test_average_refuses_a_checkpoint_whose_weights_do_not_match_its_config(checkpoints, tmp_path):
    broken = [shutil.copytree(checkpoints[name], tmp_path / name) for name in ("first", "second")]
    for folder in broken:
        weights = load_file(folder / "model.safetensors")
        weights.pop("model.decoder.layer_norm.weight")
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelFolderError, match="missing weights \\(model.decoder.layer_norm.weight\\)"):
        average_checkpoints(broken, tmp_path / "averaged")
    assert not (tmp_path / "averaged").exists()


def test_file_problem_names_a_damaged_file_of_each_kind_without_unpickling(tmp_path):
    """What a resumed run reads, checked cheaply: a torch.save archive member that fails its checksum, a
    truncated archive, JSON that does not parse, safetensors whose header does not cover the file."""
    torch.save({"state": torch.arange(1000.0)}, tmp_path / "optimizer.pt")
    assert file_problem(tmp_path / "optimizer.pt") is None
    data = bytearray((tmp_path / "optimizer.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the tensor's bytes: the archive still opens
    (tmp_path / "flipped.pt").write_bytes(bytes(data))
    assert re.fullmatch(rf"{tmp_path / 'flipped.pt'} is damaged \(its member .*/data/0 fails the archive's "
                        r"checksum\)", file_problem(tmp_path / "flipped.pt"))
    (tmp_path / "cut.pt").write_bytes(bytes(data[:100]))
    assert file_problem(tmp_path / "cut.pt").startswith(f"{tmp_path / 'cut.pt'} is truncated or not a torch.save")
    (tmp_path / "state.json").write_text('{"global_step": 4, "log_hi')
    assert file_problem(tmp_path / "state.json").startswith(f"{tmp_path / 'state.json'} is truncated or corrupt")
    (tmp_path / "list.json").write_text("[]")
    assert file_problem(tmp_path / "list.json") == f"{tmp_path / 'list.json'} holds a JSON list, not an object"
    save_file({"w": torch.ones(100)}, tmp_path / "model.safetensors")
    (tmp_path / "cut.safetensors").write_bytes((tmp_path / "model.safetensors").read_bytes()[:-8])
    assert file_problem(tmp_path / "model.safetensors") is None
    assert "incomplete metadata, file not fully covered" in file_problem(tmp_path / "cut.safetensors")


@pytest.mark.slow
def test_average_refuses_checkpoints_of_different_vocabularies_as_an_ensemble_would(tmp_path):
    """Equal configs and shapes but other tokens (a de-en and a de-fr model sharing the source vocabulary): the
    averaged embeddings would mix rows of different tokens. The check is the ensemble's (hf_s2s.data.vocabulary)."""

    folders = separate_vocabulary_folders(tmp_path)
    command = [sys.executable, str(ROOT / "scripts" / "average_checkpoints.py"), "--checkpoints",
               str(folders["de_en"]), str(folders["de_fr"]), "--output", str(tmp_path / "averaged")]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert completed.returncode == 1 and "Traceback" not in completed.stderr
    assert (f"error: {folders['de_fr']} does not share the vocabulary of {folders['de_en']}: target vocabularies of "
            "280 and 280 tokens: ") in completed.stderr
    assert "only checkpoints of one vocabulary (of one run) can be averaged" in completed.stderr
    assert not (tmp_path / "averaged").exists()


def test_average_names_a_missing_checkpoint_or_run_folder(checkpoints, tmp_path):
    with pytest.raises(FileNotFoundError, match=f"checkpoint folder {tmp_path / 'nope'} does not exist"):
        average_checkpoints([checkpoints["first"], tmp_path / "nope"], tmp_path / "averaged")
    with pytest.raises(FileNotFoundError, match=f"run folder {tmp_path / 'no-run'} does not exist"):
        find_checkpoints(tmp_path / "no-run", 2)
    assert not (tmp_path / "averaged").exists()
