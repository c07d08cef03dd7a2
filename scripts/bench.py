#!/usr/bin/env python
"""Benchmark hf_s2s against MarianMT (same sizes) and a textbook RNN, side by side on this machine.

Kept so that `python scripts/bench.py ...` works from a checkout; the command is `hf-s2s bench`
(hf_s2s/cli/bench.py), and `--help` lists its flags.
"""

import sys

from checkout import use_shared_corpus  # scripts/checkout.py

from hf_s2s.cli import run_command

if __name__ == "__main__":
    use_shared_corpus(sys.argv[1:])
    sys.exit(run_command("bench", sys.argv[1:]))
