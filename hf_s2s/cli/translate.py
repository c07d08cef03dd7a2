"""Translate a file (or stdin) with a trained model folder; one sentence per line.

    hf-s2s translate runs/x/model --input test.de > test.hyp.en
    echo "Ein Hund läuft." | hf-s2s translate runs/x/model --beams 5 --nbest 3 --scores
    hf-s2s translate runs/x/model --plot-alignment align.png --sentence "Ein Hund läuft."
    hf-s2s translate runs/x/checkpoint-908 runs/x/checkpoint-1362 --input test.de  # an ensemble of two
"""

import argparse
import sys

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.ensemble import load_for_decoding
from hf_s2s.plotting import plot_alignment
from hf_s2s.translate import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_LENGTH_PENALTY,
    alignment,
    check_decoding_options,
    read_sentences,
    translate,
)


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("model", nargs="+",
                        help="a saved model folder (model + tokenizer); several folders of one vocabulary decode as "
                             "an ensemble (the mean of their next-token probabilities; the first folder's tokenizer "
                             "and generation config)")
    parser.add_argument("--input", help="file with one source sentence per line (default: stdin)")
    parser.add_argument("--beams", type=int, default=None,
                        help="beam size (1 = greedy); default: the model's generation config, which a model trained "
                             "by hf-s2s train sets to the largest --test_num_beams of its run")
    parser.add_argument("--nbest", type=int, default=1, help="hypotheses printed per sentence (<= beams)")
    parser.add_argument("--scores", action="store_true", help="print each hypothesis' log-probability score")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences translated together")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the model's generation config")
    parser.add_argument("--length-penalty", type=float, default=DEFAULT_LENGTH_PENALTY,
                        help="beam search length penalty (1.0 = none)")
    parser.add_argument("--coverage-penalty", type=float, default=0.0, metavar="BETA",
                        help="beam search coverage penalty beta (GNMT eq. 14; 0 = off): hypotheses that leave source "
                             "words unattended lose score")
    parser.add_argument("--plot-alignment", metavar="PNG", help="save an attention heatmap for --sentence")
    parser.add_argument("--sentence", help="the sentence whose alignment is plotted (default: the first input)")
    args = parser.parse_args(argv)
    try:  # everything that can be wrong is found before the model is loaded, and said in one line
        check_decoding_options(num_beams=args.beams, num_return_sequences=args.nbest, batch_size=args.batch_size,
                               max_new_tokens=args.max_new_tokens, coverage_penalty=args.coverage_penalty)
        if args.plot_alignment and len(args.model) > 1:
            raise ValueError(f"--plot-alignment plots one model's attention; got {len(args.model)} model folders")
        sentences = [args.sentence] if args.plot_alignment and args.sentence else read_sentences(args.input)
        model, tokenizer = load_for_decoding(args.model)
        if args.beams is None:  # the folder's generation config decides: check --nbest against it too
            check_decoding_options(num_beams=model.generation_config.num_beams or 1, num_return_sequences=args.nbest,
                                   batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                                   coverage_penalty=args.coverage_penalty)
    except (OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    if args.plot_alignment:
        sentence = sentences[0]
        weights, source_tokens, target_tokens = alignment(model, tokenizer, sentence, num_beams=args.beams)
        plot_alignment(weights, source_tokens, target_tokens, args.plot_alignment)
        print(f"alignment of {len(target_tokens)} target x {len(source_tokens)} source tokens -> {args.plot_alignment}",
              file=sys.stderr)
        return 0
    results = translate(model, tokenizer, sentences, batch_size=args.batch_size, num_beams=args.beams,
                        num_return_sequences=args.nbest, max_new_tokens=args.max_new_tokens,
                        length_penalty=args.length_penalty, scores=args.scores, coverage_penalty=args.coverage_penalty)
    for index, hypotheses in enumerate(results):
        for hypothesis in hypotheses:
            fields = [hypothesis.text]
            if args.nbest > 1:
                fields.insert(0, str(index))
            if args.scores:
                fields.append(f"{hypothesis.score:.4f}")
            print("\t".join(fields))
    return 0

