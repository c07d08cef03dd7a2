#!/usr/bin/env python
"""Translate a file (or stdin) with a trained model folder; one sentence per line.

Kept so that `python scripts/translate.py ...` works from a checkout; the command is `hf-s2s translate`
(hf_s2s/cli/translate.py), and `--help` lists its flags.
"""

import sys

from hf_s2s.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("translate", sys.argv[1:]))
