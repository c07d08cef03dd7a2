"""Train a subword tokenizer for translation on a corpus's training split and save it.

    hf-s2s train-tokenizer --output_dir runs/tokenizer-de-en          # Multi30k de-en, joint BPE 8000
    hf-s2s train-tokenizer --dataset corpus/{split}.tsv --source_lang en --target_lang fr \\
        --model_type unigram --vocab_size 16000 --separate_vocabs --output_dir runs/tok-en-fr

The folder loads with ``AutoTokenizer.from_pretrained(output_dir)`` and so with ``hf-s2s train
--tokenizer_name_or_path output_dir``; separate vocabularies give one tokenizer that encodes ``text_target=``
with the target vocabulary (as MarianMT's does).
"""

import argparse
import logging
import sys

from hf_s2s.cli import HelpFormatter
from hf_s2s.data.corpus import check_splits, corpus_splits, load_translation_corpus
from hf_s2s.data.tokenization import (
    LIBRARIES,
    MODEL_TYPES,
    check_training_arguments,
    train_translation_tokenizers,
)
from hf_s2s.models.loading import check_writable
from hf_s2s.models.output_record import check_output_folder, clear_output, record_output

COMMAND = "train-tokenizer"  # the command whose output the folder's record names


def parse_args(argv=None, prog=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--dataset", default="multi30k",
                        help="multi30k, synthetic:reversal, synthetic:reordering, a corpus folder, a .jsonl/.tsv file "
                             "or pattern with {split}, or a Hub dataset name")
    parser.add_argument("--dataset_config", default=None, help="Hub dataset config name")
    parser.add_argument("--data_dir", default=None, help="folder holding Multi30k (else $HF_S2S_DATA_DIR, else the Hub)")
    parser.add_argument("--source_lang", default="de", help="source language key of the corpus")
    parser.add_argument("--target_lang", default="en", help="target language key of the corpus")
    parser.add_argument("--vocab_size", type=int, default=8000, help="final vocabulary size (special and byte tokens included)")
    parser.add_argument("--target_vocab_size", type=int, default=None, help="with --separate_vocabs; default --vocab_size")
    parser.add_argument("--model_type", choices=MODEL_TYPES, default="bpe", help="subword model")
    parser.add_argument("--library", choices=LIBRARIES, default="tokenizers",
                        help="what trains it: 🤗 tokenizers, or sentencepiece (pip install 'hf_s2s[sentencepiece]'); "
                             "either is saved as tokenizer.json")
    parser.add_argument("--separate_vocabs", action="store_true", help="one vocabulary per language instead of a joint one")
    parser.add_argument("--streaming", action="store_true", help="stream the corpus instead of loading it into memory")
    parser.add_argument("--output_dir", required=True, help="folder the tokenizer is saved to")
    parser.add_argument("--overwrite_output_dir", action="store_true",
                        help="replace an earlier train-tokenizer output in --output_dir, whole: its files are "
                             "deleted while they are byte for byte what it wrote (recorded in hf_s2s_output.json); a "
                             "folder that holds anything else, such as a model folder, is refused")
    return parser.parse_args(argv)


def main(argv=None, prog=None) -> int:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    args = parse_args(argv, prog)
    if args.target_vocab_size is not None and not args.separate_vocabs:  # before the corpus is read
        sys.exit("error: --target_vocab_size is the target side of --separate_vocabs; pass --separate_vocabs too "
                 "(or leave it out for a joint vocabulary of --vocab_size)")
    try:  # everything that can be checked without the corpus first: the sizes, the output folder, the splits
        check_training_arguments(args.vocab_size, args.model_type, not args.separate_vocabs, args.target_vocab_size,
                                 flags=("--vocab_size", "--target_vocab_size", "--model_type", "--library"),
                                 library=args.library)
        check_output_folder(args.output_dir, COMMAND, "--overwrite_output_dir", args.overwrite_output_dir)
        check_writable(args.output_dir, "--output_dir")
        splits = corpus_splits(args.dataset, args.source_lang, args.target_lang, args.data_dir, flag="--dataset")
        if splits is not None:
            check_splits(splits, args.dataset, {"train": "training the tokenizer"})
        corpus = load_translation_corpus(
            args.dataset, args.source_lang, args.target_lang, data_dir=args.data_dir,
            dataset_config=args.dataset_config, streaming=args.streaming,
        )
        tokenizers = train_translation_tokenizers(
            corpus, args.source_lang, args.target_lang, args.vocab_size, model_type=args.model_type,
            joint=not args.separate_vocabs, target_vocab_size=args.target_vocab_size, library=args.library,
            flags=("--vocab_size", "--target_vocab_size"),
        )
        if args.overwrite_output_dir:
            clear_output(args.output_dir, COMMAND, "--overwrite_output_dir")
        tokenizers.save_pretrained(args.output_dir)
        record_output(args.output_dir, COMMAND)
    # a refused folder, a corpus or vocabulary error, a missing package, a full disk: said
    except (ImportError, OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    sizes = f"{len(tokenizers.source)}" if tokenizers.is_joint else f"{len(tokenizers.source)} + {len(tokenizers.target)}"
    print(f"{args.model_type} tokenizer ({'joint' if tokenizers.is_joint else 'separate'}, {sizes} tokens) "
          f"saved to {args.output_dir}")
    return 0

