"""Write a model card (README.md with Hub metadata) from a training run's results.json.

    hf-s2s make-model-card runs/transformer_multi30k/model/results.json \\
        --repo-id me/transformer-multi30k-de-en --output card.md

The training job already writes <output_dir>/model/README.md this way; use this command to regenerate a card
(e.g. for model_cards/, or with the final repo id). The card is named after the repository, else after the run's
recipe (or, without one, its family). An existing --output file is replaced only with --overwrite, and never when it
is the results file itself.
"""

import argparse
import os
import sys
from pathlib import Path

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.hub.card import render_model_card
from hf_s2s.hub.results import read_results


def check_card_output(results: Path, output: Path, overwrite: bool) -> None:
    """Refuse, before anything is read, to write the card over the results it is made from (even with
    ``overwrite``), or over any other existing file without ``overwrite``."""
    if output.exists() and results.exists() and os.path.samefile(output, results):
        raise ValueError(f"--output {output} is the results file the card is made from; give another --output")
    if output.is_dir():
        raise ValueError(f"--output {output} is a folder; give the path of the card file (e.g. {output}/README.md)")
    if output.exists() and not overwrite:
        raise FileExistsError(f"--output {output} already exists: refusing to replace it; choose another --output "
                              "or pass --overwrite")


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("results", help="results.json written by the training job (hf-s2s train)")
    parser.add_argument("--repo-id", help="the Hub repository the card is for (used in the loading example)")
    parser.add_argument("--license", default="apache-2.0", help="license in the card metadata")
    parser.add_argument("--output", required=True, help="where the card is written")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --output file (never the results file itself)")
    args = parser.parse_args(argv)
    results_path, output = Path(args.results), Path(args.output)
    try:
        check_card_output(results_path, output, args.overwrite)
        results = read_results(results_path, required=("model_type", "model_config"))
        card = render_model_card(results, repo_id=args.repo_id, license=args.license)
        output.write_text(card)
    except (OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    print(f"card written to {output}")
