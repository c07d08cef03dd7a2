"""Write a model card (README.md with Hub metadata) from a training run's results.json.

    hf-s2s make-model-card runs/transformer-multi30k-de-en/model/results.json \
        --repo-id me/transformer-multi30k-de-en --output model_cards/transformer-multi30k-de-en.md

The training job already writes <output_dir>/model/README.md this way; use this script to regenerate a card
(e.g. for model_cards/, or with the final repo id).
"""

import argparse
import json
from pathlib import Path

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.hub import render_model_card


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("results", help="results.json written by hf_s2s.training.run")
    parser.add_argument("--repo-id", help="the Hub repository the card is for (used in the loading example)")
    parser.add_argument("--license", default="apache-2.0", help="license in the card metadata")
    parser.add_argument("--output", required=True, help="where the card is written")
    args = parser.parse_args(argv)
    results = json.loads(Path(args.results).read_text())
    Path(args.output).write_text(render_model_card(results, repo_id=args.repo_id, license=args.license))
    print(f"card written to {args.output}")

