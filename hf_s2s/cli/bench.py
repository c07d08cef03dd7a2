"""Benchmark hf_s2s against MarianMT (same sizes) and a textbook RNN, side by side on this machine.

    hf-s2s bench --output runs/bench            # full run (~10 min on 2 CPU cores)
    hf-s2s bench --quick --output runs/bench_quick  # smoke run of every path, tiny sizes
    hf-s2s bench --sections serving --output runs/bench_serving  # the server under load (the serve extra)
    hf-s2s bench --sections serving --serving-models-dir runs/serving_models  # its trained models kept for next time
    hf-s2s bench --sections shortlist --output runs/bench_shortlist  # a vocabulary shortlist beside MarianMT
    hf-s2s bench --sections scaling --scaling-factors 1 10 --output runs/bench_scaling  # cost vs corpus size

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

SECTIONS = ("training", "memory", "generation", "shortlist", "cache", "rnn", "peak", "learning", "batching",
            "pipeline", "serving", "scaling")
# run only when named: the scaling section writes and trains on corpora of up to 2.9 million pairs (hours
# here)
ASKED_ONLY = ("scaling",)


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--output", default="runs/bench", help="folder for bench.json and bench.md")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 2 repeats: a smoke run")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default 1 for the full run: on shared cores a 2-thread OpenMP pool "
                             "stalls whenever another process takes a core)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement (median reported)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=None,
                        help="what to measure (default: every section but scaling; serving only where the serve "
                             "extra is installed)")
    parser.add_argument("--scaling-factors", type=int, nargs="+", metavar="N", default=None,
                        help="the scaling section's corpus sizes, in copies of Multi30k's training split "
                             "(default: 1 10 100)")
    parser.add_argument("--scaling-dir", metavar="FOLDER", default=None,
                        help="where the scaling section writes its corpora and runs (default: a temporary folder, "
                             "removed afterwards); refused if it exists")
    parser.add_argument("--serving-model", metavar="FOLDER", default=None,
                        help="a trained model folder the serving section serves (default: the benchmark's Transformer "
                             "and GRU, trained for a few hundred steps on Multi30k when the section starts)")
    parser.add_argument("--serving-models-dir", metavar="FOLDER", default=None,
                        help="where the serving section trains its default models, and finds them again on a later "
                             "run with the same settings (default: a temporary folder, removed afterwards); a "
                             "folder holding anything else is refused")
    parser.add_argument("--serving-no-profile", action="store_true",
                        help="leave out the serving section's profiled runs (one per float32 engine)")
    parser.add_argument("--serving-max-wait-ms", type=float, metavar="MS", default=None,
                        help="the served models' batching wait (serve's --max-wait-ms; default: serve's default)")
    args = parser.parse_args(argv)
    logging.set_verbosity_error()  # generate() warns on every call that max_new_tokens overrides max_length

    asked = args.sections is not None
    args.sections = args.sections or [section for section in SECTIONS if section not in ASKED_ONLY]
    if args.scaling_factors is not None and any(factor < 1 for factor in args.scaling_factors):
        sys.exit(f"error: --scaling-factors must be positive numbers of copies, got {args.scaling_factors}")
    if args.scaling_dir is not None and Path(args.scaling_dir).exists():
        sys.exit(f"error: --scaling-dir {args.scaling_dir} exists; the scaling section writes a new folder (and "
                 "deletes what it wrote there): name one that does not exist")
    if args.serving_max_wait_ms is not None and not args.serving_max_wait_ms >= 0:
        sys.exit(f"error: --serving-max-wait-ms must be a number of milliseconds >= 0, got {args.serving_max_wait_ms}")
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
    settings.serving.models_dir = args.serving_models_dir
    settings.serving.profile = not args.serving_no_profile
    if args.serving_max_wait_ms is not None:
        settings.serving.max_wait_ms = args.serving_max_wait_ms
    if args.threads is not None:
        settings.threads = args.threads
    if args.repeats is not None:
        settings.repeats = settings.serving.repeats = args.repeats
    if args.scaling_factors is not None:
        settings.scaling.factors = tuple(args.scaling_factors)
    settings.scaling.work_dir = args.scaling_dir
    report = run_benchmark(settings, tuple(args.sections))
    markdown = to_markdown(report)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    (output / "bench.json").write_text(json.dumps(report, indent=2, default=str))
    (output / "bench.md").write_text(markdown)
    print(markdown)
    return report

