"""Folders saved by an earlier release load and generate the same tokens: tests/fixtures/saved_0.2.0 was written by
hf_s2s 0.2.0 before the package moved into sub-packages (tests/fixtures/make_saved_folders.py says how). With
hf_s2s installed the folder loads into the current classes; without it, into the folder's own code."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_s2s  # noqa: F401  (registers the families)
from hf_s2s.hub.code_integrity import verify_folder
from tests.helpers import FAMILIES, run_without_hf_s2s

FIXTURES = Path(__file__).parent / "fixtures" / "saved_0.2.0"


def _generate(folder: Path, sources: list[str]) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        return {name: model.generate(**batch, max_new_tokens=12, do_sample=False, num_beams=beams).tolist()
                for name, beams in (("greedy", 1), ("beam", 3))}


@pytest.mark.compat
@pytest.mark.parametrize("model_type", FAMILIES)
def test_a_folder_saved_before_the_layout_change_generates_the_same_tokens(model_type):
    folder = FIXTURES / model_type
    expected = json.loads((folder / "expected.json").read_text())
    assert expected["hf_s2s_version"] == "0.2.0"
    assert len({tuple(row) for row in expected["greedy"]}) > 1  # the equality has teeth
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    assert type(model).__module__.startswith("hf_s2s.")  # the installed classes, not the folder's code
    assert _generate(folder, expected["sources"]) == {"greedy": expected["greedy"], "beam": expected["beam"]}


@pytest.mark.parametrize("model_type", FAMILIES)
def test_hf_s2s_verify_still_knows_the_code_of_a_folder_saved_by_0_2_0(model_type):
    report, problems = verify_folder(FIXTURES / model_type)
    assert problems == [] and "0.2.0" in report.identical_releases


@pytest.mark.slow
@pytest.mark.compat
@pytest.mark.parametrize("model_type", FAMILIES)
def test_a_folder_saved_before_the_layout_change_runs_its_own_code_without_hf_s2s(model_type, tmp_path):
    folder = FIXTURES / model_type
    expected = json.loads((folder / "expected.json").read_text())
    result = run_without_hf_s2s(
        f"""
        import json, torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        folder, sources = {str(folder)!r}, {expected["sources"]!r}
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        batch = tokenizer(sources, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = {{name: model.generate(**batch, max_new_tokens=12, do_sample=False, num_beams=beams).tolist()
                    for name, beams in (("greedy", 1), ("beam", 3))}}
        print(json.dumps({{"module": type(model).__module__, **out}}))
        """,
        cwd=tmp_path,
    )
    assert result["module"].startswith("transformers_modules")
    assert (result["greedy"], result["beam"]) == (expected["greedy"], expected["beam"])
