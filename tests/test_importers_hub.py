"""A converted folder goes to the Hub like a trained one: `hf-s2s push-to-hub --dry-run` builds it with a card that
names where it came from, and the staged folder loads and translates where hf_s2s is not installed, giving the
tokens the converted folder gives with hf_s2s."""

import json
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_s2s  # noqa: F401  (registers the families)
from hf_s2s.cli import run_command
from hf_s2s.importers import convert
from tests.helpers import run_without_hf_s2s
from tests.saved_folders import save_tiny_model_folder

FIXTURES = Path(__file__).parent / "fixtures" / "toolkits"
# one converter per toolkit, the quickest fixture of each
CASES = {"joeynmt": FIXTURES / "joeynmt_transformer" / "model.ckpt",
         "fairseq": next((FIXTURES / "fairseq_lstm").glob("*.pt"), FIXTURES / "fairseq_lstm" / "missing.pt")}


@pytest.mark.parametrize("toolkit", list(CASES))
def test_a_converted_folder_is_pushed_with_a_card_naming_its_source_and_loads_without_hf_s2s(toolkit, tmp_path):
    folder = convert(toolkit, CASES[toolkit], tmp_path / "model")
    sources = [line.strip() for line in (CASES[toolkit].parent / "test.de").read_text().splitlines()[:4]]
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    with torch.no_grad():
        expected = model.generate(**tokenizer(sources, return_tensors="pt", padding=True), num_beams=1,
                                  max_new_tokens=20).tolist()
    assert len({tuple(row) for row in expected}) > 1  # the equality below has teeth

    staging = tmp_path / "hub"
    assert run_command("push-to-hub", [str(folder), "someone/converted", "--dry-run", "--staging-dir",
                                       str(staging)]) == 0
    card = (staging / "README.md").read_text()
    conversion = json.loads((folder / "conversion.json").read_text())
    assert conversion["toolkit"] == toolkit and conversion["checkpoint_sha256"] in card
    assert f"hf-s2s convert --from {toolkit}" in card and "converted" in card.split("---")[1]
    assert json.loads((staging / "conversion.json").read_text()) == conversion

    result = run_without_hf_s2s(
        f"""
        import json, torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        folder, sources = {str(staging)!r}, {sources!r}
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        with torch.no_grad():
            ids = model.generate(**tokenizer(sources, return_tensors="pt", padding=True), num_beams=1,
                                 max_new_tokens=20).tolist()
        print(json.dumps({{"module": type(model).__module__, "ids": ids}}))
        """,
        cwd=tmp_path,
    )
    assert result["module"].startswith("transformers_modules")
    assert result["ids"] == expected


def test_a_folder_with_no_card_source_is_refused(tmp_path):
    folder = convert("joeynmt", CASES["joeynmt"], tmp_path / "model")
    (folder / "conversion.json").unlink()
    with pytest.raises(SystemExit, match="neither results.json, README.md nor conversion.json"):
        run_command("push-to-hub", [str(folder), "someone/x", "--dry-run", "--staging-dir", str(tmp_path / "hub")])


def snapshot(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def test_convert_overwrite_replaces_only_an_earlier_conversion_and_push_publishes_only_the_new_model(tmp_path):
    """--overwrite replaces an earlier conversion whole, and nothing else: a trained model's folder (results, card,
    training arguments, checkpoints) is refused untouched, since its files would stay beside the new weights and
    push-to-hub would publish its results and card with them."""
    trained = save_tiny_model_folder(tmp_path / "trained", "rnn_seq2seq")
    (trained / "results.json").write_text(json.dumps({"test": {"greedy": {"bleu": 99.9}}}))
    (trained / "README.md").write_text("---\nlicense: apache-2.0\n---\nThe card of the trained model.\n")
    (trained / "training_args.bin").write_bytes(b"\x80\x04")
    (trained / "checkpoint-100").mkdir()
    (trained / "checkpoint-100" / "model.safetensors").write_bytes((trained / "model.safetensors").read_bytes())
    before = snapshot(trained)
    with pytest.raises(SystemExit, match=re.escape(
            f"error: --overwrite replaces only what hf-s2s convert wrote into {trained}, byte for byte, and it holds "
            "no hf_s2s_output.json")):
        run_command("convert", ["--from", "joeynmt", str(CASES["joeynmt"]), str(trained), "--overwrite"])
    assert snapshot(trained) == before

    # an earlier conversion of another model (an RNN: other code files) gives way to the new one, whole
    folder = convert("fairseq", CASES["fairseq"], tmp_path / "converted")
    assert run_command("convert", ["--from", "joeynmt", str(CASES["joeynmt"]), str(folder), "--overwrite"]) == 0
    assert snapshot(folder) == snapshot(convert("joeynmt", CASES["joeynmt"], tmp_path / "fresh"))
    staging = tmp_path / "hub"
    assert run_command("push-to-hub", [str(folder), "someone/converted", "--dry-run", "--staging-dir",
                                       str(staging)]) == 0
    assert json.loads((staging / "conversion.json").read_text())["toolkit"] == "joeynmt"
    assert not (staging / "results.json").exists() and "fairseq" not in (staging / "README.md").read_text()
