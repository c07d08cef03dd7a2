#!/usr/bin/env python
"""Serve trained model folders over HTTP, with dynamic batching.

Kept so that `python scripts/serve.py ...` works from a checkout; the command is `hf-s2s serve`
(hf_s2s/cli/serve.py), and `--help` lists its flags.
"""

import sys

from hf_s2s.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("serve", sys.argv[1:]))
