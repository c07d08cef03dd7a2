#!/usr/bin/env python
"""Cosine similarity of sentence pairs under a trained model's encoder.

Kept so that `python scripts/similarity.py ...` works from a checkout; the command is `hf-s2s similarity`
(hf_s2s/cli/similarity.py), and `--help` lists its flags.
"""

import sys

from hf_s2s.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("similarity", sys.argv[1:]))
