#!/usr/bin/env python3
"""Train tiny models with the real OpenNMT-py, Joey NMT and fairseq, and record their own translations.

The fixtures are what the converters of issue 27 are tested against: each folder under
tests/fixtures/toolkits/<toolkit>_<arch>/ holds a checkpoint as the toolkit saves (or releases) it,
its vocabulary files, the 100 tokenized test sources, the toolkit's greedy and beam outputs as
tokens, and provenance.json (versions, commands, options, seed, date).

The matrix cells (matrix.py) vary one or two settings users change from a base model per toolkit and keep only what
tests/test_importers_matrix.py needs, under tests/fixtures/toolkits/matrix/<cell>/. The toolkits run from
toolkit_opennmt.py, toolkit_joeynmt.py and toolkit_fairseq.py; common.py holds the rest.

Each toolkit lives in its own virtual environment under .toolkit_venvs/ (git-ignored), because each
pins its own torch; see common.INSTALL for what each needed. Corpora are read by path from
/work/shared/data/multi30k and sliced into a temporary folder; nothing but the fixtures is written
into the repository.

    python scripts/toolkit_fixtures/make.py                 # every fixture
    python scripts/toolkit_fixtures/make.py --only opennmt_rnn_general
    python scripts/toolkit_fixtures/make.py --list
    python scripts/toolkit_fixtures/make.py --matrix         # every matrix cell
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from common import SINGLE, make_slice, record_single
from matrix import CELLS
from toolkit_fairseq import FAIRSEQ_MODELS, make_fairseq, make_fairseq_spm
from toolkit_joeynmt import JOEY_MODELS, make_joeynmt, make_joeynmt_spm
from toolkit_opennmt import ONMT_MODELS, make_opennmt, make_opennmt_spm

SPM_FIXTURES = {"opennmt_transformer_spm": make_opennmt_spm, "joeynmt_transformer_spm": make_joeynmt_spm,
                "fairseq_transformer_spm": make_fairseq_spm}

FIXTURES = {
    **{name: make_opennmt for name in ONMT_MODELS},
    **{name: make_joeynmt for name in JOEY_MODELS},
    **{name: make_fairseq for name in FAIRSEQ_MODELS},
    **SPM_FIXTURES,
    **{name: cell.make for name, cell in CELLS.items()},  # the matrix (matrix.py): tests/fixtures/toolkits/matrix/
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", help="fixture names to make (default: all)")
    parser.add_argument("--list", action="store_true", help="list the fixture names and stop")
    parser.add_argument("--matrix", action="store_true", help="make every matrix cell (matrix.py)")
    parser.add_argument("--keep-work", action="store_true", help="keep the temporary work folders")
    parser.add_argument("--single-only", action="store_true",
                        help=f"only (re)record {SINGLE} from each named fixture's stored checkpoint (no training)")
    args = parser.parse_args()
    if args.list:
        print("\n".join(FIXTURES))
        return
    names = args.only or (list(CELLS) if args.matrix else list(FIXTURES))
    unknown = sorted(set(names) - set(FIXTURES))
    if unknown:
        parser.error(f"unknown fixture(s) {unknown}; known: {list(FIXTURES)}")
    root = Path(tempfile.mkdtemp(prefix="toolkit_fixtures_"))
    data_dir = root / "data"
    data_dir.mkdir()
    data = None if args.single_only else make_slice(data_dir)
    failed = {}
    for name in names:
        work = root / name
        work.mkdir()
        print(f"[{name}] working in {work}", flush=True)
        try:
            if args.single_only:
                record_single(name, work)
            else:
                FIXTURES[name](name, work, data)
            print(f"[{name}] done", flush=True)
        except Exception as error:  # record and go on with the next toolkit
            failed[name] = str(error)
            print(f"[{name}] FAILED: {error}", flush=True)
    if not args.keep_work and not failed:
        shutil.rmtree(root)
    if failed:
        print(f"failed: {json.dumps(failed, indent=2)} (work kept in {root})")
        sys.exit(1)


if __name__ == "__main__":
    main()
