"""fairseq converter: token parity with the real toolkit's outputs (fixtures made by fairseq 0.12.2's model code,
fairseq-fixed 0.12.3.1, with scripts/toolkit_fixtures/make.py), the dictionaries, and the refusals."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_s2s  # noqa: F401  (registers the Auto classes)
from hf_s2s.importers import CheckpointError, convert
from hf_s2s.importers.fairseq import read_dictionary
from hf_s2s.models.transformers_compat import output_cache
from tests.helpers import (
    assert_generates_alike_without_hf_s2s,
    tokenized_toolkit_fixtures,
    translate_command_lines,
)

FIXTURES = Path(__file__).parent / "fixtures" / "toolkits"
FAIRSEQ = [path for path in tokenized_toolkit_fixtures("fairseq_*") if (path / "checkpoint.pt").is_file()]
pytestmark = pytest.mark.skipif(not FAIRSEQ, reason="no fairseq fixture")


def generate_options(fixture: Path) -> dict:
    """fairseq-generate's --beam and --max-len-b as the fixture's beam command ran them (--max-len-a 0)."""
    words = json.loads((fixture / "provenance.json").read_text())["commands"]["beam"].split()
    assert words[words.index("--max-len-a") + 1] == "0"
    return {"beam": int(words[words.index("--beam") + 1]), "max_len": int(words[words.index("--max-len-b") + 1])}


@pytest.fixture(scope="module", params=FAIRSEQ, ids=[path.name for path in FAIRSEQ])
def converted(request, tmp_path_factory):
    fixture = request.param
    folder = convert("fairseq", fixture / "checkpoint.pt", tmp_path_factory.mktemp(fixture.name) / "model")
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    sources = (fixture / "test.de").read_text(encoding="utf-8").splitlines()
    return fixture, folder, model, tokenizer, sources


def generate_all(model, tokenizer, sources, max_len: int, **options) -> list[str]:
    """generate() on every line under fairseq's bound: max_len tokens, then </s> forced (hf_s2s's bound counts the
    </s>: max_len_b = max_len + 1)."""
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        ids = model.generate(**batch, max_len_a=0, max_len_b=max_len + 1, max_new_tokens=max_len + 1, **options)
    return [tokenizer.decode(row, skip_special_tokens=True).strip() for row in ids]


def fairseq_beam_search(model, tokenizer, source: str, beam: int, max_len: int) -> str:
    """fairseq 0.12.2's SequenceGenerator + search.BeamSearch (--lenpen 1, normalized scores, --min-len 1, nbest 1)
    re-implemented over the converted model's steps: 2 x beam candidates ranked by summed log-probability (<pad>
    -inf; </s> -inf at step 0; only </s> at step max_len); a candidate ending in </s> among the first ``beam`` is
    finished with score sum / (its tokens, </s> counted); the next ``beam`` candidates not ending in </s> go on; the
    sentence is done once ``beam`` hypotheses have finished, and the best normalized score wins."""
    config = model.config
    encoded = tokenizer([source] * beam, return_tensors="pt")
    encoder_outputs = model.get_encoder()(**encoded)
    tokens = torch.full((beam, 1), config.decoder_start_token_id)
    scores = torch.tensor([0.0] + [float("-inf")] * (beam - 1))  # step 0 expands beam 0 only
    cache, finished = None, []
    for step in range(max_len + 1):
        with torch.no_grad():
            out = model(encoder_outputs=encoder_outputs, attention_mask=encoded["attention_mask"],
                        decoder_input_ids=tokens if cache is None else tokens[:, -1:], cache=cache, use_cache=True)
        cache = output_cache(out)
        log_probs = out.logits[:, -1].float().log_softmax(-1)  # (beam, V)
        log_probs[:, config.pad_token_id] = float("-inf")
        if step >= max_len:
            eos = log_probs[:, config.eos_token_id].clone()
            log_probs.fill_(float("-inf"))
            log_probs[:, config.eos_token_id] = eos
        if step < 1:
            log_probs[:, config.eos_token_id] = float("-inf")
        top, index = (log_probs + scores[:, None]).view(-1).topk(2 * beam)
        origin, token = index // log_probs.shape[1], index % log_probs.shape[1]
        ended = token.eq(config.eos_token_id) & top.ne(float("-inf"))
        for j in range(beam):
            if ended[j] and len(finished) < beam:
                finished.append((top[j].item() / (step + 1), tokens[origin[j], 1:]))
        if len(finished) == beam or step >= max_len:
            break
        active = (~ended).nonzero().flatten()[:beam]
        tokens = torch.cat([tokens[origin[active]], token[active, None]], dim=1)
        scores = top[active]
        cache.reorder_cache(origin[active])
    best = max(finished, key=lambda hypothesis: hypothesis[0])[1]
    return tokenizer.decode(best, skip_special_tokens=True).strip()


@pytest.mark.slow
def test_greedy_is_the_toolkits_token_for_token(converted):
    fixture, _, model, tokenizer, sources = converted
    expected = (fixture / "greedy.txt").read_text(encoding="utf-8").splitlines()
    got = generate_all(model, tokenizer, sources, generate_options(fixture)["max_len"], num_beams=1, do_sample=False)
    assert sum(a == b for a, b in zip(got, expected, strict=True)) == len(expected) == 100


@pytest.mark.slow
def test_beam_is_the_toolkits_under_its_search_rules(converted):
    """The converted model under fairseq's beam-search rules gives beam.txt exactly; generate() with the folder's
    generation config (length_penalty 1, early_stopping True, min_new_tokens 1, <pad> suppressed) is measured."""
    fixture, _, model, tokenizer, sources = converted
    expected = (fixture / "beam.txt").read_text(encoding="utf-8").splitlines()
    options = generate_options(fixture)
    rules = [fairseq_beam_search(model, tokenizer, line, options["beam"], options["max_len"]) for line in sources]
    assert sum(a == b for a, b in zip(rules, expected, strict=True)) == len(expected) == 100
    got = generate_all(model, tokenizer, sources, options["max_len"], num_beams=options["beam"])
    equal = sum(a == b for a, b in zip(got, expected, strict=True))
    print(f"{fixture.name}: generate() beam equal to fairseq-generate on {equal}/100")
    assert equal >= 95


def test_the_dictionary_order_is_fairseqs(tmp_path):
    path = tmp_path / "dict.xx.txt"
    path.write_text("a 10\nmadeupword0000 0\n", encoding="utf-8")
    assert read_dictionary(path) == ["<s>", "<pad>", "</s>", "<unk>", "a", "madeupword0000"]
    path.write_text("a\n", encoding="utf-8")
    with pytest.raises(CheckpointError, match="not '<token> <count>'"):
        read_dictionary(path)


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
    assert record["toolkit"] == "fairseq" and record["architecture"] == fixture.name.split("_")[1]


def copy_with(fixture: Path, tmp_path: Path, **changes) -> Path:
    """The fixture's checkpoint with model options changed, beside its dictionaries."""
    checkpoint = torch.load(fixture / "checkpoint.pt", map_location="cpu", weights_only=False)
    for name, value in changes.items():
        setattr(checkpoint["cfg"]["model"], name, value)
    for name in ("dict.de.txt", "dict.en.txt"):
        (tmp_path / name).write_bytes((fixture / name).read_bytes())
    torch.save(checkpoint, tmp_path / "checkpoint.pt")
    return tmp_path / "checkpoint.pt"


REFUSED = {
    "fairseq_lstm": [("decoder_attention", "0"), ("criterion", "adaptive_loss"), ("encoder_layers", 2)],
    "fairseq_transformer": [("layernorm_embedding", True), ("no_token_positional_embeddings", True),
                            ("cross_self_attention", True), ("activation_fn", "gelu_accurate"),
                            ("decoder_normalize_before", True), ("decoder_output_dim", 16)],
}


@pytest.mark.parametrize(("fixture", "option", "value"),
                         [(f, o, v) for f in FAIRSEQ for o, v in REFUSED.get(f.name, [])],
                         ids=lambda x: x.name if isinstance(x, Path) else str(x))
def test_an_unsupported_option_is_refused_naming_it(tmp_path, fixture, option, value):
    path = copy_with(fixture, tmp_path, **{option: value})
    with pytest.raises(CheckpointError, match=f"--{option.replace('_', '-')} "):
        convert("fairseq", path, tmp_path / "out")
    assert not (tmp_path / "out" / "config.json").exists()


def test_dictionaries_of_another_model_are_refused(tmp_path):
    fixture = FAIRSEQ[0]
    path = copy_with(fixture, tmp_path)
    (tmp_path / "dict.en.txt").write_text("a 1\n", encoding="utf-8")
    with pytest.raises(CheckpointError, match="dict.en.txt lists 5 target tokens .* not this model's target"):
        convert("fairseq", path, tmp_path / "out", source_vocab=tmp_path / "dict.de.txt",
                target_vocab=tmp_path / "dict.en.txt")


TRANSFORMER = FIXTURES / "fairseq_transformer"


def fairseq_sinusoid(positions: list[int], dim: int) -> torch.Tensor:
    """fairseq's SinusoidalPositionalEmbedding.get_embedding, written out in float64: [sin(p w_i); cos(p w_i)],
    w_i = 10000^(-i / (dim/2 - 1))."""
    half = dim // 2
    w = torch.tensor([10000.0 ** (-i / (half - 1)) for i in range(half)], dtype=torch.float64)
    angles = torch.tensor(positions, dtype=torch.float64)[:, None] * w[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


@pytest.mark.skipif(not (TRANSFORMER / "checkpoint.pt").is_file(), reason="no fairseq transformer fixture")
def test_sinusoidal_positions_are_fairseqs_and_stay_fixed(tmp_path):
    """fairseq's sinusoid becomes position_embedding_layout="tensor2tensor" from position 2: the values fairseq computes at its positions
    (real tokens from padding_idx + 1 = 2, continued by the cache), and no parameter a fine-tuning would train."""
    folder = convert("fairseq", TRANSFORMER / "checkpoint.pt", tmp_path / "model")
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    config = model.config
    assert (config.position_embedding_type, config.position_embedding_layout, config.position_offset) == (
        "sinusoidal", "tensor2tensor", 2)
    assert not [name for name, _ in model.named_parameters() if "embed_positions" in name]
    positions = model.model.decoder.embed_positions
    pad = config.pad_token_id
    assert pad == 1
    torch.testing.assert_close(positions(6, 0, "cpu").double(), fairseq_sinusoid(list(range(2, 8)), config.d_model),
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(positions(1, 4, "cpu").double(), fairseq_sinusoid([6], config.d_model),
                               atol=1e-6, rtol=0)


@pytest.mark.skipif(not (TRANSFORMER / "checkpoint.pt").is_file(), reason="no fairseq transformer fixture")
@pytest.mark.parametrize(("learned", "sizes", "named"), [
    (("encoder",), (256, 1024), "--max-source-positions 256"),
    (("decoder",), (1024, 256), "--max-target-positions 256"),
    (("encoder", "decoder"), (1024, 256), "--max-target-positions 256")], ids=["encoder", "decoder", "both"])
def test_a_learned_position_table_shorter_than_the_other_sides_is_refused_naming_its_option(tmp_path, learned, sizes,
                                                                                             named):
    """hf_s2s has one position table size for both sides: a learned table shorter than the other side's maximum
    (--max-source-positions != --max-target-positions) is refused naming the option and both sizes, before the
    tensors are read (it stopped with "encoder.embed_positions holds 256 positions, not 1024" where one side learned)."""
    path = copy_with(TRANSFORMER, tmp_path, **{f"{side}_learned_pos": True for side in learned},
                     max_source_positions=sizes[0], max_target_positions=sizes[1])
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    d_model = checkpoint["cfg"]["model"].encoder_embed_dim
    for side in learned:  # fairseq's LearnedPositionalEmbedding: max positions + padding_idx + 1 rows
        checkpoint["model"][f"{side}.embed_positions.weight"] = torch.randn(sizes[side == "decoder"] + 2, d_model)
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match=f"fairseq option {named} is not supported: .*1024"):
        convert("fairseq", path, tmp_path / "out")
    assert not (tmp_path / "out" / "config.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(not (TRANSFORMER / "checkpoint.pt").is_file(), reason="no fairseq transformer fixture")
@pytest.mark.parametrize("learned", [("encoder",), ("encoder", "decoder")], ids=["encoder", "both"])
def test_learned_positions_holding_the_sinusoid_decode_as_the_sinusoid(tmp_path, learned):
    """A checkpoint whose learned position tables (--encoder/decoder-learned-pos) hold fairseq's sinusoid converts to
    learned tables and translates as the sinusoidal original does, token for token; where one side learned, the
    other side's sinusoid becomes a table too."""
    path = copy_with(TRANSFORMER, tmp_path, **{f"{side}_learned_pos": True for side in learned})
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    d_model, rows = checkpoint["cfg"]["model"].encoder_embed_dim, checkpoint["cfg"]["model"].max_source_positions
    table = torch.zeros(rows + 2, d_model)  # fairseq's LearnedPositionalEmbedding: max positions + padding_idx + 1
    table[2:] = fairseq_sinusoid(list(range(2, rows + 2)), d_model).float()
    for side in learned:
        checkpoint["model"][f"{side}.embed_positions.weight"] = table.clone()
    torch.save(checkpoint, path)
    learned_folder = convert("fairseq", path, tmp_path / "learned")
    fixed_folder = convert("fairseq", TRANSFORMER / "checkpoint.pt", tmp_path / "fixed")
    tokenizer = AutoTokenizer.from_pretrained(fixed_folder)
    sources = (TRANSFORMER / "test.de").read_text(encoding="utf-8").splitlines()[:30]
    outputs = []
    for folder in (learned_folder, fixed_folder):
        model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        outputs.append(generate_all(model, tokenizer, sources, 50, num_beams=1, do_sample=False))
        if folder == learned_folder:
            assert model.config.position_embedding_type == "learned"
            assert model.model.encoder.embed_positions.weight_table.weight.shape == (rows, d_model)
    assert outputs[0] == outputs[1]
