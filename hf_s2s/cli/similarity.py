"""Cosine similarity of sentence pairs under a trained model's encoder: each sentence is the mean of its encoder
memory over its real tokens (hf_s2s.inference.analysis.sentence_embeddings), for both model families.

    hf-s2s similarity runs/x/model --input pairs.tsv > cosines.txt
    printf 'Ein Hund läuft.\\tEin Hund rennt.\\n' | hf-s2s similarity runs/x/model

The input holds one pair a line, the two source-language sentences separated by a tab; the output one cosine (in
[-1, 1], 4 decimals) a line, in the input's order.
"""

import argparse
import sys

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.inference.analysis import similarity
from hf_s2s.inference.decoding import check_count, is_blank
from hf_s2s.inference.ensemble import load_for_decoding
from hf_s2s.inference.translate import DEFAULT_BATCH_SIZE, read_sentences


def read_pairs(path: str | None) -> tuple[list[str], list[str]]:
    """The tab-separated sentence pairs of ``path`` (stdin when None), read as ``translate`` reads its input; a line
    without exactly one tab, or with a blank sentence (:func:`hf_s2s.inference.decoding.is_blank`: an empty sentence
    has no
    meaning to compare, and its vector would be the end-of-sentence token's alone), is a ValueError naming the input
    and the line."""
    first, second = [], []
    name = path or "standard input"
    for number, line in enumerate(read_sentences(path), start=1):
        parts = line.split("\t")
        if len(parts) != 2:
            raise ValueError(f"{name}, line {number}, holds {len(parts) - 1} tabs: expected one sentence pair a line, "
                             "the two sentences separated by one tab")
        blank = [side for side, sentence in zip(("first", "second"), parts, strict=True) if is_blank(sentence)]
        if blank:
            raise ValueError(f"{name}, line {number}: the {' and the '.join(blank)} sentence "
                             f"{'is' if len(blank) == 1 else 'are'} empty; every pair needs two sentences to compare")
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
        check_count("batch_size", args.batch_size)
        first, second = read_pairs(args.input)
        model, tokenizer = load_for_decoding([args.model])  # the tokenizer is checked against the config first
    except (OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    for cosine in similarity(model, tokenizer, first, second, batch_size=args.batch_size).tolist():
        print(f"{cosine:.4f}")
    return 0
