"""Glossaries (hf_s2s/inference/glossary.py) and the lexical options on the command line: how source terms are found,
what a glossary file may hold, ``hf-s2s translate --glossary`` / ``--shortlist`` against plain decoding, and what the
engines that cannot decode them refuse by name."""

import pytest
from transformers import AutoTokenizer

from hf_s2s.cli.translate import main as translate_main
from hf_s2s.inference.glossary import Glossary
from hf_s2s.models.shortlist import VocabularyShortlist
from tests.saved_folders import save_tiny_model_folder


def test_terms_are_found_by_whole_words_ignoring_case_longest_first():
    glossary = Glossary.from_pairs({"Hund": "dog", "New York": "NYC", "York": "Y", "T-Shirt": "tee"})
    assert glossary.matches("Der hund und der Hund.") == ["dog"]  # once per sentence
    assert glossary.matches("Hunde laufen") == []  # inflected forms are not matched: each is its own entry
    assert glossary.matches("in New York City, York") == ["NYC", "Y"]  # the longest match takes its words
    assert glossary.matches("ein t shirt") == ["tee"]


def test_a_bad_glossary_file_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "g.tsv"
    path.write_text("# comment\nHund\tdog\nKatze cat\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 3: expected 'source term<TAB>target term'"):
        Glossary.from_tsv(path)
    path.write_text("Hund\tdog\nhund\tcanine\n", encoding="utf-8")
    with pytest.raises(ValueError, match="given two target terms"):
        Glossary.from_tsv(path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = save_tiny_model_folder(tmp_path_factory.mktemp("lexical") / "model", "transformer_seq2seq", seed=1)
    size = len(AutoTokenizer.from_pretrained(folder))
    VocabularyShortlist.from_candidates([[]] * size, always=range(size), target_vocab_size=size).save_pretrained(
        folder)
    return folder


def translate_lines(folder, tmp_path, capsys, *options):
    source = tmp_path / "in.txt"
    source.write_text("a b c d e\nf g\nh i j\n", encoding="utf-8")
    assert translate_main([str(folder), "--input", str(source), "--beams", "3", *options]) == 0
    return capsys.readouterr().out.splitlines()


def test_translate_with_a_glossary_writes_each_term_and_leaves_other_sentences_alone(folder, tmp_path, capsys):
    (tmp_path / "g.tsv").write_text("a\tz y\n", encoding="utf-8")
    plain = translate_lines(folder, tmp_path, capsys)
    with_terms = translate_lines(folder, tmp_path, capsys, "--glossary", str(tmp_path / "g.tsv"))
    assert "z y" not in plain[0] and "z y" in with_terms[0]
    assert with_terms[1:] == plain[1:]


def test_translate_with_a_shortlist_of_every_token_gives_the_plain_output(folder, tmp_path, capsys):
    assert translate_lines(folder, tmp_path, capsys, "--shortlist") == translate_lines(folder, tmp_path, capsys)


@pytest.mark.parametrize("options, message", [
    (["--engine", "onnx", "--shortlist"], r"sets shortlist=True \(--shortlist\), which the ONNX runtime does not"),
    (["--int8", "--shortlist"], "--int8 quantizes"),
    (["--plot-alignment", "x.png", "--shortlist"], "--shortlist applies to translations, not to a plot"),
])
def test_what_cannot_decode_the_lexical_options_is_refused_by_name(folder, tmp_path, capsys, options, message):
    with pytest.raises(SystemExit, match=message):
        translate_lines(folder, tmp_path, capsys, *options)


def test_a_folder_without_a_shortlist_says_how_to_build_one(tmp_path, capsys):
    bare = save_tiny_model_folder(tmp_path / "bare", "rnn_seq2seq")
    with pytest.raises(SystemExit, match="build it with hf-s2s build-shortlist"):
        translate_lines(bare, tmp_path, capsys, "--shortlist")
