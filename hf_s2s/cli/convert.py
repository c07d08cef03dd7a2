"""Convert a model trained with OpenNMT-py, Joey NMT or fairseq into an hf_s2s model folder.

    hf-s2s convert --from opennmt-py model_step_2000.pt converted/onmt
    hf-s2s convert --from joeynmt models/rnn/best.ckpt converted/joey      # config.yaml and vocabularies beside it
    hf-s2s convert --from fairseq checkpoints/checkpoint_best.pt converted/fs --source-vocab data-bin/dict.de.txt \\
        --target-vocab data-bin/dict.en.txt

The folder loads with from_pretrained (and with trust_remote_code=True where hf_s2s is not installed), translates
with `hf-s2s translate`, fine-tunes with `hf-s2s train --model_name_or_path` and shares with `hf-s2s push-to-hub`.
Its tokenizer splits on whitespace and maps each token to the toolkit's id: feed it text tokenized (and subword-
segmented) as the toolkit's input was. The checkpoint is read without running any of its code (docs/importers.md).
"""

import argparse
import json
import sys

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.importers import CONVERSION_FILE, convert, toolkits


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--from", dest="toolkit", required=True, choices=toolkits(),
                        help="the toolkit that trained the checkpoint")
    parser.add_argument("checkpoint", help="the toolkit's checkpoint file")
    parser.add_argument("output_dir", help="the hf_s2s model folder to write (new or empty)")
    parser.add_argument("--config", default=None,
                        help="the toolkit's training config, where the checkpoint does not hold it (Joey NMT: "
                             "default config.yaml beside the checkpoint)")
    parser.add_argument("--source-vocab", default=None,
                        help="the source vocabulary file, where the checkpoint does not hold it (default: where the "
                             "toolkit writes it)")
    parser.add_argument("--target-vocab", default=None, help="the target vocabulary file (as --source-vocab)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier conversion in output_dir, whole: its files are deleted while they "
                             "are byte for byte what hf-s2s convert wrote (recorded in hf_s2s_output.json); a folder "
                             "that holds anything else (another model's results, card, code, checkpoints) is "
                             "refused, and nothing is deleted")
    args = parser.parse_args(argv)
    try:
        folder = convert(args.toolkit, args.checkpoint, args.output_dir, overwrite=args.overwrite,
                         config=args.config, source_vocab=args.source_vocab, target_vocab=args.target_vocab)
    except (OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    print(f"converted {args.checkpoint} ({args.toolkit}) -> {folder}")
    steps = json.loads((folder / CONVERSION_FILE).read_text()).get("not_carried_over") or []
    if steps:
        print(f"not carried over (the folder does not do these; do them yourself, see {CONVERSION_FILE}):")
        for step in steps:
            print(f"  - {step}")
    return 0
