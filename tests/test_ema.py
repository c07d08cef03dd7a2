"""EMA of the weights in the training job (hf_s2s.training.ema, `--ema_decay`), on tiny real runs of the job: the saved EMA
equals the formula applied to the weights after every step; the run keeps the EMA only when it validates better;
a resumed run continues the same average, bit for bit."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

import hf_s2s  # noqa: F401
from hf_s2s.training.ema import recorded_ema_decay
from hf_s2s.training.run import run
from tests.helpers import TINY
from tests.runs import CrashAt, ForceBestMetric, tiny_args

DECAY = 0.8


class RecordWeights(TrainerCallback):
    """The model's weights before training and after every optimizer step."""

    def __init__(self):
        self.weights = []

    def _record(self, model):
        self.weights.append({name: tensor.detach().clone() for name, tensor in model.state_dict().items()})

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._record(model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self._record(model)


def test_the_saved_ema_is_the_formula_over_every_step(tmp_path):
    recorder = RecordWeights()
    results = run(*tiny_args(tmp_path, "transformer_seq2seq", "--ema_decay", str(DECAY), "--max_steps", "6",
                             "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "3",
                             "--load_best_model_at_end", "false", "--test_num_beams", "1"),
                  callbacks=[recorder])
    assert len(recorder.weights) == 7  # the initial weights and 6 steps
    expected = dict(recorder.weights[0])
    for weights in recorder.weights[1:]:
        expected = {name: DECAY * expected[name] + (1 - DECAY) * weights[name] for name in expected}
    saved = load_file(tmp_path / "ema" / "model.safetensors")
    assert saved.keys() <= expected.keys() and "model.encoder.embed_tokens.weight" in saved
    for name, tensor in saved.items():
        torch.testing.assert_close(tensor, expected[name], atol=1e-6, rtol=1e-5, msg=name)
    assert any(not torch.allclose(saved[n], recorder.weights[-1][n]) for n in saved)  # not the raw weights
    assert (tmp_path / "checkpoint-3" / "ema" / "model.safetensors").is_file()
    assert results["ema"]["decay"] == DECAY


@pytest.mark.slow
@pytest.mark.parametrize("baseline", [-1.0, 1e9], ids=["ema-wins", "raw-wins"])
def test_the_run_keeps_the_ema_only_when_it_validates_better(tmp_path, baseline):
    results = run(*tiny_args(tmp_path, "transformer_seq2seq", "--ema_decay", str(DECAY), "--test_num_beams", "1"),
                  callbacks=[ForceBestMetric(baseline)])
    ema = results["ema"]
    assert ema["used"] is (baseline < 0) and ema["baseline_validation_bleu"] == baseline
    best_step = json.loads((tmp_path / "checkpoint-16" / "trainer_state.json").read_text())["best_global_step"]
    expected = load_file(tmp_path / ("ema" if ema["used"] else f"checkpoint-{best_step}") / "model.safetensors")
    final = load_file(tmp_path / "model" / "model.safetensors")
    assert final.keys() == expected.keys()
    assert all(torch.equal(final[key], expected[key]) for key in final)
    assert results["best_validation_bleu"] == (ema["validation_bleu"] if ema["used"] else baseline)
    # ema/ is a model folder that decodes as model/ does: the same tokenizer and generation config (the run's
    # decoding settings, written after training), so `hf-s2s translate ema/` compares like with like.
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "ema" / name).read_text() == (tmp_path / "model" / name).read_text(), name
    assert json.loads((tmp_path / "ema" / "generation_config.json").read_text())["num_beams"] == 1
    assert (tmp_path / "checkpoint-16" / "ema" / "tokenizer.json").is_file()
    card = (tmp_path / "model" / "README.md").read_text()  # the model card says which weights it describes
    assert (f"| EMA of the weights | decay {DECAY} per step: validation BLEU {ema['validation_bleu']:.2f} vs "
            f"{baseline:.2f} for the raw weights; "
            f"{'the EMA is this model' if ema['used'] else 'the raw weights are this model'} |") in card


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_average(tmp_path):
    common = ("--ema_decay", str(DECAY), "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "4",
              "--max_steps", "12", "--load_best_model_at_end", "false", "--test_num_beams", "1", "--model_config",
              json.dumps({**TINY["transformer_seq2seq"], "dropout": 0.1}))
    run(*tiny_args(tmp_path / "straight", "transformer_seq2seq", *common))
    with pytest.raises(KeyboardInterrupt):
        run(*tiny_args(tmp_path / "killed", "transformer_seq2seq", *common), callbacks=[CrashAt(10)])
    checkpoint = tmp_path / "killed" / "checkpoint-8"
    refuse_resuming_another_average(tmp_path / "killed", checkpoint, common)
    run(*tiny_args(tmp_path / "killed", "transformer_seq2seq", *common, "--resume_from_checkpoint", str(checkpoint)))
    straight = load_file(tmp_path / "straight" / "ema" / "model.safetensors")
    resumed = load_file(tmp_path / "killed" / "ema" / "model.safetensors")
    assert straight.keys() == resumed.keys() and all(torch.equal(resumed[k], straight[k]) for k in straight)


def refuse_resuming_another_average(output_dir, checkpoint, common):
    """A resumed run continues the checkpoint's own average or is refused before anything is read: another decay (it
    recorded only the new one), no decay, and a checkpoint whose ema/ was never written (the run was stopped while
    saving it), told from one of a run without EMA by the decay trainer_state.json records."""
    assert recorded_ema_decay(checkpoint) == DECAY
    before = {p: p.stat().st_mtime_ns for p in output_dir.rglob("*")}
    without_ema = [flag for flag in common if flag not in ("--ema_decay", str(DECAY))]
    for flags, message in (
        (["--ema_decay", "0.5"], rf"--ema_decay 0.5: {checkpoint} was saved by a run with --ema_decay {DECAY}, and the "
                                 rf"average so far was taken with that decay; resume with --ema_decay {DECAY}"),
        (without_ema, rf"--resume_from_checkpoint {checkpoint} continues a run that kept an EMA of the weights "
                      rf"\(--ema_decay {DECAY}\): pass --ema_decay {DECAY}"),
    ):
        with pytest.raises(ValueError, match=message):
            run(*tiny_args(output_dir, "transformer_seq2seq", *(common if flags is not without_ema else []), *flags,
                           "--resume_from_checkpoint", str(checkpoint)))
    unsaved = shutil.copytree(checkpoint, output_dir / "checkpoint-9")
    shutil.rmtree(unsaved / "ema")
    with pytest.raises(ValueError, match=rf"--ema_decay: {unsaved} holds no EMA weights \(ema/\) although its run kept "
                                         rf"an EMA \(--ema_decay {DECAY}\): the run was stopped while this checkpoint "
                                         rf"was being saved, before ema/ was written; resume from the previous "
                                         rf"checkpoint instead: --resume_from_checkpoint {checkpoint}$"):
        run(*tiny_args(output_dir, "transformer_seq2seq", *common, "--resume_from_checkpoint", str(unsaved)))
    shutil.rmtree(unsaved)
    assert {p: p.stat().st_mtime_ns for p in output_dir.rglob("*")} == before  # nothing written by the refusals


def test_bad_decay_and_a_checkpoint_without_ema_are_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="--ema_decay must be between 0 and 1 \\(exclusive\\), e.g. 0.999; got 1.0"):
        run(*tiny_args(tmp_path / "a", "transformer_seq2seq", "--ema_decay", "1.0"))
    checkpoint = tmp_path / "b" / "checkpoint-4"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text("{}")
    with pytest.raises(ValueError, match="holds no EMA weights"):
        run(*tiny_args(tmp_path / "b", "transformer_seq2seq", "--ema_decay", "0.9",
                       "--resume_from_checkpoint", str(checkpoint)))
