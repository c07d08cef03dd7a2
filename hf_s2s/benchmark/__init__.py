"""Speed benchmarks of hf_s2s against the transformers models users would pick instead, measured side by side
in one process. Entry point: ``run_benchmark(BenchSettings())``; ``scripts/bench.py`` is its command line."""

from .builders import TransformerDims
from .measure import count_matmul_flops, make_batches, matmul_peak, set_threads
from .reference_rnn import TextbookRNNSeq2Seq
from .report import to_markdown
from .suites import BenchSettings, profile_top_ops, run_benchmark

__all__ = [
    "BenchSettings",
    "TextbookRNNSeq2Seq",
    "TransformerDims",
    "count_matmul_flops",
    "make_batches",
    "matmul_peak",
    "profile_top_ops",
    "run_benchmark",
    "set_threads",
    "to_markdown",
]
