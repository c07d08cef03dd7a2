#!/usr/bin/env python
"""Train a subword tokenizer for translation on a corpus's training split and save it.

    python scripts/train_tokenizer.py --output_dir runs/tokenizer-de-en          # Multi30k de-en, joint BPE 8000
    python scripts/train_tokenizer.py --dataset corpus/{split}.tsv --source_lang en --target_lang fr \\
        --model_type unigram --vocab_size 16000 --separate_vocabs --output_dir runs/tok-en-fr

A joint tokenizer loads with ``AutoTokenizer.from_pretrained(output_dir)``; separate vocabularies are saved in
``output_dir/source`` and ``output_dir/target`` (``TranslationTokenizers.from_pretrained(output_dir)``).
"""

import argparse
import logging
import sys

from hf_s2s.data import load_translation_corpus
from hf_s2s.loading import refuse_to_overwrite
from hf_s2s.tokenization import MODEL_TYPES, train_translation_tokenizers


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="multi30k",
                        help="multi30k, synthetic:reversal, synthetic:reordering, a corpus folder, a .jsonl/.tsv file "
                             "or pattern with {split}, or a Hub dataset name")
    parser.add_argument("--dataset_config", default=None, help="Hub dataset config name")
    parser.add_argument("--data_dir", default=None, help="folder holding Multi30k (else $HF_S2S_DATA_DIR, the shared copy)")
    parser.add_argument("--source_lang", default="de")
    parser.add_argument("--target_lang", default="en")
    parser.add_argument("--vocab_size", type=int, default=8000, help="final vocabulary size (special and byte tokens included)")
    parser.add_argument("--target_vocab_size", type=int, default=None, help="with --separate_vocabs; default --vocab_size")
    parser.add_argument("--model_type", choices=MODEL_TYPES, default="bpe")
    parser.add_argument("--separate_vocabs", action="store_true", help="one vocabulary per language instead of a joint one")
    parser.add_argument("--streaming", action="store_true", help="stream the corpus instead of loading it into memory")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--overwrite_output_dir", action="store_true",
                        help="write over a tokenizer or model already in --output_dir (refused otherwise)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    args = parse_args(argv)
    if not args.overwrite_output_dir:
        try:  # before the corpus is even read
            refuse_to_overwrite(args.output_dir, flag="--overwrite_output_dir")
        except FileExistsError as error:
            sys.exit(f"error: {error}")
    corpus = load_translation_corpus(
        args.dataset, args.source_lang, args.target_lang, data_dir=args.data_dir,
        dataset_config=args.dataset_config, streaming=args.streaming,
    )
    tokenizers = train_translation_tokenizers(
        corpus, args.source_lang, args.target_lang, args.vocab_size, model_type=args.model_type,
        joint=not args.separate_vocabs, target_vocab_size=args.target_vocab_size,
    )
    tokenizers.save_pretrained(args.output_dir)
    sizes = f"{len(tokenizers.source)}" if tokenizers.is_joint else f"{len(tokenizers.source)} + {len(tokenizers.target)}"
    print(f"{args.model_type} tokenizer ({'joint' if tokenizers.is_joint else 'separate'}, {sizes} tokens) "
          f"saved to {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
