"""Tests for pdprobe/analysis/capacity/window_counts.py: counts per window from every
request, chunk by chunk, equal to whole-array passes."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis import completion_runs, sampling, table_facts
from pdprobe.analysis.capacity.chunked import run_sums
from pdprobe.analysis.capacity.window_counts import (
    active_instances,
    record_firsts,
    served_counts,
    window_bounds,
    window_edges,
    window_index,
)
from pdprobe.dataset import InstanceInfo

from ._data import dataset


def test_window_edges() -> None:
    assert window_edges(0.0, 1000.0, 300.0) == pytest.approx([0, 300, 600, 1000])
    assert window_edges(0.0, 1100.0, 300.0) == pytest.approx([0, 300, 600, 900, 1100])
    assert window_edges(5.0, 5.0, 300.0) == pytest.approx([5.0, 305.0])


def test_window_index_is_half_open() -> None:
    edges = np.array([0.0, 10.0, 20.0, 25.0])
    t = np.array([-1.0, 0.0, 9.999, 10.0, 24.9, 25.0, np.nan])
    assert window_index(t, edges).tolist() == [-1, 0, 0, 1, 2, -1, -1]


def test_active_instances_and_served_counts_match_per_window_filters() -> None:
    rng = np.random.default_rng(2)
    n = 2000
    ts = np.sort(rng.uniform(0, 1200, n))
    frame = pd.DataFrame({
        "arrival_ts": ts, "prompt_tokens": 100, "output_tokens": 10,
        # p1 only serves the second half; one record names an instance nobody declared
        "prefill_instance": np.where(ts < 600, "p0", rng.choice(["p0", "p1"], n)),
        "decode_instance": pd.Series("d0", index=range(n)).mask(rng.random(n) < 0.001),
        "e2e_s": rng.uniform(1, 200, n),
        "status": rng.choice(["ok", "ok", "ok", "error"], n),
    })
    frame.loc[5, "prefill_instance"] = "stray"
    metrics = pd.DataFrame({
        "ts": np.arange(0.0, 1200.0, 15.0).repeat(2),
        "instance": np.tile(["d1", "other"], 80),  # d1 only ever reports metrics
        "signal": "requests_running", "kind": "gauge", "le": np.nan, "value": 1.0,
    })
    insts = (InstanceInfo("p0", "prefill", "t"), InstanceInfo("p1", "prefill", "t"),
             InstanceInfo("d0", "decode", "t"), InstanceInfo("d1", "decode", "t"))
    ds = dataset(frame, metrics=metrics, instances=insts)
    edges = window_edges(float(ts[0]), float(ts[-1]), 300.0)
    req, m = ds.requests, ds.metrics
    firsts = record_firsts(ds, edges)  # (both roles share it, as the windows do)
    for role in ("prefill", "decode"):
        names = {i.name for i in insts if i.role == role}
        expected = []
        for lo, hi in itertools.pairwise(edges):
            seen = set(m.loc[(m["ts"] >= lo) & (m["ts"] < hi), "instance"]) & names
            inside = req[(req["arrival_ts"] >= lo) & (req["arrival_ts"] < hi)]
            seen |= set(inside[f"{role}_instance"].dropna().astype(str))
            expected.append(len(seen) or None)
        assert active_instances(ds, role, edges, firsts) == expected
    assert active_instances(ds, "prefill", edges, firsts)[0] == 2  # p0 and the stray record
    done = (req["arrival_ts"] + req["e2e_s"]).to_numpy()
    ok = (req["status"] == "ok").to_numpy()
    expected_done = [int(np.sum(ok & (done >= lo) & (done < hi)))
                     for lo, hi in itertools.pairwise(edges)]
    counts = served_counts(ds, edges)
    assert counts is not None and counts.tolist() == expected_done


@pytest.mark.parametrize(("chunk", "run"), [(7, 1024), (1 << 16, 1024), (1 << 16, 8),
                                            (1000, 3)])
def test_counts_by_chunks_equal_whole_array_passes(monkeypatch: pytest.MonkeyPatch,
                                                   chunk: int, run: int) -> None:
    """Run bounds, length sums (bit for bit ``np.bincount``'s), presence and completions,
    computed a chunk at a time (odd boundaries), equal the whole-array computations; the
    completions placed a run at a time where a run falls between two edges (runs holding a
    NaN, an infinity or an edge placed one by one)."""
    monkeypatch.setattr(sampling, "PASS_CHUNK", chunk)
    monkeypatch.setattr(completion_runs, "PLACE_RUN", run)
    rng = np.random.default_rng(8)
    n = 5000
    ts = np.sort(1.7e9 + rng.uniform(0, 1500, n))
    prompt = rng.lognormal(6, 1.5, n)  # not integers: the order of additions shows
    edges = window_edges(float(ts[0]), float(ts[-1]), 300.0)
    at = int(np.searchsorted(ts, edges[2]))
    ts[at:at + 40] = edges[2]  # ties on an edge
    idx = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, len(edges) - 2)
    bounds = window_bounds(ts, edges)
    assert bounds.tolist() == np.searchsorted(idx, np.arange(len(edges)), side="left").tolist()
    want = np.bincount(idx, weights=prompt, minlength=len(edges) - 1)
    assert run_sums(prompt, bounds).tolist() == want.tolist()  # the same bits
    ints = rng.integers(1, 9000, n)
    assert run_sums(ints, bounds).tolist() == np.bincount(
        idx, weights=ints, minlength=len(edges) - 1).tolist()
    # from the sums per run of rows (the mix's scan's): the same bits, for runs shorter and
    # longer than the windows, bounds on and between the runs' ends
    for rows in (1, 7, 256, n - 1, n, 4 * n):
        sums = np.add.reduceat(ints, np.arange(0, n, rows))
        for b in (bounds, np.array([0, rows, min(2 * rows, n), n]), np.array([0, n])):
            assert run_sums(ints, b, (rows, sums)).tolist() == run_sums(ints, b).tolist()
    frame = pd.DataFrame({
        "arrival_ts": ts, "prompt_tokens": 100, "output_tokens": 10,
        "prefill_instance": rng.choice(["p0", "p1", "p2"], n),
        "decode_instance": pd.Series("d0", index=range(n)).mask(ts > ts[n // 2]),
        "e2e_s": np.where(rng.random(n) < 0.05, np.nan, rng.uniform(1, 900, n)),
        "status": rng.choice(["ok", "ok", "error"], n),
    })
    frame.loc[frame.index[ts < ts[0] + 400], "prefill_instance"] = "p0"
    frame.loc[frame.index[rng.random(n) < 0.03], "status"] = None  # no status counts as ok
    frame.loc[frame.index[[3, 900, 2000]], "e2e_s"] = [np.inf, -np.inf, np.inf]
    insts = (*(InstanceInfo(f"p{i}", "prefill", "t") for i in range(3)),
             InstanceInfo("d0", "decode", "t"))
    ds = dataset(frame, instances=insts)
    req = ds.requests
    win = window_index(req["arrival_ts"].to_numpy(), edges)
    firsts = record_firsts(ds, edges)  # (both roles share it, as the windows do)
    for role in ("prefill", "decode"):
        col = req[f"{role}_instance"]
        expected = [len(set(col[win == w].dropna())) or None for w in range(len(edges) - 1)]
        assert active_instances(ds, role, edges, firsts) == expected
    assert active_instances(ds, "prefill", edges, firsts)[0] == 1
    done = window_index((req["arrival_ts"] + req["e2e_s"]).to_numpy(), edges)
    ok = (req["status"] == "ok").to_numpy() | req["status"].isna().to_numpy()
    expected_done = np.bincount(done[ok & (done >= 0)], minlength=len(edges) - 1).tolist()
    assert isinstance(req["status"].dtype, pd.CategoricalDtype)  # read by its codes
    counts = served_counts(ds, edges)
    assert counts is not None and counts.tolist() == expected_done
    # strings and nullable floats (converted once by completion_runs): the same counts
    plain = replace(ds, requests=req.assign(status=req["status"].astype(object),
                                            e2e_s=req["e2e_s"].astype("Float64")))
    counts = served_counts(plain, edges)
    assert counts is not None and counts.tolist() == expected_done


@pytest.mark.parametrize("chunk", [7, 1 << 16])
def test_active_instances_from_runs_of_sorted_arrivals_equal_the_indexed_pass(
        monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Sorted arrivals (windows are runs of rows) give the presence the per-row window index
    gives: the same records shuffled take that path. Arrivals on edges, the last one on the
    closing edge (outside every window), missing and undeclared instances."""
    monkeypatch.setattr(sampling, "PASS_CHUNK", chunk)
    rng = np.random.default_rng(5)
    n = 3000
    ts = np.sort(rng.uniform(0, 1500, n))
    edges = window_edges(float(ts[0]), float(ts[-1]), 300.0)
    at = int(np.searchsorted(ts, edges[1]))
    ts[at:at + 30] = edges[1]  # ties on an edge
    names = np.array([f"p{i}" for i in range(6)])
    # instance i serves only in window i (so presence differs per window); some missing
    inst = pd.Series(names[np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, 5)])
    inst = inst.mask(rng.random(n) < 0.3).where(rng.random(n) < 0.95, "stray")
    inst.iloc[-1] = "p5"  # only the last arrival, on the closing edge, names p5
    inst[(inst == "p5").to_numpy() & (np.arange(n) < n - 1)] = "p4"
    frame = pd.DataFrame({"arrival_ts": ts, "prompt_tokens": 100, "output_tokens": 10,
                          "prefill_instance": inst})
    insts = tuple(InstanceInfo(str(x), "prefill", "t") for x in names)
    sorted_ds = dataset(frame, instances=insts)
    shuffled = dataset(frame.sample(frac=1.0, random_state=1).reset_index(drop=True),
                       instances=insts)
    got = active_instances(sorted_ds, "prefill", edges, record_firsts(sorted_ds, edges))
    assert got == active_instances(shuffled, "prefill", edges, record_firsts(shuffled, edges))
    req = sorted_ds.requests
    win = window_index(req["arrival_ts"].to_numpy(), edges)
    named = req["prefill_instance"].astype("string").to_numpy()
    expected = [len({x for x, w in zip(named, win, strict=True) if w == k and x is not pd.NA})
                or None for k in range(len(edges) - 1)]
    assert got == expected
    # whether the records are in order is asked once per table (cached): the same runs,
    # unchecked the second time; and the runs passed in (both roles share them) give the
    # same presence
    firsts = record_firsts(sorted_ds, edges)
    assert firsts is not None and firsts.tolist() == np.searchsorted(ts, edges).tolist()
    with monkeypatch.context() as m:  # (the parametrised patch stays)
        m.setattr(table_facts, "ascending", lambda _: pytest.fail("checked again"))
        assert record_firsts(sorted_ds, edges).tolist() == firsts.tolist()
        assert active_instances(sorted_ds, "prefill", edges, firsts) == expected
    assert record_firsts(shuffled, edges) is None
    assert active_instances(shuffled, "prefill", edges, None) == expected
