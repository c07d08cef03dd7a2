"""Translate a file (or stdin) with a trained model folder; one sentence per line.

    hf-s2s translate runs/x/model --input test.de > test.hyp.en
    echo "Ein Hund läuft." | hf-s2s translate runs/x/model --beams 5 --nbest 3 --scores
    hf-s2s translate runs/x/model --plot-alignment align.png --sentence "Ein Hund läuft."
    hf-s2s translate runs/x/model --int8 --input test.de > test.hyp.en   # int8 weights on the CPU
    hf-s2s translate runs/x/model --engine ctranslate2 --input test.de  # a Transformer exported to CTranslate2 on start
    hf-s2s translate runs/x/model --engine onnx --input test.de  # either family exported to ONNX on start
    hf-s2s translate runs/x/model --engine auto --input test.de  # the fastest engine that decodes it as generate()
    hf-s2s translate runs/x/model --plot-encoder-attention enc.png --layer 2 --sentence "Ein Hund läuft."
    hf-s2s translate runs/x/checkpoint-908 runs/x/checkpoint-1362 --input test.de  # an ensemble of two
    hf-s2s translate runs/x/model --input test.de --reference test.en > test.hyp.en  # BLEU and chrF on stderr
    hf-s2s translate runs/x/model --input test.de --alignments pharaoh  # "translation ||| 0-0 1-2 ..." per line
    hf-s2s translate runs/x/model --input test.de --alignments json --alignments-output test.align.jsonl --word-level

Each output is bounded by its source, at max_len_a x source tokens + max_len_b tokens (</s> included), as in fairseq:
by default the values in the model's generation config (1.3 and 5 for models trained here, and for folders saved
without them); --max-len-a/--max-len-b change them and --no-length-bound turns the bound off.
"""

import argparse
import os
import sys
from pathlib import Path

import torch

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.inference.analysis import encoder_attention
from hf_s2s.inference.attention_maps import (
    ALIGNMENT_FORMATS,
    FILE_FORMATS,
    WORD_LEVEL_RULE,
    AlignmentWriter,
    attention_map,
    check_view,
)
from hf_s2s.inference.decoding import FLAGS, check_call, check_count, length_bound_call
from hf_s2s.inference.engine_choice import AUTO, open_fastest_engine
from hf_s2s.inference.engines import ENGINES, TORCH_DTYPES, open_engine
from hf_s2s.inference.plots import check_layer_and_head, plot_alignment, plot_encoder_attention
from hf_s2s.inference.translate import DEFAULT_BATCH_SIZE, read_references, read_sentences, score_line
from hf_s2s.models.term_constraints import Glossary


def check_image_path(flag: str, path: str) -> None:
    """Refuse, before anything is loaded, an image path that cannot be written: a folder, a missing or read-only
    folder, a read-only file, or a file type matplotlib cannot write (it picks the type from the suffix)."""
    path_ = Path(path)
    if path_.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give the path of the image to write (e.g. {path_ / 'plot.png'})")
    folder = path_.parent
    if not folder.is_dir():
        raise ValueError(f"{flag} {path}: the folder {folder} does not exist; create it first or choose another path")
    if not os.access(folder, os.W_OK) or (path_.exists() and not os.access(path_, os.W_OK)):
        raise ValueError(f"{flag} {path} cannot be written (no write permission); choose another path")
    suffix = path_.suffix.lower().removeprefix(".")
    if suffix:
        from matplotlib.backend_bases import FigureCanvasBase  # only when a plot is asked for

        supported = FigureCanvasBase.get_supported_filetypes()
        if suffix not in supported:
            raise ValueError(f"{flag} {path}: matplotlib cannot write .{suffix} files; use one of "
                             f"{', '.join('.' + name for name in sorted(supported))}")


def check_output_file(flag: str, path: str, overwrite: bool) -> None:
    """Refuse, before anything is loaded, a file path that cannot be written, or that exists without ``overwrite``."""
    path_ = Path(path)
    if path_.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give the path of the file to write")
    if not path_.parent.is_dir():
        raise ValueError(f"{flag} {path}: the folder {path_.parent} does not exist; create it first or choose another "
                         "path")
    if path_.exists() and not overwrite:
        raise ValueError(f"{flag} {path} exists; pass --overwrite to replace it")
    if not os.access(path_.parent, os.W_OK) or (path_.exists() and not os.access(path_, os.W_OK)):
        raise ValueError(f"{flag} {path} cannot be written (no write permission); choose another path")


def add_alignment_flags(parser: argparse.ArgumentParser, what: str) -> None:
    """The flags that write the attention of ``what`` as alignments (``hf-s2s translate`` and ``hf-s2s score``)."""
    parser.add_argument("--alignments", choices=ALIGNMENT_FORMATS, default=None, metavar="FORMAT",
                        help=f"write the alignment of {what}, read under teacher forcing (torch engine, one model with "
                             "attention): pharaoh, each target token's most attended source token as 0-based "
                             "source-target pairs (OpenNMT-py's -report_align, Marian's --alignment hard; </s> left "
                             "out); soft, the weights, rows separated by spaces and values by commas (Marian's "
                             "--alignment soft); both after ' ||| ' on each output line, or a line each in "
                             "--alignments-output. json (JSON Lines) and csv (a line per cell) go to "
                             "--alignments-output. The map: the last decoder layer's cross-attention, the mean of its "
                             "heads, unless --layer/--head say otherwise")
    parser.add_argument("--alignments-output", metavar="FILE", help="the file --alignments writes")
    parser.add_argument("--word-level", action="store_true",
                        help=f"with --alignments: words instead of subword tokens ({WORD_LEVEL_RULE})")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --alignments-output file")


def check_alignment_flags(args, engine) -> None:
    """Refuse, before the weights load, alignment flags that cannot be honoured."""
    if args.alignments is None:
        if args.alignments_output or args.word_level:
            raise ValueError("--alignments-output and --word-level go with --alignments FORMAT")
        return
    if args.alignments_output:
        check_output_file("--alignments-output", args.alignments_output, args.overwrite)
    elif args.alignments in FILE_FORMATS:
        raise ValueError(f"--alignments {args.alignments} writes a file: name it with --alignments-output")
    engine.check_alignment()
    engine.check_forced()
    check_view(engine.configs[0], "cross", args.layer, args.head)


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
    parser.add_argument("--length-penalty", type=float, default=None,
                        help="beam search length penalty: a hypothesis scores its log-probability / length ** "
                             "PENALTY (1.0: the mean token log-probability; 0: their sum, no normalization); "
                             "default: the model's generation config (1.0 for models trained by hf-s2s train; a "
                             "converted folder's is its toolkit's)")
    parser.add_argument("--max-len-a", type=float, default=None, metavar="A",
                        help="output tokens per source token of the length bound A x source + B (fairseq's); "
                             "default: the model's generation config (max_len_a)")
    parser.add_argument("--max-len-b", type=int, default=None, metavar="B",
                        help="tokens added to the length bound; default: the model's generation config (max_len_b)")
    parser.add_argument("--no-length-bound", action="store_true",
                        help="no source-relative length bound: only --max-new-tokens (or the config's max_length) "
                             "limits the output")
    parser.add_argument("--engine", choices=[*ENGINES, AUTO], default="torch",
                        help="torch: generate(), either family, ensembles, plots and the coverage penalty; "
                             "ctranslate2: the Transformer family exported to CTranslate2 when the command starts (pip "
                             "install 'hf_s2s[ctranslate2]'); onnx: either family exported to ONNX when the command "
                             "starts, or a folder hf-s2s export-onnx wrote (pip install 'hf_s2s[onnx]'); auto: the "
                             "fastest of them that decodes the folder and these options exactly as generate() does "
                             "(named on stderr). docs/inference.md says which options each engine decodes")
    parser.add_argument("--dtype", choices=list(TORCH_DTYPES), default="float32",
                        help="weight type of the torch engine (bfloat16 translations can depend on the batch)")
    parser.add_argument("--int8", action="store_true",
                        help="decode with int8 weights on the CPU (hf_s2s.quantize_int8: dynamic quantization of the "
                             "linear and recurrent layers; with --engine ctranslate2, CTranslate2's int8)")
    parser.add_argument("--coverage-penalty", type=float, default=0.0, metavar="BETA",
                        help="beam search coverage penalty beta (GNMT eq. 14; 0 = off): hypotheses that leave source "
                             "words unattended lose score")
    parser.add_argument("--reference", metavar="FILE",
                        help="reference translations, one per input line: after translating, print sacreBLEU BLEU "
                             "(cased and lowercased, 13a) and chrF of the output against them to stderr, computed as "
                             "the training job computes the scores in results.json")
    parser.add_argument("--shortlist", action="store_true",
                        help="decode each sentence over the vocabulary shortlist saved in the (first) model folder "
                             "(hf-s2s build-shortlist): the output layer computes only the target tokens the "
                             "batch's sources can need (torch engine)")
    parser.add_argument("--glossary", metavar="TSV",
                        help="terminology, lines 'source term<TAB>target term': wherever a source term occurs in a "
                             "sentence (whole words, any case), its target term appears in the translation (torch "
                             "engine)")
    parser.add_argument("--plot-alignment", metavar="PNG", help="save an attention heatmap for --sentence")
    parser.add_argument("--plot-encoder-attention", metavar="PNG",
                        help="save heatmaps of the encoder's self-attention over --sentence (Transformer only)")
    add_alignment_flags(parser, "each translation (each hypothesis of an n-best list)")
    parser.add_argument("--layer", type=int, help="with --plot-encoder-attention: this encoder layer only (from 0), "
                                                  "default: one panel per layer; with --alignments: this decoder "
                                                  "layer, default: the last")
    parser.add_argument("--head", type=int, help="with --plot-encoder-attention or --alignments: this head only (from "
                                                 "0); default: the mean of the heads")
    parser.add_argument("--sentence", help="the sentence whose alignment or encoder attention is plotted (default: "
                                           "the first input)")
    args = parser.parse_args(argv)
    plotting = args.plot_alignment or args.plot_encoder_attention
    call = dict(num_beams=args.beams, num_return_sequences=args.nbest, max_new_tokens=args.max_new_tokens,
                length_penalty=args.length_penalty, coverage_penalty=0.0 if plotting else args.coverage_penalty)
    try:  # everything that can be wrong is found before the model is loaded, and said in one line: first what the
        # command line alone shows, then what the folders' files show (the engine opened, its options completed)
        check_call(**call, max_len_a=args.max_len_a, max_len_b=args.max_len_b)
        check_count("batch_size", args.batch_size)
        # --no-length-bound beside a bound value, named by the flags (engine.options takes the three as they are)
        length_bound_call(args.max_len_a, args.max_len_b, args.no_length_bound,
                          (FLAGS["max_len_a"], FLAGS["max_len_b"], FLAGS["no_length_bound"]))
        if plotting and (args.shortlist or args.glossary):
            raise ValueError(f"{'--shortlist' if args.shortlist else '--glossary'} applies to translations, not to a "
                             "plot: leave it out of --plot-* commands")
        glossary = Glossary.from_tsv(args.glossary) if args.glossary else None
        if (args.layer is not None or args.head is not None) and not (args.plot_encoder_attention or args.alignments):
            raise ValueError("--layer and --head choose what --plot-encoder-attention draws or --alignments writes; "
                             "give one of them")
        if args.alignments and (plotting or args.shortlist or args.glossary or args.coverage_penalty):
            given = ("a --plot-* flag" if plotting else "--shortlist" if args.shortlist else "--glossary"
                     if args.glossary else "--coverage-penalty")
            raise ValueError(f"--alignments writes the attention of translations decoded without a plot, a shortlist, "
                             f"a glossary and the coverage penalty: leave out {given}")
        if plotting and len(args.model) > 1:
            flag = "--plot-alignment" if args.plot_alignment else "--plot-encoder-attention"
            raise ValueError(f"{flag} plots one model's attention; got {len(args.model)} model folders")
        for flag, path in (("--plot-alignment", args.plot_alignment),
                           ("--plot-encoder-attention", args.plot_encoder_attention)):
            if path:
                check_image_path(flag, path)
        sentences = [args.sentence] if plotting and args.sentence else read_sentences(args.input)
        references = read_references(args.reference, len(sentences), args.input) if args.reference else None
        if references is not None and (plotting or args.nbest > 1):
            raise ValueError("--reference scores one translation per input line: it cannot be combined with "
                             + ("--nbest > 1" if args.nbest > 1 else "a plot"))

        def needs(engine) -> None:  # what the plots need of an engine beyond decoding
            if args.plot_alignment:
                engine.check_alignment()
            check_alignment_flags(args, engine)
            if args.plot_encoder_attention:
                engine.check_encoder_attention()
                config = engine.configs[0]
                check_layer_and_head(config.encoder_layers, config.encoder_attention_heads, args.layer, args.head)

        options_call = dict(**call, max_len_a=args.max_len_a, max_len_b=args.max_len_b,
                            no_length_bound=args.no_length_bound, shortlist=args.shortlist, glossary=glossary)
        if args.engine == AUTO:  # no weights yet
            choice = open_fastest_engine(args.model, dtype=args.dtype, int8=args.int8, call=options_call, needs=needs)
            engine, options = choice.engine, choice.options
            print(choice.reason, file=sys.stderr)
        else:
            engine = open_engine(args.model, args.engine, dtype=args.dtype, int8=args.int8)  # no weights yet
            needs(engine)
            options = engine.options(**options_call)
        if glossary is not None:  # each line's terms together fit in what the model may write (lines from 1)
            glossary.target_terms(engine.tokenizer(sentences)["input_ids"], engine.tokenizer, options.max_new_tokens,
                                  first=1)
        engine.load()
    except (ImportError, OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    if args.plot_alignment:
        alignment = engine.alignment(sentences[0], options)
        plot_alignment(torch.tensor(alignment.weights), alignment.source_tokens, alignment.target_tokens,
                       args.plot_alignment)
        print(f"alignment of {len(alignment.target_tokens)} target x {len(alignment.source_tokens)} source tokens -> "
              f"{args.plot_alignment}", file=sys.stderr)
    if args.plot_encoder_attention:
        weights, tokens = encoder_attention(engine.model, engine.tokenizer, sentences[:1])
        plot_encoder_attention(weights[0], tokens[0], args.plot_encoder_attention, layer=args.layer, head=args.head)
        print(f"encoder self-attention over {len(tokens[0])} source tokens -> {args.plot_encoder_attention}",
              file=sys.stderr)
    if plotting:
        return 0
    results = engine.translate(sentences, options, batch_size=args.batch_size, scores=args.scores)
    if args.alignments:
        maps = alignment_maps(engine, sentences, options, args)
        with AlignmentWriter(args.alignments, args.alignments_output) as writer:
            return print_translations(results, args, references, maps, writer)
    return print_translations(results, args, references)


def alignment_maps(engine, sentences: list[str], options, args) -> list[list]:
    """Each sentence's hypotheses read under teacher forcing, as the maps --alignments writes (none for a blank
    sentence, which is not decoded)."""
    forced = engine.force_hypotheses(sentences, options, batch_size=args.batch_size)
    return [[attention_map(hypothesis, engine.tokenizer, layer=args.layer, head=args.head, word_level=args.word_level)
             for hypothesis in hypotheses] for hypotheses in forced]


def print_translations(results, args, references, maps=None, writer: AlignmentWriter | None = None) -> int:
    """The hypotheses on stdout (with their sentence's number for n-best lists and their scores when asked for, and
    each one's alignment from ``maps`` by ``writer``), then the scores against ``references`` on stderr when given."""
    for index, hypotheses in enumerate(results):
        for rank, hypothesis in enumerate(hypotheses):
            fields = [hypothesis.text]
            if args.nbest > 1:
                fields.insert(0, str(index))
            if args.scores:
                fields.append(f"{hypothesis.score:.4f}")
            line = "\t".join(fields)
            if writer is not None:
                line += writer.suffix(maps[index][rank], index + 1, rank) if maps[index] else writer.blank(index + 1)
            print(line)
    if references is not None:
        sys.stdout.flush()  # the hypotheses come first when both streams go to one terminal
        print(score_line([hypotheses[0].text for hypotheses in results], references, args.reference), file=sys.stderr)
    return 0

