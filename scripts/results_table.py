#!/usr/bin/env python
"""Print a markdown table comparing training runs, from their results.json files (the README's results table).

Kept so that `python scripts/results_table.py ...` works from a checkout; the command is `hf-s2s results-table`
(hf_s2s/cli/results_table.py), and `--help` lists its flags.
"""

import sys

from hf_s2s.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("results-table", sys.argv[1:]))
