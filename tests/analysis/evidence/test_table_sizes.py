"""The evidence means the same at every table size: a sampled grouping (forced far below its
thresholds) gives each column the source and meaning the exact one gives."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.rules.builders import Cluster

if TYPE_CHECKING:
    from pdprobe.analysis.evidence.model import ClusterEvidence


def _sample_small(monkeypatch: pytest.MonkeyPatch, exact_rows: int = 10_000) -> None:
    """The sampling thresholds far below a test cluster's rows."""
    from pdprobe.analysis import grouped

    monkeypatch.setattr(grouped, "QUANTILE_EXACT_ROWS", exact_rows)
    monkeypatch.setattr(grouped, "GROUP_SAMPLE_MAX", exact_rows // 5)
    monkeypatch.setattr(grouped, "CELL_SAMPLE_MAX", exact_rows // 50)
    monkeypatch.setattr(grouped, "COLUMN_SAMPLE_ROWS", exact_rows * 4 // 5)


def test_prefill_transfer_p90_from_the_records_exact_and_sampled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With kv_transfer_s in the records (and KV-transfer histograms beside them) every
    instance's xfer_s_p90 is the records' p90 on an exact and on a sampled grouping alike,
    never a fallback to the histograms or gauges on the sampled one only."""
    cluster = Cluster(duration_s=250, rate_rps=60.0, seed=5)
    exact = cluster.context()
    _sample_small(monkeypatch)
    sampled = cluster.context()
    assert len(sampled.dataset.requests) > 12_000
    a, b = exact.evidence.instances, sampled.evidence.instances
    prefill = list(exact.evidence.names("prefill"))
    assert prefill
    assert (a["xfer_s_p90_source"] == "request records").all()
    assert (b["xfer_s_p90_source"] == a["xfer_s_p90_source"]).all()
    req = exact.dataset.requests
    for name in prefill:
        mine = req.loc[(req["prefill_instance"] == name).to_numpy(), "kv_transfer_s"]
        assert a.loc[name, "xfer_s_p90"] == pytest.approx(float(mine.quantile(0.9)))
    np.testing.assert_allclose(b["xfer_s_p90"], a["xfer_s_p90"], rtol=0.05)


def _shortcut_run(monkeypatch: pytest.MonkeyPatch, cluster: Cluster,
                  shortcuts: bool) -> tuple[list[dict[str, object]], ClusterEvidence]:
    """The instance summaries then the evidence of ``cluster`` with the row slices, exact
    quantiles and samples forced small (so the bin cells are ``BinCells``), with or without
    the shortcuts that share work between passes."""
    import dataclasses

    import pandas as pd

    from pdprobe.analysis import grouped, row_slices
    from pdprobe.analysis.evidence import bin_figures, cell_sums, picks
    from pdprobe.analysis.instances import summarize_instances
    from tests.rules.builders import make_context

    with monkeypatch.context() as m:
        _sample_small(m, exact_rows=2_000)
        # the prefill column's cells (at most ~480 rows) read whole, so its derived column's
        # per-bin medians are computed when read (``frame_bins``); decode-0's (~630)
        # sampled, so the cluster series' bin sample is drawn beside them
        m.setattr(grouped, "CELL_SAMPLE_MAX", 550)
        m.setattr(row_slices, "CHUNK_ROWS", 2_048)
        if not shortcuts:
            m.setattr(cell_sums, "joint_cells", lambda *args, **kwargs: None)
            m.setattr(picks, "picked_medians",
                      lambda groups, values, no_nan=False: groups.medians(values))
            m.setattr(grouped, "know_sums", lambda *args: None)
            m.setattr(bin_figures.BinSample, "complete", property(lambda self: False))
        ds = cluster.dataset()
        req = ds.requests
        # categories no row names: the known sums cover every category, used or not
        for col in ("prefill_instance", "decode_instance"):
            values = req[col].astype(str)
            req[col] = pd.Categorical(values, categories=[*sorted(set(values)), "zz-unused"])
        summaries = summarize_instances(ds)
        evidence = make_context(ds).evidence
        # (the deferred frames computed while the thresholds hold)
        bins = {name: evidence.bins[name] for name in evidence.bins}
    return [dataclasses.asdict(s) for s in summaries], dataclasses.replace(evidence, bins=bins)


def test_shared_passes_give_the_figures_of_separate_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shortcuts of the bin cells (both role columns' counts and hit sums from one pass,
    each bin's prompt tokens read by the cluster series, the series' bin sample drawn beside
    the cells, a derived column's instance medians picked from slices of rows, its per-bin
    medians computed when read) and the
    instance summaries' known TTFT sums give what a pass of each gives: every table, bin
    frame and cluster series identical, means to 1e-12. The bin sample and the prompt-token
    sums reach the cluster series from ``request_figures``' result."""
    from pdprobe.analysis import grouped
    from pdprobe.analysis.evidence import bin_figures, cell_sums, per_instance, picks

    found: dict[str, list[object]] = {}

    def recorded(owner, name):  # type: ignore[no-untyped-def]
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            out = real(*args, **kwargs)
            found.setdefault(name, []).append(out)
            return out
        monkeypatch.setattr(owner, name, wrapper)

    for owner, name in ((cell_sums, "joint_cells"), (picks, "picked_medians"),
                        (grouped, "know_sums"), (per_instance, "request_figures")):
        recorded(owner, name)
    bin_groups = bin_figures.bin_groups

    def grouped_bins(bins: np.ndarray, n_bins: int, sample_max: int | None,
                     drawn: bin_figures.BinSample | None = None) -> grouped.Groups:
        found.setdefault("drawn", []).append(drawn)
        return bin_groups(bins, n_bins, sample_max, drawn=drawn)

    monkeypatch.setattr(bin_figures, "bin_groups", grouped_bins)
    complete = bin_figures.BinSample.complete.fget
    monkeypatch.setattr(bin_figures.BinSample, "complete", property(
        lambda self: found.setdefault("complete", []).append(complete(self)) or complete(self)))
    cluster = Cluster(duration_s=120, rate_rps=60.0, decode_shares=[0.7, 0.1, 0.1, 0.1],
                      hit_by_decode={"decode-2": 0.05}, seed=7)
    sums_a, a = _shortcut_run(monkeypatch, cluster, shortcuts=True)
    # every shortcut taken: the joint pass with its sums, the picked medians, the known TTFT
    # sums of both role columns and a bin sample drawn beside the cells
    joint = found["joint_cells"]
    # the cells' rows (and each bin's prompt tokens) at once, the hit sums when read
    assert len(joint) == 2 and all(getattr(j, "sums", None) is not None for j in joint)
    assert len(found["picked_medians"]) == 1
    assert len(found["know_sums"]) == 2 and found["complete"] and all(found["complete"])
    # handed to the cluster series: the bin sample (its grouping's draws) and the prompt sums
    (handed,) = found["request_figures"]
    assert isinstance(handed, per_instance.ArrivalBinFigures)
    assert handed.sample is not None and handed.prompt_sums is not None
    assert found["drawn"] == [handed.sample]
    sums_b, b = _shortcut_run(monkeypatch, cluster, shortcuts=False)
    assert len(a.instances) and a.n_requests > 6_000
    assert sorted(a.bins) == sorted(b.bins) and "req_hit" in a.bins
    pd_testing = pytest.importorskip("pandas.testing")
    pd_testing.assert_frame_equal(a.instances, b.instances, check_exact=False, rtol=1e-12,
                                  atol=0)
    for name in a.bins:
        pd_testing.assert_frame_equal(a.bins[name], b.bins[name], check_exact=True,
                                      obj=name)
    pd_testing.assert_frame_equal(a.cluster, b.cluster, check_exact=False, rtol=1e-12,
                                  atol=0)
    _assert_close(sums_a, sums_b)


def _assert_close(a: object, b: object, where: str = "") -> None:
    """``a`` and ``b`` equal, their floats to 1e-12 (NaN equal to NaN), through dicts, lists
    and tuples."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-12, abs=0, nan_ok=True), where
    else:
        assert a == b, where
