"""A converted folder stops where its toolkit stops. Each fixture records the toolkit's greedy output with one
sentence a batch and the toolkit's own default length rule (greedy_single.txt,
scripts/toolkit_fixtures/make.py), so that a line's cap depends on that line only; greedy decoding with the
converted folder's own generation config (nothing passed but num_beams=1) must give the same tokens, line for
line, the lines that run to the cap included:

- OpenNMT-py: ``int(min(-max_length 250, 1.25 x source tokens + 5))`` tokens, none forced to </s>
  (``DecodeStrategy.ensure_max_length``);
- Joey NMT without ``max_output_length``: ``int(1.5 x source tokens with </s>)`` tokens, none forced to </s>
  (``search.search``);
- fairseq: ``--max-len-a 0 --max-len-b 200`` tokens, then </s> forced (``SequenceGenerator``).
"""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_s2s  # noqa: F401  (registers the Auto classes)
from hf_s2s.importers import convert
from tests.helpers import tokenized_toolkit_fixtures

FIXTURES = Path(__file__).parent / "fixtures" / "toolkits"
SINGLE = "greedy_single.txt"
CHECKPOINTS = {"opennmt": ("opennmt-py", "model.pt"), "joeynmt": ("joeynmt", "model.ckpt"),
               "fairseq": ("fairseq", "checkpoint.pt")}
RECORDED = [path for path in tokenized_toolkit_fixtures("*") if (path / SINGLE).is_file()]
pytestmark = pytest.mark.skipif(not RECORDED, reason=f"no fixture with {SINGLE}")


def toolkit_cap(toolkit: str, source: str) -> int:
    """The most tokens the toolkit lets a one-line batch produce before </s> (the rules in the module
    docstring)."""
    tokens = len(source.split())
    if toolkit == "opennmt-py":
        return int(min(250, tokens * 1.25 + 5))
    if toolkit == "joeynmt":
        return int((tokens + 1) * 1.5)
    return 200


def folder_of(fixture: Path, out: Path) -> tuple[str, Path]:
    """The fixture converted as a user would, from the files the toolkit's recorded run used."""
    toolkit, checkpoint = CHECKPOINTS[fixture.name.split("_", 1)[0]]
    files = {"config": fixture / "translate_single.yaml"} if toolkit == "joeynmt" else {}
    return toolkit, convert(toolkit, fixture / checkpoint, out, **files)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", RECORDED, ids=[path.name for path in RECORDED])
def test_greedy_one_sentence_a_batch_is_the_toolkits_up_to_its_cap(fixture, tmp_path):
    toolkit, folder = folder_of(fixture, tmp_path / "model")
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    sources = (fixture / "test.de").read_text(encoding="utf-8").splitlines()
    expected = (fixture / SINGLE).read_text(encoding="utf-8").splitlines()
    batch = tokenizer(sources, return_tensors="pt", padding=True)  # hf_s2s's bound is per row: batch alike
    with torch.no_grad():
        ids = model.generate(**batch, num_beams=1, do_sample=False)
    got = [tokenizer.decode(row, skip_special_tokens=True).strip() for row in ids]
    differ = [(i, a, b) for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b]
    assert not differ, differ[:3]
    at_cap = sum(len(line.split()) == toolkit_cap(toolkit, source) for line, source in zip(expected, sources,
                                                                                           strict=True))
    print(f"{fixture.name}: {len(expected)}/{len(expected)} equal, {at_cap} at the toolkit's cap")
    record = json.loads((fixture / "provenance.json").read_text())
    assert "-max_length" not in record["commands"]["greedy_single"]  # the toolkit's default rule, no cap


def test_the_fixtures_reach_each_toolkits_cap():
    """The comparison above has teeth: for every toolkit, some recorded line runs to the cap (the reported
    bug: OpenNMT-py and Joey NMT lines at the cap were one token longer than the folder's)."""
    reached = {}
    for fixture in RECORDED:
        toolkit = CHECKPOINTS[fixture.name.split("_", 1)[0]][0]
        sources = (fixture / "test.de").read_text(encoding="utf-8").splitlines()
        lines = (fixture / SINGLE).read_text(encoding="utf-8").splitlines()
        at_cap = [len(line.split()) == toolkit_cap(toolkit, source) for line, source in zip(lines, sources,
                                                                                            strict=True)]
        reached[toolkit] = reached.get(toolkit, 0) + sum(at_cap)
    assert all(reached.get(toolkit, 0) > 0 for toolkit in ("opennmt-py", "joeynmt", "fairseq")), reached
