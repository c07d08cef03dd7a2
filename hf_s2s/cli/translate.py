"""Translate a file (or stdin) with a trained model folder; one sentence per line.

    hf-s2s translate runs/x/model --input test.de > test.hyp.en
    echo "Ein Hund läuft." | hf-s2s translate runs/x/model --beams 5 --nbest 3 --scores
    hf-s2s translate runs/x/model --plot-alignment align.png --sentence "Ein Hund läuft."
    hf-s2s translate runs/x/model --int8 --input test.de > test.hyp.en   # int8 weights on the CPU
    hf-s2s translate runs/x/model --engine ctranslate2 --input test.de  # a Transformer exported to CTranslate2 on start
    hf-s2s translate runs/x/model --plot-encoder-attention enc.png --layer 2 --sentence "Ein Hund läuft."
    hf-s2s translate runs/x/checkpoint-908 runs/x/checkpoint-1362 --input test.de  # an ensemble of two
    hf-s2s translate runs/x/model --input test.de --reference test.en > test.hyp.en  # BLEU and chrF on stderr
    hf-s2s translate runs/x/model --shortlist --input test.de  # decode over the folder's vocabulary shortlist
    hf-s2s translate runs/x/model --glossary terms.tsv --input test.de  # each source term's target term appears

Each output is bounded by its source, at max_len_a x source tokens + max_len_b tokens (</s> included), as in fairseq:
by default the values in the model's generation config (1.3 and 5 for models trained here, and for folders saved
without them); --max-len-a/--max-len-b change them and --no-length-bound turns the bound off.
"""

import argparse
import os
import sys
from pathlib import Path

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.inference.analysis import check_has_encoder_attention, encoder_attention
from hf_s2s.inference.engines import ENGINES, load_engine
from hf_s2s.inference.ensemble import Seq2SeqEnsemble, load_for_decoding, read_for_decoding
from hf_s2s.inference.int8 import quantize_int8
from hf_s2s.inference.lexical import check_lexical_options, folder_shortlist, read_glossary
from hf_s2s.inference.plots import check_layer_and_head, plot_alignment, plot_encoder_attention
from hf_s2s.inference.translate import (
    DEFAULT_BATCH_SIZE,
    alignment,
    check_decoding_options,
    check_models_support,
    check_translation,
    length_bound_arguments,
    read_references,
    read_sentences,
    score_line,
    translate,
)


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
    parser.add_argument("--int8", action="store_true",
                        help="decode with int8 weights on the CPU (hf_s2s.quantize_int8: dynamic quantization of the "
                             "linear and recurrent layers; with --engine ctranslate2, CTranslate2's int8)")
    parser.add_argument("--engine", choices=list(ENGINES), default="torch",
                        help="torch: generate(); ctranslate2: the Transformer family exported to CTranslate2 when the "
                             "command starts (pip install 'hf_s2s[ctranslate2]'; one model folder, no plots or "
                             "coverage penalty)")
    parser.add_argument("--coverage-penalty", type=float, default=0.0, metavar="BETA",
                        help="beam search coverage penalty beta (GNMT eq. 14; 0 = off): hypotheses that leave source "
                             "words unattended lose score")
    parser.add_argument("--reference", metavar="FILE",
                        help="reference translations, one per input line: after translating, print sacreBLEU BLEU "
                             "(cased and lowercased, 13a) and chrF of the output against them to stderr, computed as "
                             "the training job computes the scores in results.json")
    parser.add_argument("--shortlist", action="store_true",
                        help="decode each batch over the vocabulary shortlist saved in the (first) model folder "
                             "(hf-s2s build-shortlist): the output layer computes only the target tokens its "
                             "sources can need")
    parser.add_argument("--glossary", metavar="TSV",
                        help="terminology: lines 'source term<TAB>target term'; wherever a source term occurs in a "
                             "sentence (whole words, any case), its target term appears in the translation")
    parser.add_argument("--plot-alignment", metavar="PNG", help="save an attention heatmap for --sentence")
    parser.add_argument("--plot-encoder-attention", metavar="PNG",
                        help="save heatmaps of the encoder's self-attention over --sentence (Transformer only)")
    parser.add_argument("--layer", type=int, help="with --plot-encoder-attention: this encoder layer only (from 0); "
                                                  "default: one panel per layer")
    parser.add_argument("--head", type=int, help="with --plot-encoder-attention: this head only (from 0); default: "
                                                 "the mean of the heads")
    parser.add_argument("--sentence", help="the sentence whose alignment or encoder attention is plotted (default: "
                                           "the first input)")
    args = parser.parse_args(argv)
    plotting = args.plot_alignment or args.plot_encoder_attention
    try:  # everything that can be wrong is found before the model is loaded, and said in one line
        check_decoding_options(num_beams=args.beams, num_return_sequences=args.nbest, batch_size=args.batch_size,
                               max_new_tokens=args.max_new_tokens, coverage_penalty=args.coverage_penalty,
                               length_penalty=args.length_penalty)
        bound = length_bound_arguments(args.max_len_a, args.max_len_b, args.no_length_bound)
        if (args.layer is not None or args.head is not None) and not args.plot_encoder_attention:
            raise ValueError("--layer and --head choose what --plot-encoder-attention draws; give it a PNG path")
        if args.engine != "torch":
            needs_torch = [what for what, given in (("an ensemble", len(args.model) > 1),
                                                    ("--plot-alignment", args.plot_alignment),
                                                    ("--plot-encoder-attention", args.plot_encoder_attention),
                                                    ("--coverage-penalty", args.coverage_penalty)) if given]
            if needs_torch:
                raise ValueError(f"--engine {args.engine} decodes one model folder without plots or coverage penalty; "
                                 f"asked for: {', '.join(needs_torch)} (decode those with --engine torch)")
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
        check_lexical_options(shortlist=args.shortlist, glossary=bool(args.glossary), engine=args.engine,
                              int8=args.int8, coverage_penalty=args.coverage_penalty, plotting=bool(plotting))
        folders = read_for_decoding(args.model)  # tokenizers and configs, checked; no weights yet
        lexical = {}
        if args.shortlist:
            lexical["shortlist"] = folder_shortlist(args.model[0], folders.configs[0])
        if args.glossary:
            lexical["glossary"] = read_glossary(args.glossary, folders.tokenizer)
        check_models_support(folders.configs, folders.names, coverage_penalty=args.coverage_penalty,
                             alignment=bool(args.plot_alignment), max_new_tokens=args.max_new_tokens)
        if args.engine != "torch":  # the engine loads (and exports) the folder and completes the options itself
            engine = load_engine(args.model[0], args.engine, int8=args.int8)
            options = engine.options(num_beams=args.beams, num_return_sequences=args.nbest, max_len_a=args.max_len_a,
                                     max_len_b=args.max_len_b, no_length_bound=args.no_length_bound,
                                     max_new_tokens=args.max_new_tokens, length_penalty=args.length_penalty)
            results = engine.translate(sentences, options, batch_size=args.batch_size, scores=args.scores)
            return print_translations(results, args, references)
        model, tokenizer = load_for_decoding(args.model, folders)
        if args.plot_encoder_attention:
            check_has_encoder_attention(model)
            check_layer_and_head(model.config.encoder_layers, model.config.encoder_attention_heads, args.layer,
                                 args.head)
        if args.int8:  # the loaded float32 weights are not needed afterwards
            members = model.members if isinstance(model, Seq2SeqEnsemble) else [model]
            for member in members:
                quantize_int8(member, inplace=True)
        # the folder's generation config completes the options (beams, max_length, the length bound): checked now,
        # so that nothing fails once decoding has begun
        options = check_translation(model, num_beams=args.beams, num_return_sequences=args.nbest,
                                    batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                                    length_penalty=args.length_penalty,
                                    coverage_penalty=0.0 if plotting else args.coverage_penalty, **bound)
    except (ImportError, OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    if args.plot_alignment:
        sentence = sentences[0]
        best = {**options.generate_kwargs(), "num_return_sequences": 1}  # the translation translate() gives first
        weights, source_tokens, target_tokens = alignment(model, tokenizer, sentence, **best)
        plot_alignment(weights, source_tokens, target_tokens, args.plot_alignment)
        print(f"alignment of {len(target_tokens)} target x {len(source_tokens)} source tokens -> {args.plot_alignment}",
              file=sys.stderr)
    if args.plot_encoder_attention:
        weights, tokens = encoder_attention(model, tokenizer, sentences[:1])
        plot_encoder_attention(weights[0], tokens[0], args.plot_encoder_attention, layer=args.layer, head=args.head)
        print(f"encoder self-attention over {len(tokens[0])} source tokens -> {args.plot_encoder_attention}",
              file=sys.stderr)
    if plotting:
        return 0
    results = translate(model, tokenizer, sentences, batch_size=args.batch_size, num_beams=args.beams,
                        num_return_sequences=args.nbest, max_new_tokens=args.max_new_tokens,
                        length_penalty=args.length_penalty, scores=args.scores, coverage_penalty=args.coverage_penalty,
                        **bound, **lexical)
    return print_translations(results, args, references)


def print_translations(results, args, references) -> int:
    """The hypotheses on stdout (with their sentence's number for n-best lists and their scores when asked for), then
    the scores against ``references`` on stderr when given."""
    for index, hypotheses in enumerate(results):
        for hypothesis in hypotheses:
            fields = [hypothesis.text]
            if args.nbest > 1:
                fields.insert(0, str(index))
            if args.scores:
                fields.append(f"{hypothesis.score:.4f}")
            print("\t".join(fields))
    if references is not None:
        sys.stdout.flush()  # the hypotheses come first when both streams go to one terminal
        print(score_line([hypotheses[0].text for hypotheses in results], references, args.reference), file=sys.stderr)
    return 0
