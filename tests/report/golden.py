"""Golden-file comparison: ``PDPROBE_UPDATE_GOLDEN=1 pytest tests/report`` rewrites them."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "report"
UPDATE_ENV = "PDPROBE_UPDATE_GOLDEN"


def check_golden(name: str, actual: str) -> None:
    """Compare ``actual`` with ``tests/fixtures/report/<name>``; rewrite it when asked."""
    path = GOLDEN_DIR / name
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    if not path.exists():
        raise AssertionError(f"golden file {path} is missing: run with {UPDATE_ENV}=1 to create")
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True),
                                            actual.splitlines(keepends=True),
                                            f"golden/{name}", "rendered", n=2))
        raise AssertionError(f"{name} differs from the golden file (set {UPDATE_ENV}=1 to "
                             f"accept):\n{diff[:6000]}")
