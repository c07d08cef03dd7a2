"""Build a vocabulary shortlist for a model folder from a training corpus, and save it in the folder.

    hf-s2s build-shortlist runs/x/model                      # Multi30k de-en train, first 100, best 50
    hf-s2s build-shortlist runs/x/model --dataset corpus/{split}.tsv --source_lang en --target_lang fr --best 30
    hf-s2s translate runs/x/model --shortlist --input test.de    # decode with it

For each source token, the BEST target tokens with the highest IBM Model 1 translation probability p(t | s),
estimated on the corpus's training split tokenized by the folder's tokenizer; every batch also keeps the FIRST most
frequent target tokens and the special tokens (Marian's lexical shortlist, --shortlist FILE FIRST BEST). The file,
shortlist.safetensors, is data (token ids), never code: hf-s2s verify and push-to-hub take it.
"""

import argparse
import logging
import sys
from pathlib import Path

from hf_s2s.cli import HelpFormatter
from hf_s2s.data.corpus import check_splits, corpus_splits, load_translation_corpus
from hf_s2s.inference.lexical import RESULTS_FILE, folder_languages
from hf_s2s.models.loading import check_writable, load_config, load_tokenizer
from hf_s2s.models.shortlist import (
    DEFAULT_BEST,
    DEFAULT_FIRST,
    DEFAULT_ITERATIONS,
    SHORTLIST_FILE,
    VocabularyShortlist,
    shortlist_from_texts,
)

# The direction built when neither the command line nor the folder names one: Multi30k's German to English.
DEFAULT_LANGUAGES = ("de", "en")


def check_output(path: Path, overwrite: bool) -> None:
    """Refuse to write over a file unless ``overwrite`` is given and the file is a shortlist (what this command
    writes); anything else is never replaced."""
    if not path.exists():
        return
    if not overwrite:
        raise ValueError(f"{path} exists; pass --overwrite to replace it with the new shortlist")
    try:
        VocabularyShortlist.load(path)
    except ValueError:
        raise ValueError(f"{path} exists and is not an hf_s2s shortlist: it is not replaced, even with --overwrite; "
                         "give another --output") from None


def direction(folder: str, source_lang: str | None, target_lang: str | None) -> tuple[str, str]:
    """The (source, target) languages to build for: the flags, else the folder's (its results.json), else
    :data:`DEFAULT_LANGUAGES`. Flags that contradict the folder's direction are refused: decoding would refuse the
    shortlist they build."""
    known = folder_languages(folder)
    given = (source_lang, target_lang)
    chosen = tuple(flag if flag is not None else default for flag, default in zip(given, known or DEFAULT_LANGUAGES,
                                                                                 strict=True))
    if known is not None and chosen != known:
        raise ValueError(f"{folder} translates {known[0]} -> {known[1]} (its {RESULTS_FILE}), and --source_lang "
                         f"{chosen[0]} --target_lang {chosen[1]} would build a shortlist for {chosen[0]} -> "
                         f"{chosen[1]}, which decoding with the folder refuses: leave the flags out, or give "
                         f"--source_lang {known[0]} --target_lang {known[1]}")
    return chosen


def main(argv=None, prog=None):
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("model", help="a saved model folder (its tokenizer tokenizes the corpus)")
    parser.add_argument("--dataset", default="multi30k",
                        help="multi30k, a corpus folder, a .jsonl/.tsv file or pattern with {split}, or a Hub dataset "
                             "name (its train split is read)")
    parser.add_argument("--dataset_config", default=None, help="Hub dataset config name")
    parser.add_argument("--data_dir", default=None, help="folder holding Multi30k (else $HF_S2S_DATA_DIR, else the Hub)")
    parser.add_argument("--source_lang", default=None,
                        help="source language key of the corpus; default: the language the folder translates from "
                             "(its results.json), else de")
    parser.add_argument("--target_lang", default=None,
                        help="target language key of the corpus; default: the language the folder translates into, "
                             "else en")
    parser.add_argument("--first", type=int, default=DEFAULT_FIRST,
                        help="the most frequent target tokens every batch keeps")
    parser.add_argument("--best", type=int, default=DEFAULT_BEST, help="target tokens kept per source token")
    parser.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS, help="EM iterations of IBM Model 1")
    parser.add_argument("--output", default=None, help=f"file to write (default: MODEL/{SHORTLIST_FILE}, where "
                                                       "translate --shortlist and serve's shortlist requests read it)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing shortlist file")
    args = parser.parse_args(argv)
    output = Path(args.output) if args.output else Path(args.model) / SHORTLIST_FILE
    try:  # the options, the folder and the output before the corpus is read
        for flag, value, low in (("--first", args.first, 0), ("--best", args.best, 0),
                                 ("--iterations", args.iterations, 1)):
            if value < low:
                raise ValueError(f"{flag} must be >= {low}, got {value}")
        if args.first == 0 and args.best == 0:
            raise ValueError("--first 0 and --best 0 would keep only the special tokens")
        config = load_config(args.model)
        tokenizer = load_tokenizer(args.model)
        source_lang, target_lang = direction(args.model, args.source_lang, args.target_lang)
        check_output(output, args.overwrite)
        check_writable(output.parent, "--output")
        splits = corpus_splits(args.dataset, source_lang, target_lang, args.data_dir, flag="--dataset")
        if splits is not None:
            check_splits(splits, args.dataset, {"train": "building the shortlist"})
        corpus = load_translation_corpus(args.dataset, source_lang, target_lang, data_dir=args.data_dir,
                                         dataset_config=args.dataset_config)
        check_splits(corpus, args.dataset, {"train": "building the shortlist"})
        pairs = corpus["train"]["translation"]
        shortlist = shortlist_from_texts(
            tokenizer, [pair[source_lang] for pair in pairs], [pair[target_lang] for pair in pairs],
            source_vocab_size=config.vocab_size, target_vocab_size=config.target_vocab_size, first=args.first,
            best=args.best, iterations=args.iterations,
            metadata={"dataset": args.dataset, "source_lang": source_lang, "target_lang": target_lang})
        shortlist.save(output)
    except (OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    print(f"shortlist of {len(pairs):,} {source_lang} -> {target_lang} sentence pairs (first {args.first}, "
          f"best {args.best}, IBM Model 1, "
          f"{args.iterations} iterations) -> {output}")
    return 0
