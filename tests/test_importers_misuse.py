"""`hf-s2s convert` on bad input, for every toolkit: each mistake is one `error: ...` line that names the file
(or the option, or the tensor) and the problem, before anything is written; and what a toolkit did to the text
that the converted folder does not do is said in the command's output and in conversion.json, never dropped
silently."""

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from hf_s2s.cli import run_command
from hf_s2s.importers import convert

FIXTURES = Path(__file__).parent / "fixtures" / "toolkits"
# one Transformer fixture per toolkit: its folder and checkpoint file name
TOOLKITS = {"opennmt-py": ("opennmt_transformer", "model.pt"),
            "joeynmt": ("joeynmt_transformer", "model.ckpt"),
            "fairseq": ("fairseq_transformer", "checkpoint.pt")}
pytestmark = pytest.mark.skipif(not all((FIXTURES / f / c).is_file() for f, c in TOOLKITS.values()),
                                reason="a toolkit fixture is missing")


def copy_fixture(toolkit: str, tmp_path: Path) -> Path:
    """The toolkit's fixture copied into tmp_path/in; returns the checkpoint's path there."""
    fixture, name = TOOLKITS[toolkit]
    folder = tmp_path / "in"
    shutil.copytree(FIXTURES / fixture, folder)
    return folder / name


def cli_error(toolkit: str, checkpoint: Path, out: Path, *options: str) -> str:
    """The message `hf-s2s convert` exits with (an exception other than SystemExit, a traceback, fails the
    test)."""
    with pytest.raises(SystemExit) as exited:
        run_command("convert", ["--from", toolkit, str(checkpoint), str(out), *options])
    message = str(exited.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert not (out / "config.json").exists()
    return message


def state_dict(checkpoint: dict) -> dict:
    return checkpoint["model_state"] if "model_state" in checkpoint else checkpoint["model"]


@pytest.mark.parametrize("toolkit", list(TOOLKITS))
def test_an_empty_checkpoint_is_named_as_empty(toolkit, tmp_path):
    checkpoint = copy_fixture(toolkit, tmp_path)
    checkpoint.write_bytes(b"")
    message = cli_error(toolkit, checkpoint, tmp_path / "out")
    assert str(checkpoint) in message and "is empty (0 bytes)" in message


@pytest.mark.parametrize("toolkit", list(TOOLKITS))
def test_a_truncated_checkpoint_is_named_as_truncated(toolkit, tmp_path):
    checkpoint = copy_fixture(toolkit, tmp_path)
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(data[: len(data) // 2])
    message = cli_error(toolkit, checkpoint, tmp_path / "out")
    assert str(checkpoint) in message and "damaged or truncated" in message and "re-save" not in message


@pytest.mark.parametrize("toolkit", list(TOOLKITS))
def test_a_text_file_given_as_the_checkpoint_is_named(toolkit, tmp_path):
    checkpoint = copy_fixture(toolkit, tmp_path)
    checkpoint.write_text("model: transformer\n")
    message = cli_error(toolkit, checkpoint, tmp_path / "out")
    assert str(checkpoint) in message and "is not a torch checkpoint" in message and "re-save" not in message


@pytest.mark.parametrize("toolkit", list(TOOLKITS))
@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_non_finite_weights_are_refused_naming_the_tensor(toolkit, value, tmp_path):
    checkpoint = copy_fixture(toolkit, tmp_path)
    data = torch.load(checkpoint, map_location="cpu", weights_only=False)
    name = next(name for name, tensor in state_dict(data).items() if name.endswith("layers.1.fc2.weight")
                or name.endswith("transformer_layers.1.feed_forward.w_2.weight")
                or name.endswith("layers.1.feed_forward.pwff_layer.3.weight"))
    tensor = state_dict(data)[name].clone()
    tensor[0, 0] = value
    state_dict(data)[name] = tensor
    torch.save(data, checkpoint)
    message = cli_error(toolkit, checkpoint, tmp_path / "out")
    assert f"the checkpoint's {name} holds 1 non-finite value" in message


def test_a_binary_file_given_as_the_config_is_named(tmp_path):
    checkpoint = copy_fixture("joeynmt", tmp_path)
    message = cli_error("joeynmt", checkpoint, tmp_path / "out", "--config", str(checkpoint))
    assert f"{checkpoint} is not a text file" in message and "--config" in message


def edit_config(checkpoint: Path, change) -> None:
    config = yaml.safe_load((checkpoint.parent / "config.yaml").read_text())
    change(config)
    (checkpoint.parent / "config.yaml").write_text(yaml.safe_dump(config))


@pytest.mark.parametrize(("change", "expected"), [
    (lambda c: c["model"].update(encoder=None), "model.encoder is missing, not a mapping"),
    (lambda c: c.update(model=None), "model is missing, not a mapping"),
    (lambda c: c["model"]["encoder"].update(num_layers="two"), "model.encoder.num_layers is 'two'; give a"),
    (lambda c: c["model"]["encoder"].update(num_layers=None), "model.encoder.num_layers is null; give a"),
    (lambda c: c["model"]["decoder"].update(hidden_size=-32), "model.decoder.hidden_size is -32; give a"),
    (lambda c: c["model"].update(tied_softmax="yes"), "model.tied_softmax is 'yes'; give true or false"),
    (lambda c: c["testing"].update(max_output_length=None), "testing.max_output_length is null"),
    (lambda c: c["model"]["encoder"].pop("embeddings"), "model.encoder.embeddings is missing"),
], ids=["null-section", "null-model", "string-number", "null-number", "negative-size", "string-flag",
        "null-testing-field", "missing-section"])
def test_a_malformed_config_field_is_named(change, expected, tmp_path):
    checkpoint = copy_fixture("joeynmt", tmp_path)
    edit_config(checkpoint, change)
    message = cli_error("joeynmt", checkpoint, tmp_path / "out")
    assert f"{checkpoint.parent / 'config.yaml'}: {expected}" in message


@pytest.mark.parametrize(("text", "expected"), [("model: {encoder: [\n", "is not valid YAML"),
                                                ("", "holds NoneType"), ("- a\n- b\n", "holds list")],
                         ids=["syntax", "empty", "list"])
def test_a_config_that_is_no_yaml_mapping_is_named(text, expected, tmp_path):
    checkpoint = copy_fixture("joeynmt", tmp_path)
    (checkpoint.parent / "config.yaml").write_text(text)
    message = cli_error("joeynmt", checkpoint, tmp_path / "out")
    assert f"{checkpoint.parent / 'config.yaml'} {expected}" in message


def test_a_checkpoint_of_another_toolkit_is_named_before_its_companion_files(tmp_path):
    """A fairseq checkpoint given to --from joeynmt, with no Joey files beside it, and a Joey NMT checkpoint
    given to --from opennmt-py: the error says what the checkpoint is (not), instead of asking for a config or
    a vocabulary it would not fit, or calling the other toolkit's options a threat."""
    fairseq = copy_fixture("fairseq", tmp_path / "fairseq")
    message = cli_error("joeynmt", fairseq, tmp_path / "out")
    assert "opennmt-py and fairseq checkpoints do: convert it with --from opennmt-py or --from" in message
    joey = copy_fixture("joeynmt", tmp_path / "joey")
    message = cli_error("opennmt-py", joey, tmp_path / "out")
    assert f"{joey} lacks 'model': not an OpenNMT-py checkpoint" in message


def shorten(path: Path, lines: int) -> None:
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[:lines]))


@pytest.mark.parametrize("toolkit", list(TOOLKITS))
def test_a_vocabulary_of_another_size_than_the_embeddings_is_named(toolkit, tmp_path):
    """Every toolkit's vocabulary is checked against the token tables it indexes, naming where it was read and
    both sizes (fairseq's converter did so already; OpenNMT-py and Joey NMT stopped in a traceback)."""
    checkpoint = copy_fixture(toolkit, tmp_path)
    if toolkit == "opennmt-py":
        data = torch.load(checkpoint, map_location="cpu", weights_only=False)
        data["vocab"]["tgt"] = data["vocab"]["tgt"][:100]
        torch.save(data, checkpoint)
        where = f"{checkpoint}'s vocab['tgt'] lists 100 target tokens"
    else:
        vocab = checkpoint.parent / ("trg_vocab.txt" if toolkit == "joeynmt" else "dict.en.txt")
        shorten(vocab, 50)
        where = f"{vocab} lists {50 if toolkit == 'joeynmt' else 54} target tokens"
    message = cli_error(toolkit, checkpoint, tmp_path / "out")
    assert where in message and "not this model's target vocabulary" in message


def test_an_option_missing_from_the_checkpoint_is_named(tmp_path):
    checkpoint = copy_fixture("opennmt-py", tmp_path)
    data = torch.load(checkpoint, map_location="cpu", weights_only=False)
    del data["opt"].heads
    torch.save(data, checkpoint)
    message = cli_error("opennmt-py", checkpoint, tmp_path / "out")
    assert f"{checkpoint}'s options (opt) lack(s) 'heads'" in message


def convert_command(toolkit: str, checkpoint: Path, out: Path, capsys) -> list[str]:
    """`hf-s2s convert`'s printed lines; the folder's conversion.json must hold the same notes."""
    assert run_command("convert", ["--from", toolkit, str(checkpoint), str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    notes = json.loads((out / "conversion.json").read_text())["not_carried_over"]
    assert [line.removeprefix("  - ") for line in printed if line.startswith("  - ")] == notes
    return notes


@pytest.mark.slow
def test_a_subword_model_or_lowercasing_the_folder_does_not_apply_is_stated(tmp_path, capsys):
    """Joey NMT's sentencepiece segmentation (source and target), Moses tokenization and lowercasing,
    OpenNMT-py's sentencepiece transform, fairseq's --bpe: the folder applies none of them, and the command
    and conversion.json say so, naming each option and the model file (training-only transforms need nothing
    and are not listed)."""
    joey = copy_fixture("joeynmt", tmp_path / "joey")

    def subwords(config):
        for side in ("src", "trg"):
            tokenizer = {"model_file": f"spm.{side}.model", "pretokenizer": "moses"}
            config["data"][side].update(level="bpe", tokenizer_type="sentencepiece", tokenizer_cfg=tokenizer)
        config["data"]["src"]["lowercase"] = True

    edit_config(joey, subwords)
    notes = convert_command("joeynmt", joey, tmp_path / "joey_out", capsys)
    assert [note.split(":")[0] for note in notes] == [
        "data.src.lowercase", "data.src.tokenizer_cfg.pretokenizer moses",
        "data.src.tokenizer_type sentencepiece (spm.src.model)", "data.trg.tokenizer_cfg.pretokenizer moses",
        "data.trg.tokenizer_type sentencepiece (spm.trg.model)"]

    onmt = copy_fixture("opennmt-py", tmp_path / "onmt")
    data = torch.load(onmt, map_location="cpu", weights_only=False)
    data["opt"].transforms, data["opt"].src_subword_model = ["sentencepiece", "filtertoolong"], "source.model"
    torch.save(data, onmt)
    notes = convert_command("opennmt-py", onmt, tmp_path / "onmt_out", capsys)
    assert len(notes) == 1
    assert notes[0].startswith("-transforms sentencepiece -src_subword_model source.model:")

    fairseq = copy_fixture("fairseq", tmp_path / "fairseq")
    data = torch.load(fairseq, map_location="cpu", weights_only=False)
    data["cfg"]["bpe"] = {"_name": "sentencepiece", "sentencepiece_model": "spm.model"}
    torch.save(data, fairseq)
    notes = convert_command("fairseq", fairseq, tmp_path / "fairseq_out", capsys)
    assert notes == ["--bpe sentencepiece (sentencepiece_model=spm.model): the converted tokenizer only "
                     "splits on spaces, so apply it to the input (and undo it on the output) yourself"]


@pytest.mark.slow
def test_the_card_lists_what_the_folder_does_not_do(tmp_path):
    """push-to-hub's card of a converted folder repeats conversion.json's notes."""
    joey = copy_fixture("joeynmt", tmp_path)
    edit_config(joey, lambda config: config["data"]["src"].update(lowercase=True))
    folder = convert("joeynmt", joey, tmp_path / "model")
    staging = tmp_path / "hub"
    options = ["--dry-run", "--staging-dir", str(staging)]
    assert run_command("push-to-hub", [str(folder), "someone/x", *options]) == 0
    card = (staging / "README.md").read_text()
    assert "- data.src.lowercase: Joey NMT lowercased the input" in card
