"""Benchmark hf_s2s against MarianMT (same sizes) and a textbook RNN, side by side on this machine.

    hf-s2s bench --output runs/bench            # full run (~10 min on 2 CPU cores)
    hf-s2s bench --quick --output runs/bench_quick  # smoke run of every path, tiny sizes
    hf-s2s bench --sections serving --output runs/bench_serving  # the server under load (the serve extra)

Writes bench.json (every number, the thread count, the settings) and bench.md (the tables) into --output and
prints the tables.
"""

import argparse
import json
import sys
from pathlib import Path

from transformers.utils import logging

from hf_s2s.benchmark import BenchSettings, run_benchmark, to_markdown
from hf_s2s.cli import HelpFormatter
from hf_s2s.serving import require_serve_extra

SECTIONS = ("training", "memory", "generation", "cache", "rnn", "peak", "learning", "batching", "pipeline",
            "serving")


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--output", default="runs/bench", help="folder for bench.json and bench.md")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 2 repeats: a smoke run")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default 1 for the full run: on shared cores a 2-thread OpenMP pool "
                             "stalls whenever another process takes a core)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement (median reported)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=None,
                        help="what to measure (default: every section; serving only where the serve extra is "
                             "installed)")
    parser.add_argument("--serving-model", metavar="FOLDER", default=None,
                        help="a trained model folder the serving section serves (default: random models of the "
                             "benchmark's sizes)")
    args = parser.parse_args(argv)
    logging.set_verbosity_error()  # generate() warns on every call that max_new_tokens overrides max_length

    asked = args.sections is not None
    args.sections = args.sections or list(SECTIONS)
    if "serving" in args.sections:
        try:  # before any section runs, not after the others' minutes
            require_serve_extra(also=("httpx",))
        except ImportError as error:
            if asked:
                sys.exit(f"error: the serving section: {error}; or leave serving out of --sections")
            # by default the benchmark measures what is installed, as before the serving section existed
            print(f"note: skipping the serving section ({error})", file=sys.stderr)
            args.sections.remove("serving")
    settings = BenchSettings.quick() if args.quick else BenchSettings()
    settings.serving.model = args.serving_model
    if args.threads is not None:
        settings.threads = args.threads
    if args.repeats is not None:
        settings.repeats = settings.serving.repeats = args.repeats
    report = run_benchmark(settings, tuple(args.sections))
    markdown = to_markdown(report)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    (output / "bench.json").write_text(json.dumps(report, indent=2, default=str))
    (output / "bench.md").write_text(markdown)
    print(markdown)
    return report

