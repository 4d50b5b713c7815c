"""``pdprobe.promql_grouped`` stays in the bottom layer beside ``pdprobe.promql_math``.

Its semantics are tested in tests/analysis/test_promql.py through the table helpers that use it
(``pdprobe.analysis.promql`` re-exports it); here, that it imports nothing from pdprobe, so the
collectors and analysis can both use it without a layer reaching upwards.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pdprobe.analysis.promql as table_helpers
import pdprobe.promql_grouped as promql_grouped


def test_bottom_module_imports_nothing_from_pdprobe() -> None:
    tree = ast.parse(Path(promql_grouped.__file__).read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.split(".")[0] == "pdprobe"], imported


def test_analysis_re_exports_the_same_functions() -> None:
    for name in ("SortedGroups", "group_sorted", "window_increase", "increases_by_window",
                 "interp_grouped"):
        assert getattr(table_helpers, name) is getattr(promql_grouped, name)
