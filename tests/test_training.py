"""The main job end to end on tiny models and the synthetic reversal corpus: train.py's library entry point,
recipes, resume after a crash, translate.py (n-best, scores, alignment heatmap) and checkpoint averaging."""

import errno
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest
import torch
import transformers
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, MarianConfig

import hf_s2s  # noqa: F401
import hf_s2s.data.corpus
from hf_s2s.cli import run_command
from hf_s2s.data.tokenization import train_translation_tokenizers
from hf_s2s.hub.results import RunResults, results_table
from hf_s2s.inference.translate import alignment, translate
from hf_s2s.metrics import compute_translation_metrics
from hf_s2s.models.modeling_common import DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B
from hf_s2s.models.output_record import RECORD_FILE
from hf_s2s.training.checkpoints import average_checkpoints, find_checkpoints
from hf_s2s.training.run import RECIPES_DIR, load_recipe, parse_args, run
from hf_s2s.training.run_dir import hypotheses_path
from tests.helpers import TINY
from tests.runs import CrashAt, ForceBestMetric, steps_of_one_stream_pass, tiny_args, tiny_argv

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny run per family, shared by the tests below."""
    runs = {}
    for model_type in TINY:
        output_dir = tmp_path_factory.mktemp(model_type)
        # Some test sources are longer than 8 tokens: decoding the saved folder must truncate them alike.
        results = run(*tiny_args(output_dir, model_type, "--max_source_length", "8"))
        runs[model_type] = (output_dir, results)
    return runs


@pytest.mark.slow
@pytest.mark.compat  # also run by CI on the oldest supported releases
@pytest.mark.parametrize("model_type", list(TINY))
def test_run_writes_results_and_a_loadable_model_folder(trained, model_type):
    output_dir, results = trained[model_type]
    on_disk = json.loads((output_dir / "model" / "results.json").read_text())
    assert on_disk["num_parameters"] == results["num_parameters"] > 0
    assert set(on_disk["test"]) == {"greedy", "beam2"}
    assert on_disk["test"]["greedy"]["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert on_disk["train_tokens_per_second"] > 0 and on_disk["train_seconds"] > 0
    assert (output_dir / "samples.txt").read_text().count("HYP: ") == 3
    assert matplotlib.image.imread(output_dir / "alignment.png").ndim == 3
    assert (output_dir / "checkpoint-16").is_dir()  # 256 pairs / 32 per step * 2 epochs
    # The saved folder loads through the Auto classes and reproduces the scores in results.json.
    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir / "model")
    tokenizer = AutoTokenizer.from_pretrained(output_dir / "model")
    assert type(model).__name__.startswith({"transformer_seq2seq": "Transformer", "rnn_seq2seq": "RNN"}[model_type])
    args = tiny_args(output_dir, model_type)
    corpus = hf_s2s.data.corpus.load_translation_corpus("synthetic:reversal", source_lang="src", target_lang="tgt")
    pairs = corpus["test"].select(range(16))["translation"]
    hypotheses = translate(model, tokenizer, [p["src"] for p in pairs], num_beams=1, batch_size=16,
                           max_length=args.training.generation_max_length)
    scores = compute_translation_metrics([h[0].text for h in hypotheses], [p["tgt"] for p in pairs])
    assert scores["bleu"] == pytest.approx(on_disk["test"]["greedy"]["bleu"], abs=1e-9)


def test_train_token_count_is_the_tokenized_corpus_times_the_epochs(trained):
    output_dir, results = trained["transformer_seq2seq"]
    tokenizer = AutoTokenizer.from_pretrained(output_dir / "model")
    corpus = hf_s2s.data.corpus.load_translation_corpus("synthetic:reversal", source_lang="src", target_lang="tgt")
    pairs = corpus["train"].select(range(256))["translation"]
    source = tokenizer([p["src"] for p in pairs], truncation=True, max_length=8)["input_ids"]
    target = tokenizer(text_target=[p["tgt"] for p in pairs], truncation=True, max_length=128)["input_ids"]
    assert results["train_tokens"] == 2 * sum(len(ids) for ids in source + target)


@pytest.mark.parametrize("model_type", list(TINY))
def test_the_results_json_a_run_writes_reads_into_run_results_and_back_unchanged(trained, model_type):
    output_dir, results = trained[model_type]
    text = (output_dir / "model" / "results.json").read_text()
    assert (output_dir / "results.json").read_text() == text
    assert RunResults.from_dict(json.loads(text)).to_json() == text == RunResults.from_dict(results).to_json()


@pytest.mark.slow
def test_streaming_corpus_trains_for_max_steps(tmp_path):
    results = run(*tiny_args(tmp_path, "transformer_seq2seq", "--streaming", "true", "--max_steps", "3",
                             "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false",
                             "--test_num_beams", "1"))
    assert results["train_tokens"] > 0 and results["test"]["greedy"]["bleu_signature"]
    with pytest.raises(ValueError, match="--streaming .* --max_steps"):
        run(*tiny_args(tmp_path / "again", "transformer_seq2seq", "--streaming", "true"))


def test_training_loss_decreases(trained):
    output_dir, _ = trained["transformer_seq2seq"]
    state = json.loads((output_dir / "checkpoint-16" / "trainer_state.json").read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(losses) == 16 and losses[-1] < losses[0] * 0.8


def step_losses(checkpoint: Path) -> list[float]:
    """The training loss of every step up to ``checkpoint``, from its trainer_state.json (logged every step)."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


RDROP = ("--rdrop_alpha", "5")


# the first 128 pairs streamed in windows of 100 pairs and batches of 400 tokens
STREAMED_BUDGET = ("--streaming", "true", "--max_tokens_per_batch", "400", "--streaming_window_pairs", "100",
                   "--max_train_samples", "128")


@pytest.mark.slow
@pytest.mark.parametrize(("model_type", "flags"), [
    ("transformer_seq2seq", ()), ("transformer_seq2seq", ("--max_tokens_per_batch", "400")),
    ("transformer_seq2seq", STREAMED_BUDGET), ("transformer_seq2seq", ("--max_tokens_per_batch", "400", *RDROP)),
    ("rnn_seq2seq", RDROP),
], ids=["group_by_length", "tokens", "streamed tokens", "tokens-rdrop", "rnn-rdrop"])
def test_resumed_run_ends_with_the_same_weights_as_an_uninterrupted_one(tmp_path, model_type, flags):
    # 256 pairs in batches of 32 (or of 400 tokens): 8 (10) steps an epoch. The run is killed at step 14 and
    # resumed from step 12, in its SECOND epoch: the epoch's shuffle must not depend on the random state that
    # epoch 1 left behind (dropout draws), which a resumed run does not replay. Bit for bit: one process, the
    # same batches in the same order and the same restored random state make the same float operations; with
    # R-Drop, the dropout masks of both passes of each batch too. Streamed, the second pass through the stream:
    # the resumed run reads the stream again from its start.
    common = (*flags, "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "4",
              "--max_steps", "16", "--load_best_model_at_end", "false", "--test_num_beams", "1", "--model_config",
              json.dumps({**TINY[model_type], "dropout": 0.1}))
    run(*tiny_args(tmp_path / "straight", model_type, *common))
    with pytest.raises(KeyboardInterrupt):
        run(*tiny_args(tmp_path / "killed", model_type, *common), callbacks=[CrashAt(14)])
    assert not (tmp_path / "killed" / "checkpoint-16").exists()
    if flags == STREAMED_BUDGET:
        assert steps_of_one_stream_pass(tmp_path / "straight" / "tokenizer", 128, 400, window=100) < 12
    else:
        assert 1 < json.loads((tmp_path / "killed" / "checkpoint-12" / "trainer_state.json").read_text())["epoch"] < 2
    run(*tiny_args(tmp_path / "killed", model_type, *common,
                   "--resume_from_checkpoint", str(tmp_path / "killed" / "checkpoint-12")))
    straight = load_file(tmp_path / "straight" / "model" / "model.safetensors")
    resumed = load_file(tmp_path / "killed" / "model" / "model.safetensors")
    assert straight.keys() == resumed.keys()
    for key in straight:
        torch.testing.assert_close(resumed[key], straight[key], rtol=0, atol=0, msg=key)
    losses = step_losses(tmp_path / "straight" / "checkpoint-16")
    assert len(losses) == 16 and step_losses(tmp_path / "killed" / "checkpoint-16") == losses  # steps 13-16 resumed
    # ...and the check has teeth: the run's own intermediate checkpoint differs from the end.
    middle = load_file(tmp_path / "killed" / "checkpoint-12" / "model.safetensors")
    assert any(not torch.equal(middle[k], straight[k]) for k in straight)
    # the flag reached the model's loss, and the saved folder and results say it
    rdrop_alpha = 5.0 if "--rdrop_alpha" in flags else 0.0
    saved_config = json.loads((tmp_path / "straight" / "model" / "config.json").read_text())
    results = json.loads((tmp_path / "straight" / "results.json").read_text())
    assert saved_config.get("rdrop_alpha", 0.0) == results["training_arguments"]["rdrop_alpha"] == rdrop_alpha


SAVED_EVERY_2 = ("--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "2", "--max_steps", "4",
                 "--load_best_model_at_end", "false", "--test_num_beams", "1")


@pytest.fixture(scope="module")
def saved_every_2(tmp_path_factory):
    """A run with checkpoint-2 and checkpoint-4, every file Trainer reads back on resume in each."""
    output_dir = tmp_path_factory.mktemp("saved_every_2")
    run(*tiny_args(output_dir, "transformer_seq2seq", *SAVED_EVERY_2))
    return output_dir


@pytest.mark.slow
@pytest.mark.parametrize("name", ["trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                                  "model.safetensors"])
def test_a_truncated_checkpoint_file_is_named_before_resuming(saved_every_2, tmp_path, name):
    """A file cut short (the run killed or the disk full while it was written) gave raw errors naming no file
    (OSError: [Errno 22], SafetensorError) once the corpus was read and the tokenizer trained."""
    out = shutil.copytree(saved_every_2, tmp_path / "run")
    damaged = out / "checkpoint-4" / name
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    args = tiny_args(out, "transformer_seq2seq", *SAVED_EVERY_2, "--resume_from_checkpoint", str(out / "checkpoint-4"))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=rf"--resume_from_checkpoint {out / 'checkpoint-4'}: {damaged} is truncated or "
                                         rf".*; resume from the previous checkpoint instead: --resume_from_checkpoint "
                                         rf"{out / 'checkpoint-2'}$"):
        run(*args)
    previous = out / "checkpoint-2" / name  # with no intact checkpoint before it, the advice is to start again
    previous.write_bytes(previous.read_bytes()[:10])
    with pytest.raises(ValueError, match=rf"no earlier checkpoint of {out} is intact: start the run again"):
        run(*args)
    del before[previous]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p != previous} == before


@pytest.mark.slow
def test_resuming_with_another_model_or_tokenizer_is_one_error_line_naming_the_differences(saved_every_2, tmp_path):
    """A resumed run with another --model_config (or --model_type) ended in Trainer's size-mismatch traceback after
    the corpus was read; one with another tokenizer of the same size resumed silently on ids the checkpoint's
    embeddings do not belong to."""
    out = shutil.copytree(saved_every_2, tmp_path / "run")
    resume = ("--resume_from_checkpoint", str(out / "checkpoint-4"))
    other_tokenizer = tmp_path / "other_tokenizer"
    corpus = hf_s2s.data.corpus.load_translation_corpus("synthetic:reversal", source_lang="src", target_lang="tgt")
    train_translation_tokenizers(corpus["train"].select(range(256)), source_lang="src", target_lang="tgt",
                                 vocab_size=280, model_type="unigram").save_pretrained(other_tokenizer)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    for flags, message in [
        (("--model_config", json.dumps({**TINY["transformer_seq2seq"], "d_model": 64, "dropout": 0.3})),
         "holds a model of another configuration than this run builds: d_model 32 in the checkpoint, 64 in this run; "
         "dropout 0.1 in the checkpoint, 0.3 in this run; resume with the options the run was started with "
         "(--model_type, --model_config, --recipe, --model_name_or_path), or start a new run: leave out "
         "--resume_from_checkpoint and choose another --output_dir (or pass --overwrite_output_dir to replace this "
         "run)"),
        (("--model_type", "rnn_seq2seq", "--model_config", json.dumps(TINY["rnn_seq2seq"])),
         "holds a model of another configuration than this run builds: model_type 'transformer_seq2seq' in the "
         "checkpoint, 'rnn_seq2seq' in this run; resume with"),
        (("--tokenizer_name_or_path", str(other_tokenizer)),
         "was trained with another tokenizer than this run uses (this run's vs the checkpoint's: vocabularies of "),
    ]:
        with pytest.raises(SystemExit) as refused:
            run_command("train", tiny_argv(out, "transformer_seq2seq", *SAVED_EVERY_2, *resume, *flags))
        assert str(refused.value.code).startswith(f"error: --resume_from_checkpoint {out / 'checkpoint-4'} {message}")
    shutil.rmtree(out / "tokenizer")  # the run would train another one
    with pytest.raises(SystemExit) as refused:
        run_command("train", tiny_argv(out, "transformer_seq2seq", *SAVED_EVERY_2, *resume))
    assert str(refused.value.code) == (
        f"error: --resume_from_checkpoint {out / 'checkpoint-4'}: this run would train a new tokenizer, as "
        f"{out / 'tokenizer'} is missing; the checkpoint was trained with its own: pass --tokenizer_name_or_path "
        f"{out / 'checkpoint-4'} to resume with it")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == \
        {p: data for p, data in before.items() if not p.is_relative_to(out / "tokenizer")}


def _cut_short(path, data: bytes) -> None:
    """What a full disk leaves of a file: its first half."""
    Path(path).write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("where", ["checkpoint", "model"])
def test_a_full_disk_names_the_file_and_the_intact_checkpoint_to_resume_from(tmp_path, monkeypatch, capsys, where):
    """A full disk ended the run with torch's "enforce fail at inline_container.cc ... unexpected pos" or a raw
    "No space left on device". Simulated here by the writers themselves: torch.save cuts optimizer.pt of
    checkpoint-4 short and raises what torch raises; safetensors cuts the final model's weights short and raises
    ENOSPC. The command says so in one line, and resuming as it says finishes the run."""
    out = tmp_path / "run"
    if where == "checkpoint":
        writing, intact = out / "checkpoint-4" / "optimizer.pt", ["checkpoint-2"]
        save = torch.save

        def full_disk(obj, f, *args, **kwargs):
            if Path(f) != writing:
                return save(obj, f, *args, **kwargs)
            buffer = io.BytesIO()
            save(obj, buffer, *args, **kwargs)
            _cut_short(f, buffer.getvalue())
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 4032 vs 3968")

        monkeypatch.setattr(torch, "save", full_disk)
    else:
        writing, intact = out / "model" / "model.safetensors", ["checkpoint-2", "checkpoint-4"]
        save_file = transformers.modeling_utils.safe_save_file

        def full_disk(tensors, filename, *args, **kwargs):
            save_file(tensors, filename, *args, **kwargs)
            if Path(filename) == writing:
                _cut_short(filename, Path(filename).read_bytes())
                raise OSError(errno.ENOSPC, "No space left on device")  # as safetensors' writer: no file name

        monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full_disk)
    command = ["--dataset", "synthetic:reversal", "--source_lang", "src", "--target_lang", "tgt", "--vocab_size",
               "280", "--model_config", json.dumps(TINY["transformer_seq2seq"]), "--max_train_samples", "64",
               "--max_test_samples", "4", *SAVED_EVERY_2, "--output_dir", str(out), "--report_to", "none",
               "--use_cpu", "true", "--disable_tqdm", "true", "--generation_max_length", "8"]
    with pytest.raises(SystemExit) as refused:
        run_command("train", command)
    resume_from = out / intact[-1]
    raised = {"checkpoint": "[enforce fail at inline_container.cc:664] . unexpected pos 4032 vs 3968",
              "model": "[Errno 28] No space left on device"}[where]
    assert str(refused.value.code) == (
        f"error: the disk is full ({raised}) while writing {writing}; the checkpoints written before it are intact "
        f"({', '.join(intact)}): free space, then resume with --resume_from_checkpoint {resume_from}")
    monkeypatch.undo()
    capsys.readouterr()
    assert run_command("train", [*command, "--resume_from_checkpoint", str(resume_from)]) == 0
    assert "greedy" in json.loads((out / "model" / "results.json").read_text())["test"]
    assert (out / "checkpoint-4" / "trainer_state.json").is_file()


def test_recipes_give_defaults_that_flags_override(tmp_path):
    for recipe in sorted(RECIPES_DIR.glob("*.json")):
        assert load_recipe(recipe.stem)  # every shipped recipe parses
    job = parse_args(["--recipe", "transformer_small", "--learning_rate", "0.123", "--output_dir", str(tmp_path)])
    model_args, training_args = job.model, job.training
    recipe = load_recipe("transformer_small")
    assert model_args.model_type == recipe["model_type"]
    assert training_args.learning_rate == 0.123
    assert training_args.num_train_epochs == recipe["num_train_epochs"]


def test_bad_recipes_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"unknown recipe 'nope'; available recipes: \[.*transformer_small"):
        parse_args(["--recipe", "nope"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"learning_rat": 0.1}))
    with pytest.raises(ValueError, match=r"sets unknown argument\(s\) \['learning_rat'\]"):
        parse_args(["--recipe", str(bad)])


def test_tokenizer_that_does_not_fit_the_model_fails_before_training(trained, tmp_path):
    output_dir, _ = trained["transformer_seq2seq"]
    args = tiny_args(tmp_path, "transformer_seq2seq", "--tokenizer_name_or_path", str(output_dir / "model"),
                     "--model_config", json.dumps({**TINY["transformer_seq2seq"], "vocab_size": 100}))
    with pytest.raises(ValueError, match="vocab"):
        run(*args)
    assert not list(tmp_path.glob("checkpoint-*"))


@pytest.mark.slow
def test_translate_script_nbest_scores_and_heatmaps(trained, tmp_path):
    for model_type in TINY:
        model_dir = trained[model_type][0] / "model"
        completed = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "translate.py"), str(model_dir), "--beams", "3", "--nbest", "2",
             "--scores", "--max-new-tokens", "12"],
            input="a b c\nd e f g\n", capture_output=True, text=True, timeout=120, check=True,
        )
        rows = [line.split("\t") for line in completed.stdout.splitlines()]
        assert [r[0] for r in rows] == ["0", "0", "1", "1"]
        for first, second in (rows[0:2], rows[2:4]):
            assert float(first[2]) >= float(second[2])  # best first
        png = tmp_path / f"{model_type}.png"
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "translate.py"), str(model_dir), "--plot-alignment", str(png),
             "--sentence", "a b c", "--beams", "1", "--max-new-tokens", "12"],
            capture_output=True, text=True, timeout=120, check=True,
        )
        image = matplotlib.image.imread(png)
        assert image.ndim == 3 and image.shape[0] > 50 and image.shape[1] > 50


@pytest.mark.parametrize("model_type", list(TINY))
def test_alignment_rows_are_distributions_over_the_source(trained, model_type):
    model_dir = trained[model_type][0] / "model"
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    weights, source_tokens, target_tokens = alignment(model, tokenizer, "a b c d", max_new_tokens=10)
    assert weights.shape == (len(target_tokens), len(source_tokens))
    assert source_tokens[-1] == "</s>"
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(target_tokens)), rtol=0, atol=1e-5)


@pytest.mark.slow
def test_average_checkpoints_is_the_elementwise_mean(trained, tmp_path):
    run_dir = trained["transformer_seq2seq"][0]
    checkpoints = find_checkpoints(run_dir, last=2)
    assert [c.name for c in checkpoints] == ["checkpoint-8", "checkpoint-16"]
    subprocess.run([sys.executable, str(ROOT / "scripts" / "average_checkpoints.py"), str(run_dir), "--last", "2",
                    "--output", str(tmp_path / "avg")], check=True, capture_output=True, timeout=120)
    first, second = (load_file(c / "model.safetensors") for c in checkpoints)
    averaged = load_file(tmp_path / "avg" / "model.safetensors")
    for key in first:
        torch.testing.assert_close(averaged[key], (first[key] + second[key]) / 2)
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "avg")
    assert torch.equal(model.state_dict()["model.encoder.embed_tokens.weight"],
                       averaged["model.encoder.embed_tokens.weight"])


def test_average_checkpoints_refuses_mismatched_checkpoints(trained, tmp_path):
    checkpoints = find_checkpoints(trained["transformer_seq2seq"][0], last=1) + \
        find_checkpoints(trained["rnn_seq2seq"][0], last=1)
    with pytest.raises(ValueError, match="are different models, their config.json differ in .*model_type"):
        average_checkpoints(checkpoints, tmp_path / "avg")
    with pytest.raises(ValueError, match="asked for the last 99 checkpoints"):
        find_checkpoints(trained["transformer_seq2seq"][0], last=99)


@pytest.mark.slow
def test_early_stopping_ends_the_run_when_validation_bleu_stops_improving(tmp_path):
    # With a learning rate of 0 the validation BLEU cannot improve after the first evaluation, so patience 1
    # must stop a 5-epoch run after epoch 2 (and the best checkpoint, epoch 1, is the one kept).
    results = run(*tiny_args(tmp_path, "transformer_seq2seq", "--learning_rate", "0", "--num_train_epochs", "5",
                             "--early_stopping_patience", "1", "--test_num_beams", "1"))
    assert results["epochs"] == 2
    assert json.loads((tmp_path / "checkpoint-16" / "trainer_state.json").read_text())["best_global_step"] == 8


@pytest.mark.slow
@pytest.mark.parametrize("best_single", [-1.0, 1e9], ids=["average-wins", "best-single-wins"])
def test_run_keeps_the_checkpoint_average_only_when_it_validates_better(tmp_path, best_single):
    results = run(*tiny_args(tmp_path, "transformer_seq2seq", "--num_train_epochs", "3", "--save_total_limit", "4",
                             "--average_last_checkpoints", "2", "--test_num_beams", "1"),
                  callbacks=[ForceBestMetric(best_single)])
    averaging = results["checkpoint_averaging"]
    assert averaging["checkpoints"] == ["checkpoint-16", "checkpoint-24"]
    assert averaging["used"] is (best_single < 0)
    first, second = (load_file(tmp_path / name / "model.safetensors") for name in averaging["checkpoints"])
    averaged = load_file(tmp_path / "averaged" / "model.safetensors")
    for key in first:
        torch.testing.assert_close(averaged[key], (first[key] + second[key]) / 2)
    # The saved model is the average when it won, else the best checkpoint that load_best_model_at_end restored.
    best_step = json.loads((tmp_path / "checkpoint-24" / "trainer_state.json").read_text())["best_global_step"]
    expected = averaged if averaging["used"] else load_file(tmp_path / f"checkpoint-{best_step}" / "model.safetensors")
    final = load_file(tmp_path / "model" / "model.safetensors")
    assert set(final) == set(expected)
    for key in final:
        assert torch.equal(final[key], expected[key]), key
    assert results["best_validation_bleu"] == (averaging["validation_bleu"] if averaging["used"] else best_single)
    for name in ("generation_config.json", "tokenizer_config.json"):  # averaged/ decodes as model/ does
        assert (tmp_path / "averaged" / name).read_text() == (tmp_path / "model" / name).read_text(), name
    card = (tmp_path / "model" / "README.md").read_text()
    assert "| checkpoint averaging | last 2 checkpoints: validation BLEU" in card
    assert ("the average is this model" in card) is averaging["used"]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}


@pytest.mark.slow
def test_a_resumed_run_replaces_its_own_average_and_refuses_another_before_training(tmp_path):
    """A resumed run that averages replaces averaged/ after training, and only an average hf-s2s wrote there,
    unchanged. The run's own is one: the decoding settings the run writes into it are recorded with it (they
    read as changed files, refused after training). One written before 0.3.0, which kept no record, is refused
    before anything is read or trained (it was refused after training), naming it; nothing is deleted."""
    averaging = ("--average_last_checkpoints", "2", "--test_num_beams", "1")
    run(*tiny_args(tmp_path, "transformer_seq2seq", *averaging))
    record = tmp_path / "averaged" / RECORD_FILE
    recorded = record.read_bytes()
    record.unlink()  # as a run before 0.3.0 left it
    resumed = tiny_argv(tmp_path, "transformer_seq2seq", *averaging, "--num_train_epochs", "3",
                        "--resume_from_checkpoint", str(tmp_path / "checkpoint-16"))
    before = folder_bytes(tmp_path)
    with pytest.raises(SystemExit) as refused:
        run_command("train", resumed)
    assert str(refused.value.code) == (
        f"error: --average_last_checkpoints 2 writes the checkpoint average into {tmp_path / 'averaged'} "
        f"after training, replacing only an average written there by hf-s2s, unchanged, and it holds no "
        f"{RECORD_FILE} (the record hf-s2s average-checkpoints writes of its output); nothing was deleted: "
        f"move {tmp_path / 'averaged'} out of {tmp_path} to resume with averaging, or leave out "
        "--average_last_checkpoints")
    assert folder_bytes(tmp_path) == before  # nothing trained, written or deleted

    record.write_bytes(recorded)
    assert run_command("train", resumed) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["epochs"] == 3 and results["checkpoint_averaging"]["checkpoints"] == ["checkpoint-16",
                                                                                         "checkpoint-24"]


@pytest.mark.parametrize(("config", "label"), [
    ({"attention_type": "luong_general"}, "GRU + Luong general"),
    ({"attention_type": "scaled_dot", "cell_type": "lstm"}, "LSTM + scaled dot"),
    ({"attention_type": "luong_dot", "attention_heads": 4}, "GRU + Luong dot, 4 heads"),
])
def test_results_table_names_the_rnn_attention(config, label):
    row = results_table([{"model_type": "rnn_seq2seq", "model_config": config, "test": {}}]).splitlines()[2]
    assert row.startswith(f"| {label} |")


def test_checkpoint_averaging_needs_the_checkpoints_kept(tmp_path):
    with pytest.raises(ValueError, match="--average_last_checkpoints 3 needs --save_total_limit above 3"):
        run(*tiny_args(tmp_path, "transformer_seq2seq", "--average_last_checkpoints", "3", "--save_total_limit", "3"))


@pytest.mark.slow
def test_results_table_reports_each_run_from_its_results_json(trained, tmp_path):
    runs = [json.loads((trained[model_type][0] / "results.json").read_text()) for model_type in TINY]
    runs[1]["test"].pop("beam2")  # a run decoded greedily only gets dashes in the beam columns
    lines = results_table(runs).splitlines()
    assert lines[0].split(" | ")[3:9] == ["greedy BLEU", "greedy BLEU lc", "greedy chrF", "beam 2 BLEU",
                                          "beam 2 BLEU lc", "beam 2 chrF"]
    assert len(lines) == 2 + len(runs)
    for line, results in zip(lines[2:], runs, strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == {"transformer_seq2seq": "Transformer", "rnn_seq2seq": "GRU + Bahdanau"}[results["model_type"]]
        assert cells[3] == f"{results['test']['greedy']['bleu']:.2f}"
        assert cells[5] == f"{results['test']['greedy']['chrf']:.2f}"
        expected_beam = f"{results['test']['beam2']['bleu']:.2f}" if "beam2" in results["test"] else "-"
        assert cells[6] == expected_beam
    script = subprocess.run([sys.executable, str(ROOT / "scripts" / "results_table.py"),
                             str(trained["rnn_seq2seq"][0] / "results.json")], capture_output=True, text=True)
    assert script.returncode == 0 and script.stdout.count("\n") == 3
    missing = subprocess.run([sys.executable, str(ROOT / "scripts" / "results_table.py"), str(tmp_path / "x.json")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "x.json does not exist" in missing.stderr


# --- The output folder: one run at a time, never mixed with an earlier run -------------------------------------


@pytest.mark.slow
def test_a_folder_holding_a_run_is_refused_unless_resumed_or_overwritten(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file")  # not a run: the folder may be used, the file is kept
    run(*tiny_args(out, "transformer_seq2seq", "--test_num_beams", "1"))  # checkpoint-8, checkpoint-16
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    finished = (r"already holds a finished training run \(checkpoint-8, checkpoint-16, model, tokenizer, .*; "
                r"to start again, deleting it: pass --overwrite_output_dir; or choose another --output_dir")
    with pytest.raises(ValueError, match=finished):
        run(*tiny_args(out, "transformer_seq2seq", "--vocab_size", "300"))
    # A resumed run reuses the run's tokenizer only when it asks for the one the run trained.
    with pytest.raises(ValueError, match=r"tokenizer in .* was trained with other arguments .*vocab_size: 280 there, "
                                         r"300 now; source_lang: 'src' there, 'tgt' now"):
        run(*tiny_args(out, "transformer_seq2seq", "--vocab_size", "300", "--source_lang", "tgt", "--target_lang",
                       "src", "--resume_from_checkpoint", str(out / "checkpoint-8")))
    # A run resumes in its own folder: not from another folder's checkpoint, and not while overwriting it.
    shutil.copytree(out / "checkpoint-8", tmp_path / "other" / "checkpoint-8")
    with pytest.raises(ValueError, match=r"is not one of the checkpoints of --output_dir"):
        run(*tiny_args(tmp_path / "other", "transformer_seq2seq", "--resume_from_checkpoint", str(out / "checkpoint-8")))
    with pytest.raises(ValueError, match=r"--overwrite_output_dir would delete the checkpoint"):
        run(*tiny_args(out, "transformer_seq2seq", "--resume_from_checkpoint", str(out / "checkpoint-8"),
                       "--overwrite_output_dir", "true"))
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # the refused runs changed nothing
    # --overwrite_output_dir starts again from nothing: no checkpoint, tokenizer or result of the first run is left
    # to be rotated, averaged or reused (one epoch of 4 steps now).
    results = run(*tiny_args(out, "transformer_seq2seq", "--overwrite_output_dir", "true", "--vocab_size", "300",
                             "--num_train_epochs", "1", "--per_device_train_batch_size", "64", "--test_num_beams", "1"))
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-4"]
    assert json.loads((out / "tokenizer" / "hf_s2s_tokenizer_arguments.json").read_text())["vocab_size"] == 300
    assert results["epochs"] == 1 and json.loads((out / "results.json").read_text())["epochs"] == 1
    assert (out / "notes.txt").read_text() == "the user's own file"


def _train_command(output_dir, *extra):
    return [sys.executable, str(ROOT / "scripts" / "train.py"), "--dataset", "synthetic:reversal", "--source_lang",
            "src", "--target_lang", "tgt", "--vocab_size", "280", "--model_config",
            json.dumps(TINY["transformer_seq2seq"]), "--max_train_samples", "64", "--max_test_samples", "4",
            "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false", "--report_to",
            "none", "--use_cpu", "true", "--disable_tqdm", "true", "--logging_steps", "1000", "--test_num_beams", "1",
            "--generation_max_length", "8", "--output_dir", str(output_dir), *extra]


@pytest.mark.slow
@pytest.mark.timeout(400)  # a run that never takes the lock would keep the first one waiting
def test_a_second_run_into_a_locked_folder_is_refused_and_a_killed_run_leaves_no_lock(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(_train_command(tmp_path, "--max_steps", "1000000"), stderr=subprocess.PIPE, text=True,
                             env=env)
    try:
        for line in first.stderr:  # wait until the first run holds the lock
            if "locked" in line:
                break
        assert first.poll() is None, "the first run ended before it locked the folder"
        second = subprocess.run(_train_command(tmp_path, "--max_steps", "2"), capture_output=True, text=True,
                                timeout=300, env=env)
        assert second.returncode != 0
        assert f"is in use by another training run (process {first.pid})" in second.stderr
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # The kernel released the killed run's lock; its files are a run, so starting again needs the flag.
    third = subprocess.run(_train_command(tmp_path, "--max_steps", "2", "--overwrite_output_dir", "true"),
                           capture_output=True, text=True, timeout=300, env=env)
    assert third.returncode == 0, third.stderr[-3000:]
    assert json.loads((tmp_path / "results.json").read_text())["train_tokens"] > 0


@pytest.mark.compat  # also run by CI on the oldest supported releases
@pytest.mark.parametrize("model_type", list(TINY))
def test_translate_script_on_the_saved_folder_gives_the_hypotheses_behind_results_json(trained, model_type, tmp_path,
                                                                                     capsys):
    output_dir, results = trained[model_type]
    model_dir = output_dir / "model"
    # Each score records how it was decoded, and the folder's generation config holds those settings.
    assert results["test"]["greedy"]["decoding"] == {"num_beams": 1, "max_length": 16, "length_penalty": 1.0,
                                                     "batch_size": 64, "max_source_length": 8,
                                                     "max_len_a": DEFAULT_MAX_LEN_A, "max_len_b": DEFAULT_MAX_LEN_B}
    assert results["test"]["beam2"]["decoding"]["num_beams"] == 2
    generation_config = json.loads((model_dir / "generation_config.json").read_text())
    assert (generation_config["max_length"], generation_config["num_beams"]) == (16, 2)
    assert (generation_config["max_len_a"], generation_config["max_len_b"]) == (DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B)
    corpus = hf_s2s.data.corpus.load_translation_corpus("synthetic:reversal", source_lang="src", target_lang="tgt")
    pairs = corpus["test"].select(range(16))["translation"]
    lengths = [len(ids) for ids in AutoTokenizer.from_pretrained(model_dir)([p["src"] for p in pairs])["input_ids"]]
    assert max(lengths) > results["test"]["greedy"]["decoding"]["max_source_length"]  # so truncation is tested too
    sources = tmp_path / "test.src"
    sources.write_text("".join(f"{p['src']}\n" for p in pairs))
    from hf_s2s.cli import translate as translate_command  # the command line's own code, run in this process

    for key, flags in (("beam2", []), ("greedy", ["--beams", "1"])):  # the default is the largest beam tested
        expected = hypotheses_path(output_dir, key).read_text().splitlines()
        scores = compute_translation_metrics(expected, [p["tgt"] for p in pairs])
        assert scores["bleu"] == results["test"][key]["bleu"]  # these are the translations behind the score
        assert translate_command.main([str(model_dir), "--input", str(sources), *flags]) == 0
        assert capsys.readouterr().out.splitlines() == expected
    # --reference prints the score of those translations, which is the score results.json reports.
    references = tmp_path / "test.tgt"
    references.write_text("".join(f"{p['tgt']}\n" for p in pairs))
    for key, flags in (("beam2", []), ("greedy", ["--beams", "1"])):
        assert translate_command.main([str(model_dir), "--input", str(sources), "--reference", str(references),
                                       *flags]) == 0
        printed = capsys.readouterr()
        assert printed.out.splitlines() == hypotheses_path(output_dir, key).read_text().splitlines()
        test = results["test"][key]
        score = printed.err.splitlines()[-1]  # after the weight-loading progress bar
        assert score.startswith(f"BLEU {test['bleu']:.2f} | BLEU lc {test['bleu_lowercase']:.2f} | "
                                f"chrF {test['chrf']:.2f} | 16 sentences against {references} | length ratio "
                                f"{test['bleu_sys_len'] / test['bleu_ref_len']:.3f} ({test['bleu_sys_len']:,} / "
                                f"{test['bleu_ref_len']:,} tokens) | {test['bleu_signature']}"), printed.err


@pytest.mark.slow
def test_decoding_study_script_reproduces_the_runs_test_scores_from_its_folders(trained, tmp_path):
    """scripts/decoding_study.sh (the README's EMA / ensemble / coverage figures) decodes the saved folders with
    hf-s2s translate --reference: its model/ row must give the test scores results.json reports, and its checkpoint
    ensemble row must name the run's last checkpoints by step (the tmp path holds '-', which a split on '-' misreads)."""
    output_dir, results = trained["rnn_seq2seq"]
    corpus = hf_s2s.data.corpus.load_translation_corpus("synthetic:reversal", source_lang="src", target_lang="tgt")
    pairs = corpus["test"].select(range(16))["translation"]  # the run's test set (--max_test_samples 16)
    for split in ("val", "test"):
        for lang in ("src", "tgt"):
            (tmp_path / f"{split}.{lang}").write_text("".join(f"{p[lang]}\n" for p in pairs))
    env = {**os.environ, "DATA": str(tmp_path), "SRC": "src", "TGT": "tgt", "VALID": "val", "TEST": "test",
           "BEAMS": "2", "CHECKPOINTS": "2", "PARTS": "weights ensembles",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # hf-s2s of this Python
    done = subprocess.run(["bash", str(ROOT / "scripts" / "decoding_study.sh"), str(output_dir)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:6]]
            for line in done.stdout.splitlines()[2:]}
    test = results["test"]
    # validation = test here, so the columns pair up too
    assert rows["model/ (the run's choice)"] == [f"{test[key]['bleu']:.2f}" for key in ("greedy", "beam2")] * 2
    assert list(rows)[1] == "ensemble of the last 2 checkpoints (checkpoint-8,checkpoint-16)"
    assert all(cell.replace(".", "").isdigit() for cell in rows[list(rows)[1]])


# --- Fail fast: a bad argument is named before the corpus is read or anything is written -----------------------

LEARNED_POSITIONS = json.dumps({**TINY["transformer_seq2seq"], "position_embedding_type": "learned",
                                "max_position_embeddings": 12})


@pytest.mark.parametrize(("flags", "message"), [
    (["--model_config", '{"d_model": 32,'], r"--model_config is not valid JSON \(Expecting property name"),
    (["--model_config", "[32]"], r"--model_config must be a JSON object"),
    (["--model_config", json.dumps({**TINY["transformer_seq2seq"], "encoder_attention_heads": 3})],
     r"encoder_attention_heads"),
    (["--model_config", LEARNED_POSITIONS], r"--generation_max_length 16 is longer than the 12 positions"),
    (["--model_config", LEARNED_POSITIONS, "--generation_max_length", "12"],
     r"--max_source_length 128 is longer than the 12 positions"),
    (["--test_num_beams", "1,x"], r"--test_num_beams must be distinct beam sizes .* got '1,x'"),
    (["--test_num_beams", "0"], r"--test_num_beams must be"),
    (["--predict_with_generate", "false"], r"--predict_with_generate false: the validation BLEU"),
    (["--max_train_samples", "0"], r"--max_train_samples must be a positive number of pairs .*got 0"),
    (["--resume_from_checkpoint", "true"], r"--resume_from_checkpoint true is not a checkpoint folder"),
    (["--max_target_length", "1"], r"--max_target_length must be at least 2 \(room for one token and </s>\), got 1"),
    (["--max_tokens_per_batch", "500", "--accelerator_config", '{"split_batches": true}'],
     r"--max_tokens_per_batch .* cannot be combined with --accelerator_config \['split_batches'\]"),
    (["--generation_max_length", "0"], r"--generation_max_length must be at least 2 .*got 0"),
    (["--eval_strategy", "no", "--save_strategy", "no"],
     r"--load_best_model_at_end \(true by default\) keeps the checkpoint of the best validation BLEU, and early "
     r"stopping \(--early_stopping_patience\) stops on it, but --eval_strategy no never validates: pass "
     r"--load_best_model_at_end false"),
    (["--separate_vocabs", "true", "--target_vocab_size", "3"], r"--target_vocab_size must be an integer > 260 .*got 3"),
    (["--separate_vocabs", "true", "--target_vocab_size", "0"], r"--target_vocab_size must be an integer > 260 .*got 0"),
    (["--tokenizer_type", "wordpiece"], r"--tokenizer_type must be one of \['bpe', 'unigram'\], got 'wordpiece'"),
    (["--max_len_a", "1e18"], r"--max_len_a must be <= 100 \(output tokens per source token\), got 1e\+18"),
    (["--max_len_b", str(10 ** 19)], r"--max_len_b must be <= 100000 \(tokens added to the bound\), got 10{19}"),
    (["--max_len_a", "nan"], r"--max_len_a/--max_len_b: max_len_a .* must be a number >= 0 .*got nan"),
    (["--rdrop_alpha", "-1"], r"--rdrop_alpha \(the weight of R-Drop's KL term\) must be a finite number >= 0 "
                              r"\(0: off\), got -1.0"),
    (["--rdrop_alpha", "inf"], r"--rdrop_alpha .* must be a finite number >= 0 \(0: off\), got inf"),
    (["--model_name_or_path", "MARIAN", "--rdrop_alpha", "5"],
     r"--rdrop_alpha is computed by the loss of the \['transformer_seq2seq', 'rnn_seq2seq'\] families; a marian "
     r"model's loss has no R-Drop term: leave --rdrop_alpha out"),
], ids=["json", "not-object", "config-value", "generation-length", "source-length", "beams", "beam-0",
        "predict-with-generate", "max-train-samples", "resume-not-a-checkpoint", "target-length-1",
        "token-budget-split-batches", "generation-length-0", "best-model-without-evaluation", "target-vocab-3",
        "target-vocab-0", "tokenizer-type", "max-len-a-huge", "max-len-b-huge", "max-len-a-nan", "rdrop-negative",
        "rdrop-inf", "rdrop-another-family"])
def test_bad_arguments_fail_before_anything_is_written(tmp_path, flags, message):
    if "MARIAN" in flags:  # a saved model of another family, to fine-tune
        MarianConfig(vocab_size=300, d_model=8, decoder_start_token_id=1).save_pretrained(tmp_path / "marian")
        flags = [str(tmp_path / "marian") if flag == "MARIAN" else flag for flag in flags]
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=message):
        run(*tiny_args(out, "transformer_seq2seq", *flags))
    assert not out.exists()


@pytest.mark.parametrize(("flags", "message"), [
    (["--eval_strategy", "no"],
     r"--load_best_model_at_end \(true by default\) keeps the checkpoint of the best validation BLEU, and early "
     r"stopping \(--early_stopping_patience\) stops on it, but --eval_strategy no never validates: pass "
     r"--load_best_model_at_end false to train without validation \(early stopping is then off too\), or evaluate "
     r"with --eval_strategy epoch$"),
    (["--save_strategy", "no"],
     r"--load_best_model_at_end \(true by default\) keeps the checkpoint of the best validation BLEU, so a checkpoint "
     r"must be saved at every validation: --save_strategy no and --eval_strategy epoch \(the default\) differ; give "
     r"them the same strategy, or --save_strategy best, or pass --load_best_model_at_end false$"),
    (["--eval_strategy", "steps", "--eval_steps", "4"],
     r"--save_strategy epoch \(the default\) and --eval_strategy steps differ; give them the same strategy"),
    (["--load_best_model_at_end", "true", "--save_strategy", "steps"],
     r"^error: --load_best_model_at_end keeps the checkpoint of the best validation BLEU, so a checkpoint must be "
     r"saved at every validation: --save_strategy steps and --eval_strategy epoch \(the default\) differ"),
], ids=["eval-no", "save-no", "eval-steps", "save-steps-given"])
def test_strategies_that_cannot_keep_the_best_checkpoint_are_named_by_the_flags_given(tmp_path, flags, message):
    """hf-s2s train keeps the best checkpoint by default: a strategy that cannot is one error line naming the flags the
    user gave and what the defaults are (before, transformers' own error about --load_best_model_at_end, a flag the
    user never gave, reached before hf_s2s's check)."""
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as refused:
        run_command("train", tiny_argv(out, "transformer_seq2seq", *flags))
    said = str(refused.value.code)
    assert re.search(message, said) and said.startswith("error: ") and "\n" not in said, said
    assert not out.exists()


def test_an_output_dir_that_cannot_be_written_fails_before_training(tmp_path):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError, match=r"--output_dir .*a_file/run cannot be written to"):
        run(*tiny_args(tmp_path / "a_file" / "run", "transformer_seq2seq"))
    with pytest.raises(ValueError, match=r"--output_dir .*a_file is a file, not a folder"):
        run(*tiny_args(tmp_path / "a_file", "transformer_seq2seq"))


def test_a_corpus_without_validation_split_fails_before_the_tokenizer_is_trained(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "test"):
        (corpus / f"{split}.src").write_text("a b c\nd e\n")
        (corpus / f"{split}.tgt").write_text("c b a\ne d\n")
    with pytest.raises(ValueError, match=rf"the corpus {corpus} has no 'validation' split, which evaluation \(--eval_strategy is not 'no'\)"):
        run(*tiny_args(tmp_path / "run", "transformer_seq2seq", "--dataset", str(corpus)))
    assert not (tmp_path / "run" / "tokenizer").exists()


@pytest.mark.parametrize("flag", [("--ema_decay", "0.9"), ("--average_last_checkpoints", "2")], ids=["ema", "average"])
def test_weight_selection_without_a_validation_split_fails_before_the_corpus_is_read(tmp_path, monkeypatch, flag):
    """The EMA and the checkpoint average are kept only if they validate better: without a validation split they
    failed after all the training and wrote no model."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "test"):
        (corpus / f"{split}.src").write_text("a b c\nd e\n")
        (corpus / f"{split}.tgt").write_text("c b a\ne d\n")
    monkeypatch.setattr(hf_s2s.data.corpus, "load_translation_corpus", lambda *a, **k: pytest.fail("the corpus was read"))
    with pytest.raises(ValueError, match=rf"the corpus {corpus} has no 'validation' split, which choosing between the "
                                         rf"(EMA and the raw weights|checkpoint average and the last weights) after "
                                         rf"training \({flag[0]}\) needs"):
        run(*tiny_args(tmp_path / "run", "transformer_seq2seq", "--dataset", str(corpus), "--eval_strategy", "no",
                       "--save_strategy", "steps", "--save_steps", "1", "--load_best_model_at_end", "false", *flag))
    assert not (tmp_path / "run").exists()


def test_a_malformed_recipe_is_named_with_its_json_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"learning_rate": 0.1,}')
    with pytest.raises(ValueError, match=rf"recipe {bad} is not valid JSON: Expecting property name.*line 1 column 23"):
        parse_args(["--recipe", str(bad)])
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"must hold a JSON object"):
        parse_args(["--recipe", str(bad)])
