#!/usr/bin/env python
"""Take a picture of the attention explorer (the page `hf-s2s serve` serves at /) translating a sentence: the picture in
docs/serving.md. A checkout's script: it drives headless Chromium with the code of the explorer's tests
(tests/browser.py, which needs the test extra and Debian's chromium and chromium-driver) against `hf-s2s serve`
started as its own process on a free port.

    python scripts/explorer_screenshot.py runs/explorer_ref/model --beams 5 --nbest 3 \\
        --sentence "Ein Mann in einer Weste sitzt auf einem Stuhl und hält Magazine." \\
        --output docs/images/attention-explorer.png
"""

import argparse
import io
import os
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ is no package of the wheel: the checkout's
from tests.browser import ExplorerPage, chromium, missing_browser  # noqa: E402
from tests.server_process import start_server_process  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("models", nargs="+", help="served model folders, NAME=FOLDER or FOLDER, as hf-s2s serve takes")
    parser.add_argument("--sentence", required=True, help="the sentence typed into the page")
    parser.add_argument("--output", required=True, type=Path, help="the PNG to write (refused if it exists)")
    parser.add_argument("--beams", type=int, default=None, help="beams chosen on the page (default: the model's)")
    parser.add_argument("--nbest", type=int, default=1, help="n-best chosen on the page")
    parser.add_argument("--width", type=int, default=1000, help="viewport width in CSS pixels")
    parser.add_argument("--colours", type=int, default=256, help="colours of the written PNG (a palette keeps it small)")
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.output.exists() and not args.overwrite:
        sys.exit(f"error: {args.output} exists; pass --overwrite to replace it")
    reason = missing_browser()
    if reason:
        sys.exit(f"error: {reason}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process, url = start_server_process(args.models, ROOT, env=env)
    try:
        with chromium(width=args.width, height=800) as driver:
            page = ExplorerPage(driver, url).open()
            page.translate([args.sentence], beams=args.beams, nbest=args.nbest)
            if page.error():
                sys.exit(f"error: the page shows an error: {page.error()}")
            png = page.full_page_screenshot()
    finally:
        process.kill()
        process.wait()
    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=args.colours)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    image.save(args.output, optimize=True)
    print(f"{args.output}: {image.width} x {image.height} pixels, {args.output.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
