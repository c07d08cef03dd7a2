"""The training job's phases (hf_s2s.training.run.run_phases: data -> tokenizer -> model -> train -> select -> save ->
evaluate -> report), each called alone on the synthetic reversal corpus and untrained tiny models: what each refuses
before the next runs, what it writes, and what it hands on. The whole job is tested in tests/test_training.py."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset, DatasetDict
from safetensors.torch import load_file

import hf_s2s  # noqa: F401
import hf_s2s.data.corpus
from hf_s2s.data import tokenization
from hf_s2s.hub.card import render_model_card
from hf_s2s.hub.results import RunResults
from hf_s2s.models.modeling_common import DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B
from hf_s2s.training import run as job
from hf_s2s.training.arguments import SelectionArguments
from hf_s2s.training.ema import EMA_FOLDER
from hf_s2s.training.run_dir import hypotheses_path
from hf_s2s.training.selection import (
    AVERAGED_FOLDER,
    Selection,
    is_better,
    kept_validation_bleu,
    select_weights,
)
from tests.helpers import random_tiny_model
from tests.runs import tiny_args


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The default tiny job's arguments, its corpus (256 / 32 / 16 pairs) and the tokenizer the job trains."""
    args = tiny_args(tmp_path_factory.mktemp("run"), "transformer_seq2seq")
    corpus = job.load_corpus(args.data, args.selection, args.training)
    return args, corpus, job.prepare_tokenizer(args.model, args.data, args.training, corpus["train"])


# --- data -------------------------------------------------------------------------------------------------------


def test_the_data_phase_cuts_each_split_to_its_limit(prepared):
    _, corpus, _ = prepared
    assert {split: len(pairs) for split, pairs in corpus.items()} == {"train": 256, "validation": 32, "test": 16}


def test_the_data_phase_refuses_a_corpus_without_the_split_evaluation_needs_before_a_tokenizer(tmp_path, monkeypatch):
    """A corpus whose splits only reading tells (a Hub dataset, say) is checked as soon as it is read."""
    pairs = Dataset.from_dict({"translation": [{"src": "a b", "tgt": "b a"}] * 4})
    monkeypatch.setattr(hf_s2s.data.corpus, "load_translation_corpus", lambda *a, **k: DatasetDict(train=pairs,
                                                                                                    test=pairs))
    monkeypatch.setattr(job, "prepare_tokenizer", lambda *a, **k: pytest.fail("a tokenizer was prepared"))
    with pytest.raises(ValueError, match=r"has no 'validation' split, which evaluation \(--eval_strategy is not "
                                         r"'no'\) needs"):
        job.run_phases(tiny_args(tmp_path / "run", "transformer_seq2seq"))
    assert not (tmp_path / "run").exists()


# --- tokenizer --------------------------------------------------------------------------------------------------


def test_the_tokenizer_phase_reuses_the_runs_tokenizer_only_when_asked_for_alike(prepared, monkeypatch):
    args, corpus, tokenizer = prepared
    recorded = json.loads((Path(args.training.output_dir) / "tokenizer" / "hf_s2s_tokenizer_arguments.json").read_text())
    assert recorded == job.tokenizer_arguments(args.model, args.data)
    monkeypatch.setattr(tokenization, "train_translation_tokenizers", lambda *a, **k: pytest.fail("trained again"))
    assert job.prepare_tokenizer(args.model, args.data, args.training, corpus["train"]).get_vocab() == \
        tokenizer.get_vocab()
    other = tiny_args(args.training.output_dir, "transformer_seq2seq", "--vocab_size", "300")
    with pytest.raises(ValueError, match=r"trained with other arguments .*vocab_size: 280 there, 300 now"):
        job.prepare_tokenizer(other.model, other.data, other.training, corpus["train"])
    # the library is recorded only when it is not the default (records written before the option still match), and
    # a difference either way is found
    assert "tokenizer_library" not in recorded
    other = tiny_args(args.training.output_dir, "transformer_seq2seq", "--tokenizer_library", "sentencepiece")
    with pytest.raises(ValueError, match=r"other arguments than this run asks for \(tokenizer_library: None there, "
                                         r"'sentencepiece' now\)"):
        job.prepare_tokenizer(other.model, other.data, other.training, corpus["train"])


def test_a_tokenizer_trained_with_sentencepiece_is_not_reused_by_a_run_asking_for_tokenizers(tmp_path):
    pytest.importorskip("sentencepiece")
    args = tiny_args(tmp_path, "transformer_seq2seq", "--tokenizer_library", "sentencepiece")
    corpus = job.load_corpus(args.data, args.selection, args.training)
    job.prepare_tokenizer(args.model, args.data, args.training, corpus["train"])
    default = tiny_args(tmp_path, "transformer_seq2seq")
    with pytest.raises(ValueError, match=r"other arguments than this run asks for \(tokenizer_library: "
                                         r"'sentencepiece' there, None now\)"):
        job.prepare_tokenizer(default.model, default.data, default.training, corpus["train"])


# --- model ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("flags", "bound"), [
    ((), (DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B)),
    (("--max_len_a", "0.5", "--max_len_b", "2"), (0.5, 2)),
    (("--no_length_bound",), (None, None)),
], ids=["default", "given", "off"])
def test_the_model_phase_sizes_the_model_to_the_tokenizer_with_the_length_bound_asked_for(prepared, flags, bound):
    args, _, tokenizer = prepared
    args = tiny_args(args.training.output_dir, "transformer_seq2seq", *flags)
    model, _ = job.prepare_model(args.model, args.decoding, args.training, tokenizer)
    assert model.config.vocab_size == len(tokenizer)
    assert (model.generation_config.max_len_a, model.generation_config.max_len_b) == bound


# --- train ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("flags", "early_stopping", "ema"), [
    ((), True, False),
    (("--load_best_model_at_end", "false"), False, False),
    (("--early_stopping_patience", "0"), False, False),
    (("--ema_decay", "0.9"), True, True),
], ids=["default", "no-best-model", "patience-0", "ema"])
def test_the_train_phase_stops_early_only_on_the_best_checkpoint_and_keeps_an_ema_when_asked(prepared, flags,
                                                                                             early_stopping, ema):
    args, corpus, tokenizer = prepared
    args = tiny_args(args.training.output_dir, "transformer_seq2seq", *flags)
    model, _ = job.prepare_model(args.model, args.decoding, args.training, tokenizer)
    trainer = job.build_trainer(model, tokenizer, corpus, args)
    callbacks = {type(callback).__name__ for callback in trainer.callback_handler.callbacks}
    assert ("EarlyStoppingCallback" in callbacks) is early_stopping
    assert ("EMACallback" in callbacks) is ema
    # label smoothing moves into the model's own loss, so that the labels reach it
    assert trainer.model.config.label_smoothing == 0.1 and trainer.label_smoother is None


# --- select -----------------------------------------------------------------------------------------------------


class ValidatingTrainer:
    """What the select phase asks of a trainer, with the validation BLEU of each candidate given: ``bleus`` maps
    the metric prefix ("averaged", "ema") to the score its weights validate at."""

    def __init__(self, model, output_dir, best_metric, bleus):
        self.model, self.bleus = model, bleus
        self.args = SimpleNamespace(output_dir=str(output_dir), should_save=True)  # process 0 of one machine
        self.state = SimpleNamespace(best_metric=best_metric)
        self.accelerator = SimpleNamespace(wait_for_everyone=lambda: None)

    def is_world_process_zero(self):
        return True

    def remove_callback(self, callback):
        pass

    def evaluate(self, metric_key_prefix):
        return {f"{metric_key_prefix}_bleu": self.bleus[metric_key_prefix]}


@pytest.fixture
def two_checkpoints(tmp_path):
    """A run folder with checkpoint-1 and checkpoint-2 (different weights of one tiny model) and the model the run
    restored at the end (a third draw of the weights)."""
    for step in (1, 2):
        random_tiny_model("transformer_seq2seq", 40, seed=step).save_pretrained(tmp_path / f"checkpoint-{step}")
    return tmp_path, random_tiny_model("transformer_seq2seq", 40, seed=3)


def weights(model):
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


@pytest.mark.parametrize(("best_single", "kept"), [(10.0, True), (20.0, False), (15.0, False)],
                         ids=["better", "worse", "tie"])
def test_the_select_phase_keeps_the_checkpoint_average_only_when_it_validates_better(two_checkpoints, best_single,
                                                                                     kept):
    output_dir, model = two_checkpoints
    own = weights(model)
    trainer = ValidatingTrainer(model, output_dir, best_single, {"averaged": 15.0})
    selection = select_weights(trainer, SelectionArguments(average_last_checkpoints=2))
    assert selection.averaging.checkpoints == ["checkpoint-1", "checkpoint-2"]
    assert (selection.averaging.used, selection.ema) == (kept, None)
    assert selection.validation_bleu == (15.0 if kept else best_single)
    averaged = load_file(output_dir / AVERAGED_FOLDER / "model.safetensors")
    expected = averaged if kept else own
    for name, tensor in model.state_dict().items():
        if name in averaged:  # tied weights are saved once
            assert torch.equal(tensor, expected[name]), name


def test_the_ema_must_beat_the_average_when_the_average_was_kept(two_checkpoints):
    output_dir, model = two_checkpoints
    random_tiny_model("transformer_seq2seq", 40, seed=4).save_pretrained(output_dir / EMA_FOLDER)
    trainer = ValidatingTrainer(model, output_dir, 10.0, {"averaged": 15.0, "ema": 12.0})
    selection = select_weights(trainer, SelectionArguments(average_last_checkpoints=2, ema_decay=0.9))
    assert selection.averaging.used and not selection.ema.used  # 12 beats the best checkpoint's 10, not the 15
    assert (selection.ema.baseline_validation_bleu, selection.validation_bleu) == (15.0, 15.0)


def test_a_candidate_is_kept_only_when_strictly_better_and_the_kept_ones_bleu_is_reported():
    assert is_better(1.0, None) and is_better(2.0, 1.0) and not is_better(1.0, 1.0)
    averaging = SimpleNamespace(used=True, validation_bleu=3.0)
    ema = SimpleNamespace(used=True, validation_bleu=4.0)
    assert kept_validation_bleu(2.0, None, None) == 2.0
    assert kept_validation_bleu(2.0, averaging, None) == 3.0
    assert kept_validation_bleu(2.0, averaging, ema) == 4.0  # the EMA is chosen last, over the average
    assert kept_validation_bleu(2.0, SimpleNamespace(used=False, validation_bleu=1.0), None) == 2.0


# --- save, evaluate, report -------------------------------------------------------------------------------------


def test_the_saved_folder_decodes_as_the_test_set_was_and_its_results_json_renders_the_card(prepared, tmp_path):
    args, corpus, tokenizer = prepared
    args = tiny_args(tmp_path, "transformer_seq2seq")  # --test_num_beams 1,2, --generation_max_length 16
    model, generation = job.prepare_model(args.model, args.decoding, args.training, tokenizer)
    trainer = job.build_trainer(model, tokenizer, corpus, args)
    model_dir = job.save_model_folder(trainer, tokenizer, generation.saved, args.data, args.training)
    generation_config = json.loads((model_dir / "generation_config.json").read_text())
    assert (generation_config["num_beams"], generation_config["max_length"]) == (2, 16)  # the largest beam tested
    test, samples = job.evaluate_test_set(trainer.model, tokenizer, corpus["test"], args.data, args.decoding, tmp_path)
    assert list(test) == ["greedy", "beam2"] and len(samples) == 3  # --num_sample_translations 3
    for key, scores in test.items():
        assert scores.decoding["num_beams"] == (2 if key == "beam2" else 1)
        assert len(hypotheses_path(tmp_path, key).read_text().splitlines()) == 16
    training = job.Training(seconds=2.0, validation_seconds=1.0, tokens=1000, epochs=1.0, loss=3.5)
    results = job.collect_results(trainer, 1234, training, Selection(None, None, None), test, args.data,
                                  args.training)
    job.write_results(results, samples, model_dir, tmp_path)
    written = (tmp_path / "results.json").read_text()
    assert written == (model_dir / "results.json").read_text() == results.to_json()
    assert RunResults.from_dict(json.loads(written)).to_json() == written
    assert (results.num_parameters, results.train_tokens_per_second) == (1234, 500.0)
    assert (model_dir / "README.md").read_text() == render_model_card(json.loads(written))
    assert (tmp_path / "samples.txt").read_text().count("HYP: ") == 3
