"""Average the weights of the last N checkpoints of a training run into a model folder.

    hf-s2s average-checkpoints runs/x --last 5 --output runs/x/averaged
    hf-s2s average-checkpoints --checkpoints runs/x/checkpoint-900 runs/x/checkpoint-1000 --output out
"""

import argparse
import sys

from hf_s2s.cli import HelpFormatter
from hf_s2s.training.checkpoints import average_checkpoints, find_checkpoints


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("run_dir", nargs="?", help="a Trainer output folder holding checkpoint-<step> folders")
    parser.add_argument("--last", type=int, default=5, help="how many of the newest checkpoints to average")
    parser.add_argument("--checkpoints", nargs="+", help="explicit checkpoint folders instead of run_dir/--last")
    parser.add_argument("--output", required=True, help="folder to write the averaged model to")
    parser.add_argument("--overwrite_output_dir", action="store_true",
                        help="replace an earlier average in --output, whole: its files are deleted while they are "
                             "byte for byte what average-checkpoints wrote (recorded in hf_s2s_output.json); a folder "
                             "that holds anything else (a trained model, its results.json and card) is refused")
    args = parser.parse_args(argv)
    if bool(args.run_dir) == bool(args.checkpoints):
        parser.error("give either run_dir (with --last) or --checkpoints")
    try:
        checkpoints = args.checkpoints or find_checkpoints(args.run_dir, args.last)
        average_checkpoints(checkpoints, args.output, overwrite=args.overwrite_output_dir)
    except (OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    print(f"averaged {len(checkpoints)} checkpoints -> {args.output}")
    return 0

