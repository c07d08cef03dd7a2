"""Glossaries (hf_s2s/models/term_constraints.py) and the lexical options on the command line: how source terms are found,
what a glossary file may hold, ``hf-s2s translate --glossary`` / ``--shortlist`` against plain decoding, and what the
engines that cannot decode them refuse by name. Entries the model cannot use (text that is no Unicode, special-token
spellings, terms longer than the model writes, source terms its tokenizer reads otherwise) are refused before decoding,
naming the line; hypothesis searches the reader's neighbourhood (any layout of entries, blank and comment lines; any
line) and the matching's (any normalization form on either side)."""

import unicodedata

import pytest
import tokenizers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from hf_s2s.cli.translate import main as translate_main
from hf_s2s.inference.engines import open_engine
from hf_s2s.models.shortlist import VocabularyShortlist
from hf_s2s.models.term_constraints import Glossary, words
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


def glossary_file(tmp_path, text: str):
    path = tmp_path / "g.tsv"
    path.write_text(text, encoding="utf-8")
    return path


LONG_TERM = " ".join("abcdefghij"[i % 10] for i in range(200))  # 200 tokens of the tiny tokenizer


@pytest.mark.parametrize("line, message", [
    ("Hund\tx </s>", r"line 2: the target term 'x </s>' spells the special token '</s>', which the model reads as a "
                     r"control token"),
    ("<pad> x\ty", r"line 2: the source term '<pad> x' spells the special token '<pad>'"),
    (f"a\t{LONG_TERM}", r"line 2: the target term 'a b c d e f g h i j [a-j ]*\.\.\.' is \d\d\d tokens, and the "
                        r"model writes at most 127 tokens, </s> included \(max_new_tokens\): shorten the term, or raise "
                        r"max_new_tokens"),
])
def test_entries_the_model_cannot_use_are_refused_before_decoding_naming_the_line(folder, tmp_path, capsys, line,
                                                                                  message):
    """Each was accepted and broke or silently cut the output; now one error line names the file and line, quoting
    at most 60 characters of the entry, before any weights load."""
    path = glossary_file(tmp_path, f"# terms\n{line}\n")
    with pytest.raises(SystemExit, match=rf"error: glossary {path}, {message}") as refused:
        translate_lines(folder, tmp_path, capsys, "--glossary", str(path))
    assert len(str(refused.value)) < 400


def test_a_sentence_whose_terms_together_are_longer_than_the_model_writes_is_refused_naming_it(folder, tmp_path,
                                                                                               capsys):
    half = " ".join("j" for _ in range(35))  # about 70 tokens: each alone fits in 127, the two together do not
    path = glossary_file(tmp_path, f"a\t{half}\nb\t{half} i\n")  # the first line, a b c d e, holds both
    with pytest.raises(SystemExit, match=r"sentence 1 \(counted from 1\) needs the target terms 'j j j.*' and 'j j "
                                         r"j.*' of the glossary .*: 1\d\d tokens with </s>, and the model writes at "
                                         "most 127"):
        translate_lines(folder, tmp_path, capsys, "--glossary", str(path), "--no-length-bound")


def test_text_that_is_no_unicode_is_refused_naming_the_entry():
    with pytest.raises(ValueError, match=r"glossary entry 2 \(counted from 1\): the target term holds a lone surrogate "
                                         r"U\+D800 at character 1"):
        Glossary.from_pairs([("a", "x"), ("b", "y\ud800")])


def test_a_file_that_is_not_utf8_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "g.tsv"
    path.write_bytes(b"a\te\n\xed\xa0\x80\tx\n")  # a surrogate written as UTF-8 (CESU-8): not UTF-8
    with pytest.raises(ValueError, match=rf"glossary {path}, line 2: not UTF-8 text"):
        Glossary.from_tsv(path)


def test_a_source_term_the_models_tokenizer_reads_otherwise_is_refused():
    """A tokenizer that strips accents (BERT's normalization) reads 'Mädchen' as 'madchen': the term could never
    match the text the model reads."""
    words_model = tokenizers.models.WordLevel({"[UNK]": 0, "[PAD]": 1, "madchen": 2, "girl": 3}, unk_token="[UNK]")
    backend = tokenizers.Tokenizer(words_model)
    backend.normalizer = tokenizers.normalizers.BertNormalizer(strip_accents=True, lowercase=True)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]")
    Glossary.from_pairs({"madchen": "girl"}).check(tokenizer)
    with pytest.raises(ValueError, match="glossary entry 1 \\(counted from 1\\): the model's tokenizer reads the source "
                                         "term 'Mädchen' as 'madchen'"):
        Glossary.from_pairs({"Mädchen": "girl"}).check(tokenizer)


def test_a_refusal_of_a_large_glossary_quotes_a_few_entries_only(folder):
    """An engine that cannot apply a glossary names it by its size and first entries: the whole of it was 258,000
    characters for 10,000 entries, on the command line and in a 422 body."""
    glossary = Glossary.from_pairs({f"w{index}": f"target {index}" for index in range(10_000)})
    assert repr(glossary) == "Glossary(10000 entries: 'w0': 'target 0', 'w1': 'target 1', 'w2': 'target 2', ... " \
                             "9997 more)"
    pytest.importorskip("onnxscript")
    with pytest.raises(ValueError, match="which the ONNX runtime does not implement") as refused:
        open_engine(folder, "onnx").options(glossary=glossary)
    assert len(str(refused.value)) < 400


FORMS = ("NFC", "NFD", "NFKC", "NFKD")
accented_words = st.text(alphabet="aeinouçéèäöüñåøÅÉ\u0301\u0308", min_size=1, max_size=8).filter(
    lambda word: words(word))


@given(term=accented_words, written=st.sampled_from(FORMS), read=st.sampled_from(FORMS))
@settings(max_examples=200, derandomize=True, database=None)
def test_a_term_matches_whatever_normalization_form_either_side_is_in(term, written, read):
    """A glossary in NFD (as some editors and file systems write it) matches NFC text, and the other way round: both
    sides are read in one form."""
    glossary = Glossary.from_pairs({unicodedata.normalize(written, term): "T"})
    assert glossary.matches(unicodedata.normalize(read, f"x {term} y")) == ["T"]


safe_text = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="\t\r\n#"),
                    min_size=1, max_size=12).filter(lambda text: text.strip() and words(text))


@given(entries=st.lists(st.tuples(safe_text, safe_text), min_size=1, max_size=6,
                        unique_by=lambda entry: words(entry[0])),
       layout=st.lists(st.sampled_from(["entry", "blank", "comment"]), min_size=1, max_size=14),
       ending=st.sampled_from(["\n", "\r\n"]))
@settings(max_examples=120, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_reader_reads_every_entry_with_its_line_and_skips_the_rest(tmp_path, entries, layout, ending):
    lines, expected, where = [], [], []
    pending = list(entries)
    for kind in [*layout, *["entry"] * len(entries)]:
        if kind == "entry" and pending:
            source, target = pending.pop(0)
            lines.append(f" {source}\t{target} ")
            expected.append((source.strip(), target.strip()))
            where.append(len(lines))
        elif kind == "blank":
            lines.append("   ")
        elif kind == "comment":
            lines.append("# a comment\twith a tab")
    path = tmp_path / "g.tsv"
    path.write_bytes(ending.join(lines).encode("utf-8"))
    glossary = Glossary.from_tsv(path)
    assert glossary.entries == tuple(expected)
    assert [glossary.where(index) for index in range(len(expected))] == [f"glossary {path}, line {n}" for n in where]


@given(line=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=20))
@settings(max_examples=150, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_reader_refuses_any_other_line_naming_it(tmp_path, line):
    """Whatever a line holds, the reader gives its entry or a ValueError naming the file and the line."""
    path = tmp_path / "g.tsv"
    path.write_text(f"a\tb\n{line}\n", encoding="utf-8")
    try:
        glossary = Glossary.from_tsv(path)
    except ValueError as error:
        assert f"glossary {path}, line 2" in str(error)
    else:
        assert glossary.entries[0] == ("a", "b") and len(glossary) in (1, 2)
