#!/usr/bin/env python3
"""Render the HTML report of the bundled sample and screenshot it for the README.

    python scripts/make_screenshot.py [--output docs/img/report.png] [--height 3300]

Runs ``pdprobe diagnose --format html`` on the bundled sample (``pdprobe/sample_logs``); while
that sample does not exist yet it renders the prefill-bound report of the test factory
instead. The page is opened in headless Chromium (Debian's ``/usr/bin/chromium``, or
``PDPROBE_CHROMIUM``), checked for clipped or overlapping text (as the browser test does) and
the top ``--height`` pixels are saved as a PNG.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.report.browser import TEXT_LAYOUT_JS, Chromium, find_chromium  # noqa: E402


def build_html(dest: Path, source: str) -> str:
    """Write the report to ``dest``; return a one-line description of what was rendered."""
    sample = REPO / "pdprobe" / "sample_logs"
    if source == "sample" or (source == "auto" and sample.is_dir()):
        res = subprocess.run([sys.executable, "-m", "pdprobe", "diagnose", "--format", "html",
                              "-o", str(dest)], capture_output=True, text=True, check=False,
                             timeout=600)
        if not dest.exists():
            raise SystemExit(f"pdprobe diagnose failed (exit {res.returncode}): "
                             f"{res.stderr.strip()}")
        return "the bundled sample (pdprobe diagnose --format html)"
    from pdprobe.report.base import RenderOptions
    from pdprobe.report.html import render
    from tests.report.factory import prefill_bound

    dest.write_text(render(prefill_bound(), RenderOptions()), encoding="utf-8")
    return "the test factory's prefill-bound report (pdprobe/sample_logs does not exist yet)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "img" / "report.png")
    parser.add_argument("--height", type=int, default=3300,
                        help="pixels of the page to keep (verdict, findings, charts, heat maps)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--source", choices=("auto", "sample", "factory"), default="auto")
    args = parser.parse_args()
    binary = find_chromium()
    if binary is None:
        print("make_screenshot: chromium not found (apt-get install chromium, or set "
              "PDPROBE_CHROMIUM)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="pdprobe-shot-") as tmp:
        html = Path(tmp) / "report.html"
        what = build_html(html, args.source)
        with Chromium(binary, width=args.width) as browser:
            result = browser.open(html, {"text": TEXT_LAYOUT_JS}, max_height=args.height)
        if result.errors:
            print("make_screenshot: the page logged errors: " + "; ".join(result.errors),
                  file=sys.stderr)
            return 1
        if result.values["text"]:  # the same check as the browser test, on the sample
            print("make_screenshot: clipped or overlapping text:\n  "
                  + "\n  ".join(result.values["text"]), file=sys.stderr)
            return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(result.screenshot)
    print(f"wrote {args.output} ({len(result.screenshot):,} bytes) from {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
