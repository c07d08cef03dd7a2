"""Torch operations per decoding step: the benchmark's Transformer with and without a vocabulary shortlist, and
MarianMT of the same dimensions (hf-s2s bench's models, random weights), greedy, one sentence.

    python scripts/count_decoding_ops.py              # 40 steps of a 14-token source
    python scripts/count_decoding_ops.py --top 20     # and the 20 most frequent operations

Each row counts what torch.profiler records for one generate() call, divided by its steps: where a step is a few
microseconds of dispatch per operation, the count says how far a smaller output layer can take it.
"""

import argparse
from collections import Counter

import torch

from hf_s2s.benchmark.builders import TransformerDims, build_hf_s2s_transformer, build_marian
from hf_s2s.benchmark.generation import generation_config
from hf_s2s.models.shortlist import VocabularyShortlist


def operation_counts(generate) -> Counter:
    generate()  # warm-up
    with torch.profiler.profile() as profile:
        generate()
    return Counter({event.key: event.count for event in profile.key_averages()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="tokens generated (min = max)")
    parser.add_argument("--source-tokens", type=int, default=14)
    parser.add_argument("--list-size", type=int, default=50, help="candidates per source token in the shortlist")
    parser.add_argument("--top", type=int, default=0, help="also list the most frequent operations")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dims = TransformerDims()
    transformer, marian = build_hf_s2s_transformer(dims).eval(), build_marian(dims).eval()
    candidates = [torch.randperm(dims.vocab_size)[: args.list_size].tolist() for _ in range(dims.vocab_size)]
    shortlist = VocabularyShortlist.from_candidates(candidates, always=range(100), target_vocab_size=dims.vocab_size)
    source = torch.randint(3, dims.vocab_size, (1, args.source_tokens))
    inputs = {"input_ids": source, "attention_mask": torch.ones_like(source)}
    config = generation_config(args.steps, 1)
    rows = {"MarianMT": lambda: marian.generate(**inputs, generation_config=config),
            "hf_s2s Transformer": lambda: transformer.generate(**inputs, generation_config=config),
            "hf_s2s Transformer + shortlist": lambda: transformer.generate(**inputs, generation_config=config,
                                                                           shortlist=shortlist)}
    with torch.inference_mode():
        counts = {name: operation_counts(generate) for name, generate in rows.items()}
    print(f"torch operations per step ({args.steps} greedy steps, one {args.source_tokens}-token source)")
    for name, count in counts.items():
        print(f"{name:32s} {sum(count.values()) / args.steps:8.1f}")
    if args.top:
        print("\noperation " + " ".join(f"{name:>32s}" for name in counts))
        for key, _ in counts["hf_s2s Transformer + shortlist"].most_common(args.top):
            print(f"{key:40s}" + " ".join(f"{count[key] / args.steps:32.1f}" for count in counts.values()))


if __name__ == "__main__":
    main()
