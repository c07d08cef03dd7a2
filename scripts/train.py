#!/usr/bin/env python
"""Train and evaluate a translation model.

Kept so that `python scripts/train.py ...` works from a checkout; the command is `hf-s2s train`
(hf_s2s/cli/train.py), and `--help` lists its flags.
"""

import sys

from checkout import use_shared_corpus  # scripts/checkout.py

from hf_s2s.cli import run_command

if __name__ == "__main__":
    use_shared_corpus(sys.argv[1:])
    sys.exit(run_command("train", sys.argv[1:]))
