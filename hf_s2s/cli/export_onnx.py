"""Export a model folder of either family (model + tokenizer) to ONNX: an encoder graph and a decoder-step graph whose
decoder cache is explicit inputs and outputs, with the tokenizer, the generation config and a runtime that decodes
greedy and beam search as generate() does, with numpy, onnxruntime and tokenizers only (no torch).

    hf-s2s export-onnx runs/transformer_small/model runs/transformer_small/onnx
    python runs/transformer_small/onnx/onnx_runtime.py runs/transformer_small/onnx --beams 5 < test.de

Needs the onnx extra: pip install 'hf_s2s[onnx]' (onnx and onnxscript export, onnxruntime runs).
"""

import argparse
import sys

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.inference.onnx import check_export_options, export_onnx
from hf_s2s.models.loading import load_model, load_tokenizer, local_folder


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("model", help="a saved model folder of either family (model + tokenizer)")
    parser.add_argument("output_dir", help="the folder to write (new or empty)")
    parser.add_argument("--overwrite_output_dir", action="store_true",
                        help="replace an earlier export in output_dir: its files are deleted while they are byte for "
                             "byte what the export wrote (recorded in hf_s2s_output.json); a folder that holds anything "
                             "else (a changed file, another file) is refused, and nothing is deleted")
    args = parser.parse_args(argv)
    try:  # the folders and the packages are checked before the model is loaded
        local_folder(args.model, flag="model")
        check_export_options(args.output_dir, args.overwrite_output_dir, model_dir=args.model)
        tokenizer = load_tokenizer(args.model)
        model = load_model(args.model)
        export_onnx(model, args.output_dir, tokenizer=tokenizer, overwrite=args.overwrite_output_dir)
    except (ImportError, OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    print(f"exported {args.model} -> {args.output_dir} (encoder.onnx, decoder_step.onnx, onnx_runtime.py)")
    return 0
