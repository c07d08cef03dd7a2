"""Translation fails fast and clearly (hf_s2s.translate and scripts/translate.py): impossible decoding options and
an empty input are refused before the model is loaded, non-UTF-8 input is named by line, and blank input lines
give blank output lines, keeping the output aligned with the input."""

import gzip
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hf_s2s  # noqa: F401
from hf_s2s.loading import load_model, load_tokenizer
from hf_s2s.translate import Hypothesis, check_decoding_options, read_sentences, translate
from tests.saved_folders import save_tiny_model_folder

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = ["a b c d", "", "e f", "   ", "g h i"]  # blank lines at 1 and 3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random model whose outputs are non-empty for every sentence here, the blank one included (seed 3)."""
    return save_tiny_model_folder(tmp_path_factory.mktemp("translate") / "model", "transformer_seq2seq", seed=3)


def run_translate(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "translate.py"), *args], input=stdin,
                          capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize(("options", "message"), [
    ({"num_beams": 0}, "num_beams \\(--beams\\) must be a whole number >= 1, got 0"),
    ({"num_beams": 2, "num_return_sequences": 0}, "num_return_sequences \\(--nbest\\) must be a whole number >= 1"),
    ({"num_beams": 2, "batch_size": 0}, "batch_size \\(--batch-size\\) must be a whole number >= 1, got 0"),
    ({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences \\(3, --nbest\\) must be <= num_beams"),
    ({"num_beams": 2, "max_new_tokens": 0}, "max_new_tokens \\(--max-new-tokens\\) must be a whole number >= 1"),
])
def test_impossible_decoding_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        check_decoding_options(**options)


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
    with pytest.raises(ValueError, match=f"{path}, line 2, is not UTF-8 text"):
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
    with pytest.raises(ValueError, match=f"{packed} is not a readable gzip file"):
        read_sentences(packed)


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
