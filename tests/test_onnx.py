"""ONNX export of both families (hf_s2s.inference.onnx, ``hf-s2s export-onnx``) and the onnxruntime decoding loop
(hf_s2s.inference.onnx_runtime).

- On a model of each family trained for a few seconds on the reversal task (outputs differ per sentence and end at
  different lengths), exported by the command, the runtime's tokens equal ``generate()``'s: the whole (rows, length)
  array, for a padded batch of sources of different lengths, greedy and beam search, with the folder's generation
  config (the source-relative length bound on) and with other lengths, beams, early stopping, length penalties,
  n-best lists, minimum lengths and a bound that binds. Training puts these in the slow tier; the fast tier checks
  the same equality, greedy and beam, on random tiny models of both families.
- The graphs themselves: teacher-forced logits of ONNX steps equal the PyTorch forward (float32, atol 1e-4).
- The RNN encoder without packing (masked steps under ``scan``, :func:`run_direction`) gives the packed encoder's
  memory and the same first decoding step, in PyTorch, for every decoder_init, GRU and LSTM, bidirectional or not.
- The command writes the folder; its runtime translates text as tokenizer + generate() + batch_decode, also in a
  process where torch, transformers and hf_s2s cannot be imported; user errors are one ``error:`` line.
- Slow tier besides: random models of more layouts (RNN attention types, input feeding, LSTM, multi-head, no
  attention; Transformer pre-LN, learned positions, separate vocabularies), and replacing an export.
"""

import filecmp
import io
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("onnxscript")  # the dynamo exporter builds the graph with it

from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer  # noqa: E402

from hf_s2s.cli import run_command  # noqa: E402
from hf_s2s.data.synthetic import FIRST_SYMBOL_ID, PAD_ID, reversal_dataset  # noqa: E402
from hf_s2s.importers.vocabulary import SpecialTokens, word_level_tokenizer  # noqa: E402
from hf_s2s.inference import decoding, onnx_runtime  # noqa: E402
from hf_s2s.inference.onnx import RNNDecoderStepForOnnx, RNNEncoderForOnnx, export_onnx, graph_specs  # noqa: E402
from hf_s2s.inference.onnx_runtime import OnnxSeq2Seq  # noqa: E402
from hf_s2s.inference.translate import translate  # noqa: E402
from hf_s2s.models.configuration_rnn_seq2seq import DECODER_INITS  # noqa: E402
from hf_s2s.models.loading import load_model, load_tokenizer  # noqa: E402
from tests.helpers import TINY, random_tiny_model, single_thread, train_reversal  # noqa: E402
from tests.saved_folders import save_tiny_model_folder, separate_vocabulary_folders  # noqa: E402

# also run by CI on the oldest supported releases (constraints/oldest.txt)
pytestmark = pytest.mark.compat

NUM_SYMBOLS, MAX_LEN = 8, 6
# The reversal task's vocabulary as words: ids 0-3 the special tokens, 4-11 the symbols a-h.
SYMBOLS = list("abcdefgh")
# Trained in the fast tier (config, training recipe): a bidirectional GRU encoder of 2 layers with Bahdanau attention
# learns the task in 3 epochs; the Transformer (1+1 layers) does not in its 2, but its outputs differ by sentence and
# length all the same (init_std 0.1: from the default 0.02 it repeats one token for hundreds of steps).
TRAINED = {
    "rnn": ("rnn_seq2seq", {"encoder_layers": 2, "decoder_layers": 2},
            {"num_train": 1500, "epochs": 3, "learning_rate": 1e-2}),
    "transformer": ("transformer_seq2seq", {"init_std": 0.1}, {"num_train": 3000, "epochs": 2, "learning_rate": 3e-3}),
}
# Decoding options, each compared with generate() given the same ones (None: the folder's generation config alone).
OPTIONS = {
    "config": {},
    "beam": {"num_beams": 4},
    "beam early n-best": {"num_beams": 4, "early_stopping": True, "num_return_sequences": 2},
    "beam never, no length penalty": {"num_beams": 3, "early_stopping": "never", "length_penalty": 0.0},
    "beam never, long favoured": {"num_beams": 3, "early_stopping": "never", "length_penalty": 2.0},
    "binding bound": {"max_len_a": 0.5, "max_len_b": 1},
    "beam, binding bound": {"num_beams": 4, "max_len_a": 0.5, "max_len_b": 1},
    "min length, no bound": {"num_beams": 3, "min_new_tokens": 8, "max_new_tokens": 12, "max_len_a": None,
                             "max_len_b": None},
    "short": {"max_new_tokens": 3},
}
ATOL = 1e-4


def padded(sources: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    width = max(map(len, sources))
    input_ids = np.array([row + [PAD_ID] * (width - len(row)) for row in sources])
    return input_ids, (input_ids != PAD_ID).astype(np.int64)


def generated(model, input_ids: np.ndarray, attention_mask: np.ndarray, **options) -> np.ndarray:
    with torch.no_grad(), single_thread():
        return model.generate(input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(attention_mask),
                              **options).numpy()


@pytest.fixture(scope="module")
def held_out() -> tuple[np.ndarray, np.ndarray]:
    """A padded batch of reversal sources the models were not trained on, 4 to 7 tokens long."""
    return padded(reversal_dataset(24, num_symbols=NUM_SYMBOLS, max_len=MAX_LEN, seed=7)["input_ids"])


def reversal_tokenizer():
    """Words a-h as the reversal task's symbols, </s> appended: "a b c" -> [4, 5, 6, 2]."""
    return word_level_tokenizer(["<pad>", "<s>", "</s>", "<unk>", *SYMBOLS],
                                SpecialTokens(unk="<unk>", pad="<pad>", bos="<s>", eos="</s>"), append_eos=True)


@pytest.fixture(scope="module", params=list(TRAINED))
def trained(request, tmp_path_factory):
    """(model, tokenizer, model folder, ONNX folder) of a tiny model trained for a few seconds on the reversal task,
    saved with its word-level tokenizer and exported by ``hf-s2s export-onnx``."""
    model_type, overrides, recipe = TRAINED[request.param]
    tokenizer = reversal_tokenizer()
    config = AutoConfig.for_model(model_type, **TINY[model_type], **overrides, vocab_size=len(tokenizer), dropout=0.0)
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config)
    work = tmp_path_factory.mktemp(f"onnx_{request.param}")
    train_reversal(model, work / "trainer", num_symbols=NUM_SYMBOLS, max_len=MAX_LEN, **recipe)
    model.eval()
    model.save_pretrained(work / "model")
    tokenizer.save_pretrained(work / "model")
    assert run_command("export-onnx", [str(work / "model"), str(work / "onnx")]) == 0
    return model, tokenizer, work / "model", work / "onnx"


@pytest.fixture(scope="module")
def runtime(trained) -> OnnxSeq2Seq:
    return OnnxSeq2Seq(trained[3], threads=1)


@pytest.mark.slow
def test_trained_models_give_real_translations(trained, held_out):
    """What makes the equalities meaningful: outputs differ per sentence and end at different lengths."""
    rows = generated(trained[0], *held_out)[:, 1:].tolist()
    assert len({tuple(row) for row in rows}) > len(rows) // 2
    assert len({row.index(2) for row in rows if 2 in row}) >= 3


@pytest.mark.slow
@pytest.mark.parametrize("options", list(OPTIONS))
def test_tokens_equal_generate(trained, runtime, held_out, options):
    expected = generated(trained[0], *held_out, **OPTIONS[options])
    actual = runtime.generate(*held_out, **OPTIONS[options])
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.slow
def test_onnx_steps_give_the_teacher_forced_logits(trained, runtime, held_out):
    """The encoder graph, then one step graph call per target position, fed the tokens generate() chose: the logits
    of one teacher-forced PyTorch forward, for a batch other than the export example's (batch 24, other lengths)."""
    model = trained[0]
    sequences = generated(model, *held_out, max_len_a=None, max_len_b=None, max_new_tokens=8, min_new_tokens=8)
    with torch.no_grad():
        expected = model(input_ids=torch.from_numpy(held_out[0]), attention_mask=torch.from_numpy(held_out[1]),
                         decoder_input_ids=torch.from_numpy(sequences[:, :-1])).logits.numpy()  # (B, T, V)
    np.testing.assert_allclose(runtime.forced_logits(*held_out, sequences[:, :-1]), expected, atol=ATOL, rtol=0)


@pytest.mark.slow
def test_the_command_writes_the_folder(trained, runtime):
    folder, out = trained[2], trained[3]
    manifest = json.loads((out / "onnx_manifest.json").read_text())
    written = json.loads((out / "hf_s2s_output.json").read_text())["files"]  # every file the export wrote
    assert {"encoder.onnx", "decoder_step.onnx", "generation_config.json", "onnx_runtime.py", "decoding.py",
            "tokenizer.json", "tokenizer_config.json", "onnx_manifest.json"} <= set(written)
    assert sorted(p.name for p in out.iterdir()) == sorted([*written, "hf_s2s_output.json"])
    assert filecmp.cmp(out / "onnx_runtime.py", onnx_runtime.__file__, shallow=False)
    assert filecmp.cmp(out / "decoding.py", decoding.__file__, shallow=False)
    assert json.loads((out / "generation_config.json").read_text())["max_len_a"] == 1.3  # the bound, written out
    for name, session in (("encoder", runtime.encoder), ("decoder_step", runtime.decoder_step)):
        assert [i.name for i in session.get_inputs()] == list(manifest[name]["inputs"])
        assert [o.name for o in session.get_outputs()] == manifest[name]["outputs"]
    assert set(manifest["state"]) == {name for name in manifest["decoder_step"]["inputs"] if name.startswith("past_")}
    assert manifest["model_type"] == json.loads((folder / "config.json").read_text())["model_type"]


def expected_translations(model, tokenizer, sentences: list[str], **options) -> list[str]:
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        return tokenizer.batch_decode(model.generate(**batch, **options), skip_special_tokens=True)


SENTENCES = ["a b c d", "h g", "e e f a b c", "b", "d c a"]


@pytest.mark.slow
def test_text_in_and_out_as_the_transformers_tokenizer(trained, runtime):
    model, tokenizer = trained[0], trained[1]
    input_ids, attention_mask = runtime.encode(SENTENCES)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="np")
    np.testing.assert_array_equal(input_ids, batch["input_ids"])
    np.testing.assert_array_equal(attention_mask, batch["attention_mask"])
    assert runtime.translate(SENTENCES, num_beams=3) == expected_translations(model, tokenizer, SENTENCES, num_beams=3)


@pytest.mark.slow
def test_the_runtime_needs_no_torch(trained, tmp_path):
    """The folder's own onnx_runtime.py, run as a script in a process where torch, transformers and hf_s2s cannot be
    imported, translates as tokenizer + generate() + batch_decode."""
    model, tokenizer, _, out = trained
    blocked = "import runpy, sys\nfor name in ('torch', 'transformers', 'hf_s2s'):\n    sys.modules[name] = None\n" \
              f"sys.path.insert(0, {str(out)!r})  # as python OUT/onnx_runtime.py puts its folder first\n" \
              f"sys.argv = ['onnx_runtime.py', {str(out)!r}, '--beams', '2', '--threads', '1']\n" \
              f"runpy.run_path({str(out / 'onnx_runtime.py')!r}, run_name='__main__')\n"
    completed = subprocess.run([sys.executable, "-c", blocked], input="\n".join(SENTENCES) + "\n", capture_output=True,
                               text=True, cwd=tmp_path, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.splitlines() == expected_translations(model, tokenizer, SENTENCES, num_beams=2)


# The fast tier's equality, without training: random tiny models of both families (helpers.random_tiny_model redraws
# the weights so that outputs differ per sentence), exported in this process.
RANDOM = {"rnn": ("rnn_seq2seq", {"encoder_layers": 2, "decoder_layers": 2}), "transformer": ("transformer_seq2seq", {})}


@pytest.fixture(scope="module", params=list(RANDOM))
def random_exported(request, tmp_path_factory) -> tuple:
    model_type, overrides = RANDOM[request.param]
    model = random_tiny_model(model_type, 16, seed=2, **overrides)
    return model, OnnxSeq2Seq(export_onnx(model, tmp_path_factory.mktemp("random") / "onnx"), threads=1)


@pytest.mark.parametrize("options", ["config", "beam", "beam early n-best", "min length, no bound"])
def test_random_model_tokens_equal_generate(random_exported, held_out, options):
    model, runtime = random_exported
    expected = generated(model, *held_out, **OPTIONS[options])
    assert len({tuple(row) for row in expected.tolist()}) > len(expected) // 3  # not one output for all
    np.testing.assert_array_equal(runtime.generate(*held_out, **OPTIONS[options]), expected)


def cli_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run_command("export-onnx", list(map(str, argv)))
    assert exit_info.value.code not in (0, None)
    lines = (str(exit_info.value.code) if isinstance(exit_info.value.code, str) else capsys.readouterr().err)
    return lines.strip()


def saved_rnn_folder(folder: Path) -> Path:
    """A random tiny RNN saved with the reversal tokenizer: a model folder export-onnx takes."""
    random_tiny_model("rnn_seq2seq", 12).save_pretrained(folder)
    reversal_tokenizer().save_pretrained(folder)
    return folder


def test_user_errors_are_one_error_line(tmp_path, capsys):
    model = saved_rnn_folder(tmp_path / "model")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    cases = {
        (tmp_path / "missing", tmp_path / "out"): "does not exist",
        (model, taken): "already holds files (notes.txt)",
        (model, taken, "--overwrite_output_dir"): "holds no hf_s2s_output.json",
        (model, taken / "notes.txt"): "is a file",
        (model, model): "the model folder itself",
    }
    for argv, expected in cases.items():
        message = cli_error(capsys, *argv)
        assert message.startswith("error: ") and "\n" not in message and expected in message, (argv, message)
    assert (taken / "notes.txt").read_text() == "mine" and not (tmp_path / "out").exists()


def test_export_refuses_a_generation_config_the_runtime_cannot_decode(tmp_path, capsys):
    """A setting the runtime does not implement would refuse every translation of the export: it is named before
    the export starts, and nothing is written."""
    folder = save_tiny_model_folder(tmp_path / "model", "rnn_seq2seq")
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, "no_repeat_ngram_size": 3}))
    message = cli_error(capsys, folder, tmp_path / "onnx")
    assert message.startswith("error: the generation config sets no_repeat_ngram_size=3, which the ONNX runtime does "
                              "not implement")
    assert not (tmp_path / "onnx").exists()


def test_the_runtimes_command_reads_lines_and_takes_flags_as_translate_does(tmp_path, capsys, monkeypatch):
    """``python OUT/onnx_runtime.py``: blank lines come back blank in place, a line's \\r\\n end and the input's
    byte-order mark are not part of a sentence, the length bound's flags and --batch-size decode as translate's,
    and a bad option is one error line."""
    folder = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq", seed=3)
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    export_onnx(model, tmp_path / "onnx", tokenizer=tokenizer)
    lines = ["a b c", "", "d e f g h", "   ", "b"]
    for flags, options in ((["--max-len-a", "0.5"], {"max_len_a": 0.5}), (["--no-length-bound", "--max-new-tokens",
                                                                           "7"], {"max_len_a": None, "max_len_b": None,
                                                                                  "max_new_tokens": 7})):
        monkeypatch.setattr(sys, "stdin", io.StringIO("\ufeff" + "\r\n".join(lines) + "\r\n"))
        assert onnx_runtime.main([str(tmp_path / "onnx"), "--threads", "1", "--batch-size", "2", *flags]) == 0
        with single_thread():
            expected = [hypotheses[0].text for hypotheses in translate(model, tokenizer, lines, **options)]
        assert capsys.readouterr().out.split("\n")[:-1] == expected
        assert expected[1] == expected[3] == "" and all(expected[i] for i in (0, 2, 4))
    with pytest.raises(SystemExit, match=r"error: num_beams \(--beams\) must be a whole number >= 1, got 0"):
        onnx_runtime.main([str(tmp_path / "onnx"), "--beams", "0", "--sentence", "a b"])


def test_a_training_model_is_refused():
    with pytest.raises(ValueError, match="eval mode"):
        graph_specs(random_tiny_model("rnn_seq2seq", 20).train())


def rnn_encoders() -> list[dict]:
    """Every decoder_init with both cell types and one or two directions, where the config allows the combination:
    2+2 layers, the decoder as large as the encoder output or as one direction (inits such as "last" need the one,
    others the other)."""
    cases = []
    for cell, bidirectional, init in itertools.product(("gru", "lstm"), (True, False), DECODER_INITS):
        for decoder_hidden_size in (32 if bidirectional else 16, 16):
            overrides = {"cell_type": cell, "bidirectional": bidirectional, "decoder_init": init, "encoder_layers": 2,
                         "decoder_layers": 2, "decoder_hidden_size": decoder_hidden_size}
            try:
                AutoConfig.for_model("rnn_seq2seq", **{**TINY["rnn_seq2seq"], **overrides})
            except ValueError:
                continue
            cases.append(overrides)
            break
    return cases


# The RNN encoder without packing (PyTorch only).
RNN_ENCODERS = rnn_encoders()


@pytest.mark.parametrize("overrides", RNN_ENCODERS, ids=lambda o: f"{o['cell_type']}-{o['decoder_init']}"
                         f"-{'bi' if o['bidirectional'] else 'uni'}")
def test_unpacked_rnn_encoder_equals_the_packed_one(overrides):
    """Masked steps instead of packing: the memory at real tokens (zero at padding) and the first decoding step's
    logits equal the model's, which packs the padded batch."""
    model = random_tiny_model("rnn_seq2seq", 20, **overrides)
    input_ids, attention_mask = (torch.from_numpy(x) for x in padded([[5, 6, 7, 8, 9, 10, 2], [11, 2], [4, 9, 2]]))
    fields = ("memory", "keys", "context", "hidden", "cell", "input_feed")
    with torch.no_grad():
        encoder = RNNEncoderForOnnx(model).eval()
        state = encoder.encode(input_ids, attention_mask)
        memory = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        fields = tuple(name for name in fields if getattr(state, name) is not None)
        step = RNNDecoderStepForOnnx(model, fields).eval()
        logits = step(torch.full((3, 1), 1), attention_mask, *(getattr(state, name) for name in fields))[0]
        expected = model(input_ids=input_ids, attention_mask=attention_mask,
                         decoder_input_ids=torch.full((3, 1), 1)).logits[:, 0]
    torch.testing.assert_close(state.memory, memory, atol=1e-6, rtol=0)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------------- slow tier

LAYOUTS = {
    "lstm luong_general input feeding": ("rnn_seq2seq", {"cell_type": "lstm", "attention_type": "luong_general"}),
    "gru scaled_dot 2 heads": ("rnn_seq2seq", {"attention_type": "scaled_dot", "attention_heads": 2}),
    "gru luong_concat no feeding, last": ("rnn_seq2seq", {"attention_type": "luong_concat", "input_feeding": False,
                                                          "decoder_init": "last"}),
    "gru no attention, unidirectional": ("rnn_seq2seq", {"attention_type": "none", "bidirectional": False,
                                                         "decoder_init": "zero", "decoder_hidden_size": 16}),
    "transformer pre-LN, learned, separate vocabulary": (
        "transformer_seq2seq", {"norm_position": "pre", "position_embedding_type": "learned",
                                "max_position_embeddings": 64, "share_encoder_decoder_embeddings": False,
                                "decoder_vocab_size": 23, "decoder_layers": 2}),
}


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_more_layouts_equal_generate(layout, tmp_path):
    model_type, overrides = LAYOUTS[layout]
    model = random_tiny_model(model_type, 20, pad_token_id=PAD_ID, **overrides)
    runtime = OnnxSeq2Seq(export_onnx(model, tmp_path / "onnx"), threads=1)
    batch = padded([[5, 6, 7, 8, 9, 10, 2], [11, 12, 2], [FIRST_SYMBOL_ID, 5, 6, 7, 2], [19, 2]])
    for options in ({}, {"num_beams": 4}, {"num_beams": 3, "early_stopping": True, "max_len_a": None,
                                           "max_len_b": None, "max_new_tokens": 20}):
        np.testing.assert_array_equal(runtime.generate(*batch, **options), generated(model, *batch, **options))


@pytest.mark.slow
def test_separate_vocabularies_translate_as_the_transformers_tokenizer(tmp_path):
    """A subword (BPE) tokenizer over separate source and target vocabularies: sources encode with tokenizer.json,
    outputs decode with target_tokenizer.json."""
    folder = separate_vocabulary_folders(tmp_path)["de_en"]
    assert run_command("export-onnx", [str(folder), str(tmp_path / "onnx")]) == 0
    runtime = OnnxSeq2Seq(tmp_path / "onnx", threads=1)
    assert (tmp_path / "onnx" / "target_tokenizer.json").is_file()
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    sentences = ["a b c", "d e f g h", "j"]
    assert runtime.translate(sentences) == expected_translations(model, tokenizer, sentences)


@pytest.mark.slow
def test_overwrite_replaces_the_earlier_export_whole_and_only_it(tmp_path):
    out = tmp_path / "onnx"
    export_onnx(random_tiny_model("rnn_seq2seq", 20, attention_type="luong_dot", decoder_hidden_size=32), out,
                tokenizer=reversal_tokenizer())
    with pytest.raises(FileExistsError, match="already holds files"):
        export_onnx(random_tiny_model("rnn_seq2seq", 20), out)
    (out / "notes.txt").write_text("mine")  # a file the export did not write: the overwrite refuses, deletes nothing
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    with pytest.raises(FileExistsError, match=r"it also holds notes.txt \(not written by hf-s2s export-onnx\); "
                                              "these are left in place and nothing was deleted"):
        export_onnx(random_tiny_model("rnn_seq2seq", 20), out, overwrite=True)
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    (out / "notes.txt").unlink()
    model = random_tiny_model("rnn_seq2seq", 20, cell_type="lstm")
    export_onnx(model, out, overwrite=True)  # without a tokenizer: the earlier export's tokenizer files go too
    assert sorted(path.name for path in out.iterdir()) == sorted(
        ["decoder_step.onnx", "decoding.py", "encoder.onnx", "generation_config.json", "hf_s2s_output.json",
         "onnx_manifest.json", "onnx_runtime.py"])
    assert "past_cell" in json.loads((out / "onnx_manifest.json").read_text())["state"]
    batch = padded([[5, 6, 7, 2], [8, 2]])
    np.testing.assert_array_equal(OnnxSeq2Seq(out).generate(*batch), generated(model, *batch))


def test_overwrite_deletes_no_file_a_manifest_names_unless_the_export_wrote_it_unchanged(tmp_path, capsys):
    """A list of names decides nothing: an onnx_manifest.json (crafted, or another tool's) naming a person's files,
    an export file edited since, and a record naming a file under another file's bytes each make the command refuse,
    and every file stays as it was."""
    model_dir = saved_rnn_folder(tmp_path / "model")
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.tex").write_text("three years of work")
    (out / "encoder.onnx").write_bytes(b"my own graph")
    (out / "onnx_manifest.json").write_text(json.dumps({"format": 1, "files": ["thesis.tex", "encoder.onnx"]}))
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    message = cli_error(capsys, model_dir, out, "--overwrite_output_dir")
    assert message.startswith("error: --overwrite_output_dir (overwrite=True) replaces only what hf-s2s export-onnx "
                              f"wrote into {out}, byte for byte, and it holds no hf_s2s_output.json"), message
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    # a record naming the files, with hashes that are not theirs (an edited export, a forged record)
    (out / "hf_s2s_output.json").write_text(json.dumps({"command": "hf-s2s export-onnx", "files": {
        "thesis.tex": "0" * 64, "encoder.onnx": "0" * 64, "onnx_manifest.json": "0" * 64}}))
    message = cli_error(capsys, model_dir, out, "--overwrite_output_dir")
    assert ("it also holds encoder.onnx (changed since hf-s2s export-onnx wrote it), onnx_manifest.json (changed "
            "since hf-s2s export-onnx wrote it), thesis.tex (changed since hf-s2s export-onnx wrote it); these are "
            f"left in place and nothing was deleted: move them out of {out}") in message, message
    assert {path.name: path.read_bytes() for path in out.iterdir() if path.name != "hf_s2s_output.json"} == before


