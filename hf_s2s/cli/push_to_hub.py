"""Share a trained model folder on the Hugging Face Hub: model (safetensors), tokenizer, model code, translation
pipeline and a model card filled from the run's results.json, loadable with trust_remote_code=True where hf_s2s
is not installed.

    hf-s2s push-to-hub runs/transformer-multi30k-de-en/model me/transformer-multi30k-de-en
    hf-s2s push-to-hub runs/x/model me/x --dry-run --staging-dir hub/x    # build it only, offline

Uploading needs a token (`hf auth login` or --token / $HF_TOKEN). The folder's code must be byte for byte the
installed hf_s2s release's; other code is pushed only with --allow-modified-code, after its diff is printed.
"""

import argparse
import sys

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.hub.publish import push_to_hub


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("model_dir", help="a trained model folder (hf_s2s.training.run writes <output_dir>/model)")
    parser.add_argument("repo_id", help="the Hub repository, namespace/name")
    parser.add_argument("--dry-run", action="store_true",
                        help="build and check the folder that would be uploaded, without the network")
    parser.add_argument("--staging-dir", help="where the folder is built (required with --dry-run): a new or empty "
                                              "folder outside the model folder")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--token", help="Hub token (default: the logged-in one or $HF_TOKEN)")
    parser.add_argument("--license", default="apache-2.0", help="license in the card metadata")
    parser.add_argument("--allow-modified-code", action="store_true",
                        help="push code that is not the installed hf_s2s release's (a changed file, or a .py file it "
                             "does not ship); its unified diff against the release is printed to stderr first")
    args = parser.parse_args(argv)
    if args.dry_run and not args.staging_dir:
        parser.error("--dry-run needs --staging-dir DIR: the folder is built there")
    try:
        result = push_to_hub(args.model_dir, args.repo_id, dry_run=args.dry_run, staging_dir=args.staging_dir,
                             private=args.private, token=args.token, license=args.license,
                             allow_modified_code=args.allow_modified_code)
    except (OSError, ValueError) as error:  # HubFolderError, ModelFolderError: the message says what is wrong
        sys.exit(f"error: {error}")
    print(f"dry run: the folder that would be uploaded is {result}" if args.dry_run else f"uploaded: {result}")

