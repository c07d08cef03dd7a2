"""Cosine similarity of sentence pairs under a trained model's encoder: each sentence is the mean of its encoder
memory over its real tokens (hf_s2s.encoder_analysis.sentence_embeddings), for both model families.

    hf-s2s similarity runs/x/model --input pairs.tsv > cosines.txt
    printf 'Ein Hund läuft.\tEin Hund rennt.\n' | hf-s2s similarity runs/x/model

The input holds one pair a line, the two source-language sentences separated by a tab; the output one cosine (in
[-1, 1], 4 decimals) a line, in the input's order.
"""

import argparse
import sys

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.encoder_analysis import similarity
from hf_s2s.loading import load_model, load_tokenizer
from hf_s2s.translate import DEFAULT_BATCH_SIZE, check_decoding_options, read_sentences


def read_pairs(path: str | None) -> tuple[list[str], list[str]]:
    """The tab-separated sentence pairs of ``path`` (stdin when None); a line without exactly one tab is a
    ValueError naming the input and the line."""
    first, second = [], []
    for number, line in enumerate(read_sentences(path), start=1):
        parts = line.split("\t")
        if len(parts) != 2:
            raise ValueError(f"{path or 'standard input'}, line {number}, holds {len(parts) - 1} tabs: expected one "
                             "sentence pair a line, the two sentences separated by one tab")
        first.append(parts[0])
        second.append(parts[1])
    return first, second


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("model", help="a saved model folder (model + tokenizer), either family")
    parser.add_argument("--input", help="file of tab-separated sentence pairs, one a line (default: stdin)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences encoded together")
    args = parser.parse_args(argv)
    try:  # the input is read and checked before the model is loaded
        check_decoding_options(num_beams=None, batch_size=args.batch_size)
        first, second = read_pairs(args.input)
        tokenizer = load_tokenizer(args.model)
        model = load_model(args.model)
    except (OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    for cosine in similarity(model, tokenizer, first, second, batch_size=args.batch_size).tolist():
        print(f"{cosine:.4f}")
    return 0
