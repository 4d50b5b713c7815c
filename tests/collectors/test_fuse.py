"""Fusing partial datasets: concatenation, ordering, clocks and roles."""

from __future__ import annotations

import pandas as pd

from pdprobe.collectors.fuse import fuse
from pdprobe.dataset import ROLE_FROM_LABEL, Partial, RoleHint, SourceInfo


def _partial(path: str, requests=None, metrics=None, hints=()) -> Partial:
    return Partial(source=SourceInfo(path=path, kind="x", format="x", rows=0), requests=requests,
                   metrics=metrics, role_hints=tuple(hints),
                   request_columns=frozenset(requests.columns) if requests is not None else frozenset())


def test_fuse_sorts_and_resolves_roles() -> None:
    req = pd.DataFrame({"arrival_ts": [3.0, 1.0, 2.0], "prompt_tokens": [10, 20, 30],
                        "output_tokens": [1, 2, 3], "prefill_instance": ["p0", "p0", "p1"],
                        "decode_instance": ["d0", "d1", "d0"]})
    met = pd.DataFrame({"ts": [5.0, 4.0], "instance": ["d0", "d0"], "signal": ["requests_waiting"] * 2,
                        "kind": ["gauge"] * 2, "value": [1.0, 2.0]})
    hints = [RoleHint("p0", "prefill", "prefill_instance column", ROLE_FROM_LABEL),
             RoleHint("p1", "prefill", "prefill_instance column", ROLE_FROM_LABEL),
             RoleHint("d0", "decode", "decode_instance column", ROLE_FROM_LABEL),
             RoleHint("d1", "decode", "decode_instance column", ROLE_FROM_LABEL)]
    ds = fuse([_partial("r.csv", requests=req, hints=hints), _partial("m.prom", metrics=met)])
    assert ds.requests["arrival_ts"].tolist() == [1.0, 2.0, 3.0]
    assert ds.metrics["ts"].tolist() == [4.0, 5.0]
    assert [i.name for i in ds.instances_of("prefill")] == ["p0", "p1"]
    assert [i.name for i in ds.instances_of("decode")] == ["d0", "d1"]
    assert ds.has_request_column("prefill_instance")
    assert not ds.has_request_column("ttft_s")
    assert ds.requests["ttft_s"].isna().all()  # conformed: absent column is NA, not 0


def test_fuse_warns_about_distant_clocks() -> None:
    a = pd.DataFrame({"arrival_ts": [1_700_000_000.0], "prompt_tokens": [1], "output_tokens": [1]})
    b = pd.DataFrame({"ts": [1_600_000_000.0], "instance": ["x"], "signal": ["requests_waiting"],
                      "kind": ["gauge"], "value": [1.0]})
    ds = fuse([_partial("a.jsonl", requests=a), _partial("b.prom", metrics=b)])
    assert any("apart in time" in w and "a.jsonl" in w for w in ds.warnings)


def test_one_input_has_no_clock_to_compare_and_is_not_scanned(monkeypatch) -> None:
    """One partial: no pair of spans, so no time is read for them; two still compare."""
    from pdprobe.collectors import fuse as fuse_module

    spans: list[str] = []
    real = fuse_module._time_span

    def counted(p: Partial) -> tuple[float | None, float | None]:
        spans.append(p.source.path)
        return real(p)

    monkeypatch.setattr(fuse_module, "_time_span", counted)
    a = pd.DataFrame({"arrival_ts": [1_700_000_000.0], "prompt_tokens": [1], "output_tokens": [1]})
    ds = fuse([_partial("a.jsonl", requests=a)])
    assert spans == [] and not any("apart in time" in w for w in ds.warnings)
    b = pd.DataFrame({"arrival_ts": [1_600_000_000.0], "prompt_tokens": [1], "output_tokens": [1]})
    ds = fuse([_partial("a.jsonl", requests=a), _partial("b.jsonl", requests=b)])
    assert spans == ["a.jsonl", "b.jsonl"]
    assert any("apart in time" in w for w in ds.warnings)
