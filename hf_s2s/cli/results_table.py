"""Print a markdown table comparing training runs, from their results.json files (the README's results table).

    hf-s2s results-table runs/transformer_multi30k/results.json runs/rnn_*/results.json
"""

import argparse
import json
from pathlib import Path

from hf_s2s.cli import HelpFormatter
from hf_s2s.results import results_table


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("results", nargs="+", help="results.json files written by scripts/train.py")
    args = parser.parse_args(argv)
    runs = []
    for path in args.results:
        if not Path(path).is_file():
            parser.error(f"{path} does not exist (scripts/train.py writes <output_dir>/results.json)")
        runs.append(json.loads(Path(path).read_text()))
    print(results_table(runs))
    return 0

