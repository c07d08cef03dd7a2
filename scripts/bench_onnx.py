#!/usr/bin/env python
"""ONNX runtime against torch generate(), both families side by side: generated tokens/s at a fixed output length,
greedy and beam search, on one padded batch of Multi30k-like source lengths (docs/inference.md, "Export to ONNX").

    python scripts/bench_onnx.py                       # batch 64 and batch 1, 20 new tokens, beam 5, 1 thread
    python scripts/bench_onnx.py --threads 2 --batch-sizes 64 --repeats 5

The models are the benchmark's (hf_s2s.benchmark.builders: Transformer 3+3 layers, d_model 256, 8 heads, FFN 512;
GRU with Bahdanau attention and LSTM with Luong general attention, 256 units; vocabulary 8000), untrained: every row
decodes exactly --new-tokens tokens (minimum = maximum, no length bound), so the rows differ in speed only. Each is
exported with hf_s2s.inference.onnx.export_onnx and timed round-robin with its torch generate()
(hf_s2s.benchmark.measure.interleaved_times), torch and onnxruntime on the same number of threads; the ONNX tokens
are checked equal to generate()'s first.
"""

import argparse
import sys
import tempfile

import numpy as np
import torch
from checkout import use_shared_corpus  # scripts/checkout.py

from hf_s2s.benchmark.builders import TransformerDims, build_hf_s2s_rnn, build_hf_s2s_transformer
from hf_s2s.benchmark.measure import (
    interleaved_times,
    median,
    multi30k_length_pairs,
    padded_batch,
    set_threads,
    synthetic_length_pairs,
)
from hf_s2s.inference.onnx import export_onnx
from hf_s2s.inference.onnx_runtime import OnnxSeq2Seq

MODELS = {
    "Transformer": lambda dims: build_hf_s2s_transformer(dims),
    "RNN GRU Bahdanau": lambda dims: build_hf_s2s_rnn(dims, "gru", "bahdanau"),
    "RNN LSTM Luong general": lambda dims: build_hf_s2s_rnn(dims, "lstm", "luong_general"),
}


def source_batch(batch_size: int, vocab_size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``batch_size`` sources drawn from Multi30k's length distribution (a uniform 3-12 stand-in without the corpus)."""
    try:
        pairs = multi30k_length_pairs()
    except FileNotFoundError:
        pairs = synthetic_length_pairs()
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(pairs), (batch_size,), generator=generator).tolist()
    batch = padded_batch([pairs[i] for i in picks], vocab_size, generator)
    return batch["input_ids"].numpy(), batch["attention_mask"].numpy()


def torch_generate(model, input_ids: np.ndarray, attention_mask: np.ndarray, **options):
    inputs = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention_mask)}

    def run() -> np.ndarray:
        with torch.no_grad():
            return model.generate(**inputs, **options).numpy()

    return run


def onnx_generate(runtime: OnnxSeq2Seq, input_ids: np.ndarray, attention_mask: np.ndarray, **options):
    return lambda: runtime.generate(input_ids, attention_mask, **options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 1])
    parser.add_argument("--new-tokens", type=int, default=20)
    parser.add_argument("--beams", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch and onnxruntime intra-op threads")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    use_shared_corpus(sys.argv[1:])
    set_threads(args.threads)
    dims = TransformerDims()
    options = {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens, "max_len_a": None,
               "max_len_b": None}
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, build in MODELS.items():
            torch.manual_seed(0)
            model = build(dims).eval()
            runtime = OnnxSeq2Seq(export_onnx(model, f"{work}/{len(rows)}"), threads=args.threads)
            for batch_size in args.batch_sizes:
                batch = source_batch(batch_size, dims.vocab_size)
                for search, beams in (("greedy", 1), (f"beam {args.beams}", args.beams)):
                    fns = {"torch": torch_generate(model, *batch, num_beams=beams, **options),
                           "onnx": onnx_generate(runtime, *batch, num_beams=beams, **options)}
                    equal = np.array_equal(fns["torch"](), fns["onnx"]())
                    times = interleaved_times(fns, args.repeats)
                    speed = {engine: batch_size * args.new_tokens / median(t) for engine, t in times.items()}
                    rows.append((name, batch_size, search, speed["torch"], speed["onnx"], equal))
                    print(f"{name}, batch {batch_size}, {search}: torch {speed['torch']:,.0f} tokens/s, onnx "
                          f"{speed['onnx']:,.0f} tokens/s, tokens equal: {equal}", flush=True)
    print("\n| model | batch | search | torch generate() tokens/s | ONNX runtime tokens/s | ONNX / torch | tokens "
          "equal |\n| --- | --- | --- | --- | --- | --- | --- |")
    for name, batch_size, search, torch_speed, onnx_speed, equal in rows:
        print(f"| {name} | {batch_size} | {search} | {torch_speed:,.0f} | {onnx_speed:,.0f} | "
              f"{onnx_speed / torch_speed:.2f}x | {'yes' if equal else 'NO'} |")


if __name__ == "__main__":
    main()
