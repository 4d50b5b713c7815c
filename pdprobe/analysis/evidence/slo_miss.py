"""Where the requests that missed the objective spent their time (``ClusterEvidence.slo_miss``).

Per request, TTFT = wait before prefill (``queue_s``) → prefill compute (``prefill_s``) → KV
transfer (``kv_transfer_s``) → the rest: decode admission and the first decode step (what
TTFT holds beyond the three measured stages). For the requests that missed the TTFT
objective, each stage's *excess* is its mean over them minus its median over the requests
that met it; the stage holding most of the excess names the bottleneck. Without request
records the histograms' means (``_sum``/``_count`` increases) stand in, as shares of the mean
TTFT. The busiest bins (by arrivals) tell whether the misses came in bursts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.columns import arrivals_in_order
from pdprobe.analysis.evidence.model import SloMissShape, StageExcess
from pdprobe.analysis.evidence.selection import median
from pdprobe.analysis.grouped import quantile_rows
from pdprobe.analysis.row_slices import has_values
from pdprobe.analysis.table_facts import failed_mask

if TYPE_CHECKING:
    from pdprobe.analysis.evidence.model import Slo, Window
    from pdprobe.dataset import Dataset

# Stages of TTFT, in request order: the request-record column and the histogram signal.
STAGES: Final = (("queue", "queue_s", S.QUEUE_S), ("prefill", "prefill_s", S.PREFILL_S),
                 ("kv-transfer", "kv_transfer_s", S.KV_TRANSFER_S))
REST: Final = "decode-admission"  # TTFT beyond the measured stages: admission + first step
# A baseline (median over requests that met the objective) needs this many of them.
MIN_MET: Final = 10
# The busiest bins: this share of the bins with the most arrivals (one bin in five).
BUSY_BIN_SHARE: Final = 0.2
# Histogram stage means (measured on other instances than TTFT) may add up to a little more
# than the mean TTFT; beyond this factor they describe different requests and are not used.
STAGE_SUM_TOLERANCE: Final = 1.2
# Bins for the burst test: at least this wide, so a bin holds a few requests.
BURST_BIN_MIN_S: Final = 10.0
# The requests that missed are read from each stage column at their positions (int32) when
# they are at most this share of the rows: positions (4 bytes each) then take no more memory
# than the bool mask (1 byte per row), and gathering them is cheaper than scanning every row
# of each column for them again.
POSITIONS_SHARE: Final = 0.25


def slo_miss_shape(ds: Dataset, slo: Slo, window: Window) -> SloMissShape:
    """The per-stage excess of the requests that missed TTFT, their burst share, preemptions
    (computed when a rule first reads them: ``model.ClusterEvidence.slo_miss``)."""
    preempt = _preemptions(ds)
    req = ds.requests
    cols = ds.request_columns
    if slo.ttft_slo_s is not None and "ttft_s" in cols and has_values(req, "ttft_s"):
        return _from_requests(ds, slo, window, preempt)
    return _from_histograms(ds, slo, preempt)


def _from_requests(ds: Dataset, slo: Slo, window: Window, preempt: int | None
                   ) -> SloMissShape:
    req = ds.requests
    cols = ds.request_columns
    assert slo.ttft_slo_s is not None
    ttft = req["ttft_s"].to_numpy(dtype="float64")
    # (read-only, cached per table: the SLO attainment found it already)
    failed = failed_mask(req)
    # met: known, within the objective and not failed; missed: known and not met. Masks
    # combined in place, ``a & ~b`` as one comparison of bools (``a > b``): two full-length
    # masks and six passes over the rows, where a mask per condition took three and seven
    known = np.isfinite(ttft)
    n_known = int(np.count_nonzero(known))
    met = np.less_equal(ttft, slo.ttft_slo_s)
    np.greater(met, failed, out=met)
    met &= known
    missed = np.greater(known, met, out=known)  # known is not read again
    tpot_missed = None
    if slo.tpot_slo_s is not None and "tpot_s" in cols:
        tpot = req["tpot_s"].to_numpy(dtype="float64")
        over = tpot > slo.tpot_slo_s
        # finite: below +inf, the values above the objective (neither NaN nor -inf) being
        # finite exactly when they are (one comparison; numpy's finite test costs two here)
        over &= tpot < np.inf
        tpot_missed = int(np.count_nonzero(over))
        del over
    columns = {stage: req[column].to_numpy(dtype="float64") for stage, column, _signal in STAGES
               if column in cols and has_values(req, column)}
    measured = list(columns)
    rows = quantile_rows(req)
    n_missed = int(np.count_nonzero(missed))
    stages = _excess(ttft, columns, missed, met, rows) if measured and n_missed \
        else ()
    burst, busy_req = _bursts(req["arrival_ts"].to_numpy(dtype="float64"), missed, window,
                              in_order=arrivals_in_order(ds))
    return SloMissShape(stages=stages, source="per-request", ttft_missed=n_missed,
                        tpot_missed=tpot_missed, requests=n_known,
                        burst_share=burst, busy_request_share=busy_req,
                        busy_bin_share=BUSY_BIN_SHARE if burst is not None else None,
                        preemptions=preempt, stages_known=tuple(measured))


def _stage_figures(ttft: np.ndarray, columns: dict[str, np.ndarray], rows: np.ndarray,
                   figure: Callable[[np.ndarray], Any]) -> dict[str, float]:
    """``figure`` (a mean, a median) of each measured stage at ``rows`` (a mask or positions;
    NaN counts 0), then of ``REST``: TTFT beyond the stages summed in stage order (what
    ``np.sum(axis=0)`` of them adds), at least 0. Only these rows are read, and one stage's
    values at a time besides the running total: at 10M rows with half of them missing the
    objective, the four stages held at once were 160 MB."""
    out: dict[str, float] = {}
    total: np.ndarray | None = None
    for stage, values in columns.items():
        part = _zero_nan(values[rows])
        out[stage] = float(figure(part))
        if total is None:
            total = part  # its own copy (a gather): the running total from here on
        else:
            total += part
        del part
    assert total is not None
    rest = np.subtract(ttft[rows], total, out=total)
    out[REST] = float(figure(np.clip(_zero_nan(rest), 0.0, None, out=rest)))
    return out


def _zero_nan(values: np.ndarray) -> np.ndarray:
    """``np.nan_to_num(values, nan=0.0, copy=False)`` (in place), after one test that finds
    nothing to replace in the usual all-finite values (nan_to_num makes a pass for NaN, +inf
    and -inf each)."""
    return values if np.isfinite(values).all() else np.nan_to_num(values, nan=0.0, copy=False)


def _excess(ttft: np.ndarray, columns: dict[str, np.ndarray], missed: np.ndarray,
            met: np.ndarray, sample: np.ndarray | None = None) -> tuple[StageExcess, ...]:
    """Each stage's excess: its mean over the requests that ``missed`` minus its median over
    those that ``met`` the objective, the medians read from ``sample`` (rows,
    ``grouped.quantile_rows``) when given and it holds enough of them."""
    n_met = int(np.count_nonzero(met))
    met_sample = met if sample is None else met[sample]
    if np.count_nonzero(met_sample) < MIN_MET:
        sample, met_sample = None, met
    missed_means = _stage_figures(ttft, columns, _few_as_positions(missed), np.mean)
    base_medians = (None if n_met < MIN_MET else
                    _stage_figures(ttft, columns, met, median) if sample is None else
                    _stage_figures(ttft, columns, sample[met_sample], median))
    rows = []
    for stage, mean_missed in missed_means.items():
        base = base_medians[stage] if base_medians is not None else None
        rows.append((stage, max(0.0, mean_missed - (base or 0.0)), mean_missed, base))
    total = sum(r[1] for r in rows)
    if total <= 0:
        return ()
    out = [StageExcess(stage=s, excess_s=e, share=e / total, missed_mean_s=m, met_median_s=b)
           for s, e, m, b in rows]
    return tuple(sorted(out, key=lambda x: -x.share))


def _few_as_positions(mask: np.ndarray) -> np.ndarray:
    """``mask`` as the positions of its rows (int32 below 2**31 rows) when they are few enough
    that the positions take less memory than the mask (``POSITIONS_SHARE``): the same rows in
    the same order, gathered from each column without scanning every row again; else
    ``mask``."""
    from pdprobe.analysis.row_slices import index_dtype

    n = int(np.count_nonzero(mask))
    if n > POSITIONS_SHARE * mask.size:
        return mask
    return np.flatnonzero(mask).astype(index_dtype(mask.size), copy=False)


def _bursts(arrival: np.ndarray, missed: np.ndarray, window: Window,
            in_order: bool | None = None) -> tuple[float | None, float | None]:
    """Share of misses, and of all requests, in the busiest BUSY_BIN_SHARE of the bins.

    Two passes over row slices (``grouped.chunks``): the arrivals per burst bin, then the rows
    in the busiest bins; every figure is a count, so the shares are those of one pass.
    Arrivals in time order (``in_order``, when the caller knows it: else checked here) are
    searched instead (``_bursts_sorted``).
    """
    from pdprobe.analysis.grouped import chunks
    from pdprobe.analysis.row_slices import ascending

    if arrival.size and np.isfinite(arrival[[0, -1]]).all() and \
            (ascending(arrival) if in_order is None else in_order):
        return _bursts_sorted(arrival, missed, window)
    ok = np.isfinite(arrival)
    n_ok = int(np.count_nonzero(ok))
    n_all_missed = int(np.count_nonzero(missed))
    n_missed = int(np.count_nonzero(missed[ok])) if n_ok < ok.size else n_all_missed
    if n_all_missed < 5 or n_ok < 20:
        return None, None
    width = max(window.step_s, BURST_BIN_MIN_S)
    t_min = float(np.min(arrival[ok])) if n_ok < ok.size else float(arrival.min())

    def bins_of(part: slice) -> tuple[np.ndarray, np.ndarray]:
        keep = ok[part]
        t = arrival[part][keep]
        scaled = t - t_min
        scaled /= width
        return np.floor(scaled, out=scaled).astype(np.int64), keep

    counts = np.zeros(0, dtype=np.int64)
    for part in chunks(arrival.size):
        here = np.bincount(bins_of(part)[0])
        if here.size > counts.size:
            here[:counts.size] += counts
            counts = here
        else:
            counts[:here.size] += here
    if len(counts) < 5:
        return None, None
    n_busy = max(1, round(BUSY_BIN_SHARE * len(counts)))
    busy = np.zeros(len(counts), dtype=bool)
    busy[np.argsort(-counts, kind="stable")[:n_busy]] = True
    in_busy = in_busy_missed = 0
    for part in chunks(arrival.size):
        bins, keep = bins_of(part)
        hit = busy[bins]
        in_busy += int(np.count_nonzero(hit))
        in_busy_missed += int(np.count_nonzero(hit[missed[part][keep]]))
    return (in_busy_missed / n_missed if n_missed else float("nan")), in_busy / n_ok


def _bursts_sorted(arrival: np.ndarray, missed: np.ndarray,
                   window: Window) -> tuple[float | None, float | None]:
    """``_bursts`` of finite arrivals in time order: each burst bin's requests are a run of
    rows, found by searching where each bin starts (the same floor divisions, at a few rows:
    they never decrease), and the misses in the busiest bins are counted in their runs, so
    no pass bins every arrival."""
    from pdprobe.analysis.key_search import key_starts

    n = arrival.size
    n_missed = int(np.count_nonzero(missed))
    if n_missed < 5 or n < 20:
        return None, None
    width = max(window.step_s, BURST_BIN_MIN_S)
    t_min = float(arrival[0])

    def bin_at(rows: np.ndarray) -> np.ndarray:
        scaled = arrival[rows] - t_min
        scaled /= width
        return np.floor(scaled, out=scaled).astype(np.int64)

    n_bins = int(bin_at(np.array([n - 1]))[0]) + 1
    starts = key_starts(bin_at, n_bins + 1, n)  # the last: n
    counts = np.diff(starts)
    if len(counts) < 5:
        return None, None
    n_busy = max(1, round(BUSY_BIN_SHARE * len(counts)))
    busy = np.zeros(len(counts), dtype=bool)
    busy[np.argsort(-counts, kind="stable")[:n_busy]] = True
    # runs of consecutive busy bins: one count of the misses per run
    edges = np.flatnonzero(np.diff(np.concatenate(([False], busy, [False])).astype(np.int8)))
    in_busy_missed = sum(int(np.count_nonzero(missed[starts[a]:starts[b]]))
                         for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(),
                                         strict=True))
    return in_busy_missed / n_missed, int(counts[busy].sum()) / n


def _from_histograms(ds: Dataset, slo: Slo, preempt: int | None) -> SloMissShape:
    """Mean of each stage from its histogram's _sum/_count increase, as shares of mean TTFT."""
    from pdprobe.analysis.promql import histogram_window
    from pdprobe.analysis.tables import has_signal

    if ds.metrics.empty or not has_signal(ds.metrics, S.TTFT_S):
        return SloMissShape(preemptions=preempt)
    since_start = slo.since_start

    def mean_of(signal: str, roles: tuple[str, ...]) -> float | None:
        if not has_signal(ds.metrics, signal):
            return None
        names = [i.name for r in roles for i in ds.instances_of(r)]  # type: ignore[arg-type]
        hist = histogram_window(ds.metrics, signal, instances=names or None,
                                from_zero=since_start)
        total, count = hist.attrs.get("sum"), hist.attrs.get("count")
        if not isinstance(total, float) or not isinstance(count, float) or count <= 0:
            return None
        return total / count

    ttft = mean_of(S.TTFT_S, ("frontend", "decode")) or mean_of(S.TTFT_S, ("prefill",))
    if ttft is None or ttft <= 0:
        return SloMissShape(preemptions=preempt)
    means: dict[str, float] = {}
    for stage, _column, signal in STAGES:
        value = mean_of(signal, ("prefill",)) if stage != "kv-transfer" else \
            mean_of(signal, ("decode", "prefill"))
        if value is not None:
            means[stage] = value
    if not means or not ({"queue", "prefill"} & set(means)) or \
            sum(means.values()) > STAGE_SUM_TOLERANCE * ttft:
        # no prefill-side stage, or stages from other instances than the TTFT's that add up
        # to more than the TTFT itself: no split to trust
        return SloMissShape(preemptions=preempt, source="histogram means")
    means[REST] = max(0.0, ttft - sum(means.values()))
    total = sum(means.values())
    stages = tuple(sorted((StageExcess(stage=s, excess_s=v, share=v / total, missed_mean_s=v)
                           for s, v in means.items()), key=lambda x: -x.share)) if total else ()
    return SloMissShape(stages=stages, source="histogram means", preemptions=preempt,
                        stages_known=tuple(s for s in means if s != REST))


def _preemptions(ds: Dataset) -> int | None:
    """Preemptions/retractions over the window: counter increases, else logged events."""
    from pdprobe.analysis.promql import counter_increase_by_instance
    from pdprobe.analysis.tables import has_signal

    if not ds.metrics.empty and has_signal(ds.metrics, S.PREEMPTIONS_TOTAL):
        inc = counter_increase_by_instance(ds.metrics, S.PREEMPTIONS_TOTAL)
        if len(inc) and np.isfinite(inc.to_numpy(dtype="float64")).any():
            return int(np.nansum(inc.to_numpy(dtype="float64")))
    if len(ds.events):
        n = int((ds.events["event"] == S.EV_PREEMPTION).sum())
        return n or None
    return None
