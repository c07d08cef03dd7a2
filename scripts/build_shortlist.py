#!/usr/bin/env python
"""Build a vocabulary shortlist for a model folder from a training corpus.

Kept so that `python scripts/build_shortlist.py ...` works from a checkout; the command is `hf-s2s build-shortlist`
(hf_s2s/cli/build_shortlist.py), and `--help` lists its flags.
"""

import sys
from pathlib import Path

from hf_s2s.cli import run_command

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/checkout.py, also under runpy.run_path
from checkout import use_shared_corpus  # noqa: E402

if __name__ == "__main__":
    use_shared_corpus(sys.argv[1:])
    sys.exit(run_command("build-shortlist", sys.argv[1:]))
