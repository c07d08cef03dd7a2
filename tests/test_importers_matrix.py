"""The matrix of real toolkit settings (issue 45): every cell made by scripts/toolkit_fixtures/matrix.py (a tiny
model the toolkit itself trained, varying one or two settings users change from its base model) converts, and the
converted folder's greedy output from the raw test sources, with its own generation config, equals the toolkit's
own raw-text greedy output one sentence a batch (greedy_single.txt) on 100 of 100 lines.

The width-512 cells are too large for git (matrix.py says why); where make.py wrote them (runs/toolkit_matrix/),
they are checked too. The fairseq cell trained with --tokenizer moses --bpe subword_nmt is also translated from raw
German by hf-s2s translate and by transformers' pipeline() in a process where hf_s2s cannot be imported."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_s2s  # noqa: F401  (registers the Auto classes)
from hf_s2s.cli import run_command
from hf_s2s.importers import convert
from tests.helpers import run_without_hf_s2s, translate_command_lines

REPO = Path(__file__).resolve().parents[1]
CELLS = sorted((REPO / "tests" / "fixtures" / "toolkits" / "matrix").glob("*/greedy_single.txt")) + sorted(
    (REPO / "runs" / "toolkit_matrix").glob("*/greedy_single.txt"))
CELLS = [path.parent for path in CELLS]
MOSES = [cell for cell in CELLS if (cell / "codes.bpe").is_file()]  # fairseq --tokenizer moses --bpe subword_nmt
CHECKPOINTS = {"opennmt": ("opennmt-py", "model.pt"), "joeynmt": ("joeynmt", "model.ckpt"),
               "fairseq": ("fairseq", "checkpoint.pt")}
pytestmark = pytest.mark.skipif(not CELLS, reason="no matrix cell")


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def convert_cell(cell: Path, out: Path) -> Path:
    """Convert as a user would: the cell's subword model (recorded where the toolkit trained, gone) given by flag,
    and Joey NMT's config as its greedy_single.txt run used it."""
    toolkit, checkpoint = CHECKPOINTS[cell.name.split("_", 1)[0]]
    files = {}
    for name in ("spm.model", "codes.bpe"):
        if (cell / name).is_file():
            files["source_subword_model"] = cell / name
            if toolkit == "joeynmt":
                files["target_subword_model"] = cell / name
    if toolkit == "joeynmt":
        files["config"] = cell / "translate_single.yaml"
    return convert(toolkit, cell / checkpoint, out, **files)


@pytest.fixture(scope="module", params=CELLS, ids=[cell.name for cell in CELLS])
def converted(request, tmp_path_factory):
    return request.param, convert_cell(request.param, tmp_path_factory.mktemp(request.param.name) / "model")


def test_the_folder_gives_the_toolkits_raw_text_greedy_output(converted):
    cell, folder = converted
    source = cell / "test.de" if (cell / "test.de").is_file() else cell / "test.raw.de"
    sources, expected = read_lines(source), read_lines(cell / "greedy_single.txt")
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    got = []
    for start in range(0, len(sources), 25):  # each row's length bound is its own: batched like one a batch
        batch = tokenizer(sources[start : start + 25], return_tensors="pt", padding=True)
        with torch.no_grad():
            ids = model.generate(**batch, num_beams=1, do_sample=False)
        got += [tokenizer.decode(row, skip_special_tokens=True).strip() for row in ids]
    equal = sum(a == b for a, b in zip(got, expected, strict=True))
    print(f"{cell.name}: converted == toolkit on {equal}/{len(expected)} lines")
    differ = [(i, a, b) for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b]
    assert not differ, differ[:3]
    assert len(set(expected)) > 10  # the toolkit's outputs differ from line to line: the comparison has teeth


def test_pieces_the_vocabulary_lacks_are_read_as_unk_and_never_generated(converted):
    """Where the toolkit's vocabulary lacks pieces its subword model emits (a frequency cut), the folder's encoder
    reads them as <unk> (source_unk_aliases), whether or not the token table is shared, and the output layer has
    the vocabulary's rows only."""
    cell, folder = converted
    record = json.loads((folder / "conversion.json").read_text())
    aliases = record.get("subword_models", {}).get("source_pieces_read_as_unk", 0)
    if not aliases:
        pytest.skip(f"{cell.name}: no piece read as <unk>")
    config = json.loads((folder / "config.json").read_text())
    assert config["source_unk_aliases"] == aliases
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    assert model.get_output_embeddings().weight.shape[0] == (config.get("decoder_vocab_size") or config["vocab_size"])
    first = config["vocab_size"]
    with torch.no_grad():
        ours = model.get_encoder()(input_ids=torch.tensor([[first, first + aliases - 1, config["eos_token_id"]]]))
        unk = config["unk_token_id"]
        theirs = model.get_encoder()(input_ids=torch.tensor([[unk, unk, config["eos_token_id"]]]))
    assert torch.equal(ours.last_hidden_state, theirs.last_hidden_state)


@pytest.mark.slow
@pytest.mark.parametrize("cell", MOSES, ids=[cell.name for cell in MOSES])
def test_moses_bpe_raw_german_gives_fairseqs_detokenized_text_via_translate_and_pipeline_without_hf_s2s(cell, tmp_path):
    """fairseq --tokenizer moses --bpe subword_nmt (its IWSLT/WMT recipes): raw German in, fairseq-interactive's
    detokenized English out (its D- lines), one sentence a batch, greedy, line for line: through ``hf-s2s translate``
    and through ``pipeline("translation")`` where hf_s2s cannot be imported (the folder's FSMTTokenizer and remote
    code)."""
    folder = convert_cell(cell, tmp_path / "model")
    sources, expected = read_lines(cell / "test.raw.de"), read_lines(cell / "greedy_single.txt")
    got = translate_command_lines(folder, sources, tmp_path, "--beams", "1", "--batch-size", "1")
    differ = [(i, a, b) for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b]
    print(f"{cell.name}: hf-s2s translate == fairseq-interactive on {len(expected) - len(differ)}/{len(expected)}")
    assert not differ, differ[:3]
    piped = run_without_hf_s2s(f"""
        import json, torch
        from transformers import pipeline
        translator = pipeline("translation", model={str(folder)!r}, trust_remote_code=True)
        assert type(translator.tokenizer).__name__ == "FSMTTokenizer", type(translator.tokenizer)
        with torch.no_grad():
            out = translator({sources!r}, num_beams=1, batch_size=1)
        print(json.dumps([row["translation_text"] for row in out]))
    """, cwd=tmp_path)
    differ = [(i, a, b) for i, (a, b) in enumerate(zip(piped, expected, strict=True)) if a != b]
    assert not differ, differ[:3]


@pytest.mark.parametrize("cell", MOSES, ids=[cell.name for cell in MOSES])
def test_moses_bpe_codes_recorded_where_fairseq_trained_are_named_with_the_flag_to_pass(cell, tmp_path):
    """The checkpoint names its --bpe-codes by the path they had where fairseq trained, which is gone: hf-s2s convert
    says which option and path, and the flag to pass, and writes nothing."""
    with pytest.raises(SystemExit) as exit_info:
        run_command("convert", ["--from", "fairseq", str(cell / "checkpoint.pt"), str(tmp_path / "out")])
    message = str(exit_info.value.code)
    assert message.startswith("error: --bpe-codes /") and message.split()[2].endswith("codes.bpe"), message
    assert "does not exist here" in message and message.endswith("pass the BPE codes with --source-subword-model")
    assert not (tmp_path / "out").exists()
