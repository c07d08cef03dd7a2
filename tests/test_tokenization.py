"""Tokenizer training, the exact round trip on the real Multi30k test set, saving/loading offline, separate
vocabularies, Unigram, and the tokenizer/model-config fit check."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from hf_s2s.data import corpus as data
from hf_s2s.data import encoding
from hf_s2s.data.synthetic import text_reversal_corpus
from hf_s2s.data.tokenization import (
    TranslationTokenizers,
    check_tokenizer_fits_model,
    normalize_text,
    special_token_ids,
    train_tokenizer,
    train_tokenizer_from_texts,
    train_translation_tokenizers,
)
from hf_s2s.models.loading import load_tokenizer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def multi30k():
    folder = data.resolve_data_dir()
    if folder is None:
        pytest.skip("Multi30k not found (set HF_S2S_DATA_DIR)")
    return data.load_text_folder(folder, "de", "en")


@pytest.fixture(scope="module")
def joint(multi30k):
    return train_tokenizer(multi30k, "de", "en", vocab_size=3000)


def assert_round_trip(tokenizer, texts):
    failures = [(t, tokenizer.decode(tokenizer(t)["input_ids"], skip_special_tokens=True)) for t in texts]
    failures = [(t, d) for t, d in failures if d != normalize_text(t)]
    assert not failures, f"{len(failures)} of {len(texts)} did not round-trip, e.g. {failures[:3]}"


def test_normalization():
    assert normalize_text("  Ein\u00a0 Hund\tläuft \n") == "Ein Hund läuft"
    assert normalize_text("ﬁne ①") == "fine 1"  # NFKC
    assert normalize_text("e\u0301") == "é"  # composed
    assert normalize_text("Ein\rHund") == "Ein Hund"  # a lone \r kept inside a corpus line (hf_s2s.data.corpus)


@pytest.mark.slow
def test_joint_bpe_round_trips_the_multi30k_test_set(multi30k, joint):
    assert len(joint) == 3000
    for lang in ("de", "en"):
        texts = [ex["translation"][lang] for ex in multi30k["test"]]
        assert len(texts) == 1000
        assert_round_trip(joint, texts)


def test_special_tokens_and_eos(joint):
    assert [joint.pad_token_id, joint.bos_token_id, joint.eos_token_id, joint.unk_token_id] == [0, 1, 2, 3]
    assert joint.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]
    encoded = joint("Ein Hund.", text_target="A dog.")
    assert encoded["input_ids"][-1] == 2 and encoded["labels"][-1] == 2
    assert 1 not in encoded["input_ids"] and encoded["labels"].count(2) == 1
    assert joint("A dog.")["input_ids"] == encoded["labels"]


def test_unseen_characters_fall_back_to_bytes(joint):
    text = "Ein Schneemann ☃ und 😀 — ǅ"
    ids = joint(text)["input_ids"]
    assert joint.unk_token_id not in ids
    assert joint.decode(ids, skip_special_tokens=True) == normalize_text(text)


def test_save_and_load_with_autotokenizer_offline(joint, multi30k, tmp_path):
    joint.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    texts = [ex["translation"]["de"] for ex in multi30k["test"].select(range(200))]
    assert loaded(texts)["input_ids"] == joint(texts)["input_ids"]
    assert [loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id, loaded.unk_token_id] == [0, 1, 2, 3]
    assert load_tokenizer(tmp_path)(texts[:5])["input_ids"] == joint(texts[:5])["input_ids"]
    pair = TranslationTokenizers.from_pretrained(tmp_path)
    assert pair.is_joint and len(pair.source) == len(joint)


def test_unigram_round_trips(multi30k, tmp_path):
    train = multi30k["train"].select(range(5000))
    tokenizer = train_tokenizer(train, "de", "en", vocab_size=2000, model_type="unigram")
    assert len(tokenizer) <= 2000
    assert tokenizer.backend_tokenizer.model.__class__.__name__ == "Unigram"
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]
    for lang in ("de", "en"):
        assert_round_trip(tokenizer, [ex["translation"][lang] for ex in multi30k["test"]])
    tokenizer.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path)("Ein Hund.")["input_ids"] == tokenizer("Ein Hund.")["input_ids"]


def test_separate_vocabularies(tmp_path):
    corpus = text_reversal_corpus(200, 10, 10, num_symbols=8, source_lang="src", target_lang="tgt")
    corpus = corpus.map(lambda ex: {"translation": {"src": ex["translation"]["src"],
                                                    "tgt": ex["translation"]["tgt"].upper()}})
    pair = train_translation_tokenizers(corpus, "src", "tgt", vocab_size=300, joint=False, target_vocab_size=280)
    assert not pair.is_joint and len(pair.source) <= 300 and len(pair.target) <= 280
    source_vocab, target_vocab = pair.source.get_vocab(), pair.target.get_vocab()
    assert "▁a" in source_vocab and "▁a" not in target_vocab and "▁A" in target_vocab
    tokenized = encoding.tokenize_corpus(corpus, pair.source, "src", "tgt", target_tokenizer=pair.target)
    first, raw = tokenized["test"][0], corpus["test"][0]["translation"]
    assert pair.target.decode(first["labels"], skip_special_tokens=True) == raw["tgt"]
    assert pair.source.decode(first["input_ids"], skip_special_tokens=True) == raw["src"]
    assert special_token_ids(pair.source, pair.target)["decoder_vocab_size"] == len(pair.target)

    # One folder that AutoTokenizer (and the main job's --tokenizer_name_or_path) loads, MarianMT-style.
    pair.save_pretrained(tmp_path / "one")
    assert {"tokenizer.json", "target_tokenizer.json"} <= {p.name for p in (tmp_path / "one").iterdir()}
    loaded = TranslationTokenizers.from_pretrained(tmp_path / "one")
    assert loaded.target.get_vocab() == target_vocab and loaded.source.get_vocab() == source_vocab
    assert not loaded.is_joint
    tokenizer = load_tokenizer(tmp_path / "one")
    both = tokenizer(raw["src"], text_target=raw["tgt"])
    assert (both["input_ids"], both["labels"]) == (first["input_ids"], first["labels"])
    # The older layout, source/ and target/ subfolders, still loads as a pair (but not as one tokenizer).
    pair.source.save_pretrained(tmp_path / "old" / "source")
    pair.target.save_pretrained(tmp_path / "old" / "target")
    old = TranslationTokenizers.from_pretrained(tmp_path / "old")
    assert old.target.get_vocab() == target_vocab and old.source.get_vocab() == source_vocab
    with pytest.raises(ValueError, match=r"holds separate source/ and target/ tokenizers; .*TranslationTokenizers"):
        load_tokenizer(tmp_path / "old")
    with pytest.raises(FileNotFoundError, match=r"expected tokenizer\.json .* or the subfolders source/ and target/"):
        TranslationTokenizers.from_pretrained(tmp_path / "old" / "source" / "missing")


def test_bad_training_arguments():
    with pytest.raises(ValueError, match=r"`model_type` must be one of \['bpe', 'unigram'\], got 'wordpiece'"):
        train_tokenizer_from_texts(["a b"], 1000, model_type="wordpiece")
    with pytest.raises(ValueError, match=r"`vocab_size` must be an integer > 260 .*got 100"):
        train_tokenizer_from_texts(["a b"], 100)
    with pytest.raises(ValueError, match=r"`target_vocab_size` is only for joint=False"):
        train_translation_tokenizers(text_reversal_corpus(5, 1, 1), "src", "tgt", 300, target_vocab_size=300)
    # A target size of 0 (or too small) is refused, not replaced by vocab_size; before any text is read.
    for size in (0, 3):
        with pytest.raises(ValueError, match=rf"`target_vocab_size` must be an integer > 260 .*got {size}"):
            train_translation_tokenizers(iter(()), "src", "tgt", 300, joint=False, target_vocab_size=size)


# ------------------------------------------------------------------------------------------------ fit check


def config(**fields):
    defaults = dict(vocab_size=400, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    return SimpleNamespace(**{**defaults, **fields})


@pytest.fixture(scope="module")
def small():
    return train_tokenizer(text_reversal_corpus(100, 1, 1), "src", "tgt", vocab_size=300)


def test_fit_check_accepts_a_matching_config(small):
    check_tokenizer_fits_model(small, config())
    check_tokenizer_fits_model(small, config(vocab_size=len(small), decoder_start_token_id=0, bos_token_id=None))
    check_tokenizer_fits_model(small, config(**special_token_ids(small)))


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(vocab_size=100), r"the source tokenizer has \d+ tokens but config\.vocab_size is 100"),
        (dict(pad_token_id=3), r"config\.pad_token_id is 3 but the tokenizer's is 0"),
        (dict(eos_token_id=None), r"config\.eos_token_id is None but the tokenizer's is 2"),
        (dict(bos_token_id=5), r"config\.bos_token_id is 5 but the tokenizer's is 1"),
        (dict(decoder_start_token_id=3), r"decoder_start_token_id is 3; it must be .* one of \[0, 1, 2\]"),
        (dict(decoder_start_token_id=None), r"decoder_start_token_id is None"),
    ],
)
def test_fit_check_errors(small, fields, message):
    with pytest.raises(ValueError, match=r"tokenizer does not fit the model config: .*" + message):
        check_tokenizer_fits_model(small, config(**fields))


def without_eos(tokenizer, folder: Path):
    """``tokenizer`` saved to ``folder`` without its post-processor (the one that appends </s>), loaded back."""
    tokenizer.save_pretrained(folder)
    spec = json.loads((folder / "tokenizer.json").read_text())
    spec["post_processor"] = None
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    return AutoTokenizer.from_pretrained(folder)


def test_fit_check_refuses_a_tokenizer_that_does_not_append_eos(small, tmp_path):
    plain = without_eos(small, tmp_path)
    assert plain("a b")["input_ids"] == small("a b")["input_ids"][:-1]  # same tokens, no </s>
    eos_message = (r"the {side} tokenizer does not end a sentence with </s> \(config\.eos_token_id 2\): 'a' encodes "
                   r"to \[\d+\], so the model would never learn to stop")
    with pytest.raises(ValueError, match=eos_message.format(side="source") + ".*" + eos_message.format(side="target")):
        check_tokenizer_fits_model(plain, config())
    # Separate vocabularies: the target side alone lacks </s>.
    with pytest.raises(ValueError, match=r"fit the model config: " + eos_message.format(side="target") + r"[^;]*$"):
        check_tokenizer_fits_model(small, config(), target_tokenizer=plain)


def test_training_job_refuses_a_tokenizer_without_eos_before_training(small, tmp_path):
    from hf_s2s.training.run import parse_args, run

    without_eos(small, tmp_path / "tokenizer")
    args = parse_args(["--dataset", "synthetic:reversal", "--source_lang", "src", "--target_lang", "tgt",
                       "--tokenizer_name_or_path", str(tmp_path / "tokenizer"), "--output_dir", str(tmp_path / "run"),
                       "--use_cpu", "true", "--report_to", "none"])
    with pytest.raises(ValueError, match=r"the target tokenizer does not end a sentence with </s>"):
        run(*args)
    assert not list((tmp_path / "run").glob("*/model.safetensors"))  # refused before any training step


def test_fit_check_refuses_an_eos_other_than_the_configs(small):
    # The tokenizer appends id 2 but the config (and generate) stop at id 3.
    with pytest.raises(ValueError, match=r"config\.eos_token_id is 3 but the tokenizer's is 2; the source tokenizer "
                                         r"does not end a sentence with </s> \(config\.eos_token_id 3\)"):
        check_tokenizer_fits_model(small, config(eos_token_id=3))


def test_fit_check_refuses_left_padding(small, tmp_path):
    small.save_pretrained(tmp_path)
    left = AutoTokenizer.from_pretrained(tmp_path, padding_side="left")
    with pytest.raises(ValueError, match=r"the target tokenizer pads on the left \(padding_side='left'\), but the "
                                         r"models need right padding: set tokenizer\.padding_side = 'right'"):
        check_tokenizer_fits_model(small, config(), target_tokenizer=left)


def test_fit_check_separate_decoder_vocabulary(small):
    big = train_tokenizer(text_reversal_corpus(100, 1, 1, num_symbols=26), "src", "tgt", vocab_size=400)
    assert len(big) > len(small)
    check_tokenizer_fits_model(small, config(vocab_size=len(small), decoder_vocab_size=len(big)), target_tokenizer=big)
    with pytest.raises(ValueError, match=rf"target tokenizer has {len(big)} tokens but config\.decoder_vocab_size is"):
        check_tokenizer_fits_model(small, config(vocab_size=len(big), decoder_vocab_size=len(small)),
                                   target_tokenizer=big)
    with pytest.raises(ValueError, match=rf"target tokenizer has {len(big)} tokens but config\.vocab_size is"):
        check_tokenizer_fits_model(small, config(vocab_size=len(small)), target_tokenizer=big)


# ------------------------------------------------------------------------------------------------ script


@pytest.mark.slow
def test_train_tokenizer_script(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    corpus = text_reversal_corpus(200, 10, 10)
    for prefix, split in (("train", "train"), ("val", "validation")):
        for lang in ("src", "tgt"):
            (folder / f"{prefix}.{lang}").write_text("".join(ex["translation"][lang] + "\n" for ex in corpus[split]))
    out = tmp_path / "tok"
    completed = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "train_tokenizer.py"), "--dataset", str(folder), "--source_lang", "src",
         "--target_lang", "tgt", "--vocab_size", "300", "--model_type", "unigram", "--output_dir", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "unigram tokenizer (joint" in completed.stdout
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.decode(tokenizer("c a f")["input_ids"], skip_special_tokens=True) == "c a f"


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "message"), [
    (["--target_vocab_size", "300"], "error: --target_vocab_size is the target side of --separate_vocabs"),
    (["--dataset", "no/such/corpus_{split}.tsv"], "error: "),
])
def test_train_tokenizer_script_refuses_bad_input_with_one_error_line(tmp_path, flags, message):
    """A flag it cannot use is refused before the corpus is read, and a corpus it cannot read is named: one
    `error:` line each, never a traceback, and nothing written."""
    completed = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "train_tokenizer.py"), "--output_dir", str(tmp_path / "tok"), *flags],
        capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode != 0 and "Traceback" not in completed.stderr, completed.stderr[-3000:]
    assert message in completed.stderr
    assert not (tmp_path / "tok").exists()


@pytest.mark.parametrize(("flags", "message"), [
    (["--separate_vocabs", "--target_vocab_size", "3"],
     r"--target_vocab_size must be an integer > 260 \(the special tokens and the 256 byte-fallback tokens\), got 3"),
    (["--separate_vocabs", "--target_vocab_size", "0"], r"--target_vocab_size must be an integer > 260 .*got 0"),
    (["--vocab_size", "3"], r"--vocab_size must be an integer > 260 .*got 3"),
    (["--output_dir", "{tmp}/a_file/tok"], r"--output_dir .*a_file/tok: .*a_file is a file, not a folder"),
    (["--output_dir", "{tmp}/read_only/tok"], r"--output_dir .*read_only/tok cannot be written to \(it would be created "
                                              r"in .*read_only\)"),
], ids=["target-3", "target-0", "vocab-3", "under-a-file", "read-only"])
def test_train_tokenizer_refuses_sizes_and_an_unwritable_folder_before_reading_the_corpus(tmp_path, monkeypatch,
                                                                                          flags, message):
    """The vocabulary sizes and the output folder are checked before the corpus is read (they were found only after
    the corpus loaded, or after training, when the tokenizer could not be saved)."""
    from hf_s2s.cli import run_command
    from hf_s2s.cli import train_tokenizer as command

    (tmp_path / "a_file").write_text("")
    (tmp_path / "read_only").mkdir(mode=0o555)
    if os.geteuid() == 0:  # root writes anywhere: what os.access reports to a user for a folder of mode 0o555
        monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path / "read_only")
    monkeypatch.setattr(command, "load_translation_corpus", lambda *a, **k: pytest.fail("the corpus was read"))
    flags = [flag.replace("{tmp}", str(tmp_path)) for flag in flags]
    with pytest.raises(SystemExit) as refused:
        run_command("train-tokenizer", ["--dataset", "synthetic:reversal", "--source_lang", "src", "--target_lang",
                                        "tgt", "--output_dir", str(tmp_path / "tok"), *flags])
    assert re.match("error: " + message, str(refused.value.code)) and "\n" not in refused.value.code, \
        refused.value.code
    assert not (tmp_path / "tok").exists() and not (tmp_path / "read_only" / "tok").exists()
