"""train.py under `accelerate launch` with two CPU processes (DDP, and FSDP2 sharding the layers, both over
gloo) against one process with the same global batch: the same losses step by step and the same final
weights; and the job shuts its process group down before it exits."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.runs import steps_of_one_stream_pass

ROOT = Path(__file__).resolve().parent.parent
TRAIN = str(ROOT / "scripts" / "train.py")
COMMON = [
    "--dataset", "synthetic:reversal", "--source_lang", "src", "--target_lang", "tgt", "--vocab_size", "280",
    "--model_config", json.dumps({"d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
                                  "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
                                  "dropout": 0.0}),
    "--max_train_samples", "256", "--max_test_samples", "8", "--eval_strategy", "no", "--save_strategy", "no",
    "--load_best_model_at_end", "false", "--max_steps", "4", "--train_sampling_strategy", "sequential",
    "--logging_steps", "1", "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true",
    "--test_num_beams", "1", "--generation_max_length", "12", "--learning_rate", "3e-3", "--warmup_steps", "2",
]


def step_losses(log: str) -> list[float]:
    return [float(x) for x in re.findall(r"'loss': '([0-9.]+)'", log)]


# a streamed corpus in windows of 64 pairs; a stream's budget must hold the longest pair the limits let
# through
STREAMED = ("--streaming", "true", "--streaming_window_pairs", "64", "--max_source_length", "64",
            "--max_target_length", "64")
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1",
          "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29533"]
STRATEGIES = {
    "ddp": ["--multi_gpu"],
    "fsdp": ["--use_fsdp", "--fsdp_version", "2", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
             "--fsdp_transformer_layer_cls_to_wrap", "TransformerSeq2SeqEncoderLayer,TransformerSeq2SeqDecoderLayer"],
}


def launch_env(work: Path) -> dict[str, str]:
    """The environment of a run: one torch thread per process, and $TMPDIR in the test's folder, where torch's
    elastic launcher (under accelerate launch) writes its logs into a new torchelastic_* folder it never
    removes."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(work)}


# Runs train.py as its own __main__ and then reports, from each process, whether the job left its process group
# up: one left up can abort the process at exit ("terminate called without an active exception").
EXIT_REPORT = f"""import runpy, sys
import torch.distributed as dist
sys.argv[0] = {TRAIN!r}
try:
    runpy.run_path({TRAIN!r}, run_name="__main__")
finally:
    # one write of the whole line: the two processes share the pipe, and separate writes of its parts interleave
    sys.stdout.write(f"process group left up: {{dist.is_initialized()}}\\n")
"""


# The loss options a multi-process run is compared under. With COMMON's dropout 0 (so that each process computes
# what one process computes) R-Drop's two passes are the same and its KL term is 0: what this checks of R-Drop is its
# repeated batch and the normalisation of its cross-entropy; the KL term's is checked with two different passes in
# test_modeling_common.
LOSSES = {"plain": [], "rdrop": ["--rdrop_alpha", "5"]}


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("strategy", "loss"), [
    ("ddp", "plain"),  # ddp stays in the fast tier
    pytest.param("fsdp", "plain", marks=pytest.mark.slow),
    pytest.param("ddp", "rdrop", marks=pytest.mark.slow),
], ids=["ddp", "fsdp", "ddp-rdrop"])
def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path, strategy, loss):
    env = launch_env(tmp_path)
    launch = LAUNCH + STRATEGIES[strategy]
    common = [*COMMON, *LOSSES[loss]]
    (tmp_path / "train_then_report.py").write_text(EXIT_REPORT)
    two = subprocess.run(launch + [str(tmp_path / "train_then_report.py"), *common, "--per_device_train_batch_size",
                                   "8", "--output_dir", str(tmp_path / "two")],
                         capture_output=True, text=True, timeout=400, env=env)
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("process group left up: False") == 2, two.stdout[-3000:]
    one = subprocess.run([sys.executable, TRAIN, *common, "--per_device_train_batch_size", "16", "--output_dir",
                          str(tmp_path / "one")], capture_output=True, text=True, timeout=400, env=env)
    assert one.returncode == 0, one.stderr[-3000:]

    results_two = json.loads((tmp_path / "two" / "results.json").read_text())
    assert results_two["world_size"] == 2
    assert results_two["training_arguments"]["rdrop_alpha"] == (5.0 if loss == "rdrop" else 0.0)
    losses_two, losses_one = step_losses(two.stdout + two.stderr), step_losses(one.stdout + one.stderr)
    assert len(losses_one) == 4 and losses_two == pytest.approx(losses_one, abs=2e-3)
    weights_two = load_file(tmp_path / "two" / "model" / "model.safetensors")
    weights_one = load_file(tmp_path / "one" / "model" / "model.safetensors")
    for key in weights_one:
        torch.testing.assert_close(weights_two[key], weights_one[key], rtol=0, atol=1e-5, msg=key)


def train(args: list[str], processes: int, work: Path) -> str:
    """scripts/train.py on one process, or on two under accelerate (DDP over gloo); returns its log. ``work``:
    the test's folder (:func:`launch_env`)."""
    command = (LAUNCH + STRATEGIES["ddp"] if processes == 2 else [sys.executable]) + [TRAIN, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=400,
                          env=launch_env(work))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def assert_same_weights(folder: Path, reference: Path, atol: float) -> None:
    weights, expected = load_file(folder / "model.safetensors"), load_file(reference / "model.safetensors")
    assert weights.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(weights[key], expected[key], rtol=0, atol=atol, msg=key)


def assert_two_processes_train_like_one(tmp_path, two: list[str], one: list[str]) -> None:
    """train.py with the flags ``two`` on 2 processes and ``one`` on 1: the same pairs (token count), the same
    step losses, the same weights (up to the order of float sums)."""
    log_two = train([*COMMON, *two, "--output_dir", str(tmp_path / "two")], processes=2, work=tmp_path)
    log_one = train([*COMMON, *one, "--output_dir", str(tmp_path / "one")], processes=1, work=tmp_path)
    results_two = json.loads((tmp_path / "two" / "results.json").read_text())
    results_one = json.loads((tmp_path / "one" / "results.json").read_text())
    assert results_two["world_size"] == 2
    assert results_two["train_tokens"] == results_one["train_tokens"]  # the same pairs, split between processes
    losses_two, losses_one = step_losses(log_two), step_losses(log_one)
    assert len(losses_one) == 4 and losses_two == pytest.approx(losses_one, abs=2e-3)
    assert_same_weights(tmp_path / "two" / "model", tmp_path / "one" / "model", atol=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_stream_on_two_processes_matches_one_process_with_the_same_global_batch(tmp_path):
    """A streamed corpus without a token budget: each process reads the stream and keeps its 8 of every 16
    pairs, so the two train on the batch of 16 one process reads, no pair twice. (accelerate's default,
    process 0 reading and concatenating both batches, failed on batches padded to different lengths.)"""
    streamed = ["--streaming", "true", "--train_sampling_strategy", "sequential"]
    assert_two_processes_train_like_one(tmp_path, [*streamed, "--per_device_train_batch_size", "8"],
                                        [*streamed, "--per_device_train_batch_size", "16"])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("streamed", [(), STREAMED], ids=["in memory", "streamed"])
def test_token_budget_on_two_processes_matches_one_process_with_the_summed_budget(tmp_path, streamed):
    """Each process trains on its piece of a global batch built with the summed budget (2 x 200 tokens); the
    loss is normalised by the target tokens of both pieces. One process with 400 tokens trains on the whole
    global batch: the same steps, the same weights (up to the order of float sums). Streamed, every process
    reads the whole stream and keeps its piece of each batch of a window (4 windows of 64 pairs; none ends in
    a batch of one pair, which 2 processes would join to the batch before it)."""
    assert_two_processes_train_like_one(tmp_path, [*streamed, "--max_tokens_per_batch", "200"],
                                        [*streamed, "--max_tokens_per_batch", "400"])


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("streamed", [(), STREAMED], ids=["in memory", "streamed"])
def test_two_process_run_resumed_in_its_second_epoch_ends_like_the_uninterrupted_one(tmp_path, streamed):
    """256 pairs in global batches of 2 x 200 tokens make 10 steps an epoch (streamed in windows of 64: 12 a
    pass); the run resumed from step 12 must train on the second epoch's remaining batches in the
    uninterrupted run's order, on both processes (streamed: after reading the first pass again, each process
    its share)."""
    model_config = {**json.loads(COMMON[COMMON.index("--model_config") + 1]), "dropout": 0.1}
    common = [*COMMON, *streamed, "--max_tokens_per_batch", "200", "--max_steps", "14", "--save_strategy", "steps",
              "--save_steps", "12", "--model_config", json.dumps(model_config)]
    train([*common, "--output_dir", str(tmp_path / "straight")], processes=2, work=tmp_path)
    checkpoint = tmp_path / "straight" / "checkpoint-12"
    if streamed:
        assert steps_of_one_stream_pass(tmp_path / "straight" / "tokenizer", 256, 400, window=64, max_length=64) <= 12
    else:
        assert 1 < json.loads((checkpoint / "trainer_state.json").read_text())["epoch"] < 2
    # what a run killed after step 12 leaves in its folder: its tokenizer and that checkpoint (a run resumes in its
    # own folder)
    for name in ("tokenizer", "checkpoint-12"):
        shutil.copytree(tmp_path / "straight" / name, tmp_path / "resumed" / name)
    train([*common, "--output_dir", str(tmp_path / "resumed"), "--resume_from_checkpoint",
           str(tmp_path / "resumed" / "checkpoint-12")], processes=2, work=tmp_path)

    middle = load_file(checkpoint / "model.safetensors")
    final = load_file(tmp_path / "straight" / "model" / "model.safetensors")
    assert any(not torch.equal(middle[k], final[k]) for k in final)
    # bit for bit: the same batches on the same processes with the same random states
    assert_same_weights(tmp_path / "resumed" / "model", tmp_path / "straight" / "model", atol=0)
