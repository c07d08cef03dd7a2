#!/usr/bin/env python
"""Convert a model trained with OpenNMT-py, Joey NMT or fairseq into an hf_s2s model folder.

Kept so that `python scripts/convert.py ...` works from a checkout; the command is `hf-s2s convert`
(hf_s2s/cli/convert.py), and `--help` lists its flags.
"""

import sys

from hf_s2s.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("convert", sys.argv[1:]))
