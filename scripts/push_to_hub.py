#!/usr/bin/env python
"""Share a trained model folder on the Hugging Face Hub: model (safetensors), tokenizer, model code, translation

Kept so that `python scripts/push_to_hub.py ...` works from a checkout; the command is `hf-s2s push-to-hub`
(hf_s2s/cli/push_to_hub.py), and `--help` lists its flags.
"""

import sys

from hf_s2s.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("push-to-hub", sys.argv[1:]))
