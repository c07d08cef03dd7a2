#!/usr/bin/env python
"""Average the weights of the last N checkpoints of a training run into a model folder.

Kept so that `python scripts/average_checkpoints.py ...` works from a checkout; the command is `hf-s2s average-checkpoints`
(hf_s2s/cli/average_checkpoints.py), and `--help` lists its flags.
"""

import sys

from hf_s2s.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("average-checkpoints", sys.argv[1:]))
