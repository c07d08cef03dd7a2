"""Corpus loaders, default corpus resolution, bad input, synthetic text tasks and tokenization of a corpus."""

import gzip
import json
import logging
import os
import re
from pathlib import Path

import pytest
from datasets import DatasetDict, IterableDatasetDict

import hf_s2s
from hf_s2s.cli import run_command
from hf_s2s.data import corpus as data
from hf_s2s.data import encoding
from hf_s2s.data.filters import CorpusFilter, PairFilters
from hf_s2s.data.synthetic import reorder_sentence, text_reversal_corpus, word_reordering_corpus
from hf_s2s.data.tokenization import train_tokenizer
from tests.runs import train_args

PAIRS = [("Ein Hund läuft.", "A dog runs."), ("Zwei Männer.", "Two men."), ("Ein Kind spielt.", "A child plays.")]


def write_lines(path: Path, lines: list[str]) -> Path:
    text = "".join(line + "\n" for line in lines)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_folder(folder: Path, prefixes=("train", "val", "test_2016_flickr"), gz=False, pairs=PAIRS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    for prefix in prefixes:
        write_lines(folder / f"{prefix}.de{suffix}", [de for de, _ in pairs])
        write_lines(folder / f"{prefix}.en{suffix}", [en for _, en in pairs])
    return folder


def as_pairs(split, source_lang="de", target_lang="en") -> list[tuple[str, str]]:
    return [(ex["translation"][source_lang], ex["translation"][target_lang]) for ex in split]


# ------------------------------------------------------------------------------------------------ loaders


@pytest.mark.parametrize("gz", [False, True])
def test_text_folder_maps_multi30k_names_to_splits(tmp_path, gz):
    corpus = data.load_text_folder(write_folder(tmp_path, gz=gz), "de", "en")
    assert isinstance(corpus, DatasetDict)
    assert list(corpus) == ["train", "validation", "test"]
    for split in corpus.values():
        assert split.column_names == ["translation"]
        assert as_pairs(split) == PAIRS


def test_text_folder_reversed_direction(tmp_path):
    corpus = data.load_text_folder(write_folder(tmp_path), "en", "de")
    assert as_pairs(corpus["train"], "en", "de") == [(en, de) for de, en in PAIRS]


def test_text_folder_explicit_prefixes(tmp_path):
    write_folder(tmp_path, prefixes=("train", "valid", "test_2017_mscoco", "test_2016_flickr"))
    corpus = data.load_text_folder(tmp_path, "de", "en", split_prefixes={"test": "test_2017_mscoco"})
    assert list(corpus) == ["train", "validation", "test"]
    with pytest.raises(FileNotFoundError, match=r"split 'test'.*test_2018\.de"):
        data.load_text_folder(tmp_path, "de", "en", split_prefixes={"test": "test_2018"})
    with pytest.raises(ValueError, match=r"unknown split name\(s\) \['dev'\]"):
        data.load_text_folder(tmp_path, "de", "en", split_prefixes={"dev": "val"})


def test_text_folder_streaming(tmp_path):
    corpus = data.load_text_folder(write_folder(tmp_path, gz=True), "de", "en", streaming=True)
    assert isinstance(corpus, IterableDatasetDict)
    assert as_pairs(corpus["test"]) == PAIRS
    assert as_pairs(corpus["test"]) == PAIRS  # a second pass reads the files again


@pytest.mark.parametrize("streaming", [False, True])
def test_jsonl(tmp_path, streaming):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"translation": {"de": de, "en": en}, "id": i}) + "\n"
                            for i, (de, en) in enumerate(PAIRS)), encoding="utf-8")
    corpus = data.load_jsonl({"train": path, "test": path}, "de", "en", streaming=streaming)
    assert isinstance(corpus, IterableDatasetDict if streaming else DatasetDict)
    assert as_pairs(corpus["train"]) == PAIRS and as_pairs(corpus["test"]) == PAIRS
    assert list(next(iter(corpus["train"]))) == ["translation"]
    with pytest.raises(ValueError, match=r"train\.jsonl, line 1: target language 'fr' is not in the translation; "
                                         r"languages there: \['de', 'en'\]"):
        data.load_jsonl(path, "de", "fr", streaming=streaming)


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("name", ["train.tsv", "train.tsv.gz"])
def test_tsv(tmp_path, streaming, name):
    path = write_lines(tmp_path / name, [f"{de}\t{en}" for de, en in PAIRS])
    corpus = data.load_tsv(path, "de", "en", streaming=streaming)
    assert list(corpus) == ["train"]
    assert as_pairs(corpus["train"]) == PAIRS


def test_tsv_wrong_field_count(tmp_path):
    path = write_lines(tmp_path / "train.tsv", ["a\tb", "a\tb\tc"])
    with pytest.raises(ValueError, match=r"train\.tsv, line 2: expected 2 tab-separated fields .* got 3"):
        data.load_tsv(path, "de", "en")


def test_load_translation_corpus_dispatch(tmp_path):
    folder = write_folder(tmp_path / "folder")
    assert as_pairs(data.load_translation_corpus(str(folder), "de", "en")["validation"]) == PAIRS
    for split in ("train", "dev", "test"):
        write_lines(tmp_path / f"{split}.tsv", [f"{de}\t{en}" for de, en in PAIRS])
    corpus = data.load_translation_corpus(str(tmp_path / "{split}.tsv"), "de", "en")
    assert list(corpus) == ["train", "validation", "test"]
    synthetic = data.load_translation_corpus("synthetic:reordering", "en", "xx")
    assert set(synthetic["train"][0]["translation"]) == {"en", "xx"}
    with pytest.raises(ValueError, match=r"unknown synthetic task 'synthetic:copy'"):
        data.load_translation_corpus("synthetic:copy", "src", "tgt")
    with pytest.raises(FileNotFoundError, match=r"missing file for split 'train': .*nothing\.jsonl does not exist"):
        data.load_translation_corpus(str(tmp_path / "nothing.jsonl"), "de", "en")


# ------------------------------------------------------------------------------------------------ bad input


def test_missing_target_file_names_the_path(tmp_path):
    write_folder(tmp_path, prefixes=("val",))
    write_lines(tmp_path / "train.de.gz", ["x"])
    with pytest.raises(FileNotFoundError, match=r"split 'train', language 'en': expected .*train\.en or .*train\.en\.gz"):
        data.load_text_folder(tmp_path, "de", "en")


def test_missing_folder_and_empty_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"corpus folder .*absent does not exist"):
        data.load_text_folder(tmp_path / "absent", "de", "en")
    write_lines(tmp_path / "notes.de", ["x"])
    write_lines(tmp_path / "notes.en", ["x"])
    with pytest.raises(FileNotFoundError, match=r"no split found in .*expected files named like train\.de\[\.gz\]"):
        data.load_text_folder(tmp_path, "de", "en")


def test_unknown_language_lists_available(tmp_path):
    write_folder(tmp_path)
    with pytest.raises(ValueError, match=r"target language 'fr' has no files in .*available there: \['de', 'en'\]"):
        data.load_text_folder(tmp_path, "de", "fr")


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("longer", ["source", "target"])
def test_line_count_mismatch_names_both_files_and_counts(tmp_path, streaming, longer):
    write_lines(tmp_path / "train.de", ["a", "b", "c", "d"] if longer == "source" else ["a", "b"])
    write_lines(tmp_path / "train.en.gz", ["a", "b"] if longer == "source" else ["a", "b", "c", "d", "e"])
    counts = (4, 2) if longer == "source" else (2, 5)
    pattern = rf"not line-aligned: .*train\.de has {counts[0]} lines but .*train\.en\.gz has {counts[1]} lines"
    with pytest.raises(ValueError, match=pattern):
        corpus = data.load_text_folder(tmp_path, "de", "en", streaming=streaming)
        list(corpus["train"])


def test_empty_pairs_are_skipped_and_counted(tmp_path, caplog):
    """Blank as translate sees it: whitespace, and invisible format characters (a line of zero-width spaces holds
    no word, and was trained on as a source that should be translated into "Invisible")."""
    write_lines(tmp_path / "train.de", ["Hallo", "", "Welt", "  ", "\u200b\u200b", "Ja"])
    write_lines(tmp_path / "train.en", ["Hello", "Empty source", "", "Blank", "Invisible", "Yes"])
    with caplog.at_level(logging.WARNING, logger="hf_s2s.data.corpus"):
        corpus = data.load_text_folder(tmp_path, "de", "en")
    assert as_pairs(corpus["train"]) == [("Hallo", "Hello"), ("Ja", "Yes")]
    assert "skipped 4 of 6 pairs in split 'train'" in caplog.text

    tsv = write_lines(tmp_path / "pairs.tsv", ["a\tb", "\tb", "", "c\td"])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_s2s.data.corpus"):
        assert as_pairs(data.load_tsv(tsv, "de", "en")["train"]) == [("a", "b"), ("c", "d")]
    assert "skipped 2 of 4 pairs" in caplog.text


def write_bytes(path: Path, content: bytes) -> Path:
    path.write_bytes(gzip.compress(content) if path.suffix == ".gz" else content)
    return path


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("gz", [False, True])
def test_lone_carriage_return_stays_inside_its_line(tmp_path, caplog, gz, streaming):
    # One lone \r in each file (same line) and one in the source only; \r\n line ends are ordinary line ends.
    suffix = ".gz" if gz else ""
    write_bytes(tmp_path / f"train.de{suffix}", b"Ein\rHund.\r\nZwei\rKatzen.\nDrei.\n")
    write_bytes(tmp_path / f"train.en{suffix}", b"A\rdog.\r\nTwo cats.\nThree.\n")
    write_bytes(tmp_path / f"pairs.tsv{suffix}", b"Ein\rHund.\tA\rdog.\r\nDrei.\tThree.\n")
    with caplog.at_level(logging.WARNING, logger="hf_s2s.data.corpus"):
        folder = data.load_translation_corpus(str(tmp_path), "de", "en", streaming=streaming)
        assert as_pairs(folder["train"]) == [("Ein\rHund.", "A\rdog."), ("Zwei\rKatzen.", "Two cats."),
                                             ("Drei.", "Three.")]
    assert f"train.de{suffix}: 2 line(s) hold a carriage return (\\r) that does not end the line" in caplog.text
    assert f"train.en{suffix}: 1 line(s) hold a carriage return" in caplog.text
    tsv = data.load_translation_corpus(str(tmp_path / f"pairs.tsv{suffix}"), "de", "en", streaming=streaming)
    assert as_pairs(tsv["train"]) == [("Ein\rHund.", "A\rdog."), ("Drei.", "Three.")]


def test_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    (tmp_path / "train.de").write_text("Ein Hund.\nZwei.\n", encoding="utf-8-sig")
    (tmp_path / "train.en").write_text("A dog.\nTwo.\n", encoding="utf-8-sig")
    assert as_pairs(data.load_text_folder(tmp_path, "de", "en")["train"]) == [("Ein Hund.", "A dog."), ("Zwei.", "Two.")]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("name", ["train.de", "train.de.gz", "train.tsv", "train.jsonl"])
def test_non_utf8_bytes_name_the_file_and_the_line(tmp_path, name, streaming):
    line = "Käse".encode("latin-1")  # b"K\xe4se"
    if name.startswith("train.de"):
        write_bytes(tmp_path / name, b"Ein Hund.\n" + line + b"\n")
        write_lines(tmp_path / "train.en", ["A dog.", "Cheese."])
        dataset = str(tmp_path)
    elif name.endswith(".tsv"):
        dataset = str(write_bytes(tmp_path / name, b"Ein Hund.\tA dog.\n" + line + b"\tCheese.\n"))
    else:
        good = json.dumps({"translation": {"de": "Ein Hund.", "en": "A dog."}}).encode()
        dataset = str(write_bytes(tmp_path / name, good + b"\n" + good.replace(b"Ein Hund.", line) + b"\n"))
    with pytest.raises(ValueError, match=rf"{name}, line 2: not UTF-8 \(byte 0xe4 at byte \d+ of the line\)"):
        list(data.load_translation_corpus(dataset, "de", "en", streaming=streaming)["train"])


def test_damaged_gzip_names_the_file(tmp_path):
    write_lines(tmp_path / "train.de.gz", [f"Satz {i}." for i in range(2000)])
    write_lines(tmp_path / "train.en.gz", [f"Sentence {i}." for i in range(2000)])
    path = tmp_path / "train.de.gz"
    path.write_bytes(path.read_bytes()[:-40])  # cut off the end, as an interrupted download does
    with pytest.raises(ValueError, match=r"train\.de\.gz: damaged gzip file, unreadable from line \d+ on"):
        data.load_text_folder(tmp_path, "de", "en")


def jsonl_line(**row) -> str:
    return json.dumps(row)


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    "bad_line, message",
    [
        (jsonl_line(translation={"de": "Zwei."}), r"line 2: target language 'en' is not in the translation; "
                                                  r"languages there: \['de'\]"),
        (jsonl_line(translation={"de": "Zwei.", "en ": "Two."}), r"line 2: target language 'en' is not in"),
        (jsonl_line(translation={"de": "Zwei.", "en": "Two.", "fr": "Deux."}),
         r"line 2: the row adds the field 'translation\.fr', unlike line 1; every row must have the fields "
         r"\['id', 'translation', 'translation\.de', 'translation\.en'\]"),
        (jsonl_line(translation={"de": "Zwei.", "en": "Two."}), r"line 2: the row lacks the field 'id', unlike line 1"),
        (jsonl_line(translation={"de": "Zwei.", "en": "Two."}, id=2, source="web"),
         r"line 2: the row adds the field 'source'"),
        (jsonl_line(translation={"de": "Zwei.", "en": 2}, id=2),
         r"line 2: the field 'translation\.en' is a JSON int, expected a string"),
        (jsonl_line(translation=["Zwei.", "Two."], id=2), r"line 2: expected an object with a 'translation' object"),
        ('{"translation": {"de": "Zwei.", "en": "Two."}', r"line 2: not valid JSON \(Expecting ',' delimiter at "
                                                           r"column 46\); expected one object per line"),
    ],
)
def test_jsonl_rows_that_lack_or_add_fields_name_the_file_line_and_field(tmp_path, bad_line, message, streaming):
    path = tmp_path / "train.jsonl"
    path.write_text(jsonl_line(translation={"de": "Ein Hund.", "en": "A dog."}, id=1) + "\n" + bad_line + "\n",
                    encoding="utf-8")
    with pytest.raises(ValueError, match=r".*train\.jsonl, " + message):
        list(data.load_jsonl(path, "de", "en", streaming=streaming)["train"])


def test_jsonl_null_and_blank_lines_are_empty_pairs(tmp_path, caplog):
    path = tmp_path / "train.jsonl"
    rows = [{"de": "Ein Hund.", "en": "A dog."}, {"de": "Zwei.", "en": None}, {"de": "Drei.", "en": "Three."}]
    path.write_text("\n".join(jsonl_line(translation=row) for row in rows) + "\n\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="hf_s2s.data.corpus"):
        assert as_pairs(data.load_jsonl(path, "de", "en")["train"]) == [("Ein Hund.", "A dog."), ("Drei.", "Three.")]
    assert "skipped 2 of 4 pairs in split 'train'" in caplog.text


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("kind", ["folder", "tsv", "jsonl"])
@pytest.mark.parametrize("content", ["", "\n \n"])
def test_a_split_without_pairs_is_an_error_naming_its_files(tmp_path, kind, content, streaming):
    write_folder(tmp_path, prefixes=("train",))
    if kind == "folder":
        (tmp_path / "val.de").write_text(content)
        (tmp_path / "val.en").write_text(content)
        dataset, where = str(tmp_path), r".*val\.de / .*val\.en"
    else:
        write_lines(tmp_path / f"train.{kind}", ["Ein Hund.\tA dog." if kind == "tsv" else
                                                 jsonl_line(translation={"de": "Ein Hund.", "en": "A dog."})])
        (tmp_path / f"dev.{kind}").write_text(content)
        dataset, where = str(tmp_path / f"{{split}}.{kind}"), rf".*dev\.{kind}"
    reason = "the file\\(s\\) hold no lines" if not content else "all 2 have an empty source or target"
    with pytest.raises(ValueError, match=rf"split 'validation' \({where}\) has no pairs: {reason}"):
        data.load_translation_corpus(dataset, "de", "en", streaming=streaming)


def test_plain_and_gzip_copies_of_one_file_are_an_error(tmp_path):
    write_folder(tmp_path)
    write_lines(tmp_path / "val.en.gz", ["Another dog."] * 3)
    with pytest.raises(ValueError, match=r"both .*val\.en and .*val\.en\.gz exist; keep one of them"):
        data.load_text_folder(tmp_path, "de", "en")


@pytest.mark.parametrize("kind", ["folder", "tsv", "synthetic:reversal"])
def test_equal_source_and_target_languages_are_an_error(tmp_path, kind):
    # In one translation dict the target would overwrite the source: a TSV's first column would be lost.
    if kind == "folder":
        dataset = str(write_folder(tmp_path))
    elif kind == "tsv":
        dataset = str(write_lines(tmp_path / "train.tsv", ["Ein Hund.\tA dog."]))
    else:
        dataset = kind
    with pytest.raises(ValueError, match=r"the source and target languages are both 'de'; give two different codes"):
        data.load_translation_corpus(dataset, "de", "de")


def test_check_splits_names_the_missing_split(tmp_path):
    corpus = data.load_text_folder(write_folder(tmp_path, prefixes=("val", "test")), "de", "en")
    data.check_splits(corpus, str(tmp_path), {"validation": "evaluation"})
    with pytest.raises(ValueError, match=r"the corpus .* has no 'train' split, which training needs; its splits: "
                                         r"\['validation', 'test'\] \(.* train files are named train\)"):
        data.check_splits(corpus, str(tmp_path), {"train": "training", "validation": "evaluation"})


def test_corpus_splits_are_known_from_the_file_names_before_anything_is_read(tmp_path, monkeypatch):
    """So that a job refuses a corpus without a split it needs before reading it; None where only loading tells."""
    write_folder(tmp_path / "folder", prefixes=("train", "test_2016_flickr"), gz=True)
    write_lines(tmp_path / "train.tsv", ["Ein Hund.\tA dog."])
    write_lines(tmp_path / "dev.tsv", ["Ein Hund.\tA dog."])
    assert data.corpus_splits(str(tmp_path / "folder"), "de", "en") == ["train", "test"]
    assert data.corpus_splits(str(tmp_path / "{split}.tsv"), "de", "en") == ["train", "validation"]
    assert data.corpus_splits(str(tmp_path / "train.tsv"), "de", "en") == ["train"]
    assert data.corpus_splits("synthetic:reversal", "src", "tgt") == ["train", "validation", "test"]
    assert data.corpus_splits("someone/corpus", "de", "en") is None  # a Hub name: only loading tells
    monkeypatch.chdir(tmp_path)
    for missing in ("folder/missing", "missing.tsv", "./missing", "no/such/corpus"):
        with pytest.raises(FileNotFoundError, match=rf"--dataset {missing} does not exist \(a local path, not a Hub "):
            data.corpus_splits(missing, "de", "en", flag="--dataset")
    with pytest.raises(ValueError, match=r"a \{split\} pattern names .jsonl/.json/.tsv files"):
        data.corpus_splits(str(tmp_path / "folder" / "{split}.de.gz"), "de", "en")


@pytest.mark.parametrize("command", ["train", "train-tokenizer"])
@pytest.mark.parametrize(("languages", "removed", "message"), [
    (("fr", "en"), None, r"source language 'fr' has no files in {folder}; languages available there: \['de', 'en'\]"),
    (("de", "fr"), None, r"target language 'fr' has no files in {folder}; languages available there: \['de', 'en'\]"),
    (("de", "en"), "train.de", r"missing file for split 'train', language 'de': expected {folder}/train.de or "
                               r"{folder}/train.de.gz"),
    (("de", "en"), "val.en", r"missing file for split 'validation', language 'en': expected {folder}/val.en or "),
], ids=["source-language", "target-language", "source-side-of-train", "target-side-of-validation"])
def test_a_missing_language_or_side_is_named_as_such_not_as_a_missing_split(tmp_path, command, languages, removed,
                                                                             message):
    """A folder without the source language's files, or a split with one side's file only, is named as what it is,
    before anything is read, by both commands that train (before: "the corpus has no 'train' split")."""
    folder = write_folder(tmp_path / "corpus")
    if removed:
        (folder / removed).unlink()
    source, target = languages
    argv = ["--dataset", str(folder), "--source_lang", source, "--target_lang", target]
    argv = train_args(tmp_path / "out", *argv) if command == "train" else [*argv, "--output_dir", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as stopped:
        run_command(command, argv)
    said = str(stopped.value.code)
    assert re.match("error: " + message.format(folder=re.escape(str(folder))), said) and "\n" not in said, said
    assert not (tmp_path / "out").exists()


def test_a_missing_local_corpus_is_named_not_looked_up_on_the_hub(tmp_path, monkeypatch):
    """"corpus.txt" or "data/corpus" beside a data/ folder said "Couldn't reach ... on the Hub"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for missing in ("corpus.txt", "data/corpus"):
        with pytest.raises(FileNotFoundError, match=rf"^{missing} does not exist \(expected a corpus folder"):
            data.load_translation_corpus(missing, "de", "en")
    with pytest.raises(FileNotFoundError, match=r"^someone/corpus is neither a local corpus \(no such file or folder "
                                                r"here\) nor a Hub dataset that could be loaded: "):
        data.load_translation_corpus("someone/corpus", "de", "en")  # tests are offline


@pytest.mark.parametrize(
    "prefixes, flags, message",
    [
        (("val", "test"), [], r"the corpus .* has no 'train' split, which training needs"),
        (("train", "test"), [], r"has no 'validation' split, which evaluation \(--eval_strategy is not 'no'\) needs"),
        (("train", "val", "test"), ["--max_train_samples", "0"],
         r"--max_train_samples must be a positive number of pairs \(or left out for all\), got 0"),
        (("train", "val", "test"), ["--max_eval_samples", "-1"], r"--max_eval_samples must be a positive number"),
    ],
)
def test_training_job_refuses_a_corpus_it_cannot_use_before_training_a_tokenizer(tmp_path, prefixes, flags, message):
    from hf_s2s.training.run import parse_args, run

    corpus = write_folder(tmp_path / "corpus", prefixes=prefixes)
    output_dir = tmp_path / "run"
    args = parse_args(["--dataset", str(corpus), "--output_dir", str(output_dir), "--vocab_size", "300",
                       "--use_cpu", "true", "--report_to", "none", *flags])
    with pytest.raises(ValueError, match=message):
        run(*args)
    assert not (output_dir / "tokenizer").exists()


# ------------------------------------------------------------------------------------------------ resolution


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    return monkeypatch


def test_resolution_order(tmp_path, no_env):
    explicit, from_env = write_folder(tmp_path / "explicit"), write_folder(tmp_path / "env")
    no_env.setenv(data.DATA_DIR_ENV, str(from_env))
    assert data.resolve_data_dir(explicit) == explicit
    assert data.resolve_data_dir(None) == from_env
    no_env.delenv(data.DATA_DIR_ENV)
    assert data.resolve_data_dir(None) is None


def test_explicit_dir_that_does_not_exist_is_an_error(tmp_path, no_env):
    with pytest.raises(FileNotFoundError, match=r"data_dir points to .*nowhere, which is not a folder; pass --data_dir"):
        data.load_multi30k(data_dir=tmp_path / "nowhere")
    no_env.setenv(data.DATA_DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"\$HF_S2S_DATA_DIR points to .*nowhere"):
        data.load_multi30k()


def test_nothing_reachable_says_what_to_pass(no_env):
    # Tests run offline (conftest), so the Hub attempt fails too.
    with pytest.raises(FileNotFoundError) as error:
        data.load_multi30k()
    message = str(error.value)
    assert "Pass --data_dir DIR (data_dir=DIR) or set HF_S2S_DATA_DIR=DIR" in message
    assert "train.de.gz, train.en.gz" in message and "'bentrevett/multi30k' from the Hub:" in message
    with pytest.raises(FileNotFoundError, match=r"Hub: not tried \(hub_name=None\)"):
        data.load_multi30k(hub_name=None)


def test_the_library_never_looks_beside_the_checkout(no_env, tmp_path):
    """Only --data_dir and $HF_S2S_DATA_DIR name a local corpus: run from a folder with ../shared/data/multi30k
    beside it, the library still finds none (the checkout's scripts set the variable, below)."""
    write_folder(tmp_path / "shared" / "data" / "multi30k")
    (tmp_path / "work").mkdir()
    no_env.chdir(tmp_path / "work")
    assert data.resolve_data_dir() is None


def test_the_checkouts_scripts_point_the_library_at_the_shared_copy(no_env):
    from checkout import SHARED_MULTI30K, use_shared_corpus  # scripts/checkout.py (on sys.path: conftest)

    assert SHARED_MULTI30K == Path(hf_s2s.__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
    use_shared_corpus(["--data_dir", "elsewhere"])
    assert os.environ.get(data.DATA_DIR_ENV) is None  # an explicit folder wins
    if not SHARED_MULTI30K.is_dir():
        pytest.skip(f"no shared Multi30k at {SHARED_MULTI30K}")
    use_shared_corpus([])
    assert data.resolve_data_dir() == SHARED_MULTI30K
    corpus = data.load_multi30k("de", "en", streaming=True)
    first = next(iter(corpus["test"]))["translation"]
    assert first == {"de": "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
                     "en": "A man in an orange hat starring at something."}


# ------------------------------------------------------------------------------------------------ synthetic


def test_text_reversal_corpus():
    corpus = text_reversal_corpus(50, 5, 5, num_symbols=6, min_len=2, max_len=4, seed=3)
    assert {k: len(v) for k, v in corpus.items()} == {"train": 50, "validation": 5, "test": 5}
    for src, tgt in as_pairs(corpus["train"], "src", "tgt"):
        assert tgt.split() == src.split()[::-1] and 2 <= len(src.split()) <= 4
        assert set(src.split()) <= set("abcdef")
    assert as_pairs(corpus["test"], "src", "tgt") == as_pairs(text_reversal_corpus(50, 5, 5, num_symbols=6, min_len=2,
                                                                                     max_len=4, seed=3)["test"], "src", "tgt")


def test_word_reordering():
    assert reorder_sentence("the big dog sees a cat") == "ka hundo garu mi kato vidas"
    assert reorder_sentence("a man likes the small red bird") == "mi viro ka fogo tini roso amas"
    corpus = word_reordering_corpus(20, 2, 2)
    for src, tgt in as_pairs(corpus["train"], "src", "tgt"):
        assert tgt == reorder_sentence(src) and len(tgt.split()) == len(src.split())


# ------------------------------------------------------------------------------------------------ tokenize


@pytest.fixture(scope="module")
def reordering():
    corpus = word_reordering_corpus(300, 20, 20)
    return corpus, train_tokenizer(corpus, "src", "tgt", vocab_size=320)


def test_tokenize_corpus_columns_and_truncation_counts(reordering, caplog):
    corpus, tokenizer = reordering
    sources = [ex["translation"]["src"] for ex in corpus["train"]]
    targets = [ex["translation"]["tgt"] for ex in corpus["train"]]
    full = tokenizer(sources)["input_ids"]
    limit = sorted(len(ids) for ids in full)[len(full) // 2]  # the median length: about half get cut
    expected_cut = sum(len(ids) > limit for ids in full)
    assert 0 < expected_cut < len(full)
    with caplog.at_level(logging.WARNING, logger="hf_s2s.data.encoding"):
        tokenized, stats = encoding.tokenize_corpus(corpus, tokenizer, "src", "tgt", max_source_length=limit,
                                                    max_target_length=256, return_stats=True)
    train = tokenized["train"]
    assert train.column_names == ["input_ids", "attention_mask", "labels"]
    assert stats["train"] == encoding.TruncationStats(len(full), expected_cut, 0)
    assert f"truncated {expected_cut} of {len(full)} sources" in caplog.text
    # Same as the tokenizer's own truncation (which keeps the final </s>).
    assert train["input_ids"] == tokenizer(sources, truncation=True, max_length=limit)["input_ids"]
    assert train["labels"] == tokenizer(text_target=targets)["input_ids"]
    assert all(ids[-1] == tokenizer.eos_token_id for ids in train["input_ids"])
    assert all(mask == [1] * len(ids) for mask, ids in zip(train["attention_mask"], train["input_ids"], strict=True))


def test_tokenize_corpus_streaming_equals_in_memory(reordering):
    corpus, tokenizer = reordering
    streamed = IterableDatasetDict({k: v.to_iterable_dataset() for k, v in corpus.items()})
    tokenized = encoding.tokenize_corpus(corpus, tokenizer, "src", "tgt", 8, 8)
    tokenized_stream = encoding.tokenize_corpus(streamed, tokenizer, "src", "tgt", 8, 8)
    assert isinstance(tokenized_stream, IterableDatasetDict)
    assert list(tokenized_stream["test"]) == list(tokenized["test"])


def test_tokenize_corpus_in_two_processes_equals_one_filters_and_counts_included(reordering):
    """--preprocessing_num_workers: the same rows, truncation counts and filter counts as one process."""
    corpus, tokenizer = reordering
    outcomes = []
    for num_proc in (None, 2):
        corpus_filter = CorpusFilter(PairFilters(max_source_tokens=12, duplicates=True), ("train",), "src", "tgt")
        texts = corpus_filter.filter_texts(DatasetDict(corpus))
        tokenized, stats = encoding.tokenize_corpus(texts, tokenizer, "src", "tgt", max_source_length=10,
                                                    num_proc=num_proc, return_stats=True,
                                                    corpus_filter=corpus_filter)
        outcomes.append((tokenized["train"]["input_ids"][:], stats, corpus_filter.counts()))
    assert outcomes[0] == outcomes[1]
    counts = outcomes[0][2]["train"]
    assert counts.removed["source_too_long"] > 0 and outcomes[0][1]["train"].source_truncated > 0


def test_tokenize_corpus_rejects_bad_limits(reordering):
    corpus, tokenizer = reordering
    with pytest.raises(ValueError, match=r"`max_source_length` must be None or an integer >= 2.*got 1"):
        encoding.tokenize_corpus(corpus, tokenizer, "src", "tgt", max_source_length=1)
