#!/usr/bin/env python
"""Write a model card (README.md with Hub metadata) from a training run's results.json.

Kept so that `python scripts/make_model_card.py ...` works from a checkout; the command is `hf-s2s make-model-card`
(hf_s2s/cli/make_model_card.py), and `--help` lists its flags.
"""

import sys

from hf_s2s.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("make-model-card", sys.argv[1:]))
