"""Regenerate the documentation's reference pages from the code: docs/cli.md (every hf-s2s command's flags) and
docs/configuration.md (every config field). Run it after changing a flag or a config field; tests/test_docs.py
fails while a committed page is stale.

    python scripts/gen_docs_reference.py                    # writes docs/cli.md and docs/configuration.md
    python scripts/gen_docs_reference.py --output-dir /tmp/x
"""

import argparse
from pathlib import Path

from hf_s2s.cli.reference import write_pages

DOCS_DIR = Path(__file__).resolve().parent.parent / "docs"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default=str(DOCS_DIR), help="folder the pages are written to (default: docs/)")
    args = parser.parse_args(argv)
    for path in write_pages(args.output_dir):
        print(path)


if __name__ == "__main__":
    main()
