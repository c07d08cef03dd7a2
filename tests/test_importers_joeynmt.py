"""Joey NMT converter (RNN and Transformer): token parity with the real toolkit's outputs (fixtures made by Joey NMT
2.3.0 with scripts/toolkit_fixtures/make.py), the config and vocabularies read from beside the checkpoint, and the
refusals."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoTokenizer

from hf_s2s.importers import CheckpointError, convert
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
JOEY = [path for path in tokenized_toolkit_fixtures("joeynmt_*") if (path / "model.ckpt").is_file()]
pytestmark = pytest.mark.skipif(not JOEY, reason="no Joey NMT fixture")
MODEL_CLASSES = {"rnn": RNNSeq2SeqForConditionalGeneration, "transformer": TransformerSeq2SeqForConditionalGeneration}
MAX_OUTPUT_LENGTH = 50  # the fixtures' testing.max_output_length
NO_SOURCE_BOUND = {"max_len_a": None, "max_len_b": None}


@pytest.fixture(scope="module", params=JOEY, ids=[path.name for path in JOEY])
def converted(request, tmp_path_factory):
    fixture = request.param
    folder = convert("joeynmt", fixture / "model.ckpt", tmp_path_factory.mktemp(fixture.name) / "model")
    architecture = json.loads((folder / "conversion.json").read_text())["architecture"]
    model = MODEL_CLASSES[architecture].from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    sources = (fixture / "test.de").read_text(encoding="utf-8").splitlines()
    return fixture, folder, model, tokenizer, sources


def generate_all(model, tokenizer, sources, **options) -> list[str]:
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        ids = model.generate(**batch, max_new_tokens=MAX_OUTPUT_LENGTH, min_new_tokens=1, **NO_SOURCE_BOUND,
                             **options)
    return [tokenizer.decode(row, skip_special_tokens=True).strip() for row in ids]


def joey_beam_search(model, tokenizer, source: str, beam: int, max_length: int = MAX_OUTPUT_LENGTH) -> str:
    """Joey NMT 2.3.0's ``search.beam_search`` (beam_alpha -1, n_best 1, min_output_length 1), re-implemented over
    the converted model's steps: candidates ranked by summed log-probability, </s> forbidden at the first step; a
    beam that ended stays in the beam and keeps expanding (it is stored once, at its first </s>); the finished flags
    belong to beam *positions* and stay set (``is_finished | ...``); the sentence ends when every position is
    flagged, or after ``max_length`` steps (then unfinished beams are stored too); the best stored score wins."""
    config = model.config
    eos = config.eos_token_id
    encoded = tokenizer([source] * beam, return_tensors="pt")
    encoder_outputs = model.get_encoder()(**encoded)
    tokens = torch.full((beam, 1), config.decoder_start_token_id)
    scores = torch.tensor([0.0] + [float("-inf")] * (beam - 1))
    finished = torch.zeros(beam, dtype=torch.bool)
    cache, hypotheses = None, []
    for step in range(max_length):
        with torch.no_grad():
            out = model(encoder_outputs=encoder_outputs, attention_mask=encoded["attention_mask"],
                        decoder_input_ids=tokens[:, -1:], cache=cache, use_cache=True)
        cache = output_cache(out)
        log_probs = out.logits[:, -1].float().log_softmax(-1)  # (beam, V)
        if step < 1:
            log_probs[:, eos] = float("-inf")
        top, index = (log_probs + scores[:, None]).view(-1).topk(beam)
        origin, token = index // log_probs.shape[1], index % log_probs.shape[1]
        tokens = torch.cat([tokens[origin], token[:, None]], dim=1)
        cache.reorder_cache(origin)
        scores = top
        finished = token.eq(eos) | finished | top.eq(float("-inf"))
        if step + 1 == max_length:
            finished[:] = True
        for j in finished.nonzero().view(-1).tolist():
            n_eos = int(tokens[j, 1:].eq(eos).sum())
            if (n_eos == 0 and step + 1 == max_length) or (n_eos == 1 and tokens[j, -1] == eos):
                hypotheses.append((top[j].item(), tokens[j, 1:]))
        if finished.all():
            break
    best = sorted(hypotheses, key=lambda hypothesis: hypothesis[0], reverse=True)[0][1]
    return tokenizer.decode(best, skip_special_tokens=True).strip()


@pytest.mark.slow
def test_greedy_is_the_toolkits_token_for_token(converted):
    fixture, _, model, tokenizer, sources = converted
    expected = (fixture / "greedy.txt").read_text(encoding="utf-8").splitlines()
    got = generate_all(model, tokenizer, sources, num_beams=1, do_sample=False)
    assert sum(a == b for a, b in zip(got, expected, strict=True)) == len(expected) == 100


@pytest.mark.slow
def test_beam_is_the_toolkits_under_its_search_rules(converted):
    """The converted model under Joey NMT's beam-search rules gives beam.txt exactly; generate()'s rules differ
    (docs/importers.md): its agreement is measured and printed here."""
    fixture, _, model, tokenizer, sources = converted
    expected = (fixture / "beam.txt").read_text(encoding="utf-8").splitlines()
    beam = json.loads((fixture / "provenance.json").read_text())["beam_size"]
    rules = [joey_beam_search(model, tokenizer, line, beam) for line in sources]
    assert sum(a == b for a, b in zip(rules, expected, strict=True)) == len(expected) == 100
    for early_stopping in (True, False):
        got = generate_all(model, tokenizer, sources, num_beams=beam, length_penalty=0.0,
                           early_stopping=early_stopping)
        equal = sum(a == b for a, b in zip(got, expected, strict=True))
        print(f"{fixture.name}: generate() beam (early_stopping={early_stopping}) equal to joeynmt on {equal}/100")


@pytest.mark.slow
def test_folder_loads_and_generates_without_hf_s2s(converted, tmp_path):
    _, folder, model, tokenizer, sources = converted
    assert_generates_alike_without_hf_s2s(model, tokenizer, folder, sources[:4], tmp_path, num_beams=1,
                                          max_new_tokens=20)


@pytest.mark.slow
def test_translate_command_on_the_converted_folder(converted, tmp_path):
    fixture, folder, _, _, sources = converted
    lines = translate_command_lines(folder, sources[:3], tmp_path, "--beams", "1")
    assert lines == (fixture / "greedy.txt").read_text(encoding="utf-8").splitlines()[:3]
    record = json.loads((folder / "conversion.json").read_text())
    assert record["toolkit"] == "joeynmt" and record["architecture"] in fixture.name


@pytest.mark.slow
def test_translate_takes_the_folders_length_penalty(converted, tmp_path):
    """Joey NMT ranks beams by raw sums (beam_alpha -1). Converted with the config its beam search ran with
    (testing.beam_size 5), the folder's generation config says length_penalty 0, and translate() (hf-s2s translate,
    the server) uses it unless told otherwise; 1.0 would rank the beams differently. (With beam_size 1 the generation
    config cannot hold a length penalty: transformers refuses to save one without beam search.)"""
    from hf_s2s.inference.engines import TorchEngine
    from hf_s2s.inference.translate import translate

    fixture, _, _, tokenizer, sources = converted
    folder = convert("joeynmt", fixture / "model.ckpt", tmp_path / "model", config=fixture / "translate_beam5.yaml",
                     source_vocab=fixture / "src_vocab.txt", target_vocab=fixture / "trg_vocab.txt")
    architecture = json.loads((folder / "conversion.json").read_text())["architecture"]
    model = MODEL_CLASSES[architecture].from_pretrained(folder).eval()
    assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (5, 0.0)
    assert TorchEngine(folder).options(num_beams=5).length_penalty == 0.0

    def texts(**options):
        return [hyps[0].text for hyps in translate(model, tokenizer, sources, num_beams=5, scores=False, **options)]

    default = texts()
    assert default == texts(length_penalty=0.0)
    assert default != texts(length_penalty=1.0)


# What each RNN fixture's conversion must exercise: init_hidden zero / last / bridge, last over an encoder twice the
# decoder's size (the forward half), both attentions, with and without input feeding
RNN_SWITCHES = {
    "joeynmt_rnn_bahdanau": {"decoder_init": "bridge", "decoder_init_cell": "copy_hidden",
                             "attention_type": "luong_concat", "input_feeding": True},
    "joeynmt_rnn_luong": {"decoder_init": "last", "attention_type": "luong_general", "input_feeding": True},
    "joeynmt_rnn_zero": {"decoder_init": "zero", "attention_type": "luong_concat", "input_feeding": False},
    "joeynmt_rnn_last_forward": {"decoder_init": "last_forward", "decoder_init_cell": "copy_hidden",
                                 "attention_type": "luong_general"},
}


@pytest.mark.parametrize("name", sorted(RNN_SWITCHES))
def test_each_rnn_fixture_exercises_its_switches(name, tmp_path):
    expected = RNN_SWITCHES[name]
    assert converted_config_values("joeynmt", FIXTURES / name / "model.ckpt", expected, tmp_path / "m") == expected


def copy_with_config(fixture: Path, folder: Path, change) -> Path:
    """The fixture's checkpoint and vocabularies in ``folder``, with ``change(config)`` applied to config.yaml."""
    folder.mkdir()
    for name in ("model.ckpt", "src_vocab.txt", "trg_vocab.txt"):
        shutil.copyfile(fixture / name, folder / name)
    config = yaml.safe_load((fixture / "config.yaml").read_text())
    change(config)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    return folder / "model.ckpt"


RNN = next((path for path in JOEY if "_rnn_" in path.name), None)
TRANSFORMER = FIXTURES / "joeynmt_transformer"


@pytest.mark.skipif(RNN is None, reason="no Joey NMT RNN fixture")
@pytest.mark.parametrize(("section", "option", "value"), [
    ("decoder", "activation", "relu"), ("decoder", "attention", "multihead"), ("decoder", "init_hidden", "random"),
    ("encoder", "rnn_type", "transformer"), ("encoder", "type", "cnn"),
])
def test_an_unsupported_rnn_option_is_refused_naming_it(tmp_path, section, option, value):
    checkpoint = copy_with_config(RNN, tmp_path / "in", lambda config: config["model"][section].update({option: value}))
    with pytest.raises(CheckpointError, match=rf"model\.{section}\.{option}"):
        convert("joeynmt", checkpoint, tmp_path / "out")
    assert not (tmp_path / "out" / "config.json").exists()


@pytest.mark.skipif(not (TRANSFORMER / "model.ckpt").is_file(), reason="no Joey NMT Transformer fixture")
@pytest.mark.parametrize(("section", "option", "value"), [
    ("encoder", "alpha", 0.5), ("decoder", "activation", "swish"), ("decoder", "layer_norm", "post"),
    ("encoder", "layer_norm", None),
])
def test_an_unsupported_transformer_option_is_refused_naming_it(tmp_path, section, option, value):
    def change(config):
        if value is None:
            del config["model"][section][option]
        else:
            config["model"][section][option] = value
    checkpoint = copy_with_config(TRANSFORMER, tmp_path / "in", change)
    with pytest.raises(CheckpointError, match=rf"model\.{section}\.{option}"):
        convert("joeynmt", checkpoint, tmp_path / "out")


@pytest.mark.slow
def test_config_and_vocabularies_are_read_from_where_the_cli_says(tmp_path):
    """Nothing beside the checkpoint: --config / --source-vocab / --target-vocab name the files; without them the
    error says which file is missing and how to pass it."""
    fixture = JOEY[0]
    (tmp_path / "ckpt").mkdir()
    checkpoint = tmp_path / "ckpt" / "model.ckpt"
    shutil.copyfile(fixture / "model.ckpt", checkpoint)
    with pytest.raises(CheckpointError, match="--config"):
        convert("joeynmt", checkpoint, tmp_path / "out")
    done = subprocess.run([sys.executable, "-m", "hf_s2s.cli", "convert", "--from", "joeynmt", str(checkpoint),
                           str(tmp_path / "cli"), "--config", str(fixture / "config.yaml"),
                           "--source-vocab", str(fixture / "src_vocab.txt"),
                           "--target-vocab", str(fixture / "trg_vocab.txt")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "cli" / "config.json").is_file() and (tmp_path / "cli" / "conversion.json").is_file()
