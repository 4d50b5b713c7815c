"""Per-bin frames computed when first read give the frames computed at once."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.analysis.evidence.test_table_sizes import _sample_small
from tests.rules.builders import Cluster


def _frames(seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    index = pd.Index(np.arange(6) * 60.0, name="ts")
    first = pd.DataFrame(rng.random((6, 3)), index=index, columns=["p-1", "p-0", "z"])
    first.iloc[1:3, 0] = np.nan
    later = pd.DataFrame(rng.random((6, 2)), index=index, columns=["p-0", "d-0"])
    return first, later


@pytest.mark.parametrize("deferred", [0, 1])
def test_parts_merge_in_order_when_read(deferred: int) -> None:
    """A frame's parts, one of them deferred, merge as ``merged`` merges them in the order
    they came (earlier values win); the deferred part is computed once, when first read."""
    from pdprobe.analysis.evidence.frame_bins import FrameBins, merged

    first, later = _frames(3)
    calls: list[int] = []
    bins = FrameBins()
    for k, frame in enumerate((first, later)):
        if k == deferred:
            bins.defer("req_prefill_per_token",
                       lambda frame=frame: calls.append(1) or frame)  # type: ignore[misc]
        else:
            bins.merge("req_prefill_per_token", frame)
    assert bins.pending("req_prefill_per_token") and not calls
    assert list(bins) == ["req_prefill_per_token"] and len(bins) == 1
    plain = merged(first, later)
    for _ in range(2):
        pd.testing.assert_frame_equal(bins["req_prefill_per_token"], plain, check_exact=True)
    assert calls == [1] and not bins.pending("req_prefill_per_token")
    assert bins.get("req_tpot") is None


def test_deferred_frames_are_the_frames_computed_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-bin medians of cells read whole (``BinCells`` without a sample) and the
    prefix-hit frames of whole-number token columns are computed when a rule reads them, and
    are the frames computed at once: every bin frame and the cluster series the same."""
    from pdprobe.analysis import grouped, row_slices, table_facts
    from pdprobe.analysis.evidence.cells import BinCells
    from pdprobe.analysis.instances import summarize_instances
    from tests.rules.builders import make_context

    # decode-0's cells (~630 rows) sampled: their medians computed at once
    cluster = Cluster(duration_s=120, rate_rps=60.0, decode_shares=[0.7, 0.1, 0.1, 0.1], seed=7)

    def evidence(defer: bool) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
        with monkeypatch.context() as m:
            _sample_small(m, exact_rows=2_000)
            m.setattr(grouped, "CELL_SAMPLE_MAX", 550)  # prefill cells whole, decode sampled
            m.setattr(row_slices, "CHUNK_ROWS", 2_048)
            if not defer:
                m.setattr(BinCells, "sampled", property(lambda self: True))
                # the token sums tested bin by bin: summed at once (the instance summaries'
                # sums found them whole all the same)
                m.setattr(table_facts, "known_whole", lambda table, column: False)
            ds = cluster.dataset()
            summarize_instances(ds)  # (as the service: their token sums find them whole)
            found = make_context(ds).evidence
            bins = found.bins
            for name in ("req_prefill_per_token", "req_hit"):
                assert bins.pending(name) is defer  # type: ignore[attr-defined]
            assert not bins.pending("req_tpot")  # type: ignore[attr-defined]
            return {name: bins[name] for name in bins}, found.cluster

    (later, later_series), (once, once_series) = evidence(defer=True), evidence(defer=False)
    assert sorted(later) == sorted(once) and "req_prefill_per_token" in later
    for name, frame in once.items():
        pd.testing.assert_frame_equal(later[name], frame, check_exact=True, obj=name)
    # (the prompt tokens per bin summed beside the cells' rows)
    pd.testing.assert_frame_equal(later_series, once_series, check_exact=True)
