"""Export of the Transformer family to CTranslate2 (hf_s2s.inference.ctranslate2, `hf-s2s export-ctranslate2`).

The exported model decodes the same tokens as ``generate()``: greedy on tiny models trained on the reversal task
(so their outputs are real, varied translations, not one repeated token) and on random models of every layout
(pre/post-LN, sinusoidal/learned positions, shared/separate vocabularies, tied/untied output, scaled/unscaled
embeddings); beam search too, against ``generate(early_stopping=True)``: CTranslate2 stops a sentence once
``num_beams`` hypotheses have finished, which is that setting (transformers' default, ``early_stopping=False``,
keeps searching and can end on another hypothesis). The command exports a saved folder with its tokenizer, whose
tokens become the vocabulary. What cannot be exported, or where, is refused before anything is written.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

from hf_s2s import TransformerSeq2SeqConfig, TransformerSeq2SeqForConditionalGeneration  # noqa: E402
from hf_s2s.cli import run_command  # noqa: E402
from hf_s2s.data.synthetic import EOS_ID, FIRST_SYMBOL_ID, PAD_ID, reversal_dataset  # noqa: E402
from hf_s2s.data.tokenization import TranslationTokenizers, train_tokenizer_from_texts  # noqa: E402
from hf_s2s.inference.ctranslate2 import export_ctranslate2, exported_translator, translate_ids  # noqa: E402
from hf_s2s.models.loading import load_model, load_tokenizer  # noqa: E402
from tests.helpers import TINY, random_tiny_model, train_reversal  # noqa: E402
from tests.saved_folders import save_tiny_model_folder, tiny_tokenizer  # noqa: E402

# also run by CI on the oldest supported releases (constraints/oldest.txt)
pytestmark = pytest.mark.compat

ROOT = Path(__file__).resolve().parent.parent
NUM_SYMBOLS, MAX_LEN = 8, 6
VOCAB = FIRST_SYMBOL_ID + NUM_SYMBOLS
MAX_NEW_TOKENS = MAX_LEN + 3
TRAINED_LAYOUTS = {
    # Marian's layout: the benchmark's and CTranslate2's own converters' usual case
    "post-LN, sinusoidal, shared vocabulary": dict(norm_position="post", position_embedding_type="sinusoidal"),
    # every other choice at once: own target table (2 extra ids), untied output layer, unscaled embeddings
    "pre-LN, learned, separate vocabularies": dict(
        norm_position="pre", position_embedding_type="learned", max_position_embeddings=16,
        share_encoder_decoder_embeddings=False, decoder_vocab_size=VOCAB + 2, tie_word_embeddings=False,
        scale_embedding=False),
}


def translator(folder) -> "ctranslate2.Translator":
    return ctranslate2.Translator(str(folder), device="cpu", intra_threads=1, inter_threads=1)


def generated(model, batch: dict, **options) -> list[list[int]]:
    """generate()'s new tokens per sentence, through the first end token (the padding after it dropped), without the
    source-relative length bound, which CTranslate2 does not have (its one max_decoding_length is the batch's)."""
    rows = model.generate(**batch, max_len_a=None, max_len_b=None, **options)[:, 1:].tolist()  # start token dropped
    return [row[: row.index(EOS_ID) + 1] if EOS_ID in row else row for row in rows]


def padded(sources: list[list[int]]) -> dict:
    width = max(map(len, sources))
    input_ids = torch.tensor([row + [PAD_ID] * (width - len(row)) for row in sources])
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD_ID).long()}


@pytest.fixture(scope="module")
def held_out() -> dict:
    """A padded batch of reversal sources the models were not trained on, of varied lengths."""
    return padded(reversal_dataset(24, num_symbols=NUM_SYMBOLS, max_len=MAX_LEN, seed=7)["input_ids"])


@pytest.fixture(scope="module", params=list(TRAINED_LAYOUTS))
def trained(request, tmp_path_factory):
    """(model, exported folder) of a tiny model trained for ~190 steps (2 s) on the reversal task."""
    # init_std 0.1: from the default 0.02, the shared tied table needs hundreds of steps to stop repeating one token
    config = {**TINY["transformer_seq2seq"], **TRAINED_LAYOUTS[request.param], "vocab_size": VOCAB, "init_std": 0.1}
    torch.manual_seed(0)
    model = TransformerSeq2SeqForConditionalGeneration(TransformerSeq2SeqConfig(**config))
    work = tmp_path_factory.mktemp("trained")
    train_reversal(model, work / "trainer", num_symbols=NUM_SYMBOLS, max_len=MAX_LEN, num_train=3000, epochs=2,
                   batch_size=32, learning_rate=3e-3)
    model.eval()
    return model, export_ctranslate2(model, work / "ct2")


@pytest.mark.slow
def test_trained_model_outputs_are_real_translations(trained, held_out):
    """What makes the equalities below meaningful: outputs differ per sentence and end at different lengths (not
    one repeated token, nor an immediate end)."""
    model, _ = trained
    outputs = generated(model, held_out, max_new_tokens=MAX_NEW_TOKENS)
    assert len({tuple(row) for row in outputs}) > len(outputs) // 2
    assert len({len(row) for row in outputs if row[-1] == EOS_ID}) >= 3


@pytest.mark.parametrize("min_new_tokens", [0, 4])
def test_greedy_tokens_equal_generate(trained, held_out, min_new_tokens):
    model, folder = trained
    expected = generated(model, held_out, max_new_tokens=MAX_NEW_TOKENS, min_new_tokens=min_new_tokens)
    assert translate_ids(translator(folder), held_out["input_ids"], held_out["attention_mask"], 1, MAX_NEW_TOKENS,
                         min_new_tokens) == expected


def test_beam_tokens_equal_generate_with_early_stopping(trained, held_out):
    model, folder = trained
    expected = generated(model, held_out, max_new_tokens=MAX_NEW_TOKENS, num_beams=4, early_stopping=True)
    assert translate_ids(translator(folder), held_out["input_ids"], held_out["attention_mask"], 4,
                         MAX_NEW_TOKENS) == expected


def test_int8_export_keeps_the_trained_models_greedy_tokens(trained, held_out, tmp_path):
    """CTranslate2's int8 weights change logits a little; a trained model's choices survive it. The model itself is
    left as it was (ctranslate2 quantizes the weights it is handed in place)."""
    model, float_folder = trained
    weights = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    int8 = translator(export_ctranslate2(model, tmp_path / "int8", quantization="int8"))
    assert all(torch.equal(weights[name], tensor) for name, tensor in model.state_dict().items())
    assert translator(float_folder).compute_type == "float32" and int8.compute_type.startswith("int8")
    expected = generated(model, held_out, max_new_tokens=MAX_NEW_TOKENS)
    # Each step's choice with the float model's output before it fed back (teacher forcing, CTranslate2's
    # target_prefix), before one difference carries over to the rest of a sentence. CTranslate2's int8 kernels
    # depend on the CPU, and these tiny models are unsure of many steps (on an AVX2-only AMD EPYC the median gap
    # between the float model's best two tokens was 0.65 nats for one layout): int8 may pick the runner-up of a
    # near-tie, never a token the float model rules out. There 120 of 137 and 135 of 138 steps agreed, and where
    # they did not, int8's token was at most 0.27 and 0.94 nats below the float model's best; a broken quantization
    # picks tokens many nats below it.
    sources = [[str(token) for token, keep in zip(row, mask, strict=True) if keep]
               for row, mask in zip(held_out["input_ids"].tolist(), held_out["attention_mask"].tolist(), strict=True)]
    width = max(map(len, expected))
    prefixes = torch.tensor([[model.config.decoder_start_token_id, *row, *[PAD_ID] * (width - len(row))]
                             for row in expected])[:, :-1]
    with torch.no_grad():
        log_probs = model(**held_out, decoder_input_ids=prefixes).logits.log_softmax(-1)  # (B, width, V)
    agreed, total, gaps = 0, 0, []
    for step in range(width):
        rows = [index for index, row in enumerate(expected) if len(row) > step]
        results = int8.translate_batch([sources[index] for index in rows], beam_size=1, max_decoding_length=step + 1,
                                       target_prefix=[[str(token) for token in expected[index][:step]]
                                                      for index in rows], return_end_token=True, max_input_length=0)
        for index, result in zip(rows, results, strict=True):
            chosen, best = int(result.hypotheses[0][step]), expected[index][step]
            agreed += chosen == best
            total += 1
            gaps.append(float(log_probs[index, step, best] - log_probs[index, step, chosen]))
    assert agreed >= 0.75 * total and max(gaps) < 1.5, (agreed, total, sorted(gaps)[-5:])


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("separate", [False, True], ids=["shared", "separate"])
@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_every_layout_decodes_like_generate(norm, positions, separate, tie):
    """Random models (std 0.3: varied outputs) of each layout, greedy and beam 4, on a padded batch; scaled and
    unscaled embeddings, relu and gelu alternate across the layouts."""
    vocab = {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 37} if separate else {}
    model = random_tiny_model("transformer_seq2seq", 30, seed=1, norm_position=norm, position_embedding_type=positions,
                              tie_word_embeddings=tie, scale_embedding=tie == separate,
                              activation_function="gelu" if tie == (norm == "pre") else "relu", **vocab)
    generator = torch.Generator().manual_seed(0)
    batch = padded([torch.randint(4, 30, (n,), generator=generator).tolist() + [EOS_ID] for n in (3, 8, 5, 1)])
    exported = exported_translator(model)  # through a temporary folder, gone once loaded
    for beams in (1, 4):
        expected = generated(model, batch, max_new_tokens=12, num_beams=beams, early_stopping=True)
        assert translate_ids(exported, batch["input_ids"], batch["attention_mask"], beams, 12) == expected


def test_sinusoidal_model_decodes_past_max_position_embeddings():
    """Sinusoidal positions have no length limit in hf_s2s: the exported table reaches past the config's
    max_position_embeddings (16 here) for sources and outputs of 20 tokens."""
    model = random_tiny_model("transformer_seq2seq", 30, seed=2, max_position_embeddings=16)
    batch = padded([list(range(4, 23)) + [EOS_ID], [7, 8, EOS_ID]])
    expected = generated(model, batch, max_new_tokens=20, min_new_tokens=20)
    assert translate_ids(exported_translator(model), batch["input_ids"], batch["attention_mask"], 1, 20, 20) == expected


# ---- the command, with the tokenizer's vocabulary ---------------------------------------------------------------

SENTENCES = ["a b c d", "e f", "g h i j a", "b"]
# Words of other letters: a target vocabulary that shares only the special tokens with tiny_tokenizer()'s.
TARGET_TEXTS = [" ".join("klmnopqrst"[(i * k) % 10] for k in range(1, 2 + i % 5)) for i in range(200)]


def separate_vocab_tokenizer():
    source, target = tiny_tokenizer(), train_tokenizer_from_texts(TARGET_TEXTS, vocab_size=272, min_frequency=1)
    return TranslationTokenizers(source, target).as_tokenizer()


def assert_translates_like_generate(model_dir, exported_dir, num_beams=1):
    tokenizer, model = load_tokenizer(model_dir), load_model(model_dir)
    batch = dict(tokenizer(SENTENCES, padding=True, return_tensors="pt"))
    expected = generated(model, batch, max_new_tokens=10, num_beams=num_beams, early_stopping=True)
    assert len({tuple(row) for row in expected}) > 1  # a model that says one thing would prove little
    assert translate_ids(translator(exported_dir), batch["input_ids"], batch["attention_mask"], num_beams, 10,
                         tokenizer=tokenizer) == expected


def test_command_exports_a_folder_with_its_tokenizers_vocabulary(tmp_path):
    model_dir = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq", seed=3)
    assert run_command("export-ctranslate2", [str(model_dir), str(tmp_path / "ct2")]) == 0
    tokenizer = load_tokenizer(model_dir)
    vocabulary = json.loads((tmp_path / "ct2" / "shared_vocabulary.json").read_text())
    assert vocabulary == tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    config = json.loads((tmp_path / "ct2" / "config.json").read_text())
    assert (config["decoder_start_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert_translates_like_generate(model_dir, tmp_path / "ct2")
    assert_translates_like_generate(model_dir, tmp_path / "ct2", num_beams=3)


@pytest.mark.slow
def test_script_exports_separate_vocabularies(tmp_path):
    """scripts/export_ctranslate2.py (a fresh process) on a folder whose tokenizer has two vocabularies: the target
    one, of another size, becomes target_vocabulary.json."""
    tokenizer = separate_vocab_tokenizer()
    model_dir = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq", tokenizer=tokenizer, seed=3,
                                       share_encoder_decoder_embeddings=False,
                                       decoder_vocab_size=len(tokenizer.target_tokenizer))
    completed = subprocess.run([sys.executable, str(ROOT / "scripts" / "export_ctranslate2.py"), str(model_dir),
                                str(tmp_path / "ct2")], capture_output=True, text=True, timeout=180)
    assert completed.returncode == 0, completed.stderr
    read = lambda name: json.loads((tmp_path / "ct2" / f"{name}_vocabulary.json").read_text())  # noqa: E731
    assert read("source") == tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    target = tokenizer.target_tokenizer
    assert read("target") == target.convert_ids_to_tokens(list(range(len(target)))) != read("source")
    assert not (tmp_path / "ct2" / "shared_vocabulary.json").exists()
    assert_translates_like_generate(model_dir, tmp_path / "ct2")


# ---- refusals, before anything is written ------------------------------------------------------------------------


def tiny_transformer(**config):
    return random_tiny_model("transformer_seq2seq", 30, **config)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")  # torch's eager quantization is deprecated
def test_rnn_and_unsupported_models_are_refused(tmp_path):
    with pytest.raises(ValueError, match="only the Transformer family .* got RNNSeq2SeqForConditionalGeneration"):
        export_ctranslate2(random_tiny_model("rnn_seq2seq", 30), tmp_path / "rnn")
    model = tiny_transformer()
    model.config.activation_function = "silu"  # not a valid hf_s2s config; stands for what CTranslate2 lacks
    with pytest.raises(ValueError, match="activation_function='silu' has no CTranslate2 counterpart; exportable: "
                                         "relu, gelu"):
        export_ctranslate2(model, tmp_path / "silu")
    quantized = torch.ao.quantization.quantize_dynamic(tiny_transformer(), {torch.nn.Linear}, dtype=torch.qint8)
    with pytest.raises(ValueError, match="export the model before quantizing it"):
        export_ctranslate2(quantized, tmp_path / "quantized")
    assert not any(tmp_path.iterdir())


def test_bad_options_and_a_tokenizer_that_does_not_fit_are_refused(tmp_path):
    model = tiny_transformer()
    with pytest.raises(ValueError, match="quantization .* must be one of int8, int8_float32, .*; got 'int4'"):
        export_ctranslate2(model, tmp_path / "out", quantization="int4")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        export_ctranslate2(model, tmp_path / "file")
    with pytest.raises(ValueError, match="the tokenizer's source vocabulary has 280 tokens but the model's vocab_size "
                                         "is 30"):
        export_ctranslate2(model, tmp_path / "out", tokenizer=tiny_tokenizer())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_output_folder_with_files_is_refused_unless_overwrite(tmp_path):
    """Overwriting replaces the earlier export whole: a stale shared_vocabulary.json would otherwise be loaded in
    place of the new separate vocabularies. A file the export did not write makes it refuse, deleting nothing."""
    out = tmp_path / "out"
    export_ctranslate2(tiny_transformer(), out)
    with pytest.raises(FileExistsError, match=r"already holds files \(config.json, hf_s2s_output.json, model.bin, "
                                              r"shared_vocabulary.json\): .* pass overwrite=True"):
        export_ctranslate2(tiny_transformer(), out)
    (out / "notes.txt").write_text("mine")
    before = files_of(out)
    with pytest.raises(FileExistsError, match=r"it also holds notes.txt \(not written by hf-s2s export-ctranslate2\)"):
        export_ctranslate2(tiny_transformer(), out, overwrite=True)
    assert files_of(out) == before
    (out / "notes.txt").unlink()
    separate = tiny_transformer(share_encoder_decoder_embeddings=False, decoder_vocab_size=37)
    export_ctranslate2(separate, out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "hf_s2s_output.json", "model.bin",
                                                     "source_vocabulary.json", "target_vocabulary.json"]
    batch = padded([[5, 6, 7, EOS_ID], [9, EOS_ID]])
    assert translate_ids(translator(out), batch["input_ids"], batch["attention_mask"], 1, 8) == \
        generated(separate, batch, max_new_tokens=8)


def files_of(folder) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_overwrite_deletes_only_an_unchanged_export_of_its_own(tmp_path):
    """--overwrite_output_dir replaces what hf-s2s export-ctranslate2 wrote, by content: not a transformers model
    folder (its config.json would be replaced and the folder become unloadable), not a CTranslate2 model another
    tool wrote (model.bin and a CTranslate2 config.json prove nothing about who wrote them), not an export whose
    model.bin was replaced since; each is refused and left as it was."""
    rnn_dir = save_tiny_model_folder(tmp_path / "rnn", "rnn_seq2seq")
    model_dir = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq")
    before = files_of(rnn_dir)
    with pytest.raises(SystemExit, match=rf"error: overwrite=True \(--overwrite_output_dir\) replaces only what "
                                         rf"hf-s2s export-ctranslate2 wrote into {rnn_dir}, byte for byte, and it "
                                         r"holds no hf_s2s_output.json"):
        run_command("export-ctranslate2", [str(model_dir), str(rnn_dir), "--overwrite_output_dir"])
    assert files_of(rnn_dir) == before
    load_model(rnn_dir)  # still the model folder it was
    other_tool = tmp_path / "ct2_by_another_tool"
    export_ctranslate2(tiny_transformer(), other_tool)
    (other_tool / "hf_s2s_output.json").unlink()
    edited = tmp_path / "edited"
    export_ctranslate2(tiny_transformer(), edited)
    (edited / "model.bin").write_bytes(b"a model.bin put here by hand")
    for folder, why in [(other_tool, "holds no hf_s2s_output.json"),
                        (edited, "it also holds model.bin (changed since hf-s2s export-ctranslate2 wrote it)")]:
        kept = files_of(folder)
        with pytest.raises(FileExistsError, match=re.escape(why)):
            export_ctranslate2(tiny_transformer(), folder, overwrite=True)
        assert files_of(folder) == kept
    for other in ({"model.safetensors": b"weights"}, {"notes.txt": b"mine"}):
        folder = tmp_path / next(iter(other)).replace(".", "_")
        folder.mkdir()
        for name, data in other.items():
            (folder / name).write_bytes(data)
        with pytest.raises(FileExistsError, match="holds no hf_s2s_output.json"):
            export_ctranslate2(tiny_transformer(), folder, overwrite=True)
        assert files_of(folder) == other


def test_command_refuses_before_loading(tmp_path, capsys):
    model_dir = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq")
    with pytest.raises(SystemExit, match="error: output_dir .* is the model folder itself"):
        run_command("export-ctranslate2", [str(model_dir), str(model_dir), "--overwrite_output_dir"])
    with pytest.raises(SystemExit, match="error: quantization \\(--quantization\\) must be one of"):
        run_command("export-ctranslate2", [str(tmp_path / "not_loaded"), str(tmp_path / "out"), "--quantization", "x"])
    rnn_dir = save_tiny_model_folder(tmp_path / "rnn", "rnn_seq2seq")
    with pytest.raises(SystemExit, match="error: only the Transformer family"):
        run_command("export-ctranslate2", [str(rnn_dir), str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("options", "message"), [
    ({"num_beams": 0}, "num_beams must be a whole number >= 1, got 0"),
    ({"max_new_tokens": 0}, "max_new_tokens must be a whole number >= 1, got 0"),
    ({"min_new_tokens": 5, "max_new_tokens": 4}, "min_new_tokens \\(5\\) must be <= max_new_tokens \\(4\\)"),
])
def test_translate_ids_refuses_impossible_options(options, message):
    with pytest.raises(ValueError, match=message):
        translate_ids(None, [[5, EOS_ID]], **options)


@pytest.mark.parametrize(("command", "flags"), [
    ("translate", ["--engine", "ctranslate2"]), ("translate", []), ("export-ctranslate2", []),
    ("serve", ["--engine", "ctranslate2"]),
], ids=["translate-ctranslate2", "translate-torch", "export-again", "serve"])
def test_a_ctranslate2_directory_given_as_a_model_folder_is_named_as_one(tmp_path, command, flags):
    """The commands that read a model folder, given what export-ctranslate2 wrote, say what it is and what to give
    instead (before: advice to save a tokenizer with tokenizer.save_pretrained, or "Unrecognized model")."""
    model_dir = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq")
    assert run_command("export-ctranslate2", [str(model_dir), str(tmp_path / "ct2")]) == 0
    (tmp_path / "input.txt").write_text("a b c\n")
    argv = {"translate": [str(tmp_path / "ct2"), "--input", str(tmp_path / "input.txt"), *flags],
            "export-ctranslate2": [str(tmp_path / "ct2"), str(tmp_path / "again")],
            "serve": [str(tmp_path / "ct2"), *flags, "--port", "0"]}[command]
    with pytest.raises(SystemExit) as refused:
        run_command(command, argv)
    said = str(refused.value.code)
    assert re.fullmatch(
        rf"error: {re.escape(str(tmp_path / 'ct2'))} is a CTranslate2 model directory \(model.bin, written by "
        r"export-ctranslate2\), not a model folder: give the model folder it was exported from \(the ctranslate2 "
        r"engine, --engine ctranslate2, exports one itself when it loads\), or load this directory with "
        r"ctranslate2.Translator", said), said
