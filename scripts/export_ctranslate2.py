#!/usr/bin/env python
"""Export a trained Transformer folder to a CTranslate2 model directory.

Kept so that `python scripts/export_ctranslate2.py ...` works from a checkout; the command is
`hf-s2s export-ctranslate2` (hf_s2s/cli/export_ctranslate2.py), and `--help` lists its flags.
"""

import sys

from hf_s2s.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("export-ctranslate2", sys.argv[1:]))
