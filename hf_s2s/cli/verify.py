"""Tell whether a model folder's code is an unmodified hf_s2s release, and which one, before loading it with
trust_remote_code=True: every .py file in it (at any depth) is compared, byte for byte, with the code each hf_s2s
release ships (code_manifest.json, installed with hf_s2s). No network: give the local folder, e.g. the one
`hf download me/x --local-dir x` writes.

    hf-s2s verify x           # "unmodified hf_s2s 0.2.0 code: 9 files" (exit 0), else what is not (exit 1)
    hf-s2s verify x --diff    # ...and how each file differs from the release's

Exit status 1 also when the folder holds compiled or pickled files, an entry that cannot be verified as a file of
the folder (a symlink to a folder, a broken link or a loop, a FIFO, socket or device), or when an auto_map or
custom_pipelines entry of its JSON files loads code from another repository or from a file outside the folder.
"""

import argparse
import sys
from pathlib import Path

from hf_s2s.cli import HelpFormatter
from hf_s2s.hub.code_integrity import code_diff, verify_folder
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
    if args.diff:
        print(code_diff(report), end="")
    return 1
