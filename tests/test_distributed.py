"""train.py under `accelerate launch` with two CPU processes (DDP, and FSDP2 sharding the layers, both over
gloo) against one process with the same global batch: the same losses step by step and the same final
weights; and the job shuts its process group down before it exits. Then two machines of one process each,
simulated on localhost, against one machine of two processes: with one output folder for both and with a folder
per machine, trained and resumed, equal bit for bit."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
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


# --- Two machines -------------------------------------------------------------------------------------------------
# Two machines simulated on localhost, as a user launches one on each: `accelerate launch --num_machines 2
# --machine_rank R` with one process each, against one machine of two processes. The same two processes do the same
# arithmetic (DDP's gloo all-reduce of two gradients, each process seeded alike), so the steps and weights must be
# equal bit for bit. The main job with its recipe and the tokenizer it trains (trained on process 0, which the other
# machine must get), and dropout on, so that a resumed run must restore each process's random state.
TWO_MACHINE_RUN = ["--recipe", "transformer_small", *COMMON, "--per_device_train_batch_size", "8",
                   "--model_config", json.dumps({**json.loads(COMMON[COMMON.index("--model_config") + 1]),
                                                 "dropout": 0.1})]
CHECKPOINTS = ["--save_strategy", "steps", "--save_steps", "2"]  # checkpoint-2 and checkpoint-4 of the 4 steps


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's pick), for machine 0's rendezvous."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch_two_machines(args_of_machine: list[list[str]], work: Path) -> list[tuple[int, str]]:
    """scripts/train.py launched on two machines on localhost at once, machine R with ``args_of_machine[R]``; each
    has its own $HF_HOME and $TMPDIR (nothing shared but the network, and the output folder when both are given the
    same). Returns each machine's exit status and log. Each launch waits for the other machine's, so both are
    killed (their process groups) when one does not end in time."""
    port = str(free_port())
    machines, logs = [], []
    for rank, args in enumerate(args_of_machine):
        home = work / f"machine{rank}"
        (home / "tmp").mkdir(parents=True, exist_ok=True)
        logs.append(home / "launch.log")
        command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "2",
                   "--machine_rank", str(rank), "--num_processes", "2", "--main_process_ip", "127.0.0.1",
                   "--main_process_port", port, "--mixed_precision", "no", "--dynamo_backend", "no", TRAIN, *args]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(home / "tmp"), "HF_HOME": str(home / "hf")}
        with open(logs[-1], "w") as log:  # a file, not a pipe: a full pipe would stall one machine and so both
            machines.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                             start_new_session=True))
    deadline = time.monotonic() + 400
    try:
        for machine in machines:
            machine.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for machine in machines:
            if machine.poll() is None:
                os.killpg(machine.pid, signal.SIGKILL)
                machine.wait()
    return [(machine.returncode, log.read_text()) for machine, log in zip(machines, logs, strict=True)]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


@pytest.fixture(scope="module")
def one_machine(tmp_path_factory) -> tuple[Path, str]:
    """The run on one machine of two processes, the corpus in memory: its output folder and log. A streamed corpus
    trains on the same batches (each process keeps its 8 of every 16 pairs, in the corpus's order) with the same
    tokenizer, bit for bit (checked on this machine), so both cases below compare with this one run."""
    work = tmp_path_factory.mktemp("one_machine")
    log = train([*TWO_MACHINE_RUN, *CHECKPOINTS, "--output_dir", str(work / "run")], processes=2, work=work)
    return work / "run", log


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("streamed", "folder_per_machine"), [
    ((), False),
    (("--streaming", "true"), True),
], ids=["recipe, one folder for both", "streamed, a folder per machine"])
def test_two_machines_train_as_one_machine_of_two_processes(tmp_path, one_machine, streamed, folder_per_machine):
    """One shared output folder: process 0 alone writes it, and the other machine reads the tokenizer from there. A
    folder per machine (``--save_on_each_node``): the tokenizer reaches machine 1 through the launch, and machine 1's
    folder ends with what it needs to resume and none of the run's records; both machines then resume from step 2,
    each from its own folder, and end as the uninterrupted runs did. (Both corpora take the same path to every
    machine, and so do both folder layouts whatever the corpus: the two cases cover each once.)"""
    args = [*TWO_MACHINE_RUN, *streamed, *CHECKPOINTS]
    one, log_one = one_machine
    layout = ["--save_on_each_node", "true"] if folder_per_machine else []
    folders = [tmp_path / f"machine{rank}" / "run" for rank in (0, 1)] if folder_per_machine else \
        [tmp_path / "shared"] * 2
    launched = launch_two_machines([[*args, *layout, "--output_dir", str(folder)] for folder in folders], tmp_path)
    for status, log in launched:
        assert status == 0, log[-3000:]
    main, other = folders

    assert step_losses(launched[0][1]) == step_losses(log_one) and len(step_losses(log_one)) == 4
    assert_same_weights(main / "model", one / "model", atol=0)
    results, results_one = (json.loads((folder / "results.json").read_text()) for folder in (main, one))
    assert results["world_size"] == 2 and results["train_tokens"] == results_one["train_tokens"]
    assert folder_bytes(main / "tokenizer") == folder_bytes(one / "tokenizer")
    if not folder_per_machine:
        return
    assert folder_bytes(other / "tokenizer") == folder_bytes(main / "tokenizer")
    assert sorted(path.name for path in other.iterdir()) == [".hf_s2s_train.lock", "checkpoint-2", "checkpoint-4",
                                                           "tokenizer"]  # the records are machine 0's
    for step in (2, 4):
        assert_same_weights(other / f"checkpoint-{step}", main / f"checkpoint-{step}", atol=0)
        assert [path.name for path in (other / f"checkpoint-{step}").glob("rng_state*")] == ["rng_state_1.pth"]

    # What a launch killed after step 2 leaves on each machine: its tokenizer and that checkpoint.
    resumed = [tmp_path / f"machine{rank}" / "resumed" for rank in (0, 1)]
    for folder, copy in zip(folders, resumed, strict=True):
        for name in ("tokenizer", "checkpoint-2"):
            shutil.copytree(folder / name, copy / name)
    launched = launch_two_machines([[*args, *layout, "--output_dir", str(copy), "--resume_from_checkpoint",
                                     str(copy / "checkpoint-2")] for copy in resumed], tmp_path)
    for status, log in launched:
        assert status == 0, log[-3000:]
    assert_same_weights(resumed[0] / "model", one / "model", atol=0)
    assert_same_weights(resumed[1] / "checkpoint-4", main / "checkpoint-4", atol=0)


@pytest.mark.timeout(600)
def test_a_folder_per_machine_without_save_on_each_node_is_refused_on_both_machines(tmp_path):
    """Without --save_on_each_node only process 0 saves: a machine with a folder of its own would keep no checkpoint
    to resume from. Both machines stop with the same one line, before the corpus is read or anything written."""
    folders = [tmp_path / f"machine{rank}" / "run" for rank in (0, 1)]
    launched = launch_two_machines([[*TWO_MACHINE_RUN, "--output_dir", str(folder)] for folder in folders], tmp_path)
    expected = ("error: --output_dir: the machine(s) of process(es) 1 have a folder of their own there, not the one "
                "process 0 writes, and without --save_on_each_node only process 0 saves")
    for status, log in launched:
        assert status != 0
        assert [line for line in log.splitlines() if line.startswith("error:")] == \
            [line for line in log.splitlines() if line.startswith(expected)], log[-3000:]
        assert log.count(expected) == 1, log[-3000:]
    assert [path.name for path in folders[0].iterdir()] == [".hf_s2s_train.lock"]
    assert not folders[1].exists()
