"""A converted folder whose toolkit segmented raw text with SentencePiece takes raw text: the tokenizer segments as
sentencepiece does, with the toolkit's ids, and the folder's greedy output is the toolkit's raw-text output line for
line (fixtures *_spm made by the real toolkits with scripts/toolkit_fixtures/make.py). Models the tokenizer cannot
reproduce exactly are refused, naming the file."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm
import torch
import yaml
from sentencepiece import sentencepiece_model_pb2
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

import hf_s2s  # noqa: F401  (registers the Auto classes)
from hf_s2s.cli import run_command
from hf_s2s.importers import convert
from hf_s2s.importers.checkpoints import load_checkpoint
from hf_s2s.importers.fairseq import read_dictionary
from hf_s2s.inference.engines import load_engine
from hf_s2s.serving.app import create_app
from hf_s2s.serving.server import serve_in_thread
from tests.helpers import translate_command_lines

FIXTURES = Path(__file__).parent / "fixtures" / "toolkits"
SPM = sorted(path for path in FIXTURES.glob("*_spm") if (path / "spm.model").is_file())
CHECKPOINTS = {"opennmt": ("opennmt-py", "model.pt"), "joeynmt": ("joeynmt", "model.ckpt"),
               "fairseq": ("fairseq", "checkpoint.pt")}
SOURCE, EXPECTED = "test.raw.de", "greedy_single.txt"
pytestmark = pytest.mark.skipif(not SPM, reason="no SentencePiece fixture")


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def convert_fixture(fixture: Path, out: Path) -> Path:
    """Convert as a user would: the fixture's model files name the SentencePiece model by a path that is gone,
    so the flags name it (Joey NMT's config names one for each side)."""
    return convert_fixture_with(fixture, fixture / "spm.model", out)


def convert_fixture_with(fixture: Path, model: Path, out: Path) -> Path:
    toolkit, checkpoint = CHECKPOINTS[fixture.name.split("_", 1)[0]]
    # Joey NMT: the config its greedy_single.txt run used (no max_output_length), and a flag for each side
    joey = {"config": fixture / "translate_single.yaml", "target_subword_model": model} if toolkit == "joeynmt" else {}
    return convert(toolkit, fixture / checkpoint, out, source_subword_model=model, **joey)


@pytest.fixture(scope="module", params=SPM, ids=[path.name for path in SPM])
def converted(request, tmp_path_factory):
    return request.param, convert_fixture(request.param, tmp_path_factory.mktemp(request.param.name) / "model")


def restricted(proto: bytes, vocab: set[str]) -> bytes:
    """The model as ``SentencePieceProcessor.SetVocabulary(vocab)`` leaves it (what Joey NMT's set_vocab calls;
    sentencepiece 0.2.3 dropped that method): its normal pieces outside ``vocab`` marked unused."""
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(proto)
    for piece in model.pieces:
        if piece.type in (piece.NORMAL, piece.UNUSED):
            piece.type = piece.NORMAL if piece.piece in vocab else piece.UNUSED
    return model.SerializeToString()


def source_vocab(fixture: Path) -> list[str]:
    """The toolkit's source vocabulary in id order."""
    toolkit = fixture.name.split("_", 1)[0]
    if toolkit == "opennmt":
        return load_checkpoint(fixture / "model.pt", "opennmt-py")["vocab"]["src"]
    if toolkit == "joeynmt":
        return read_lines(fixture / "src_vocab.txt")
    return read_dictionary(fixture / "dict.de.txt")


def toolkit_ids(fixture: Path, lines: list[str]) -> list[list[int]]:
    """What the toolkit feeds its encoder (without a final </s>): sentencepiece's pieces looked up in its source
    vocabulary, <unk> for a piece it lacks. OpenNMT-py joins the line's whitespace-split words with spaces first;
    Joey NMT restricts the model to its vocabulary (SentencePieceTokenizer.set_vocab)."""
    proto = (fixture / "spm.model").read_bytes()
    toolkit, vocab = fixture.name.split("_", 1)[0], source_vocab(fixture)
    if toolkit == "opennmt":
        lines = [" ".join(line.split()) for line in lines]
    elif toolkit == "joeynmt":
        proto = restricted(proto, set(vocab))
    processor = spm.SentencePieceProcessor(model_proto=proto)
    index = {token: i for i, token in enumerate(vocab)}
    return [[index.get(piece, index["<unk>"]) for piece in processor.encode(line, out_type=str)] for line in lines]


# beyond the test sources: characters the model never saw, spaces, fullwidth forms (nmt_nfkc), and English words,
# whose pieces the German vocabularies lack (the toolkits read them as <unk>)
EXTRA = ["Ein Mann ☃ im  Schnee…", "ＡＢＣ ① ½", "  ", "Ærø ĳ", "A young woman with two dogs is walking together."]


def test_raw_text_encodes_to_the_toolkits_ids(converted):
    """Every test source and EXTRA encodes to the ids the toolkit gives; a piece the toolkit reads as <unk> has an
    id of its own after the toolkit's vocabulary (its encoder row is <unk>'s: the next test)."""
    fixture, folder = converted
    lines = read_lines(fixture / SOURCE) + EXTRA
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    vocab = source_vocab(fixture)
    ids = tokenizer(lines, add_special_tokens=False)["input_ids"]
    as_unk = [[vocab.index("<unk>") if i >= len(vocab) else i for i in row] for row in ids]
    assert as_unk == toolkit_ids(fixture, lines)
    aliased = sum(i >= len(vocab) for row in ids for i in row)
    restricted_by_toolkit = fixture.name.startswith("joeynmt")
    assert (aliased == 0) == restricted_by_toolkit, aliased


def test_pieces_read_as_unk_give_the_encoder_what_unk_gives(converted):
    """The encoder's output for the folder's ids equals its output for the toolkit's ids (<unk> where the toolkit
    lacks a piece), exactly: the aliased rows are copies of <unk>'s."""
    fixture, folder = converted
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    eos = [tokenizer.eos_token_id] if model.config.source_eos else []
    for line, expected in zip(EXTRA, toolkit_ids(fixture, EXTRA), strict=True):
        if not expected + eos:  # "  ": nothing for OpenNMT-py's encoder, which gets no </s>
            continue
        with torch.no_grad():
            ours = model.get_encoder()(input_ids=tokenizer(line, return_tensors="pt")["input_ids"])
            theirs = model.get_encoder()(input_ids=torch.tensor([expected + eos]))
        assert torch.equal(ours.last_hidden_state, theirs.last_hidden_state), line


def test_the_tokenizer_loads_without_sentencepiece(converted):
    """tokenizer.json (and target_tokenizer.json with the folder's separate-vocabulary tokenizer class, hence
    trust_remote_code) with transformers and tokenizers only: sentencepiece and hf_s2s blocked."""
    fixture, folder = converted
    line = read_lines(fixture / SOURCE)[0]
    code = ("import sys; sys.modules['sentencepiece'] = None; sys.modules['hf_s2s'] = None\n"
            "from transformers import AutoTokenizer\n"
            f"tokenizer = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)\n"
            f"print(tokenizer({line!r}, add_special_tokens=False)['input_ids'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == toolkit_ids(fixture, [line])[0]


def test_conversion_json_names_the_model_it_carried(converted):
    fixture, folder = converted
    record = json.loads((folder / "conversion.json").read_text())
    assert record["subword_models"]["source"]["read_from"] == f"--source-subword-model {fixture / 'spm.model'}"
    assert not [note for note in record["not_carried_over"] if "sentencepiece" in note]


@pytest.mark.slow
def test_translate_and_pipeline_give_the_toolkits_raw_text_output(converted, tmp_path):
    """hf-s2s translate and pipeline() on raw text, greedy, one sentence a batch == the toolkit's own raw-text
    route (its segmentation, its decoding, its detokenization), line for line."""
    fixture, folder = converted
    sources, expected = read_lines(fixture / SOURCE), read_lines(fixture / EXPECTED)
    got = translate_command_lines(folder, sources, tmp_path, "--beams", "1", "--batch-size", "1")
    differ = [(i, a, b) for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b]
    print(f"{fixture.name}: hf-s2s translate {len(expected) - len(differ)}/{len(expected)} lines equal")
    assert not differ, differ[:3]
    translator = pipeline("translation", model=str(folder), trust_remote_code=True)
    with torch.no_grad():
        piped = [out["translation_text"] for out in translator(sources, num_beams=1, batch_size=1)]
    assert piped == expected


@pytest.mark.slow
def test_the_server_takes_raw_text_and_answers_the_toolkits_output(converted):
    """hf-s2s serve's /translate, one raw sentence a request, greedy: the toolkit's raw-text output."""
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    fixture, folder = converted
    sources, expected = read_lines(fixture / SOURCE)[:20], read_lines(fixture / EXPECTED)[:20]
    with serve_in_thread(create_app({"converted": load_engine(folder, threads=1)})) as url:
        got = [httpx.post(f"{url}/translate", json={"sentences": [source], "num_beams": 1}, timeout=60)
               .json()["translations"][0]["text"] for source in sources]
    assert got == expected


# where each toolkit recorded the model's path: OpenNMT-py's options, Joey NMT's config, fairseq's cfg.bpe
RECORDED_AS = {"opennmt": "-src_subword_model", "joeynmt": "data.src.tokenizer_cfg.model_file",
               "fairseq": "--sentencepiece-model"}


@pytest.mark.parametrize("fixture", SPM, ids=[path.name for path in SPM])
def test_a_recorded_model_path_that_does_not_exist_is_named_with_the_flag_to_pass(fixture, tmp_path):
    """The toolkit's files name the model where it trained; without --source-subword-model the command says which
    option, which path and which flag to pass, and writes nothing."""
    toolkit, checkpoint = CHECKPOINTS[fixture.name.split("_", 1)[0]]
    with pytest.raises(SystemExit) as exit_info:
        run_command("convert", ["--from", toolkit, str(fixture / checkpoint), str(tmp_path / "out")])
    message = str(exit_info.value.code)
    option = RECORDED_AS[fixture.name.split("_", 1)[0]]
    assert message.startswith(f"error: {option} /"), message
    assert message.split()[2].endswith("spm.model") and "does not exist here" in message
    assert message.endswith("pass the SentencePiece model with --source-subword-model")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("fixture", SPM, ids=[path.name for path in SPM])
def test_a_model_file_that_is_missing_is_named(fixture, tmp_path):
    with pytest.raises(FileNotFoundError, match="--source-subword-model .*missing.model does not exist"):
        convert_fixture_with(fixture, tmp_path / "missing.model", tmp_path / "out")


def train_model(lines: list[str], **options) -> bytes:
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=writer, minloglevel=2,
                                   num_threads=1, **options)
    return writer.getvalue()


@pytest.mark.parametrize("options, expected", [
    # another model than the toolkit's: pieces its vocabulary lacks
    ({"model_type": "bpe", "vocab_size": 300, "character_coverage": 1.0}, "that are not pieces of it"),
    # pieces a tokenizer.json cannot segment with
    ({"model_type": "char", "vocab_size": 60}, "it is a char model; unigram and bpe models are supported"),
    ({"model_type": "unigram", "vocab_size": 300, "treat_whitespace_as_suffix": True},
     "treat_whitespace_as_suffix=true"),
])
def test_a_subword_model_the_tokenizer_cannot_reproduce_is_refused_naming_it(options, expected, tmp_path):
    fixture = SPM[0]
    model = tmp_path / "other.model"
    # trained on the vocabulary's own tokens too: it knows every character of them
    text = read_lines(fixture / SOURCE) + [token.replace("\u2581", " ") for token in source_vocab(fixture)]
    model.write_bytes(train_model(text * 3, **options))
    with pytest.raises(ValueError, match="cannot be carried over") as error:
        convert_fixture_with(fixture, model, tmp_path / "out")
    assert f"--source-subword-model {model}" in str(error.value)
    assert expected in str(error.value)
    assert not (tmp_path / "out").exists()


def test_joey_lowercasing_before_its_model_is_carried_over(tmp_path):
    """Joey NMT's lowercase: true lowercases the text before segmenting it; so does the converted tokenizer."""
    fixture = FIXTURES / "joeynmt_transformer_spm"
    config = yaml.safe_load((fixture / "translate_single.yaml").read_text())
    config["data"]["src"]["lowercase"] = True
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    model = fixture / "spm.model"
    folder = convert("joeynmt", fixture / "model.ckpt", tmp_path / "out", config=tmp_path / "config.yaml",
                     source_subword_model=model, target_subword_model=model)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    lines = read_lines(fixture / SOURCE)[:20] + EXTRA
    lowered = toolkit_ids(fixture, [line.lower() for line in lines])
    assert tokenizer(lines, add_special_tokens=False)["input_ids"] == lowered
    assert lowered != toolkit_ids(fixture, lines)  # cased text segments otherwise: the comparison has teeth
    record = json.loads((folder / "conversion.json").read_text())
    assert record["subword_models"]["source"]["lowercase"] and not record["subword_models"]["target"]["lowercase"]

