"""Tell whether a model folder's code is an unmodified hf_s2s release, and which one, before loading it with
trust_remote_code=True: every .py file in it (at any depth) is compared, byte for byte, with the code each hf_s2s
release ships (code_manifest.json, installed with hf_s2s). No network: give the local folder, e.g. the one
`hf download me/x --local-dir x` writes.

    hf-s2s verify x           # "unmodified hf_s2s 0.2.0 code: 9 files" (exit 0), else what is not (exit 1)
    hf-s2s verify x --diff    # ...and how each file differs from the release's

It checks a folder as it is shared: one downloaded from the Hub, or the one push-to-hub would upload, staged with
`hf-s2s push-to-hub runs/x/model me/x --dry-run --staging-dir hub/x` (then `hf-s2s verify hub/x`). A training
run's folder is not one: it keeps the run's state beside the weights (training_args.bin, checkpoints' optimizer
state: pickles), which push-to-hub leaves out; verify names those files and the command that stages the folder.

Exit status 1 also when the folder holds compiled or pickled files, an entry that cannot be verified as a file of
the folder (a symlink to a folder, a broken link or a loop, a FIFO, socket or device), or when an auto_map or
custom_pipelines entry of its JSON files loads code from another repository or from a file outside the folder.
"""

import argparse
import shlex
import sys
from pathlib import Path

from hf_s2s.cli import HelpFormatter
from hf_s2s.hub.code_integrity import code_diff, verify_folder
from hf_s2s.hub.publish import run_model_folder, training_state_files
from hf_s2s.models.version import __version__


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("folder", help="a model folder (a local copy of a Hub repository)")
    parser.add_argument("--diff", action="store_true",
                        help="print the unified diff of each differing file against the release's (in full when the "
                             "installed hf_s2s does not hold that release's copy) and each unknown file in full")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        sys.exit(f"error: {folder} is not a folder")
    report, problems = verify_folder(folder)
    if not problems:
        print(f"unmodified hf_s2s {', '.join(report.identical_releases)} code: {len(report.unmodified)} files")
        return 0
    compared = f"hf_s2s {report.release}" if report.release else "no release (the manifest records none)"
    print(f"{folder} is not an unmodified hf_s2s release (compared with {compared}; the installed hf_s2s is "
          f"{__version__}):")
    print("\n".join(f"  {problem}" for problem in problems))
    if report.unmodified:
        print(f"  unmodified: {', '.join(report.unmodified)}")
    training = training_state_files(folder)
    if training:
        print(training_run_advice(folder, training))
    if args.diff:
        print(code_diff(report), end="")
    return 1


def training_run_advice(folder: Path, training: list[str]) -> str:
    """What verify says of a training run's ``folder``, which holds ``training`` (the files only training writes):
    which files keep it from being a folder to share, and the command that stages one from it, to verify instead."""
    shown = ", ".join(training[:4]) + (f" and {len(training) - 4} more" if len(training) > 4 else "")
    model_dir = run_model_folder(folder) or folder / "model"
    stage = shlex.join(["hf-s2s", "push-to-hub", str(model_dir), "NAMESPACE/NAME", "--dry-run", "--staging-dir",
                        "DIR"])
    return (f"{folder} is a training run's folder, not one to share: it holds the run's own state ({shown}), which "
            f"no shared folder holds; verify checks the folder push-to-hub uploads: stage it with `{stage}` (no "
            f"network), then run `hf-s2s verify DIR`")
