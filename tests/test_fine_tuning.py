"""Fine-tuning the folders users bring (``hf-s2s train --model_name_or_path``): a folder converted from another
toolkit, one written by plain ``save_pretrained`` with a generation config of its own, a folder without a tokenizer,
a run's folder instead of its model, and a tokenizer that does not fit the corpus. Each either trains and saves the
trained weights with the decoding settings the run says it uses, or is refused in one line before training."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from datasets import Dataset, Features, IterableDataset, Sequence, Value
from safetensors.torch import load_file
from transformers import GenerationConfig

import hf_s2s.data.corpus
from hf_s2s.cli import run_command
from hf_s2s.importers import convert
from hf_s2s.models.loading import load_tokenizer
from hf_s2s.training.checks import check_arguments, check_tokenizer_covers_corpus
from hf_s2s.training.generation_settings import settle_generation_configs
from hf_s2s.training.run import parse_args
from hf_s2s.training.run_dir import hypotheses_path
from tests.helpers import TINY, translate_command_lines
from tests.runs import train_args
from tests.saved_folders import save_tiny_model_folder

FIXTURES = Path(__file__).parent / "fixtures" / "toolkits"
# What hf-s2s convert reads for each fixture, by toolkit: the checkpoint and the files beside it it is told of.
CONVERT = {"opennmt": ("opennmt-py", "model.pt", {}),
           "joeynmt": ("joeynmt", "model.ckpt", {}),
           "fairseq": ("fairseq", "checkpoint.pt", {"source_vocab": "dict.de.txt", "target_vocab": "dict.en.txt"})}
# One step of fine-tuning at the full learning rate (no warm-up: the weights change), saved as checkpoint-1, tested
# greedily on two sentences.
ONE_STEP = ["--source_lang", "de", "--target_lang", "en", "--max_train_samples", "16", "--max_eval_samples", "2",
            "--max_test_samples", "2", "--max_steps", "1", "--eval_strategy", "no", "--save_strategy", "steps",
            "--save_steps", "1", "--load_best_model_at_end", "false", "--test_num_beams", "1",
            "--generation_max_length", "12", "--warmup_steps", "0", "--report_to", "none", "--use_cpu", "true",
            "--disable_tqdm", "true"]


def converted_fixture(name: str, out: Path) -> Path:
    """``hf-s2s convert`` of the toolkit fixture ``name`` into ``out`` (skips the test where it is absent)."""
    toolkit, checkpoint, files = CONVERT[name.split("_")[0]]
    fixture = FIXTURES / name
    if not (fixture / checkpoint).is_file():
        pytest.skip(f"no fixture {name}")
    return convert(toolkit, fixture / checkpoint, out, **{key: fixture / file for key, file in files.items()})


def fixture_corpus(name: str, out: Path) -> Path:
    """A corpus in the fixture's own languages and writing (lowercased, tokenized): its test sources and the
    toolkit's greedy translations of them, as train, val and test splits."""
    out.mkdir()
    for split in ("train", "val", "test"):
        shutil.copyfile(FIXTURES / name / "test.de", out / f"{split}.de")
        shutil.copyfile(FIXTURES / name / "greedy.txt", out / f"{split}.en")
    return out


def assert_same_weights(path, other) -> None:
    first, second = load_file(path), load_file(other)
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key


def changes_said(caplog) -> str:
    return " ".join(record.getMessage() for record in caplog.records if "is changed for this run" in record.getMessage())


@pytest.mark.slow
@pytest.mark.parametrize(("fixture", "changes"), [
    # a converted OpenNMT-py folder decodes with 5 beams and early_stopping: transformers refused to save
    # early_stopping with the one beam tested, at the end of the run, before writing the weights
    ("opennmt_transformer", ["max_length 251 -> 12 (--generation_max_length)",
                             "in the saved folder: num_beams 5 -> 1 (the largest --test_num_beams)",
                             "in the saved folder: early_stopping True -> unset (used only by beam search"]),
    # a converted Joey NMT folder's max_new_tokens silently overrode --generation_max_length
    ("joeynmt_rnn_bahdanau", ["max_length unset -> 12 (--generation_max_length)",
                              "max_new_tokens 50 -> unset (it would override --generation_max_length)"]),
])
def test_a_converted_folder_fine_tunes_and_saves_its_trained_weights_with_the_decoding_settings_said(
        fixture, changes, tmp_path, caplog):
    folder = converted_fixture(fixture, tmp_path / "converted")
    corpus = fixture_corpus(fixture, tmp_path / "corpus")
    out = tmp_path / "run"
    assert run_command("train", ["--model_name_or_path", str(folder), "--dataset", str(corpus), "--output_dir",
                                 str(out), *ONE_STEP]) == 0
    said = changes_said(caplog)
    assert all(change in said for change in changes), said
    # the weights of the one step trained, not the converted ones
    assert_same_weights(out / "model" / "model.safetensors", out / "checkpoint-1" / "model.safetensors")
    converted, trained = load_file(folder / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    assert any(not torch.equal(converted[key], trained[key]) for key in trained)
    generation = json.loads((out / "model" / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["max_length"]) == (1, 12)
    assert "early_stopping" not in generation and "max_new_tokens" not in generation
    results = json.loads((out / "results.json").read_text())
    assert results["test"]["greedy"]["decoding"]["max_length"] == 12
    # the saved folder translates the test sources as the run did
    sources = (corpus / "test.de").read_text().splitlines()[:2]
    assert translate_command_lines(out / "model", sources, tmp_path) == \
        hypotheses_path(out, "greedy").read_text().splitlines()


@pytest.mark.parametrize("fixture", ["opennmt_transformer", "joeynmt_transformer", "fairseq_transformer"])
def test_each_toolkits_generation_config_settles_into_configs_that_save(fixture, tmp_path):
    """What a run would save in its checkpoints and its model folder, for a converted folder of each toolkit (the
    toolkit decides the generation config, not the architecture), with greedy and with beam test decoding:
    transformers' own strict check passes, and the file reloads as settled."""
    given = GenerationConfig.from_pretrained(converted_fixture(fixture, tmp_path / "converted"))
    for test_beams in ("1", "1,4"):
        args = parse_args(train_args(tmp_path / "run", "--test_num_beams", test_beams))
        settled = settle_generation_configs(given, args.decoding, args.training, source=fixture)
        for name, config in (("training", settled.training), ("saved", settled.saved)):
            config.save_pretrained(tmp_path / test_beams / name)
            reloaded = GenerationConfig.from_pretrained(tmp_path / test_beams / name)
            assert reloaded.to_diff_dict() == config.to_diff_dict(), (test_beams, name)
        assert (settled.saved.num_beams, settled.saved.max_length) == (int(test_beams[-1]), 8)
        assert settled.saved.max_new_tokens is None


# A generation config written by hand (or by another tool): flags without effect in its own greedy mode, and a
# max_new_tokens that would override --generation_max_length.
CONTRADICTING = {"num_beams": 1, "early_stopping": True, "length_penalty": 0.6, "temperature": 0.7,
                 "max_new_tokens": 30}


@pytest.mark.slow
def test_a_plain_saved_folder_whose_generation_config_contradicts_the_run_keeps_its_trained_weights(tmp_path, caplog):
    folder = save_tiny_model_folder(tmp_path / "saved", "transformer_seq2seq")
    for code in folder.glob("*.py"):  # as plain transformers saves it, without hf_s2s's code and auto_map
        code.unlink()
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items()
                                                    if k not in ("auto_map", "custom_pipelines")}))
    generation = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**generation, **CONTRADICTING}))
    out = tmp_path / "run"
    assert run_command("train", train_args(out, "--model_name_or_path", str(folder), "--save_strategy", "steps",
                                           "--save_steps", "1")) == 0
    assert_same_weights(out / "model" / "model.safetensors", out / "checkpoint-1" / "model.safetensors")
    saved = json.loads((out / "model" / "generation_config.json").read_text())
    assert saved["max_length"] == 8 and not set(CONTRADICTING) - {"num_beams"} & set(saved)
    said = changes_said(caplog)
    for name in ("max_new_tokens 30 -> unset", "temperature 0.7 -> unset", "early_stopping True -> unset",
                 "length_penalty 0.6 -> unset"):
        assert name in said, said


@pytest.mark.parametrize(("how", "message"), [
    ("model_config", "error: --model_config sets d_model 64 (the folder: 32), but a fine-tuned model keeps the config "
                     "of --model_name_or_path {folder}: leave these fields out of --model_config (a --recipe's "
                     "model_config counts too), or train a new model without --model_name_or_path"),
    ("no_tokenizer", "error: --model_name_or_path {folder} holds no tokenizer (no tokenizer.json or "
                     "tokenizer_config.json): pass the tokenizer the model was trained with as "
                     "--tokenizer_name_or_path, or save it into the folder (tokenizer.save_pretrained)"),
    ("run_folder", "error: --model_name_or_path {folder} holds no config.json: not a saved model folder (a training "
                   "run's folder: its model is {folder}/model)"),
    ("generation_config", "error: --generation_config would replace the model's generation config for validation "
                          "only"),
])
def test_what_fine_tuning_would_ignore_or_cannot_use_is_one_error_line_before_the_corpus_is_read(
        tmp_path, monkeypatch, how, message):
    """A --model_config (or a recipe's) was ignored without a word; a folder without a tokenizer failed after the
    output folder was locked; a run's folder was "not a saved model folder" without saying where its model is;
    --generation_config replaced the model's generation config in validation but not in the saved folder."""
    folder = save_tiny_model_folder(tmp_path / "saved" / "model", "transformer_seq2seq")
    flags = []
    if how == "model_config":
        flags = ["--model_config", json.dumps({**TINY["transformer_seq2seq"], "d_model": 64})]
    elif how == "no_tokenizer":
        (folder / "tokenizer.json").unlink()
        (folder / "tokenizer_config.json").unlink()
    elif how == "run_folder":  # a run's output folder, whose model is in model/
        folder = folder.parent
    else:
        flags = ["--generation_config", str(folder)]
    monkeypatch.setattr(hf_s2s.data.corpus, "load_translation_corpus", lambda *a, **k: pytest.fail("corpus read"))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as refused:
        run_command("train", train_args(out, "--model_name_or_path", str(folder), *flags))
    assert str(refused.value.code).startswith(message.format(folder=folder)), refused.value.code
    assert not out.exists()


# How the refusal of given tokenizer arguments ends when fine-tuning.
KEEPS_ITS_TOKENIZER = ("the run uses the tokenizer of --model_name_or_path {folder} as it is and trains "
                       "none; a fine-tuned model keeps the tokenizer it was trained with: leave them out (a "
                       "--recipe's count too)")


@pytest.mark.parametrize(("flags", "family", "message"), [
    (["--model_type", "transformer_seq2seq"], "rnn_seq2seq",  # the default, given
     "error: --model_type 'transformer_seq2seq', but --model_name_or_path {folder} is a 'rnn_seq2seq' model, "
     "and a fine-tuned model keeps its folder's config: leave out --model_type (a --recipe's counts too), or "
     "train a new model without --model_name_or_path"),
    (["--recipe", "transformer_small"], "rnn_seq2seq",
     "error: --model_type 'transformer_seq2seq', but --model_name_or_path {folder} is a 'rnn_seq2seq' model"),
    (["--vocab_size", "8000"], "transformer_seq2seq",  # the default, given
     "error: --vocab_size 8000 (the tokenizer's: 280): " + KEEPS_ITS_TOKENIZER),
    (["--tokenizer_type", "unigram", "--vocab_size", "300"], "transformer_seq2seq",
     "error: --vocab_size 300 (the tokenizer's: 280), --tokenizer_type 'unigram' (the tokenizer's: 'bpe'): "
     + KEEPS_ITS_TOKENIZER),
    (["--model_type", "transformer_seq2seq", "--tokenizer_type", "bpe", "--vocab_size", "280"],  # as the folder has
     "transformer_seq2seq", None),
    (["--vocab_size", "8000"], None,
     "error: --vocab_size 8000 (the tokenizer's: 280): the run uses the tokenizer of "
     "--tokenizer_name_or_path {folder} as it is and trains none; leave them out, or leave out "
     "--tokenizer_name_or_path to train a tokenizer with them (a --recipe's count too)"),
], ids=["model_type", "recipe", "vocab_size", "both", "agreeing", "tokenizer_name_or_path"])
def test_a_model_type_vocab_size_or_tokenizer_type_given_against_the_folder_is_refused_naming_both(
        tmp_path, monkeypatch, flags, family, message):
    """--model_type, --vocab_size and --tokenizer_type have defaults, and were ignored without a word when
    fine-tuning (and the tokenizer's two with a given tokenizer), whatever was given. Given (on the command
    line, even at their default values, or by a --recipe) against the folder, they are refused before the
    corpus is read, naming the folder's value and the given one; given as the folder has them (280: the tiny
    tokenizer's size), they are fine."""
    folder = save_tiny_model_folder(tmp_path / "saved", family or "transformer_seq2seq")
    given = ["--model_name_or_path", str(folder)] if family else ["--tokenizer_name_or_path", str(folder)]
    monkeypatch.setattr(hf_s2s.data.corpus, "load_translation_corpus",
                        lambda *a, **k: pytest.fail("corpus read"))
    argv = train_args(tmp_path / "run", *given, *flags)
    if message is None:
        check_arguments(*parse_args(argv))
        return
    with pytest.raises(SystemExit) as refused:
        run_command("train", argv)
    assert str(refused.value.code).startswith(message.format(folder=folder)), refused.value.code
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("written", "expected"), [
    ("as the toolkit read it", None),
    ("capitalized", "maps 17% of the source tokens of the training split to <unk>: it does not fit this corpus"),
    ("languages swapped", "maps 77% of the source and 76% of the target tokens"),
])
def test_a_tokenizer_that_does_not_fit_the_corpus_is_named_and_refused_when_most_tokens_are_unknown(
        tmp_path, written, expected):
    """A converted toolkit's word vocabulary on text written otherwise, or on another language, trained on <unk>."""
    folder = converted_fixture("opennmt_transformer", tmp_path / "converted")
    tokenizer = load_tokenizer(folder)
    german = (FIXTURES / "opennmt_transformer" / "test.de").read_text().splitlines()
    english = (FIXTURES / "opennmt_transformer" / "greedy.txt").read_text().splitlines()
    sources, targets = {"as the toolkit read it": (german, english),
                        "capitalized": ([line.capitalize() for line in german], english),
                        "languages swapped": (english, german)}[written]
    tokenized = Dataset.from_dict({"input_ids": tokenizer(sources)["input_ids"],
                                   "labels": tokenizer(text_target=targets)["input_ids"]})
    if written == "languages swapped":
        with pytest.raises(ValueError, match=rf"the tokenizer of {folder} {expected} .*; the model would learn to "
                                             r"translate <unk>"):
            check_tokenizer_covers_corpus(tokenized, tokenizer, str(folder))
    else:
        said = check_tokenizer_covers_corpus(tokenized, tokenizer, str(folder))
        assert said is expected or expected in said


def test_a_streamed_split_is_not_read_for_the_coverage_check():
    """Reading a stream's column reads the whole stream (a corpus streamed because it is large): the check leaves
    streams alone, and this stream fails the test if anything reads it."""
    def rows():
        raise AssertionError("the coverage check read the stream")
        yield  # a generator

    stream = IterableDataset.from_generator(rows, features=Features({"input_ids": Sequence(Value("int64")),
                                                                      "labels": Sequence(Value("int64"))}))
    assert stream.column_names == ["input_ids", "labels"]  # what the check once took for an in-memory split
    assert check_tokenizer_covers_corpus(stream, None, "given") is None  # no tokenizer is read either


@pytest.mark.slow
def test_fine_tuning_on_a_corpus_the_tokenizer_cannot_read_stops_before_training(tmp_path):
    folder = converted_fixture("opennmt_transformer", tmp_path / "converted")
    corpus = fixture_corpus("opennmt_transformer", tmp_path / "corpus")
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as refused:
        run_command("train", ["--model_name_or_path", str(folder), "--dataset", str(corpus), "--output_dir", str(out),
                              *ONE_STEP, "--source_lang", "en", "--target_lang", "de"])
    assert str(refused.value.code).startswith(f"error: the tokenizer of {folder} maps ")
    assert not list(out.glob("checkpoint-*")) and not (out / "model").exists()
