#!/usr/bin/env python
"""Benchmark hf_s2s against MarianMT (same sizes) and a textbook RNN, side by side on this machine.

Kept so that `python scripts/bench.py ...` works from a checkout; the command is `hf-s2s bench`
(hf_s2s/cli/bench.py), and `--help` lists its flags.
"""

import sys
from pathlib import Path

from hf_s2s.cli import run_command

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/checkout.py, also under runpy.run_path
from checkout import use_shared_corpus  # noqa: E402

if __name__ == "__main__":
    use_shared_corpus(sys.argv[1:])
    sys.exit(run_command("bench", sys.argv[1:]))
