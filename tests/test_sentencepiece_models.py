"""SentencePiece models as fast tokenizers: the .model reader against sentencepiece's own protobuf, the converted
tokenizer against sentencepiece itself on real Multi30k text (ids and decoding, line for line), the saved folder
without hf_s2s, the special ids of a user's model, training with the sentencepiece library, and the refusals."""

import io
import json
import random
import re
import subprocess
import sys

import pytest
from transformers import AutoConfig, AutoTokenizer

from hf_s2s.cli import run_command
from hf_s2s.data import corpus as data
from hf_s2s.data.sentencepiece_models import (
    parse_model,
    read_model,
    sentencepiece_differences,
    sentencepiece_tokenizer,
    train_sentencepiece_model,
)
from hf_s2s.data.tokenization import (
    check_tokenizer_fits_model,
    load_given_tokenizer,
    special_token_ids,
    train_tokenizer_from_texts,
)
from tests.helpers import TINY, multi30k_lines, run_without_hf_s2s
from tests.runs import train_args

spm = pytest.importorskip("sentencepiece")

# Text sentencepiece and tokenizers may treat differently: whitespace of every kind, characters no model has seen,
# NFKC cases, "▁" typed in the text, an empty line, a long run.
ODD_LINES = ["", " ", "  Ein  Hund\tläuft \n", "\u00a0nbsp\u3000ideographic space", "Ein Schneemann ☃ und 😀 — ǅ",
             "ﬁne ①", "e\u0301", "a\rb", "▁x ▁ ▁▁y", "x▁", "日本語のテキスト", "\u200bzero\u200dwidth", "ÀÉÎÕÜ ßẞ",
             "12345 67,89", "A" * 300]
# Text that spells special tokens: the fast tokenizer reads them as those tokens, sentencepiece as characters.
SPECIAL_SPELLING = "<s> </s> <unk> <pad>"




@pytest.fixture(scope="module")
def training_text():
    return multi30k_lines("train.de.gz")[:4000] + multi30k_lines("train.en.gz")[:4000]


@pytest.fixture(scope="module")
def test_lines():
    """Validation and test sentences in four languages (cs and fr hold characters the de+en models never saw)."""
    return (multi30k_lines("val.de.gz") + multi30k_lines("val.en.gz") + multi30k_lines("test_2016_flickr.de.gz")
            + multi30k_lines("test_2016_flickr.cs.gz")[:500] + multi30k_lines("test_2016_flickr.fr.gz")[:500]
            + ODD_LINES)


def user_model(texts, model_type="unigram", vocab_size=1000, **options) -> bytes:
    """A .model as users bring them: sentencepiece's own defaults (unk 0, bos 1, eos 2, no pad, coverage 0.9995)."""
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=writer, model_type=model_type,
                                   vocab_size=vocab_size, minloglevel=2, num_threads=1, **options)
    return writer.getvalue()


@pytest.fixture(scope="module")
def user_models(training_text):
    return {(kind, fallback): user_model(training_text, kind, byte_fallback=fallback)
            for kind in ("unigram", "bpe") for fallback in (False, True)}


def test_the_model_reader_gives_what_sentencepiece_wrote(user_models):
    pb2 = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")
    for serialized in user_models.values():
        proto = pb2.ModelProto()
        proto.ParseFromString(serialized)
        model = parse_model(serialized)
        assert model.pieces == [(p.piece, pytest.approx(p.score), p.type) for p in proto.pieces]
        spec, normalizer = proto.trainer_spec, proto.normalizer_spec
        assert (model.model_type, model.byte_fallback, model.unk_id, model.bos_id, model.eos_id, model.pad_id) == \
            (spec.model_type, spec.byte_fallback, spec.unk_id, spec.bos_id, spec.eos_id, spec.pad_id)
        assert (model.precompiled_charsmap, model.add_dummy_prefix, model.remove_extra_whitespaces) == \
            (normalizer.precompiled_charsmap, normalizer.add_dummy_prefix, normalizer.remove_extra_whitespaces)
        assert model.pad_id == -1 and model.precompiled_charsmap  # the defaults the tests below rely on


@pytest.mark.parametrize("byte_fallback", [False, True], ids=["unk", "byte-fallback"])
@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_the_fast_tokenizer_encodes_and_decodes_like_sentencepiece(user_models, test_lines, model_type,
                                                                     byte_fallback):
    model = parse_model(user_models[model_type, byte_fallback])
    tokenizer = sentencepiece_tokenizer(model)
    differences = sentencepiece_differences(tokenizer, model, [*test_lines, SPECIAL_SPELLING])
    assert len(test_lines) > 4000
    assert differences["ids"] == [len(test_lines)], "only the line that spells special tokens may differ"
    assert differences["decode"] == []
    # lines with <unk>: only without byte fallback (characters outside the default coverage of 0.9995); their ids
    # match too, and their decoding once <unk> is written as sentencepiece writes it (" ⁇ ")
    assert len(differences["unk"]) == (0 if byte_fallback else 897)
    # sentences end with </s>, at the model's own id
    assert tokenizer("Ein Hund.")["input_ids"][-1] == model.eos_id == 2


def test_a_user_models_special_ids_and_the_model_config_that_follows(user_models):
    model = parse_model(user_models["unigram", False])
    tokenizer = sentencepiece_tokenizer(model)
    assert (tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert tokenizer.pad_token_id == len(model.pieces) == len(tokenizer) - 1  # appended, as MarianMT's
    ids = special_token_ids(tokenizer)
    assert ids == {"pad_token_id": 1000, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1}
    config = AutoConfig.for_model("transformer_seq2seq", vocab_size=len(tokenizer), **ids)
    check_tokenizer_fits_model(tokenizer, config)


def test_a_model_without_bos_starts_the_decoder_from_pad(training_text):
    tokenizer = sentencepiece_tokenizer(parse_model(user_model(training_text[:2000], bos_id=-1, pad_id=3)))
    assert tokenizer.bos_token_id is None and tokenizer.pad_token_id == 3
    ids = special_token_ids(tokenizer)
    assert ids["decoder_start_token_id"] == 3
    check_tokenizer_fits_model(tokenizer, AutoConfig.for_model("rnn_seq2seq", vocab_size=len(tokenizer), **ids))


def test_separate_models_share_special_ids_or_are_refused(training_text, tmp_path):
    german, english = training_text[:4000], training_text[4000:]
    (tmp_path / "de.model").write_bytes(user_model(german, vocab_size=900, character_coverage=1.0))
    (tmp_path / "en.model").write_bytes(user_model(english, vocab_size=800, character_coverage=1.0))
    with pytest.raises(ValueError, match=r"put special tokens at different ids \(pad_token_id 900 vs 800.*--pad_id"):
        load_given_tokenizer(tmp_path / "de.model", tmp_path / "en.model")
    (tmp_path / "en.model").write_bytes(user_model(english, vocab_size=900, character_coverage=1.0))
    tokenizer = load_given_tokenizer(tmp_path / "de.model", tmp_path / "en.model")
    assert type(tokenizer).__name__ == "SeparateVocabTokenizer"
    source = spm.SentencePieceProcessor(model_file=str(tmp_path / "de.model"))
    target = spm.SentencePieceProcessor(model_file=str(tmp_path / "en.model"))
    assert tokenizer(german[:50])["input_ids"] == [ids + [2] for ids in source.encode(german[:50])]
    assert tokenizer(text_target=english[:50])["input_ids"] == [ids + [2] for ids in target.encode(english[:50])]
    assert tokenizer.batch_decode(target.encode(english[:50]), skip_special_tokens=True) == english[:50]


@pytest.mark.parametrize(("options", "message"), [
    ({"eos_id": -1}, r"no end-of-sentence piece \(eos_id=-1\)"),
    ({"model_type": "word"}, "it is a word model; unigram and bpe models are supported"),
    ({"model_type": "char"}, "it is a char model"),
    ({"user_defined_symbols": ["<tag>"]}, r"1 user-defined symbol\(s\) \(<tag>\)"),
])
def test_a_model_that_cannot_serve_is_refused_by_name(training_text, tmp_path, options, message):
    path = tmp_path / "x.model"
    path.write_bytes(user_model(training_text[:2000], **{"vocab_size": 500, **options}))
    with pytest.raises(ValueError, match=f"the SentencePiece model {path} cannot be used: .*{message}"):
        sentencepiece_tokenizer(path)


def test_a_file_that_is_not_a_model_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--tokenizer_name_or_path .*missing.model does not exist"):
        read_model(tmp_path / "missing.model", "--tokenizer_name_or_path")
    (tmp_path / "text.model").write_text("Ein Hund läuft.\n" * 10)
    with pytest.raises(ValueError, match=r"text.model is not a SentencePiece model"):
        read_model(tmp_path / "text.model")


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_a_model_trained_here_follows_hf_s2s_conventions_and_matches_sentencepiece(training_text, test_lines,
                                                                                     model_type):
    model = train_sentencepiece_model(training_text, 1200, model_type)
    tokenizer = sentencepiece_tokenizer(model)
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]
    assert len(tokenizer) <= 1200 and model.byte_fallback
    differences = sentencepiece_differences(tokenizer, model, test_lines)
    assert differences == {"ids": [], "decode": [], "unk": []}  # byte fallback: no <unk>, even for cs and fr
    through_library = train_tokenizer_from_texts(training_text, 1200, model_type, library="sentencepiece")
    assert through_library(test_lines[:100])["input_ids"] == tokenizer(test_lines[:100])["input_ids"]


@pytest.mark.slow
def test_the_saved_folder_loads_without_hf_s2s_and_sentencepiece_and_matches_sentencepiece(user_models, test_lines,
                                                                                            tmp_path):
    serialized = user_models["bpe", True]
    sentencepiece_tokenizer(parse_model(serialized)).save_pretrained(tmp_path / "tok")
    texts = test_lines[:200] + ODD_LINES
    result = run_without_hf_s2s(f"""
        import json, sys
        sys.modules["sentencepiece"] = None  # and no sentencepiece either: tokenizer.json is all it needs
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained({str(tmp_path / "tok")!r})
        ids = tokenizer({texts!r})["input_ids"]
        print(json.dumps({{"ids": ids, "texts": tokenizer.batch_decode(ids, skip_special_tokens=True)}}))
    """, cwd=tmp_path)
    processor = spm.SentencePieceProcessor(model_proto=serialized)
    assert result["ids"] == [ids + [2] for ids in processor.encode(texts)]
    assert result["texts"] == [processor.decode(ids) for ids in processor.encode(texts)]


def _train_command(tmp_path, *flags) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hf_s2s.cli", "train", "--dataset", "synthetic:reversal", "--source_lang", "src",
         "--target_lang", "tgt", "--output_dir", str(tmp_path / "run"), "--model_config",
         json.dumps(TINY["transformer_seq2seq"]), *flags], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "message"), [
    (("--tokenizer_name_or_path", "nowhere/x.model"), "--tokenizer_name_or_path nowhere/x.model does not exist"),
    (("--tokenizer_name_or_path", "{bad}"), "cannot be used: it has no end-of-sentence piece"),
    (("--target_tokenizer_name_or_path", "{good}"), "--target_tokenizer_name_or_path is the target side of"),
    (("--tokenizer_name_or_path", "{good}", "--tokenizer_library", "sentencepiece"),
     "--tokenizer_library sentencepiece trains a new tokenizer"),
])
def test_train_refuses_bad_sentencepiece_arguments_with_one_error_line(training_text, tmp_path, flags, message):
    (tmp_path / "bad.model").write_bytes(user_model(training_text[:1000], vocab_size=300, eos_id=-1))
    (tmp_path / "good.model").write_bytes(user_model(training_text[:1000], vocab_size=300))
    flags = [flag.format(bad=tmp_path / "bad.model", good=tmp_path / "good.model") for flag in flags]
    done = _train_command(tmp_path, *flags)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("error: ") and message in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_training_with_sentencepiece_without_the_package_is_an_error_naming_the_extra(tmp_path):
    blocked = ("import sys; sys.modules['sentencepiece'] = None; from hf_s2s.cli import main; "
               "sys.exit(main())")
    done = subprocess.run(
        [sys.executable, "-c", blocked, "train", "--dataset", "synthetic:reversal", "--source_lang", "src",
         "--target_lang", "tgt", "--output_dir", str(tmp_path / "run"), "--tokenizer_library", "sentencepiece"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: --tokenizer_library sentencepiece needs the sentencepiece package: pip install "
        "'hf_s2s[sentencepiece]' (or pip install sentencepiece)")
    assert not (tmp_path / "run").exists()


def test_the_checks_against_sentencepiece_need_it_and_say_so(monkeypatch, user_models):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    model = parse_model(user_models["unigram", True])
    tokenizer = sentencepiece_tokenizer(model)  # reading and converting need no sentencepiece
    with pytest.raises(ImportError, match=r"needs the sentencepiece package: pip install 'hf_s2s\[sentencepiece\]'"):
        sentencepiece_differences(tokenizer, model, ["Ein Hund."])



@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_train_tokenizer_trains_with_sentencepiece_into_a_folder_that_matches_it(tmp_path, model_type, capsys):
    corpus = data.load_translation_corpus("synthetic:reordering", "src", "tgt")
    texts = [text for pair in corpus["train"]["translation"] for text in (pair["src"], pair["tgt"])]
    status = run_command("train-tokenizer", ["--dataset", "synthetic:reordering", "--source_lang", "src",
                                             "--target_lang", "tgt", "--vocab_size", "300", "--model_type", model_type,
                                             "--library", "sentencepiece", "--output_dir", str(tmp_path / "tok")])
    assert status == 0 and f"{model_type} tokenizer (joint, " in capsys.readouterr().out
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    expected = sentencepiece_tokenizer(train_sentencepiece_model(texts, 300, model_type))
    assert tokenizer(texts[:50])["input_ids"] == expected(texts[:50])["input_ids"]
    assert tokenizer.batch_decode(tokenizer(texts[:50])["input_ids"], skip_special_tokens=True) == texts[:50]
    assert json.loads((tmp_path / "tok" / "tokenizer.json").read_text())["model"]["type"] == \
        {"unigram": "Unigram", "bpe": "BPE"}[model_type]


# 70 characters and the space: with the 4 special and 256 byte pieces a model needs 331 pieces at least
MANY_CHARACTERS = "abcdefghijklmnopqrstuvwxyzäöüß" + "αβγδεζηθικλμνξοπρστυφχψω" + "абвгдежзийклмнопр"[:16]


@pytest.mark.parametrize(("command", "flags", "flag"), [
    ("train-tokenizer", ["--library", "sentencepiece", "--output_dir", "{out}"], "--vocab_size"),
    ("train-tokenizer", ["--library", "sentencepiece", "--separate_vocabs", "--vocab_size", "400",
                         "--target_vocab_size", "300", "--output_dir", "{out}"], "--target_vocab_size"),
    ("train", ["--tokenizer_library", "sentencepiece", "--output_dir", "{out}"], "--vocab_size"),
], ids=["train-tokenizer", "separate-target", "train"])
def test_a_vocabulary_smaller_than_the_corpus_characters_is_one_error_naming_the_flag_and_the_size_needed(
        tmp_path, command, flags, flag):
    """Every character of the corpus gets a SentencePiece piece (character_coverage 1.0): a vocabulary with no room
    for them is an error line naming the flag, the characters and the size that holds them (before: sentencepiece's
    RuntimeError "Vocabulary size is smaller than required_chars" as a traceback)."""
    rng = random.Random(0)
    lines = ["".join(rng.choice(MANY_CHARACTERS + "  ") for _ in range(40)) for _ in range(200)]
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("".join(f"{line}\t{line[::-1]}\n" for line in lines), encoding="utf-8")
    argv = ["--dataset", str(corpus), "--source_lang", "de", "--target_lang", "en", "--vocab_size", "300",
            *[flag.format(out=tmp_path / "out") for flag in flags]]
    if command == "train":
        argv = train_args(tmp_path / "out", *argv)
    with pytest.raises(SystemExit) as stopped:
        run_command(command, argv)
    said = str(stopped.value.code)
    assert re.fullmatch(rf"error: {flag} 300 is too small for a SentencePiece model of this corpus: each of its 71 "
                        r"characters needs a piece of its own \(character_coverage 1.0\) besides the 4 special and 256 "
                        rf"byte pieces, 331 in all; raise {flag} to 331 or more", said), said
