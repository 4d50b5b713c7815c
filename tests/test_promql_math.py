"""The bottom module of the metric pipeline: counter and histogram math on plain arrays.

Its semantics are tested in tests/analysis/test_promql.py (with the table helpers that use it);
here, that it stays at the bottom: collectors and analysis both import it, so it must import
nothing from pdprobe (or a collector would again pull the analysis layer in).
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

import pdprobe.analysis.promql as table_helpers
import pdprobe.promql_math as promql_math


def test_bottom_module_imports_nothing_from_pdprobe() -> None:
    tree = ast.parse(Path(promql_math.__file__).read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.split(".")[0] == "pdprobe"], imported


def test_collectors_take_the_math_from_the_bottom_not_from_analysis() -> None:
    root = Path(promql_math.__file__).parent / "collectors"
    leaks = []
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "pdprobe.analysis"):
                leaks.append(f"{path.name}: {node.module}")
    assert leaks == []


def test_analysis_re_exports_the_same_functions() -> None:
    for name in ("correct_counter", "correct_counters_grouped", "increase", "rate",
                 "histogram_quantile", "fraction_below", "histogram_quantiles_matrix"):
        assert getattr(table_helpers, name) is getattr(promql_math, name)


def test_grouped_correction_resets_each_series_on_its_own() -> None:
    group = np.array([0, 0, 0, 1, 1, 1])
    values = np.array([5.0, 9.0, 2.0, 100.0, 50.0, 60.0])
    out = promql_math.correct_counters_grouped(group, values)
    np.testing.assert_array_equal(out, [5.0, 9.0, 11.0, 100.0, 150.0, 160.0])
