#!/usr/bin/env python
"""Score given translations with a trained model folder (forced decoding).

Kept so that `python scripts/score.py ...` works from a checkout; the command is `hf-s2s score` (hf_s2s/cli/score.py),
and `--help` lists its flags.
"""

import sys

from hf_s2s.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("score", sys.argv[1:]))
