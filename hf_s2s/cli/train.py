"""Train and evaluate a translation model.

    hf-s2s train --recipe transformer_small            # Multi30k de->en, small Transformer
    hf-s2s train --recipe rnn_bahdanau_gru --output_dir runs/gru
    accelerate launch --multi_gpu --num_processes 2 scripts/train.py --recipe transformer_small

Every Seq2SeqTrainingArguments flag works too (``--help`` lists them); a recipe gives defaults, flags override.
"""

import logging
import sys

import transformers

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.results import summary_line
from hf_s2s.training import check_arguments, parse_args, run


def main(argv=None, prog=None):
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()
    try:  # a refused flag or output folder is one line, before anything is read or trained (run() checks again)
        model_args, data_args, training_args = parse_args(argv, prog=prog)
        check_arguments(model_args, data_args, training_args)
    except (OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    results = run(model_args, data_args, training_args)
    if results:
        print(summary_line(results))
        print(f"model, tokenizer and results.json in {training_args.output_dir}/model")

