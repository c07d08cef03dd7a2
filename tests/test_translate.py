"""Translation fails fast and clearly (hf_s2s.inference.translate and scripts/translate.py): impossible decoding options and
an empty input are refused before the model is loaded, non-UTF-8 input is named by line, and blank input lines
give blank output lines, keeping the output aligned with the input."""

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import pipeline

import hf_s2s  # noqa: F401
from hf_s2s.data.tokenization import TranslationTokenizers, train_tokenizer_from_texts
from hf_s2s.inference.translate import Hypothesis, read_sentences, translate
from hf_s2s.models.loading import load_model, load_tokenizer
from tests.saved_folders import TEXTS, save_tiny_model_folder, tiny_tokenizer

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = ["a b c d", "", "e f", "   ", "g h i"]  # blank lines at 1 and 3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random model whose outputs are non-empty for every sentence here, the blank one included (seed 3)."""
    return save_tiny_model_folder(tmp_path_factory.mktemp("translate") / "model", "transformer_seq2seq", seed=3)


def run_translate(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "translate.py"), *args], input=stdin,
                          capture_output=True, text=True, timeout=180)


@pytest.mark.slow
@pytest.mark.parametrize(("args", "stdin", "message"), [
    (["--nbest", "0"], "a b\n", "num_return_sequences (--nbest) must be a whole number >= 1, got 0"),
    (["--beams", "0"], "a b\n", "num_beams (--beams) must be a whole number >= 1, got 0"),
    (["--batch-size", "0"], "a b\n", "batch_size (--batch-size) must be a whole number >= 1, got 0"),
    ([], "", "standard input is empty: there is nothing to translate"),
])
def test_translate_script_refuses_bad_options_and_empty_input_before_loading(tmp_path, args, stdin, message):
    # The model folder does not exist: the refusal must come first, so no model is loaded in vain.
    completed = run_translate(str(tmp_path / "not_loaded"), *args, stdin=stdin)
    assert completed.returncode == 1 and completed.stdout == ""
    assert f"error: {message}" in completed.stderr and "Traceback" not in completed.stderr


def test_read_sentences_keeps_blank_lines_strips_line_ends_and_names_bad_bytes(tmp_path):
    path = tmp_path / "input.txt"
    path.write_bytes(b"a b\r\n\nc d\n")
    assert read_sentences(path) == ["a b", "", "c d"]
    path.write_bytes(b"a b\nc \xff d\n")
    with pytest.raises(ValueError, match=f"{path}, line 2: not UTF-8 \\(byte 0xff at byte 3 of the line\\)"):
        read_sentences(path)
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=f"{path} is empty"):
        read_sentences(path)


def test_gzipped_input_reads_as_the_plain_file_and_a_broken_one_is_named(tmp_path):
    plain, packed = tmp_path / "input.txt", tmp_path / "input.txt.gz"
    plain.write_bytes(b"a b\r\n\nc d\n")
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_sentences(packed) == read_sentences(plain) == ["a b", "", "c d"]
    packed.write_bytes(plain.read_bytes())  # named .gz but not compressed
    with pytest.raises(ValueError, match=f"{packed}: damaged gzip file"):
        read_sentences(packed)


@pytest.mark.slow
@pytest.mark.parametrize(("references", "args", "message"), [
    ("x\ny\n", [], "--reference {ref} has 2 lines but the input ({src}) has 3: they must match line by line"),
    ("x\ny\nz\nw\n", [], "--reference {ref} has 4 lines but the input ({src}) has 3"),
    (None, [], "No such file"),
    ("x\ny\nz\n", ["--beams", "2", "--nbest", "2"], "--reference scores one translation per input line: it cannot "
                                                     "be combined with --nbest > 1"),
], ids=["short", "long", "missing", "nbest"])
def test_a_reference_file_that_does_not_fit_the_input_is_refused_before_loading(tmp_path, references, args, message):
    source, reference = tmp_path / "test.src", tmp_path / "test.ref"
    source.write_text("a b\nc\nd e\n")
    if references is not None:
        reference.write_text(references)
    completed = run_translate(str(tmp_path / "not_loaded"), "--input", str(source), "--reference", str(reference),
                              *args)
    assert completed.returncode == 1 and completed.stdout == "" and "Traceback" not in completed.stderr
    assert message.format(ref=reference, src=source) in completed.stderr


@pytest.mark.parametrize(("num_beams", "nbest"), [(1, 1), (2, 2)])
def test_blank_sentences_give_blank_hypotheses_and_the_rest_is_unchanged(model_dir, num_beams, nbest):
    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    with torch.no_grad():  # the model would invent a translation for a blank line: the test has teeth
        invented = model.generate(**tokenizer([""], return_tensors="pt"), max_new_tokens=5)
    assert tokenizer.decode(invented[0], skip_special_tokens=True) != ""
    results = translate(model, tokenizer, SENTENCES, num_beams=num_beams, num_return_sequences=nbest,
                        max_new_tokens=5, batch_size=2)
    alone = translate(model, tokenizer, [s for s in SENTENCES if s.strip()], num_beams=num_beams,
                      num_return_sequences=nbest, max_new_tokens=5, batch_size=2)
    assert [[h.text for h in hyps] for i, hyps in enumerate(results) if i in (1, 3)] == [[""] * nbest] * 2
    assert [results[i] for i in (0, 2, 4)] == alone
    assert all(h.text for hyps in alone for h in hyps)
    only_blank = translate(model, tokenizer, ["", " "], num_beams=num_beams, num_return_sequences=nbest)
    assert only_blank == [[Hypothesis("", 0.0)] * nbest] * 2


@pytest.mark.slow
def test_translate_script_keeps_blank_lines_aligned(model_dir):
    completed = run_translate(str(model_dir), "--beams", "1", "--max-new-tokens", "5",
                              stdin="\n".join(SENTENCES) + "\n")
    assert completed.returncode == 0, completed.stderr[-2000:]
    lines = completed.stdout.split("\n")
    assert len(lines) == len(SENTENCES) + 1 and lines[-1] == ""  # one output line per input line
    assert [i for i, line in enumerate(lines[:-1]) if not line] == [1, 3]


@pytest.mark.parametrize("num_beams", [1, 3])
def test_translations_without_scores_are_the_same_translations(model_dir, num_beams):
    """scores=False (what the training job's test decoding uses: generate then keeps no per-step scores) changes
    nothing but the scores: the same hypotheses, in the same order, with score None."""
    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    kwargs = {"num_beams": num_beams, "num_return_sequences": min(2, num_beams), "batch_size": 2,
              "max_new_tokens": 6}
    scored = translate(model, tokenizer, SENTENCES, **kwargs)
    plain = translate(model, tokenizer, SENTENCES, scores=False, **kwargs)
    assert [[h.text for h in hs] for hs in plain] == [[h.text for h in hs] for hs in scored]
    assert all(h.score is None for hs in plain for h in hs)
    assert all(isinstance(h.score, float) for hs in scored for h in hs)


@pytest.mark.slow
def test_nbest_above_the_folders_own_beam_count_is_one_error_line(model_dir):
    """Without --beams the folder's generation config decides the beam count (1 where it never set one); --nbest
    above it is refused as the other options are, with one error line (not a traceback after the model loaded),
    and the folder translates without --beams."""
    assert load_model(model_dir).generation_config.num_beams in (None, 1)  # never set: generate's default, 1
    done = run_translate(str(model_dir), "--nbest", "3", stdin="a b c\n")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "error: num_return_sequences (3, --nbest) must be <= num_beams (1, --beams)" in done.stderr
    done = run_translate(str(model_dir), stdin="a b c\n")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1, done.stderr[-2000:]


# --- Values and folders refused before any weights are loaded (issue 24) ------------------------------------------


def command_error(work: Path, *argv: str) -> str:
    """The one-line error of the translate command run in this process (it must exit, not raise), translating a
    one-line file written into the folder ``work`` unless the arguments name an input."""
    from hf_s2s.cli import translate as translate_command

    argv = list(argv)
    if "--input" not in argv and "--sentence" not in argv:
        source = work / "input.txt"
        source.write_text("a b\n")
        argv += ["--input", str(source)]
    with pytest.raises(SystemExit) as stopped:
        translate_command.main(argv)
    assert isinstance(stopped.value.code, str), stopped.value.code  # sys.exit(message): one line, exit status 1
    return stopped.value.code


@pytest.mark.parametrize(("flags", "message"), [
    (["--max-len-a", "1e18"], "--max-len-a must be <= 100 (output tokens per source token), got 1e+18"),
    (["--max-len-a", "nan"], "max_len_a (output tokens per source token) must be a number >= 0"),
    (["--max-len-b", "100000000000000000000"], "--max-len-b must be <= 100000 (tokens added to the bound)"),
    (["--max-len-a", "0", "--max-len-b", "0"], "max_len_a=0.0 with max_len_b=0 bounds every output to 0 tokens"),
    (["--beams", "4", "--coverage-penalty", "nan"], "coverage_penalty (--coverage-penalty) must be a finite number "
                                                    "in [0, 10] (GNMT's beta; 0 = off), got nan"),
    (["--beams", "4", "--coverage-penalty", "inf"], "coverage_penalty (--coverage-penalty) must be a finite number"),
    (["--beams", "4", "--coverage-penalty", "1e18"], "coverage_penalty (--coverage-penalty) must be a finite number"),
    (["--length-penalty", "nan"], "length_penalty (--length-penalty) must be a finite number in [-5, 5]"),
    (["--length-penalty=-1e9"], "length_penalty (--length-penalty) must be a finite number in [-5, 5]"),
], ids=["a-huge", "a-nan", "b-huge", "zero-tokens", "coverage-nan", "coverage-inf", "coverage-huge", "lp-nan",
        "lp-huge"])
def test_non_finite_and_absurd_numbers_are_refused_naming_the_flag_before_loading(tmp_path, flags, message):
    error = command_error(tmp_path, str(tmp_path / "not_loaded"), *flags)
    assert error.startswith("error: ") and message in error and "not_loaded" not in error


@pytest.fixture(scope="module")
def special_folders(tmp_path_factory):
    """Folders of models that cannot decode some things: no attention (RNN, attention_type none), a learned position
    table of 16 rows, bfloat16 weights; each with its weights file truncated, so that an error from its config is
    seen to come before the weights are read."""
    from hf_s2s.models.loading import load_model
    from tests.saved_folders import tiny_tokenizer

    base = tmp_path_factory.mktemp("special")
    folders = {"none": save_tiny_model_folder(base / "none", "rnn_seq2seq", attention_type="none"),
               "learned": save_tiny_model_folder(base / "learned", "transformer_seq2seq", seed=3,
                                                 position_embedding_type="learned", max_position_embeddings=16),
               "float32": save_tiny_model_folder(base / "float32", "transformer_seq2seq", seed=3)}
    load_model(folders["float32"]).to(torch.bfloat16).save_pretrained(base / "bfloat16")
    tiny_tokenizer().save_pretrained(base / "bfloat16")
    folders["bfloat16"] = base / "bfloat16"
    for name in ("none", "learned", "bfloat16"):
        broken = base / f"{name}_unreadable_weights"
        broken.mkdir()
        for path in folders[name].iterdir():
            broken.joinpath(path.name).write_bytes(path.read_bytes()[:100] if path.suffix == ".safetensors"
                                                   else path.read_bytes())
        folders[f"{name}_unreadable_weights"] = broken
    return folders


@pytest.mark.parametrize(("folder", "flags", "message"), [
    ("none", ["--beams", "3", "--coverage-penalty", "0.1"],
     "the coverage penalty (--coverage-penalty) reads the decoder's attention over the source, but {folder} has none "
     "(rnn_seq2seq with attention_type 'none')"),
    ("none", ["--plot-alignment", "{tmp}/a.png", "--sentence", "a b"],
     "an alignment (--plot-alignment) reads the decoder's attention over the source, but {folder} has none"),
    ("learned", ["--max-new-tokens", "17"],
     "max_new_tokens (--max-new-tokens) 17 is beyond {folder}'s learned position table of 16 positions"),
], ids=["coverage", "alignment", "positions"])
def test_what_a_models_config_rules_out_is_one_error_line_before_its_weights_load(special_folders, tmp_path, folder,
                                                                                   flags, message):
    unreadable = special_folders[f"{folder}_unreadable_weights"]
    flags = [flag.format(tmp=tmp_path) for flag in flags]
    error = command_error(tmp_path, str(unreadable), *flags)
    assert error == "error: " + message.format(folder=unreadable) or error.startswith(
        "error: " + message.format(folder=unreadable)), error
    assert not (tmp_path / "a.png").exists()


def test_a_learned_position_table_takes_as_many_new_tokens_as_it_has_rows(special_folders, tmp_path, capsys):
    from hf_s2s.cli import translate as translate_command

    folder = str(special_folders["learned"])
    source = tmp_path / "input.txt"
    source.write_text("a b\n")
    assert translate_command.main([folder, "--input", str(source), "--max-new-tokens", "16", "--no-length-bound"]) == 0
    assert capsys.readouterr().out.count("\n") == 1  # one translation (split on \n only: it may hold \x1c)


def test_an_ensemble_of_float32_and_bfloat16_folders_is_refused_before_loading(special_folders, tmp_path):
    first, second = special_folders["float32"], special_folders["bfloat16_unreadable_weights"]
    error = command_error(tmp_path, str(first), str(second))
    assert error.startswith(f"error: the folders hold weights of different dtypes ({first} float32, {second} "
                            "bfloat16)"), error


@pytest.mark.parametrize(("path", "message"), [
    ("missing/a.png", "--plot-alignment {path}: the folder {tmp}/missing does not exist"),
    ("", "--plot-alignment {path} is a folder; give the path of the image to write"),
    ("a.xyz", "--plot-alignment {path}: matplotlib cannot write .xyz files; use one of"),
], ids=["no-folder", "a-folder", "file-type"])
def test_an_image_path_that_cannot_be_written_is_refused_before_loading(tmp_path, path, message):
    path = str(tmp_path / path) if path else str(tmp_path)
    error = command_error(tmp_path, str(tmp_path / "not_loaded"), "--plot-alignment", path, "--sentence", "a")
    assert error.startswith("error: " + message.format(path=path, tmp=tmp_path)), error


def test_a_tokenizer_larger_than_the_embedding_table_is_refused_naming_both_sizes(tmp_path):
    """A token id past the model's table would be looked up in a wrong row (or fail inside the forward)."""
    from tests.saved_folders import tiny_tokenizer

    folder = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq", seed=3)
    vocab_size = len(tiny_tokenizer())
    grown = tiny_tokenizer()
    grown.add_tokens([f"extra{i}" for i in range(20)])
    grown.save_pretrained(folder)
    error = command_error(tmp_path, str(folder))
    assert error.startswith(f"error: {folder}: tokenizer does not fit the model config: the source tokenizer has "
                            f"{vocab_size + 20} tokens but config.vocab_size is {vocab_size}"), error


# --- Input read as the corpus loader reads it; cut sources named (issue 24) --------------------------------------


@pytest.mark.slow
def test_input_is_read_as_the_corpus_loader_reads_it_and_cut_lines_are_named(model_dir, tmp_path):
    """A byte-order mark is dropped (it changed the first translation), a lone carriage return stays inside its line
    with a warning (old Mac line ends: one line, said so), and a source longer than the folder's model_max_length is
    named on stderr with its line number and length."""
    from hf_s2s.models.loading import load_tokenizer as load

    folder = tmp_path / "model"
    folder.mkdir()
    for path in model_dir.iterdir():
        folder.joinpath(path.name).write_bytes(path.read_bytes())
    tokenizer = load(folder)
    tokenizer.model_max_length = 6
    tokenizer.save_pretrained(folder)
    long_line = "a b c d e f g h i j"
    source = tmp_path / "input.txt"
    source.write_bytes("\ufeffa b c\n".encode() + f"e f\n{long_line}\nb\rc\n".encode())
    done = run_translate(str(folder), "--input", str(source), "--beams", "1", "--max-new-tokens", "5")
    assert done.returncode == 0, done.stderr[-2000:]
    model = load_model(folder)
    expected = translate(model, tokenizer, ["a b c", "e f", long_line, "b\rc"], num_beams=1, max_new_tokens=5)
    assert done.stdout.splitlines() == [hyps[0].text for hyps in expected]
    length = len(tokenizer(long_line)["input_ids"])
    assert (f"1 of 4 sentences are longer than the 6 source tokens the model reads (the tokenizer's "
            f"model_max_length) and are translated cut to them: line 3 ({length} tokens)") in done.stderr
    assert "1 line(s) hold a carriage return (\\r) that does not end the line; kept inside the line" in done.stderr
    cut = tokenizer([long_line], truncation=True, max_length=6)["input_ids"][0]
    with torch.no_grad():
        alone = model.generate(torch.tensor([cut]), num_beams=1, max_new_tokens=5)
    assert expected[2][0].text == tokenizer.decode(alone[0], skip_special_tokens=True)


@pytest.mark.slow
def test_a_line_of_invisible_characters_is_blank_and_keeps_its_place(model_dir):
    """Zero-width spaces, a joiner, a lone byte-order mark: nothing to translate, so an empty output line, as for a
    line of spaces (the model would invent a translation for them)."""
    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    invisible = ["\u200b\u200b", "\u200d \u2060", "\ufeff"]
    with torch.no_grad():
        invented = model.generate(**tokenizer(invisible[:1], return_tensors="pt"), max_new_tokens=5)
    assert tokenizer.decode(invented[0], skip_special_tokens=True) != ""  # the test has teeth
    results = translate(model, tokenizer, ["a b c d", *invisible, "g h i"], num_beams=1, max_new_tokens=5)
    assert [hyps[0].text for hyps in results[1:4]] == ["", "", ""] and results[0][0].text and results[4][0].text
    done = run_translate(str(model_dir), "--beams", "1", "--max-new-tokens", "5",
                         stdin="a b c d\n\u200b\u200b\ng h i\n")
    assert done.returncode == 0 and done.stdout.split("\n")[1] == "", done.stderr[-2000:]


def test_greedy_scores_under_a_target_vocabulary_of_another_size_are_each_sentences_own(tmp_path):
    """A separate target vocabulary smaller than the source one (as in a folder converted from OpenNMT-py): a batch's
    greedy scores equal each sentence's alone. transformers' compute_transition_scores finds row r's scores at r x
    the source vocabulary's size, which gave other rows' scores, or an IndexError, for every row but the first."""
    target = train_tokenizer_from_texts([text.upper() for text in TEXTS], vocab_size=270, min_frequency=1)
    tokenizer = TranslationTokenizers(tiny_tokenizer(), target).as_tokenizer()
    folder = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq", tokenizer=tokenizer, seed=3,
                                    decoder_vocab_size=len(target), share_encoder_decoder_embeddings=False)
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    assert model.config.decoder_vocab_size < model.config.vocab_size
    sentences = TEXTS[:6]
    batched = translate(model, tokenizer, sentences, num_beams=1, scores=True)
    alone = [translate(model, tokenizer, [sentence], num_beams=1, scores=True)[0] for sentence in sentences]
    assert [hypotheses[0].text for hypotheses in batched] == [hypotheses[0].text for hypotheses in alone]
    assert len({hypotheses[0].score for hypotheses in alone}) > 1
    assert all(abs(b[0].score - a[0].score) < 1e-4 for b, a in zip(batched, alone, strict=True)), (batched, alone)


@pytest.mark.slow  # two processes
def test_a_folder_without_generation_config_translates_as_with_the_default_one_and_says_so(tmp_path):
    """transformers builds a missing generation config from config.json, whose generic max_length cut every
    translation at 19 tokens; the command decodes with the family's defaults instead, and says so in one
    line."""
    with_config = save_tiny_model_folder(tmp_path / "with", "transformer_seq2seq")
    without = Path(shutil.copytree(with_config, tmp_path / "without"))
    (without / "generation_config.json").unlink()
    sources = "".join(" ".join("abcdefghij"[(i * k) % 10] for k in range(30)) + "\n"  # 30 words each
                      for i in (1, 3))
    done = {folder: run_translate(str(folder), "--beams", "1", stdin=sources)
            for folder in (with_config, without)}
    assert all(completed.returncode == 0 for completed in done.values()), done[without].stderr[-2000:]
    assert done[without].stdout == done[with_config].stdout
    tokenizer = load_tokenizer(with_config)
    assert max(len(tokenizer(line).input_ids) for line in done[without].stdout.splitlines()) > 20
    warned = [line for line in done[without].stderr.splitlines() if "generation_config.json" in line]
    assert len(warned) == 1 and warned[0].startswith(f"{without} has no generation_config.json with a length "
                                                     "limit")
    assert "generation_config.json" not in done[with_config].stderr


def test_a_folder_without_generation_config_translates_in_the_pipeline_as_with_the_default_one(tmp_path):
    """The translation pipeline (the folder's own, as remote code) decodes such a folder as the folder with its
    generation config, not cut at transformers' generic 20 tokens."""
    with_config = save_tiny_model_folder(tmp_path / "with", "transformer_seq2seq")
    without = Path(shutil.copytree(with_config, tmp_path / "without"))
    (without / "generation_config.json").unlink()
    sources = [" ".join("abcdefghij"[(i * k) % 10] for k in range(30)) for i in (1, 3)]  # 30 words each
    translations = {folder: [output["translation_text"] for output in pipeline(
        "translation", model=str(folder), trust_remote_code=True)(sources)] for folder in (with_config, without)}
    assert translations[without] == translations[with_config]
    tokenizer = load_tokenizer(with_config)
    assert max(len(tokenizer(line).input_ids) for line in translations[without]) > 20
