#!/usr/bin/env python
"""Train and evaluate a translation model.

Kept so that `python scripts/train.py ...` works from a checkout; the command is `hf-s2s train`
(hf_s2s/cli/train.py), and `--help` lists its flags.
"""

import sys
from pathlib import Path

from hf_s2s.cli import run_command

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/checkout.py, also under runpy.run_path
from checkout import use_shared_corpus  # noqa: E402

if __name__ == "__main__":
    use_shared_corpus(sys.argv[1:])
    sys.exit(run_command("train", sys.argv[1:]))
