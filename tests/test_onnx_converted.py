"""Folders converted from the old toolkits export to ONNX and decode there as generate() does: the importers'
switches (decoder inits, readouts, position layouts, output biases) are traced into the graphs, and the runtime
honours what their generation configs set (fairseq's suppressed pad token)."""

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_s2s  # noqa: F401  (registers the families)
from hf_s2s.importers import convert
from hf_s2s.inference.onnx import export_onnx
from hf_s2s.inference.onnx_runtime import OnnxSeq2Seq

FIXTURES = Path(__file__).parent / "fixtures" / "toolkits"
CASES = {
    "joeynmt_rnn_bahdanau": ("joeynmt", "model.ckpt"),
    "fairseq_transformer": ("fairseq", "checkpoint.pt"),
    "opennmt_rnn_general": ("opennmt-py", "model.pt"),
    "joeynmt_transformer": ("joeynmt", "model.ckpt"),
    "fairseq_lstm": ("fairseq", "checkpoint.pt"),
}
FAST = ("joeynmt_rnn_bahdanau", "fairseq_transformer")


def _checkpoint(name: str) -> Path:
    folder = FIXTURES / name
    named = folder / CASES[name][1]
    return named if named.is_file() else next(folder.glob("*.pt"))


@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in CASES])
def test_a_converted_folder_decodes_the_same_in_onnx(name, tmp_path):
    folder = convert(CASES[name][0], _checkpoint(name), tmp_path / "model")
    sources = [line.strip() for line in (FIXTURES / name / "test.de").read_text().splitlines()[:12]]
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    batch = tokenizer(sources, return_tensors="pt", padding=True)  # leaves padding on in the tokenizer's backend
    export_onnx(model, tmp_path / "onnx", tokenizer=tokenizer)
    onnx = OnnxSeq2Seq(tmp_path / "onnx")
    for beams in (1, 3):
        with torch.no_grad():
            expected = model.generate(**batch, num_beams=beams, max_new_tokens=25)
        got = onnx.generate(batch["input_ids"].numpy(), batch["attention_mask"].numpy(), num_beams=beams,
                            max_new_tokens=25)
        assert got.tolist() == expected.tolist(), beams
        # the text path too: the runtime pads and masks itself, whatever padding the saved tokenizer carried
        assert onnx.translate(sources, num_beams=beams, max_new_tokens=25) == \
            tokenizer.batch_decode(expected, skip_special_tokens=True)
    assert len({tuple(row) for row in expected.tolist()}) > 1
