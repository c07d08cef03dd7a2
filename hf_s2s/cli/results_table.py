"""Print a markdown table comparing training runs, from their results.json files (the README's results table).

    hf-s2s results-table runs/transformer_multi30k/results.json runs/rnn_*/results.json
"""

import argparse
import sys

from hf_s2s.cli import HelpFormatter
from hf_s2s.hub.results import read_results, results_table

# What a row of the table reads from each results.json: the family, and the test scores.
TABLE_KEYS = ("model_type", "test")


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("results", nargs="+", help="results.json files written by scripts/train.py")
    args = parser.parse_args(argv)
    try:  # every file is read and checked before anything is printed
        runs = [read_results(path, required=TABLE_KEYS) for path in args.results]
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2  # a wrong argument: argparse's status for usage errors, which this was before it named the problem
    print(results_table(runs))
    return 0

