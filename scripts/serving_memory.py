#!/usr/bin/env python
"""The memory of `hf-s2s serve` under the worst requests its limits allow (hf_s2s/benchmark/serving_memory.py): the
figures of docs/serving.md, "Bounded answers".

    python scripts/serving_memory.py --output runs/serving_memory.json            # a random model of the reference size
    python scripts/serving_memory.py runs/transformer_small/model --max-answer-bytes 8000000

Without a folder, a random Transformer of the benchmark's dimensions (3+3 layers, d_model 256, 8 heads, a BPE
vocabulary of 8,000 trained on Multi30k's training text, read from $HF_S2S_DATA_DIR or the checkout's shared copy):
a random model rarely ends a sentence, so every translation runs to its length bound, the worst case.
"""

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/checkout.py
from checkout import use_shared_corpus  # noqa: E402

from hf_s2s.benchmark.builders import TransformerDims  # noqa: E402
from hf_s2s.benchmark.measure import multi30k_dir  # noqa: E402
from hf_s2s.benchmark.serving_memory import MemoryLoad, run  # noqa: E402
from hf_s2s.benchmark.serving_models import random_folders  # noqa: E402
from hf_s2s.inference.translate import read_sentences  # noqa: E402
from hf_s2s.serving.config import RequestLimits  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", help="a model folder to serve (default: a random one of the reference "
                                                  "size)")
    parser.add_argument("--clients", type=int, default=MemoryLoad.clients)
    parser.add_argument("--rounds", type=int, default=MemoryLoad.rounds, help="requests of each kind per client")
    for field in dataclasses.fields(RequestLimits):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=int, default=field.default)
    parser.add_argument("--output", help="write the report (JSON) here too")
    args = parser.parse_args(argv)
    limits = RequestLimits(**{field.name: getattr(args, field.name) for field in dataclasses.fields(RequestLimits)})
    load = MemoryLoad(limits=limits, clients=args.clients, rounds=args.rounds)
    use_shared_corpus([])
    data = multi30k_dir()
    words = read_sentences(data / "test_2016_flickr.de.gz")[0].split()
    with tempfile.TemporaryDirectory(prefix="hf_s2s_memory_") as scratch:
        folder = args.folder
        if folder is None:
            texts = read_sentences(data / "train.de.gz") + read_sentences(data / "train.en.gz")
            folder = str(random_folders(TransformerDims(), Path(scratch), texts, seed=0)["Transformer"])
        report = run(folder, load, words)
    report["folder"] = args.folder or "random Transformer, 3+3 layers, d_model 256, 8 heads, BPE 8,000 (Multi30k)"
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
