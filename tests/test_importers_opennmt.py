"""OpenNMT-py converter (RNN and Transformer): token parity with the real toolkit's outputs (fixtures made by
OpenNMT-py 3.5.1 with scripts/toolkit_fixtures/make.py), the safe checkpoint reading and the refusals."""

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from hf_s2s.importers import CheckpointError, convert
from hf_s2s.importers.opennmt import opennmt_max_lengths
from hf_s2s.models.modeling_rnn_seq2seq import RNNSeq2SeqForConditionalGeneration
from hf_s2s.models.modeling_transformer_seq2seq import TransformerSeq2SeqForConditionalGeneration
from hf_s2s.models.transformers_compat import output_cache
from tests.helpers import (
    assert_generates_alike_without_hf_s2s,
    converted_config_values,
    tokenized_toolkit_fixtures,
    translate_command_lines,
)

FIXTURES = Path(__file__).parent / "fixtures" / "toolkits"
OPENNMT = tokenized_toolkit_fixtures("opennmt_*")
RNN = [path for path in OPENNMT if "_rnn_" in path.name]
MODEL_CLASSES = {"rnn": RNNSeq2SeqForConditionalGeneration, "transformer": TransformerSeq2SeqForConditionalGeneration}
pytestmark = pytest.mark.skipif(not OPENNMT, reason="no OpenNMT-py fixture")


def provenance(fixture: Path) -> dict:
    return json.loads((fixture / "provenance.json").read_text())


def translate_options(fixture: Path) -> dict:
    """onmt_translate's -batch_size and -max_length as the fixture's greedy command ran it."""
    words = provenance(fixture)["commands"]["greedy"].split()
    return {"batch_size": int(words[words.index("-batch_size") + 1]),
            "max_length": int(words[words.index("-max_length") + 1])}


@pytest.fixture(scope="module", params=OPENNMT, ids=[path.name for path in OPENNMT])
def converted(request, tmp_path_factory):
    fixture = request.param
    folder = convert("opennmt-py", fixture / "model.pt", tmp_path_factory.mktemp(fixture.name) / "model")
    architecture = json.loads((folder / "conversion.json").read_text())["architecture"]
    model = MODEL_CLASSES[architecture].from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    sources = (fixture / "test.de").read_text(encoding="utf-8").splitlines()
    caps = opennmt_max_lengths([len(line.split()) for line in sources], **translate_options(fixture))
    return fixture, folder, model, tokenizer, sources, caps


def generate_all(model, tokenizer, sources, caps, **options) -> list[str]:
    """generate() on every line, each under onmt_translate's cap for it (lines of one cap batched together)."""
    outputs = [None] * len(sources)
    for cap in sorted(set(caps)):
        rows = [i for i, c in enumerate(caps) if c == cap]
        batch = tokenizer([sources[i] for i in rows], return_tensors="pt", padding=True)
        with torch.no_grad():
            ids = model.generate(**batch, max_new_tokens=cap, max_len_a=None, max_len_b=None, **options)
        for i, row in zip(rows, ids, strict=True):
            outputs[i] = tokenizer.decode(row, skip_special_tokens=True).strip()
    return outputs


def opennmt_beam_search(model, tokenizer, source: str, beam: int, cap: int) -> str:
    """OpenNMT-py 3.5.1's BeamSearch (length_penalty avg, alpha 1, n_best 1, ratio 0), re-implemented over the
    converted model's steps: candidates ranked by summed log-probability; a candidate ending in </s> is kept with
    score sum / (its tokens + 1, the start token counted); a finished slot gets -65504 and is not refilled; the
    search stops as soon as the step's top candidate is finished (or after ``cap`` tokens, where all are kept)."""
    config = model.config
    encoded = tokenizer([source] * beam, return_tensors="pt")
    encoder_outputs = model.get_encoder()(**encoded)
    tokens = torch.full((beam, 1), config.decoder_start_token_id)
    scores = torch.tensor([0.0] + [float("-inf")] * (beam - 1))
    cache, hypotheses = None, []
    for step in range(1, cap + 1):
        with torch.no_grad():
            out = model(encoder_outputs=encoder_outputs, attention_mask=encoded["attention_mask"],
                        decoder_input_ids=tokens[:, -1:], cache=cache, use_cache=True)
        cache = output_cache(out)
        log_probs = out.logits[:, -1].float().log_softmax(-1) + scores[:, None]  # (beam, V)
        top, index = (log_probs.view(-1) / (step + 1)).topk(beam)
        origin, token = index // log_probs.shape[1], index % log_probs.shape[1]
        tokens = torch.cat([tokens[origin], token[:, None]], dim=1)
        cache.reorder_cache(origin)
        finished = token.eq(config.eos_token_id) | (step == cap)
        hypotheses += [(top[j].item(), tokens[j, 1:]) for j in range(beam) if finished[j]]
        if finished[0]:
            break
        scores = (top * (step + 1)).masked_fill(finished, -65504.0)
    best = max(hypotheses, key=lambda hypothesis: hypothesis[0])[1]
    return tokenizer.decode(best, skip_special_tokens=True).strip()


@pytest.mark.slow
def test_greedy_is_the_toolkits_token_for_token(converted):
    fixture, _, model, tokenizer, sources, caps = converted
    expected = (fixture / "greedy.txt").read_text(encoding="utf-8").splitlines()
    got = generate_all(model, tokenizer, sources, caps, num_beams=1, do_sample=False)
    assert sum(a == b for a, b in zip(got, expected, strict=True)) == len(expected) == 100


@pytest.mark.slow
def test_beam_is_the_toolkits_under_its_search_rules(converted):
    """The converted model under OpenNMT-py's beam-search rules gives beam.txt exactly; generate()'s differ from
    them in two named ways (docs/importers.md), measured and printed here."""
    fixture, _, model, tokenizer, sources, caps = converted
    expected = (fixture / "beam.txt").read_text(encoding="utf-8").splitlines()
    beam = provenance(fixture)["beam_size"]
    rules = [opennmt_beam_search(model, tokenizer, line, beam, cap) for line, cap in zip(sources, caps, strict=True)]
    assert sum(a == b for a, b in zip(rules, expected, strict=True)) == len(expected) == 100
    got = generate_all(model, tokenizer, sources, caps, num_beams=beam, length_penalty=1.0, early_stopping=True)
    equal = sum(a == b for a, b in zip(got, expected, strict=True))
    print(f"{fixture.name}: generate() beam equal to onmt_translate on {equal}/100")


@pytest.mark.slow
def test_folder_loads_and_generates_without_hf_s2s(converted, tmp_path):
    _, folder, model, tokenizer, sources, _ = converted
    assert_generates_alike_without_hf_s2s(model, tokenizer, folder, sources[:4], tmp_path, num_beams=1,
                                          max_new_tokens=20)


@pytest.mark.slow
def test_translate_command_on_the_converted_folder(converted, tmp_path):
    fixture, folder, _, _, sources, _ = converted
    lines = translate_command_lines(folder, sources[:3], tmp_path, "--beams", "1")
    assert len(lines) == 3
    record = json.loads((folder / "conversion.json").read_text())
    assert record["toolkit"] == "opennmt-py" and record["architecture"] in fixture.name


class Payload:  # a class no allow-list names: unpickling it would import this module
    pass


def test_a_checkpoint_holding_another_class_is_refused_naming_it(tmp_path):
    checkpoint = torch.load(RNN[0] / "model.pt", map_location="cpu", weights_only=False)
    checkpoint["extra"] = Payload()
    path = tmp_path / "model.pt"
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match=r"test_importers_opennmt\.Payload"):
        convert("opennmt-py", path, tmp_path / "out")


@pytest.mark.parametrize(("option", "value"), [("copy_attn", True), ("coverage_attn", True),
                                               ("context_gate", "both"), ("global_attention", "none"),
                                               ("rnn_type", "SRU"), ("n_src_feats", 1),
                                               ("global_attention_function", "sparsemax")])
def test_an_unsupported_option_is_refused_naming_it(tmp_path, option, value):
    checkpoint = torch.load(RNN[0] / "model.pt", map_location="cpu", weights_only=False)
    setattr(checkpoint["opt"], option, value)
    assert isinstance(checkpoint["opt"], argparse.Namespace)
    path = tmp_path / "model.pt"
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match=f"-{option} "):
        convert("opennmt-py", path, tmp_path / "out")
    assert not (tmp_path / "out" / "config.json").exists()


TRANSFORMER = FIXTURES / "opennmt_transformer"


@pytest.mark.skipif(not (TRANSFORMER / "model.pt").is_file(), reason="no OpenNMT-py Transformer fixture")
@pytest.mark.parametrize(("option", "value"), [("max_relative_positions", 20), ("max_relative_positions", -1),
                                               ("position_encoding_type", "Rotary"),
                                               ("position_encoding", False), ("num_kv", 1),
                                               ("parallel_residual", True), ("layer_norm", "rms"),
                                               ("self_attn_type", "average"), ("pos_ffn_activation_fn", "silu"),
                                               ("decoder_type", "rnn"), ("copy_attn", True)])
def test_an_unsupported_transformer_option_is_refused_naming_it(tmp_path, option, value):
    checkpoint = torch.load(TRANSFORMER / "model.pt", map_location="cpu", weights_only=False)
    setattr(checkpoint["opt"], option, value)
    path = tmp_path / "model.pt"
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match=f"-{option} "):
        convert("opennmt-py", path, tmp_path / "out")
    assert not (tmp_path / "out" / "config.json").exists()


@pytest.mark.skipif(not (TRANSFORMER / "model.pt").is_file(), reason="no OpenNMT-py Transformer fixture")
def test_sinusoidal_concat_positions_are_checked_against_the_stored_table(tmp_path):
    """-position_encoding_type SinusoidalConcat maps onto position_embedding_layout="tensor2tensor": a checkpoint
    whose stored pe tables are OpenNMT-py's SinusoidalConcat ([sin; cos], frequencies 10000^(-i/(d/2 - 1)), from
    position 0) converts; one that declares it over another table is refused."""
    checkpoint = torch.load(TRANSFORMER / "model.pt", map_location="cpu", weights_only=False)
    checkpoint["opt"].position_encoding_type = "SinusoidalConcat"
    torch.save(checkpoint, tmp_path / "declared.pt")
    with pytest.raises(CheckpointError, match="is not the position table OpenNMT-py.s -position_encoding_type "
                                              "SinusoidalConcat computes"):
        convert("opennmt-py", tmp_path / "declared.pt", tmp_path / "refused")
    for side in ("encoder", "decoder"):
        name = f"{side}.embeddings.make_embedding.pe.pe"
        rows, _, dim = checkpoint["model"][name].shape
        half = dim // 2  # float32, as the toolkit computes it: at position 5000 float64 angles differ by ~5e-4
        w = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
        angles = torch.arange(rows, dtype=torch.float32)[:, None] * w[None, :]
        checkpoint["model"][name] = torch.cat([angles.sin(), angles.cos()], dim=1)[:, None, :]
    torch.save(checkpoint, tmp_path / "concat.pt")
    folder = convert("opennmt-py", tmp_path / "concat.pt", tmp_path / "out")
    config = json.loads((folder / "config.json").read_text())
    assert (config["position_embedding_layout"], config["position_offset"]) == ("tensor2tensor", 0)


# What each fixture's conversion must exercise: the three global attentions, -bridge or the final states, both
# sinusoid layouts, and one table for both sides and the generator (-share_embeddings,
# -share_decoder_embeddings)
SWITCHES = {
    "opennmt_rnn_general": {"attention_type": "luong_general", "decoder_init": "final_states_bridge"},
    "opennmt_rnn_mlp": {"attention_type": "luong_concat", "decoder_init": "final_states"},
    "opennmt_rnn_dot": {"attention_type": "luong_dot", "decoder_init": "final_states"},
    "opennmt_transformer": {"position_embedding_layout": "interleaved"},
    "opennmt_transformer_concat": {"position_embedding_layout": "tensor2tensor"},
    "opennmt_transformer_shared": {"share_encoder_decoder_embeddings": True, "tie_word_embeddings": True},
}


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_each_fixture_exercises_its_switches(name, tmp_path):
    expected = SWITCHES[name]
    assert converted_config_values("opennmt-py", FIXTURES / name / "model.pt", expected, tmp_path / "m") == expected


def test_the_cap_follows_onmt_translate_batches():
    # lines sorted by source length, batches of 2: (1, 2) then (3, 10); each batch capped by its longest
    assert opennmt_max_lengths([10, 1, 3, 2], batch_size=2, max_length=50) == [17, 7, 17, 7]
    assert opennmt_max_lengths([100], batch_size=2, max_length=50) == [50]


@pytest.mark.slow
def test_cli_convert(tmp_path):
    out = tmp_path / "cli"
    done = subprocess.run([sys.executable, "-m", "hf_s2s.cli", "convert", "--from", "opennmt-py",
                           str(OPENNMT[0] / "model.pt"), str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (out / "config.json").is_file() and (out / "conversion.json").is_file()
    shutil.rmtree(out)
