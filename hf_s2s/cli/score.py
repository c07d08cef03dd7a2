"""Score given translations with a trained model folder (forced decoding, teacher forcing): the log-probability the
model gives each translation of its source, as marian-scorer, fairseq's --score-reference and OpenNMT-py's -tgt
("gold score") compute it. One pair a line: the source in --input, its translation on the same line of --target.

    hf-s2s score runs/x/model --input test.de --target test.en > test.scores
    hf-s2s score runs/x/model --input test.de --target test.en --word-scores --normalize
    hf-s2s score runs/x/model --input test.de --target test.en --alignments pharaoh   # forced alignments

Each output line is the pair's score as marian-scorer prints it: the sum of the translation's token log-probabilities
(natural log, </s> included), divided by its token count with --normalize; then, with --alignments in a line format,
" ||| " and the alignment; then, with --word-scores, " ||| WordScores= " and each token's log-probability. fairseq
prints base-2 logarithms and the mean over tokens: divide a --normalize score by ln 2 to compare.
"""

import argparse
import sys
from pathlib import Path

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.cli.translate import add_alignment_flags, check_alignment_flags
from hf_s2s.inference.attention_maps import AlignmentWriter, attention_map
from hf_s2s.inference.decoding import check_count
from hf_s2s.inference.engines import TORCH_DTYPES, open_engine
from hf_s2s.inference.translate import DEFAULT_BATCH_SIZE, read_sentences


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("model", help="a saved model folder (model + tokenizer)")
    parser.add_argument("--input", help="file with one source sentence per line (default: stdin)")
    parser.add_argument("--target", required=True, metavar="FILE",
                        help="the translations to score, one per input line")
    parser.add_argument("--normalize", action="store_true",
                        help="divide each score by the translation's token count (</s> included), as marian-scorer's "
                             "--normalize")
    parser.add_argument("--word-scores", action="store_true",
                        help="print each token's log-probability after ' ||| WordScores= ', as marian-scorer")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="pairs read together")
    parser.add_argument("--dtype", choices=list(TORCH_DTYPES), default="float32", help="weight type")
    add_alignment_flags(parser, "each given translation")
    parser.add_argument("--layer", type=int, help="with --alignments: this decoder layer (from 0); default: the last")
    parser.add_argument("--head", type=int, help="with --alignments: this head (from 0); default: the mean of the "
                                                 "heads")
    args = parser.parse_args(argv)
    try:  # everything that can be wrong is found before the weights load, and said in one line
        check_count("batch_size", args.batch_size)
        if (args.layer is not None or args.head is not None) and not args.alignments:
            raise ValueError("--layer and --head choose the map --alignments writes; give --alignments FORMAT")
        sources = read_sentences(args.input)
        if not Path(args.target).is_file():
            raise ValueError(f"--target {args.target} does not exist (or is not a file)")
        targets = read_sentences(args.target)
        if len(targets) != len(sources):
            raise ValueError(f"--target {args.target} has {len(targets)} lines but the input "
                             f"({args.input or 'standard input'}) has {len(sources)}: they must match line by line")
        engine = open_engine([args.model], "torch", dtype=args.dtype)
        engine.check_forced()
        check_alignment_flags(args, engine)
        engine.load()
        forced = engine.force_decode(sources, targets, batch_size=args.batch_size,
                                     output_attentions=args.alignments is not None)
    except (ImportError, OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    with AlignmentWriter(args.alignments or "pharaoh", args.alignments_output) as writer:
        for number, pair in enumerate(forced, start=1):
            score = pair.score / len(pair.target_ids) if args.normalize else pair.score
            line = f"{score:.6f}"
            if args.alignments:
                found = attention_map(pair, engine.tokenizer, layer=args.layer, head=args.head,
                                      word_level=args.word_level)
                line += writer.suffix(found, number)
            if args.word_scores:
                line += " ||| WordScores= " + " ".join(f"{value:.6f}" for value in pair.token_log_probs)
            print(line)
    return 0
