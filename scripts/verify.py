#!/usr/bin/env python
"""Tell whether a model folder's code is an unmodified hf_s2s release, and which one.

Kept so that `python scripts/verify.py FOLDER` works from a checkout; the command is `hf-s2s verify`
(hf_s2s/cli/verify.py), and `--help` lists its flags.
"""

import sys

from hf_s2s.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("verify", sys.argv[1:]))
