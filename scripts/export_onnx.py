#!/usr/bin/env python
"""Export a model folder of either family to ONNX graphs, with a runtime that decodes without torch.

Kept so that `python scripts/export_onnx.py ...` works from a checkout; the command is `hf-s2s export-onnx`
(hf_s2s/cli/export_onnx.py), and `--help` lists its flags.
"""

import sys

from hf_s2s.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("export-onnx", sys.argv[1:]))
