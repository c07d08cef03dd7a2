"""``hf-s2s build-shortlist`` and the builder behind it (hf_s2s/models/shortlist.py) on a small corpus
written to disk whose word translations are known: what it writes and where, what bad input and options it refuses
before reading the corpus, that it never replaces a file it did not write, and that a shortlist built for another
direction or tokenizer than the folder's is refused by name (at build time, and when decoding)."""

import json

import pytest
from transformers import AutoTokenizer

from hf_s2s.cli.build_shortlist import main as build_main
from hf_s2s.cli.translate import main as translate_main
from hf_s2s.data.tokenization import train_tokenizer_from_texts
from hf_s2s.models.shortlist import SHORTLIST_FILE, VocabularyShortlist, build_shortlist, shortlist_from_texts
from tests.saved_folders import TEXTS, save_tiny_model_folder

# each source letter is translated by one target letter, the target word order reversed
LEXICON = {"a": "e", "b": "f", "c": "g", "d": "h"}
PAIRS = [(" ".join(words), " ".join(LEXICON[word] for word in reversed(words)))
         for words in ([x, y] for x in "abcd" for y in "abcd" if x != y)] + [("a", "e"), ("a b c", "g f e")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny_model_folder(tmp_path_factory.mktemp("build") / "model", "transformer_seq2seq")


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("".join(f"{source}\t{target}\n" for source, target in PAIRS), encoding="utf-8")
    return path


def token(tokenizer, word: str) -> int:
    (found,) = tokenizer(word, add_special_tokens=False)["input_ids"]
    return found


def test_the_cli_writes_each_source_words_translation_first_into_the_folder(folder, corpus, tmp_path, capsys):
    output = tmp_path / "out" / SHORTLIST_FILE
    output.parent.mkdir()
    assert build_main([str(folder), "--dataset", str(corpus), "--best", "2", "--first", "1", "--output",
                       str(output)]) == 0
    assert f"shortlist of {len(PAIRS)} de -> en sentence pairs" in capsys.readouterr().out
    tokenizer = AutoTokenizer.from_pretrained(folder)
    shortlist = VocabularyShortlist.load(output)
    assert shortlist.source_vocab_size == shortlist.target_vocab_size == len(tokenizer)
    for source, target in LEXICON.items():
        candidates = shortlist.candidates(token(tokenizer, source))
        assert len(candidates) == 2 and candidates[0] == token(tokenizer, target)
    # the most frequent target word (e: in every pair holding a) and every special token, for every batch
    assert set(shortlist.always.tolist()) == {token(tokenizer, "e"), *tokenizer.all_special_ids}
    assert shortlist.metadata["best"] == "2" and shortlist.metadata["dataset"] == str(corpus)


def test_by_default_it_saves_in_the_folder_where_translate_reads_it(tmp_path, corpus):
    model = save_tiny_model_folder(tmp_path / "model", "rnn_seq2seq")
    assert build_main([str(model), "--dataset", str(corpus)]) == 0
    assert VocabularyShortlist.from_pretrained(model).metadata["first"] == "100"


@pytest.mark.parametrize("options, message", [
    (["--best", "-1"], "--best must be >= 0, got -1"),
    (["--iterations", "0"], "--iterations must be >= 1"),
    (["--first", "0", "--best", "0"], "would keep only the special tokens"),
])
def test_bad_options_are_refused_before_anything_is_written(folder, corpus, tmp_path, options, message):
    output = tmp_path / "s.safetensors"
    with pytest.raises(SystemExit, match=message):
        build_main([str(folder), "--dataset", str(corpus), "--output", str(output), *options])
    assert not output.exists()


def test_a_corpus_without_a_train_split_or_with_a_bad_line_is_refused_by_name(folder, corpus, tmp_path):
    output = tmp_path / "s.safetensors"
    (tmp_path / "held_out").mkdir()
    (tmp_path / "held_out" / "test.tsv").write_text("a\te\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="has no 'train' split, which building the shortlist needs"):
        build_main([str(folder), "--dataset", str(tmp_path / "held_out" / "{split}.tsv"), "--output", str(output)])
    corpus.write_text("a\te\nb f\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="line 2: expected 2 tab-separated fields"):
        build_main([str(folder), "--dataset", str(corpus), "--output", str(output)])
    assert not output.exists()


def test_it_replaces_only_its_own_shortlist_and_only_with_overwrite(folder, corpus, tmp_path):
    output = tmp_path / "s.safetensors"
    output.write_text("someone else's file\n", encoding="utf-8")
    for extra in ([], ["--overwrite"]):
        with pytest.raises(SystemExit, match="exists"):
            build_main([str(folder), "--dataset", str(corpus), "--output", str(output), *extra])
        assert output.read_text(encoding="utf-8") == "someone else's file\n"
    output.unlink()
    assert build_main([str(folder), "--dataset", str(corpus), "--output", str(output), "--best", "1"]) == 0
    with pytest.raises(SystemExit, match="pass --overwrite"):
        build_main([str(folder), "--dataset", str(corpus), "--output", str(output), "--best", "3"])
    assert VocabularyShortlist.load(output).metadata["best"] == "1"
    assert build_main([str(folder), "--dataset", str(corpus), "--output", str(output), "--best", "3",
                       "--overwrite"]) == 0
    assert VocabularyShortlist.load(output).metadata["best"] == "3"


def test_the_builder_refuses_token_ids_outside_the_vocabulary():
    with pytest.raises(ValueError, match="source token id 9, outside the source vocabulary of 5"):
        build_shortlist([[1, 9]], [[2]], source_vocab_size=5, target_vocab_size=5, special_target_ids=[0])
    with pytest.raises(ValueError, match="target token id 7, outside the target vocabulary of 5"):
        build_shortlist([[1]], [[7]], source_vocab_size=5, target_vocab_size=5, special_target_ids=[0])


def with_direction(folder, source_lang: str, target_lang: str):
    """The folder as hf-s2s train leaves it: its results.json names the direction it translates."""
    (folder / "results.json").write_text(json.dumps({"model_type": "transformer_seq2seq", "source_lang": source_lang,
                                                     "target_lang": target_lang}), encoding="utf-8")
    return folder


def test_the_folders_direction_is_the_default_and_flags_that_contradict_it_are_refused(tmp_path):
    model = with_direction(save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq"), "en", "de")
    corpus = tmp_path / "train.jsonl"
    corpus.write_text("".join(json.dumps({"translation": {"de": target, "en": source}}) + "\n"
                              for source, target in PAIRS), encoding="utf-8")
    with pytest.raises(SystemExit, match=r"translates en -> de \(its results.json\), and --source_lang de "
                                         r"--target_lang en would build a shortlist for de -> en"):
        build_main([str(model), "--dataset", str(corpus), "--source_lang", "de", "--target_lang", "en"])
    assert not (model / SHORTLIST_FILE).exists()
    assert build_main([str(model), "--dataset", str(corpus)]) == 0  # en -> de, the folder's
    metadata = VocabularyShortlist.from_pretrained(model).metadata
    assert (metadata["source_lang"], metadata["target_lang"]) == ("en", "de")


def test_decoding_refuses_a_shortlist_of_the_reverse_direction_or_another_tokenizer(folder, corpus, tmp_path):
    """Both decode without an error otherwise: the sizes are the folder's, only the contents are wrong."""
    model = with_direction(save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq"), "de", "en")
    source = tmp_path / "in.txt"
    source.write_text("a b\n", encoding="utf-8")
    tokenizer = AutoTokenizer.from_pretrained(model)
    sources, targets = zip(*PAIRS, strict=True)
    reverse = shortlist_from_texts(tokenizer, targets, sources, source_vocab_size=len(tokenizer),
                                   target_vocab_size=len(tokenizer), metadata={"source_lang": "en", "target_lang": "de"})
    reverse.save_pretrained(model)
    with pytest.raises(SystemExit, match=r"built for en -> de \(the reverse direction\), and .* translates de -> en: "
                                         r"build one for this direction with hf-s2s build-shortlist .* --source_lang de"):
        translate_main([str(model), "--input", str(source), "--shortlist"])
    other = train_tokenizer_from_texts([text.upper() for text in TEXTS], vocab_size=len(tokenizer), min_frequency=1)
    assert len(other) == len(tokenizer)
    shortlist_from_texts(other, sources, targets, source_vocab_size=len(tokenizer), target_vocab_size=len(tokenizer),
                         metadata={"source_lang": "de", "target_lang": "en"}).save_pretrained(model)
    with pytest.raises(SystemExit, match="built with another tokenizer than .*: build it again with hf-s2s "
                                         "build-shortlist"):
        translate_main([str(model), "--input", str(source), "--shortlist"])
