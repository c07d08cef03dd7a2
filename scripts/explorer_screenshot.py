#!/usr/bin/env python
"""Take a picture of the attention explorer (the page `hf-s2s serve` serves at /) translating a sentence: the pictures
in docs/serving.md. A checkout's script: it drives headless Chromium with the code of the explorer's tests
(tests/browser.py, which needs the test extra and Debian's chromium and chromium-driver) against `hf-s2s serve`
started as its own process on a free port.

    python scripts/explorer_screenshot.py tf=runs/explorer_tf/model --beams 4 --nbest 3 --hypothesis 2 \\
        --argmax --sentence "..." --output docs/images/attention-explorer.png
    python scripts/explorer_screenshot.py tf=runs/explorer_tf/model --phone --sentence "..." \\
        --output docs/images/attention-explorer-phone.png

Without --phone, the whole page at --width CSS pixels; with --phone, what a 390 x 844 phone shows with the map in
view and a cell tapped (its tooltip).
"""

import argparse
import io
import os
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ is no package of the wheel: the checkout's
from tests.browser import ExplorerPage, chromium, emulate, missing_browser  # noqa: E402
from tests.server_process import start_server_process  # noqa: E402

PHONE = (390, 844)  # CSS pixels


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("models", nargs="+", help="served model folders, NAME=FOLDER or FOLDER, as hf-s2s serve takes")
    parser.add_argument("--sentence", required=True, help="the sentence typed into the page")
    parser.add_argument("--output", required=True, type=Path, help="the PNG to write (refused if it exists)")
    parser.add_argument("--beams", type=int, default=None, help="beams chosen on the page (default: the model's)")
    parser.add_argument("--nbest", type=int, default=1, help="n-best chosen on the page")
    parser.add_argument("--hypothesis", type=int, default=1, help="the hypothesis whose map is shown (from 1)")
    parser.add_argument("--layer", type=int, default=None, help="the layer shown (default: the last)")
    parser.add_argument("--head", default=None, help="the head shown, or mean (default: the mean)")
    parser.add_argument("--word-level", action="store_true", help="merge subword pieces into words")
    parser.add_argument("--scale", choices=["unit", "map", "row"], default="unit", help="the colour scale")
    parser.add_argument("--argmax", action="store_true", help="mark each row's maximum")
    parser.add_argument("--compare", metavar="MODEL", help="a served model shown side by side")
    parser.add_argument("--phone", action="store_true", help="a phone's screen (390 x 844), a cell tapped")
    parser.add_argument("--width", type=int, default=1280, help="viewport width in CSS pixels (without --phone)")
    parser.add_argument("--colours", type=int, default=256, help="colours of the written PNG (a palette keeps it small)")
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    return parser.parse_args(argv)


def show(page: ExplorerPage, args: argparse.Namespace) -> None:
    """Choose on the page what ``args`` ask to see."""
    if args.hypothesis > 1:
        page.select_hypothesis(0, args.hypothesis - 1)
    view = {name: value for name, value in (("layer", args.layer), ("head", args.head)) if value is not None}
    page.view(0, **view, word=args.word_level, scale=args.scale, argmax=args.argmax)
    if args.compare:
        section = page.section(0)
        page.choose(".compare-model", args.compare, section)
        page.find("form.compare button", section).click()
        page.wait.until(lambda d: len(page.find_all(".panel", section)) == 2)
        page.settle()


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
            if args.phone:
                emulate(driver, *PHONE, 2, mobile=True)
            page = ExplorerPage(driver, url).open()
            page.translate([args.sentence], beams=args.beams, nbest=args.nbest)
            if page.error():
                sys.exit(f"error: the page shows an error: {page.error()}")
            show(page, args)
            if args.phone:
                cells = page.find_all("table.heatmap td[data-weight]", page.panel(0))
                driver.execute_script("arguments[0].scrollIntoView({block: 'end'})",
                                      page.find(".heatmap-scroll", page.panel(0)))
                cells[len(cells) // 2].click()  # a tap: the cell takes the focus, its tooltip shows
                png = page.screenshot()
            else:
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
