"""Measuring tools of the benchmark: thread pinning, interleaved timing with warm-up and medians, the Multi30k
length distribution and batches drawn from it, matmul FLOP counting and the machine's matmul peak.

Every speed the benchmark reports is a ratio of two models timed in the same process, round-robin: repeat r of
model A, then repeat r of model B, ... so load from other processes on the shared cores hits both alike.
"""

import gzip
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils import flop_counter

from ..data.corpus import DATA_DIR_ENV, resolve_data_dir

_WORD_OR_PUNCT = re.compile(r"\w+|[^\w\s]")


def set_threads(num_threads: int | None) -> int:
    """Pin torch's intra-op thread pool (None: leave torch's choice). Returns the count in use, which the report
    records: on a 2-core machine more threads than cores slows torch down badly."""
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    return torch.get_num_threads()


def interleaved_times(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict[str, list[float]]:
    """Run each function ``warmup`` times untimed, then ``repeats`` timed rounds in which every function runs once
    (round-robin, so drifting load affects all alike). Returns the seconds of each repeat per name."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def status_mb(field: str) -> float:
    """A memory figure of this process from /proc/self/status (VmRSS: now; VmHWM: the peak), in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"/proc/self/status has no {field}")


# ------------------------------------------------------------------------------------------------ data shapes


def sentence_lengths(path: Path) -> list[int]:
    """Token count of every line of a (gzipped) text file: words and punctuation marks, +1 for </s>. A word-level
    proxy for a subword tokenizer's lengths (an 8k BPE on Multi30k splits a few % more)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [len(_WORD_OR_PUNCT.findall(line)) + 1 for line in f]


def multi30k_dir() -> Path:
    """The Multi30k folder the full benchmark reads: ``$HF_S2S_DATA_DIR`` (``python scripts/bench.py`` points it at a
    checkout's shared copy). ``--quick`` runs need no corpus."""
    folder = resolve_data_dir()
    if folder is None:
        raise FileNotFoundError(f"the benchmark reads Multi30k's training split from ${DATA_DIR_ENV}: set it to a "
                                "folder holding train.de.gz and train.en.gz (or run with --quick, which needs none)")
    return folder


def multi30k_length_pairs(data_dir: Path | None = None, source: str = "de", target: str = "en") -> list[tuple[int, int]]:
    """(source length, target length) of every Multi30k training pair, read in place (never copied)."""
    data_dir = data_dir or multi30k_dir()
    src = sentence_lengths(data_dir / f"train.{source}.gz")
    tgt = sentence_lengths(data_dir / f"train.{target}.gz")
    return list(zip(src, tgt, strict=True))


def synthetic_length_pairs(count: int = 1000, low: int = 3, high: int = 12, seed: int = 0) -> list[tuple[int, int]]:
    """A stand-in distribution for smoke runs without the corpus: uniform lengths in [low, high]."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high + 1, (count, 2), generator=g)
    return [tuple(pair) for pair in lengths.tolist()]


def make_batches(
    length_pairs: list[tuple[int, int]], num_batches: int, batch_size: int, vocab_size: int, seed: int = 0,
) -> list[dict[str, torch.Tensor]]:
    """Random right-padded training batches (:func:`padded_batch`): each draws ``batch_size`` pairs at random from
    ``length_pairs`` (no sorting by length: the padding is what a shuffled data loader gives)."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(num_batches):
        picks = torch.randint(0, len(length_pairs), (batch_size,), generator=g).tolist()
        batches.append(padded_batch([length_pairs[i] for i in picks], vocab_size, g))
    return batches


def padded_batch(pairs: list[tuple[int, int]], vocab_size: int, generator: torch.Generator,
                 first_token_id: int = 4, eos_token_id: int = 2) -> dict[str, torch.Tensor]:
    """One training batch of the given (source length, target length) pairs, filled with random ids ending in
    </s>: input_ids/attention_mask (B, S) padded with 0, labels (B, T) padded with -100; ``num_tokens`` is the
    count of real source + target tokens."""
    src_lens, tgt_lens = [s for s, _ in pairs], [t for _, t in pairs]
    input_ids = torch.zeros(len(pairs), max(src_lens), dtype=torch.long)
    labels = torch.full((len(pairs), max(tgt_lens)), -100, dtype=torch.long)
    for row, (s, t) in enumerate(pairs):
        input_ids[row, :s] = torch.randint(first_token_id, vocab_size, (s,), generator=generator)
        input_ids[row, s - 1] = eos_token_id
        labels[row, :t] = torch.randint(first_token_id, vocab_size, (t,), generator=generator)
        labels[row, t - 1] = eos_token_id
    return {
        "input_ids": input_ids,
        "attention_mask": (input_ids != 0).long(),
        "labels": labels,
        "num_tokens": sum(src_lens) + sum(tgt_lens),
    }


def model_inputs(batch: dict) -> dict[str, torch.Tensor]:
    return {k: v for k, v in batch.items() if k != "num_tokens"}


# ------------------------------------------------------------------------------------------------------ FLOPs


def _cpu_flash_attention_flops(query, key, value, *args, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(query, key, value)


def _cpu_flash_attention_backward_flops(grad_out, query, key, value, *args, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)


# torch's FLOP counter knows the CUDA attention kernels but not the CPU flash kernel that sdpa uses here
_CPU_ATTENTION_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_attention_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_attention_backward_flops,
}  # FlopCounterMode passes these tensor shapes, not tensors


def count_matmul_flops(fn: Callable[[], object]) -> int:
    """FLOPs of the matrix products (mm, bmm, addmm, baddbmm, attention kernels; 2 per multiply-add) that ``fn``
    runs, forward and backward, as torch's FlopCounterMode counts them. Elementwise work is not counted."""
    with flop_counter.FlopCounterMode(display=False, custom_mapping=_CPU_ATTENTION_FLOPS) as counter:
        fn()
    return counter.get_total_flops()


def matmul_peak(size: int, repeats: int, warmup: int = 1, seed: int = 0) -> dict:
    """The FLOP/s a large square float32 matmul reaches here: the practical peak the utilisation is measured
    against. Returns size, median seconds and FLOP/s."""
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(size, size, generator=g), torch.randn(size, size, generator=g)
    out = torch.empty(size, size)
    times = interleaved_times({"mm": lambda: torch.mm(a, b, out=out)}, repeats, warmup)["mm"]
    seconds = median(times)
    return {"size": size, "seconds": seconds, "flops_per_s": 2 * size**3 / seconds}
