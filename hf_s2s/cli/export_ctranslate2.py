"""Export a trained Transformer folder (model + tokenizer) to a CTranslate2 model directory.

    hf-s2s export-ctranslate2 runs/transformer_small/model runs/transformer_small/ct2
    hf-s2s export-ctranslate2 runs/transformer_small/model runs/transformer_small/ct2_int8 --quantization int8

Translate with it through ctranslate2.Translator (docs/inference.md, "Export to CTranslate2"). Needs the
ctranslate2 extra: pip install 'hf_s2s[ctranslate2]'.
"""

import argparse
import sys

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.inference.ctranslate2 import check_export_options, export_ctranslate2
from hf_s2s.models.loading import load_model, load_tokenizer


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("model", help="a saved Transformer model folder (model + tokenizer)")
    parser.add_argument("output_dir", help="the CTranslate2 model directory to write (new or empty)")
    parser.add_argument("--quantization", default=None,
                        help="CTranslate2 weight type: int8, int8_float32, int16, float16, ... (ctranslate2's names); "
                             "default: the model's dtype")
    parser.add_argument("--overwrite_output_dir", action="store_true",
                        help="replace an earlier export in output_dir: its files are deleted while they are byte for "
                             "byte what the export wrote (recorded in hf_s2s_output.json); a folder that holds anything "
                             "else (a changed file, another file, a transformers model folder) is refused, and nothing "
                             "is deleted")
    args = parser.parse_args(argv)
    try:  # options and the output folder are checked before the model is loaded
        check_export_options(args.output_dir, args.quantization, args.overwrite_output_dir, model_dir=args.model)
        tokenizer = load_tokenizer(args.model)
        model = load_model(args.model)
        export_ctranslate2(model, args.output_dir, tokenizer=tokenizer, quantization=args.quantization,
                           overwrite=args.overwrite_output_dir)
    except (ImportError, OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    print(f"exported {args.model} ({args.quantization or 'weights as saved'}) -> {args.output_dir}")
    return 0
