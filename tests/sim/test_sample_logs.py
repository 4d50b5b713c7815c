"""The bundled sample: small, every input kind, and what scripts/make_sample_logs.py makes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pdprobe.collectors.files import read_paths
from pdprobe.services.diagnose import bundled_sample

REPO = Path(__file__).resolve().parents[2]


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("make_sample_logs",
                                                  REPO / "scripts" / "make_sample_logs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sample_is_small_and_holds_every_input_kind() -> None:
    sample = bundled_sample()
    files = [p for p in sample.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 5 * 2**20
    ds = read_paths([sample])
    kinds = {s.kind for s in ds.sources}
    assert {"requests", "metrics", "engine-log"} <= kinds
    roles = [i.role for i in ds.instances]
    assert roles.count("prefill") >= 2 and roles.count("decode") >= 4
    assert ds.requests["arrival_ts"].max() - ds.requests["arrival_ts"].min() >= 20 * 60


def test_sample_is_what_the_script_generates(tmp_path: Path) -> None:
    module = _script()
    fresh = tmp_path / "sample_logs"
    module.generate(fresh)
    assert module._same(fresh, bundled_sample()), "run scripts/make_sample_logs.py"
