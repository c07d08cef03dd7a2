"""The toolkits' default Transformers share one token table between encoder, decoder and output layer
(OpenNMT-py -share_vocab -share_embeddings -share_decoder_embeddings, Joey NMT tied_embeddings + tied_softmax,
fairseq --share-all-embeddings). Converted, the folder shares it too: one tensor in the saved weights, one
after loading, and still one after fine-tuning steps; a checkpoint whose options tie tables that differ is
refused naming the option. Greedy parity with the toolkit runs in each toolkit's own suite (the fixtures below
are among theirs)."""

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_s2s  # noqa: F401  (registers the Auto classes)
from hf_s2s.importers import CheckpointError, convert

FIXTURES = Path(__file__).parent / "fixtures" / "toolkits"
# fixture -> (--from, checkpoint file, the toolkit's tied table names in its state dict, the option that ties
# them)
SHARED = {
    "opennmt_transformer_shared": ("opennmt-py", "model.pt",
                                   [f"{side}.embeddings.make_embedding.emb_luts.0.weight"
                                    for side in ("encoder", "decoder")], "-share_embeddings"),
    "joeynmt_transformer_tied": ("joeynmt", "model.ckpt", ["src_embed.lut.weight", "trg_embed.lut.weight"],
                                 "model.tied_embeddings"),
    "fairseq_transformer_shared": ("fairseq", "checkpoint.pt", ["encoder.embed_tokens.weight",
                                                                "decoder.embed_tokens.weight"],
                                   "--share-all-embeddings"),
}
PRESENT = [name for name, (_, checkpoint, _, _) in SHARED.items() if (FIXTURES / name / checkpoint).is_file()]
pytestmark = pytest.mark.skipif(not PRESENT, reason="no shared-vocabulary fixture")


@pytest.fixture(scope="module", params=PRESENT)
def converted(request, tmp_path_factory):
    name = request.param
    toolkit, checkpoint, _, _ = SHARED[name]
    folder = convert(toolkit, FIXTURES / name / checkpoint, tmp_path_factory.mktemp(name) / "model")
    return name, folder


def test_the_folder_shares_one_token_table(converted):
    """config.json says so, the safetensors file holds the table once, and the loaded model's encoder table,
    decoder table and output layer are one tensor."""
    _, folder = converted
    config = json.loads((folder / "config.json").read_text())
    assert (config["share_encoder_decoder_embeddings"], config["tie_word_embeddings"]) == (True, True)
    assert config.get("decoder_vocab_size") is None
    with safe_open(folder / "model.safetensors", "pt") as weights:
        tables = [key for key in weights.keys() if key.endswith(("embed_tokens.weight", "lm_head.weight"))]
    assert tables == ["model.encoder.embed_tokens.weight"]
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    table = model.model.encoder.embed_tokens.weight
    assert model.model.decoder.embed_tokens.weight is table and model.lm_head.weight is table


def test_fine_tuning_keeps_the_table_shared(converted):
    """Three optimizer steps on a translation loss: the three uses stay one tensor, and it changed (the
    gradients of all three reach it)."""
    name, folder = converted
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).train()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    sources = (FIXTURES / name / "test.de").read_text(encoding="utf-8").splitlines()[:4]
    targets = (FIXTURES / name / "greedy.txt").read_text(encoding="utf-8").splitlines()[:4]
    batch = tokenizer(sources, text_target=targets, return_tensors="pt", padding=True)
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    before = model.model.encoder.embed_tokens.weight.detach().clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    table = model.model.encoder.embed_tokens.weight
    assert model.model.decoder.embed_tokens.weight is table and model.lm_head.weight is table
    assert not torch.equal(table.detach(), before)


@pytest.mark.parametrize("name", PRESENT)
def test_tied_tables_that_differ_are_refused_naming_the_option(name, tmp_path):
    """A checkpoint whose options tie the token tables but whose tables differ (edited, or options of another
    model) is refused naming the option, not converted with one of the two silently chosen."""
    toolkit, checkpoint, tables, option = SHARED[name]
    folder = tmp_path / "in"
    folder.mkdir()
    for path in (FIXTURES / name).iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    data = torch.load(folder / checkpoint, map_location="cpu", weights_only=False)
    state = data["model_state"] if toolkit == "joeynmt" else data["model"]
    state[tables[1]] = state[tables[1]].clone() + 0.01
    torch.save(data, folder / checkpoint)
    with pytest.raises(CheckpointError, match=f"{option} ties {tables[0]} and {tables[1]}"):
        convert(toolkit, folder / checkpoint, tmp_path / "out")


@pytest.mark.parametrize("toolkit", ["joeynmt", "fairseq"])
def test_sharing_two_different_vocabularies_is_refused_naming_the_option(toolkit, tmp_path):
    """Joey NMT's tied_embeddings and fairseq's --share-all-embeddings need one vocabulary; options that say
    so beside two different vocabulary files (the toolkits' untied fixtures) are refused naming the option and
    the files, not converted into a config error about hf_s2s's fields."""
    fixture = FIXTURES / ("joeynmt_transformer" if toolkit == "joeynmt" else "fairseq_transformer")
    folder = tmp_path / "in"
    folder.mkdir()
    for path in fixture.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    if toolkit == "joeynmt":
        config = (folder / "config.yaml").read_text()
        config = config.replace('"tied_embeddings": false', '"tied_embeddings": true')
        (folder / "config.yaml").write_text(config)
        checkpoint, option = folder / "model.ckpt", "model.tied_embeddings:"
    else:
        checkpoint, option = folder / "checkpoint.pt", "--share-all-embeddings"
        data = torch.load(checkpoint, map_location="cpu", weights_only=False)
        data["cfg"]["model"].share_all_embeddings = True
        torch.save(data, checkpoint)
    expected = f"{option} True is not supported: it needs one"
    with pytest.raises(CheckpointError, match=expected):
        convert(toolkit, checkpoint, tmp_path / "out")
