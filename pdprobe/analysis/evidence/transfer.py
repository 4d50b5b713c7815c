"""Cluster-level evidence: KV-transfer figures, SLO attainment, arrival rate, length mix.

Request records give exact figures (read once, through ``columns.transfer_seconds`` for the
KV-transfer time); histograms and the per-instance table stand in when they are absent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.columns import arrivals_in_order, transfer_seconds
from pdprobe.analysis.evidence.model import Mix, Slo, Transfer
from pdprobe.analysis.evidence.selection import median, median_and_quantile, quantile
from pdprobe.analysis.evidence.stats import ChangePoint
from pdprobe.analysis.grouped import column_values, for_quantiles
from pdprobe.analysis.row_slices import has_values
from pdprobe.analysis.table_facts import column_finite, column_sum
from pdprobe.values import Missing

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.base import SloAttainment, WorkloadSummary
    from pdprobe.analysis.evidence.model import Window
    from pdprobe.dataset import Dataset

# Bins with fewer requests than this are left out of the length-mix change-point test.
MIX_MIN_REQUESTS_PER_BIN: Final = 5
# The rank test of the length mix either side of a split ranks every request: above this many
# on a side it ranks an even-stride sample of about this many (every k-th request in record
# order, so the same capture gives the same sample) and the mix's source says so. At 200,000
# per side a shift of the size the rules act on (ratio_lag_measure.MIX_SHIFT_MIN) has a
# p-value far below any alpha; the sample only bounds the sort (a few million rows per side
# cost seconds). Every bundled input, simulated scenario and public trace is below it.
MIX_RANK_TEST_MAX: Final = 200_000


def ttft_sample(ds: Dataset) -> np.ndarray | None:
    """Each request's TTFT at the rows whole-column quantiles read (``for_quantiles``; every
    row up to the sampling threshold), None without TTFT: gathered once for the SLO's p90,
    the queue's and the transfer's shares of it (a 1M-row gather of 10M rows each)."""
    req = ds.requests
    if "ttft_s" not in ds.request_columns or not has_values(req, "ttft_s"):
        return None
    sampled: np.ndarray = for_quantiles(req, req["ttft_s"].to_numpy(dtype="float64"))
    return sampled


def transfer_figures(ds: Dataset, window: Window, table: pd.DataFrame,
                     cluster: pd.DataFrame, ttft: np.ndarray | None = None) -> Transfer:
    """Cluster KV-transfer latency, share of TTFT, bandwidth, volume and congestion test
    (``ttft``: ``ttft_sample(ds)`` when the caller has it)."""
    from pdprobe.analysis.evidence.stats import spearman
    from pdprobe.analysis.promql import histogram_quantile, histogram_window
    from pdprobe.analysis.tables import has_signal

    req = ds.requests
    cols = ds.request_columns
    out: dict[str, Any] = {}
    bytes_total: float | None = None  # the records' KV bytes in total, once summed
    xfer = transfer_seconds(ds)
    if xfer is not None:
        # quantiles on every request, or on a sample of a very large table (grouped module)
        x_all = xfer.to_numpy(dtype="float64")
        at_sample = for_quantiles(req, x_all)  # gathered once: the ratio below reads it too
        p50, p90 = median_and_quantile(at_sample[np.isfinite(at_sample)], 0.9)
        out.update(latency_p50_s=p50, latency_p90_s=p90, latency_source="request records")
        transfers = None  # the finite times, counted below unless the sums prove them all so
        ttft = ttft_sample(ds) if ttft is None else ttft
        if ttft is not None:
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = at_sample / np.where(ttft > 0, ttft, np.nan)
            ratio = ratio[np.isfinite(ratio)]
            if ratio.size:
                out["share_of_ttft_p50"] = median(ratio)
        if "kv_bytes" in cols and has_values(req, "kv_bytes"):
            kv = req["kv_bytes"].to_numpy(dtype="float64")
            # A finite sum of every value has no NaN (nor infinity) to look for: the masks
            # below only when it is not (at 10M rows a NaN test, a comparison with 0 and
            # their combination: ~15 ms), each figure the very sum it would be.
            kv_all = column_sum(req, "kv_bytes")  # (kv.sum(), cached: the failures read it)
            kv_nan = None if column_finite(req, "kv_bytes") else np.isnan(kv)
            if req["kv_bytes"].dtype == np.float64:
                # the bytes in total: pandas' ``Series.sum`` of a float64 column (NaN as 0,
                # then numpy's sum of the array), read below without a second pass of pandas
                bytes_total = float(kv_all if kv_nan is None or not kv_nan.any()
                                    else np.where(kv_nan, 0.0, kv).sum())
            # every time above 0 (the smallest is; NaN would make it NaN) and no NaN bytes:
            # every row has both, without a mask
            every = kv_nan is None and bool(x_all.min() > 0)
            both = None
            if not every:
                both = x_all > 0  # masks combined in place (NaN compares False)
                if kv_nan is not None:
                    both &= ~kv_nan
                every = bool(both.all())
            del kv_nan
            if every:  # the very sums, without copying every row
                kv_sum, x_sum = kv_all if bytes_total is None else bytes_total, x_all.sum()
                if np.isfinite(x_sum):  # every time above 0, none infinite: all finite
                    transfers = x_all.size
            elif both is not None and both.any():
                kv_sum, x_sum = kv[both].sum(), x_all[both].sum()
            if every or (both is not None and both.any()):
                out.update(achieved_bytes_per_s=float(kv_sum / x_sum),
                           achieved_source="kv_bytes / kv_transfer_s in request records")
        out["transfers"] = int(np.count_nonzero(np.isfinite(x_all))) if transfers is None \
            else transfers
    elif not ds.metrics.empty and has_signal(ds.metrics, S.KV_TRANSFER_S):
        hist = histogram_window(ds.metrics, S.KV_TRANSFER_S, window.start_ts, window.end_ts,
                                from_zero=True)
        if not hist.empty and hist["count"].sum() > 0:
            le, cnt = hist["le"].to_numpy(), hist["count"].to_numpy()
            p50 = histogram_quantile(0.5, le, cnt)
            p90 = histogram_quantile(0.9, le, cnt)
            if np.isfinite(p50):
                out.update(latency_p50_s=p50, latency_p90_s=p90,
                           latency_source="KV-transfer histograms",
                           transfers=int(hist.attrs.get("count", 0) or 0))
    if "kv_bytes" in cols and has_values(req, "kv_bytes"):
        if bytes_total is None:
            bytes_total = float(req["kv_bytes"].sum())
        out.update(bytes_total=bytes_total, bytes_source="request records")
    elif "h_xfer_bytes_sum" in table.columns and table["h_xfer_bytes_sum"].notna().any():
        # A transfer is counted on both ends by some connectors: take the producer side.
        pre = table.loc[table["role"] == "prefill", "h_xfer_bytes_sum"]
        src = pre if pre.notna().any() else table["h_xfer_bytes_sum"]
        out.update(bytes_total=float(src.sum()), bytes_source="KV-transfer byte histograms")
    if "achieved_bytes_per_s" not in out:
        achieved = table["xfer_bytes_per_s"].dropna()
        if len(achieved):
            out.update(achieved_bytes_per_s=float(achieved.median()),
                       achieved_source=str(table.loc[achieved.index[0],
                                                      "xfer_bytes_per_s_source"]))
    if "latency_p50_s" not in out:
        lat = table["xfer_s_p50"].dropna()
        if len(lat):
            out.update(latency_p50_s=float(lat.median()),
                       latency_p90_s=float(table["xfer_s_p90"].dropna().median())
                       if table["xfer_s_p90"].notna().any() else None,
                       latency_source=str(table.loc[lat.index[0], "xfer_s_p50_source"]))
    lat_col = "xfer_s_per_gb_p50" if "xfer_s_per_gb_p50" in cluster.columns else "xfer_s_p50"
    if "kv_bytes_per_s" in cluster.columns and lat_col in cluster.columns:
        demand = cluster["kv_bytes_per_s"].to_numpy(dtype="float64")
        per_bin = cluster[lat_col].to_numpy(dtype="float64")
        rho, p, n = spearman(demand, per_bin)
        if n >= 5 and np.isfinite(rho):
            ok = np.isfinite(demand) & np.isfinite(per_bin)
            d, lt = demand[ok], per_bin[ok]
            lo, hi = np.quantile(d, [1 / 3, 2 / 3])
            out.update(demand_vs_latency_rho=rho, demand_vs_latency_p=p,
                       latency_low_demand_s=float(np.median(lt[d <= lo])),
                       latency_high_demand_s=float(np.median(lt[d >= hi])),
                       latency_per_gb=lat_col == "xfer_s_per_gb_p50")
    return Transfer(**out)


def slo_figures(slo: SloAttainment | Missing, ttft_slo: float | None, tpot_slo: float | None,
                ds: Dataset, table: pd.DataFrame, ttft: np.ndarray | None = None) -> Slo:
    """Objectives (given, else the analysis's), attainment and the p90 latencies (``ttft``:
    ``ttft_sample(ds)`` when the caller has it)."""
    from pdprobe.analysis.base import SloAttainment

    ttft_att = tpot_att = both = None
    extra: dict[str, Any] = {}
    if isinstance(slo, SloAttainment):
        ttft_slo = ttft_slo if ttft_slo is not None else slo.ttft_slo_s
        tpot_slo = tpot_slo if tpot_slo is not None else slo.tpot_slo_s
        ttft_att = None if isinstance(slo.ttft, Missing) else float(slo.ttft)
        tpot_att = None if isinstance(slo.tpot, Missing) else float(slo.tpot)
        both = None if isinstance(slo.both, Missing) else float(slo.both)
        extra = {"target": slo.target, "method": slo.method, "defaulted": slo.defaulted,
                 "since_start": slo.since_start, "observed": slo.observed}
    req = ds.requests
    ttft_p90 = tpot_p90 = None
    ttft = ttft_sample(ds) if ttft is None else ttft
    if ttft is not None:
        ttft_p90 = quantile(ttft, 0.9)
    elif table["ttft_p90"].notna().any():
        ttft_p90 = float(table["ttft_p90"].max())
    if "tpot_s" in ds.request_columns and has_values(req, "tpot_s"):
        tpot_p90 = quantile(for_quantiles(req, req["tpot_s"].to_numpy(dtype="float64")), 0.9)
    elif table.loc[table["role"] == "decode", "tpot_p90"].notna().any():
        tpot_p90 = float(table.loc[table["role"] == "decode", "tpot_p90"].median())
    return Slo(ttft_slo_s=ttft_slo, tpot_slo_s=tpot_slo, ttft_attainment=ttft_att,
               tpot_attainment=tpot_att, ttft_p90_s=ttft_p90, tpot_p90_s=tpot_p90,
               both_attainment=both, **extra)


def arrival_rate(workload: WorkloadSummary | Missing, ds: Dataset, window: Window,
                 table: pd.DataFrame) -> float | None:
    """Requests per second: the workload analysis's, else records, else finished counters."""
    from pdprobe.analysis.base import WorkloadSummary

    if isinstance(workload, WorkloadSummary):
        arrival = workload.arrival_rate_rps
        if not isinstance(arrival, Missing) and arrival > 0:
            return float(arrival)
    if len(ds.requests) >= 2 and window.span_s > 0:
        return float(len(ds.requests) / window.span_s)
    finished = table.loc[table["role"] == "decode", "c_finished"] if "c_finished" in \
        table.columns else None
    if finished is not None and finished.notna().any() and window.span_s > 0:
        return float(finished.sum() / window.span_s)
    return None


def queue_share(ds: Dataset, ttft: np.ndarray | None = None
                ) -> tuple[float | None, float | None]:
    """Median per-request queue_s / ttft_s and the p90 of queue_s (None without them;
    ``ttft``: ``ttft_sample(ds)`` when the caller has it)."""
    req = ds.requests
    cols = ds.request_columns
    if "queue_s" not in cols or not has_values(req, "queue_s"):
        return None, None
    # gathered once for the p90 and the ratio
    queue = for_quantiles(req, req["queue_s"].to_numpy(dtype="float64"))
    q90 = quantile(queue, 0.9)
    ttft = ttft_sample(ds) if ttft is None else ttft
    if ttft is None:
        return None, q90
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = queue / np.where(ttft > 0, ttft, np.nan)
    ratio = ratio[np.isfinite(ratio)]
    return (median(ratio) if ratio.size else None), q90


def mix_figures(ds: Dataset, window: Window, cluster: pd.DataFrame) -> Mix:
    """Strongest level shift of mean prompt/output length and of arrivals per bin.

    Bins with too few requests are left out (a bin mean of 3 requests is noise). When request
    records exist the split is re-tested on the requests themselves (rank test), which is far
    more powerful than comparing bin means.
    """
    from pdprobe.analysis.evidence.rank_tests import mann_whitney_p
    from pdprobe.analysis.evidence.stats import change_point

    if "prompt_mean" not in cluster.columns:
        return _throughput_mix(cluster)
    ts = cluster.index.to_numpy(dtype="float64")
    counts = cluster["arrivals"] if "arrivals" in cluster.columns else cluster.get("arrivals_hist")
    keep = np.ones(len(ts), dtype=bool)
    if counts is not None:
        keep = counts.to_numpy(dtype="float64") >= MIX_MIN_REQUESTS_PER_BIN
    out: dict[str, Any] = {"source": "request records" if len(ds.requests)
                           else "token-length histograms"}
    notes: list[str] = []
    for col, name in (("prompt_mean", "prompt"), ("output_mean", "output")):
        if col not in cluster.columns:
            continue
        vals = cluster[col].to_numpy(dtype="float64")
        cp = change_point(ts[keep], np.log(np.clip(vals[keep], 1e-9, None)))
        if cp is None:
            continue
        # Report levels in tokens, not in logs.
        before = vals[keep & (ts < cp.ts)]
        after = vals[keep & (ts >= cp.ts)]
        cp = ChangePoint(index=cp.index, ts=cp.ts, before=float(np.nanmedian(before)),
                         after=float(np.nanmedian(after)), p_value=cp.p_value,
                         before_swing=cp.before_swing)
        out[name] = cp
        if len(ds.requests):
            req = ds.requests
            tok = column_values(req, "prompt_tokens" if name == "prompt" else "output_tokens")
            arr = req["arrival_ts"].to_numpy(dtype="float64")
            if arrivals_in_order(ds):  # the rows before the split are a run: found by a binary search
                split = int(np.searchsorted(arr, cp.ts, side="left"))
                a, b = tok[:split], tok[split:]
            else:
                a, b = _rows_where(tok, arr < cp.ts), _rows_where(tok, arr >= cp.ts)
            if a.size >= 5 and b.size >= 5:
                p_key = "prompt_p_requests" if name == "prompt" else "output_p_requests"
                sampled = max(a.size, b.size) > MIX_RANK_TEST_MAX
                a, b = (rank_sample(a).astype(np.float64), rank_sample(b).astype(np.float64))
                out[p_key] = mann_whitney_p(a, b)
                if sampled:
                    notes.append(f"{name} rank test on a sample of {a.size:,} and {b.size:,} "
                                 "requests either side of the split (every k-th)")
    if counts is not None:
        cp = change_point(ts, counts.to_numpy(dtype="float64"))
        if cp is not None:
            out["arrivals"] = cp
    if notes:
        out["source"] = "; ".join([out["source"], *notes])
    return Mix(**out)


def _rows_where(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``values[mask]``; a view when the rows are one run (requests in arrival order split at
    a time), so the rank test's sample is taken without copying either side."""
    n = int(np.count_nonzero(mask))
    if n == 0:
        return values[:0]
    if mask[:n].all():
        return values[:n]
    if mask[mask.size - n:].all():
        return values[mask.size - n:]
    return values[mask]


def rank_sample(values: np.ndarray, limit: int = MIX_RANK_TEST_MAX) -> np.ndarray:
    """``values`` when at most ``limit``, else every k-th of them (k = ceil(n / limit))."""
    if values.size <= limit:
        return values
    return values[:: -(-values.size // limit)]


def _throughput_mix(cluster: pd.DataFrame) -> Mix:
    """Without lengths, the prompt/output token-rate ratio from the engines' throughput.

    Prefill instances' prompt throughput over decode instances' generation throughput is the
    mix's prompt tokens per output token (decode instances' own "prompt throughput" is left out:
    older vLLM counted KV received over the connector there).
    """
    from pdprobe.analysis.evidence.stats import change_point

    if "prompt_tps_total" not in cluster.columns or "gen_tps_total" not in cluster.columns:
        return Mix()
    p = cluster["prompt_tps_total"].to_numpy(dtype="float64")
    g = cluster["gen_tps_total"].to_numpy(dtype="float64")
    ok = np.isfinite(p) & np.isfinite(g) & (p > 0) & (g > 0)
    if ok.sum() < 6:
        return Mix()
    ts = cluster.index.to_numpy(dtype="float64")[ok]
    ratio = p[ok] / g[ok]
    cp = change_point(ts, np.log(ratio))
    if cp is None:
        return Mix()
    cp = ChangePoint(index=cp.index, ts=cp.ts, before=float(np.median(ratio[ts < cp.ts])),
                     after=float(np.median(ratio[ts >= cp.ts])), p_value=cp.p_value,
                     before_swing=cp.before_swing)
    return Mix(work=cp, source="engine throughput (prompt vs generation tokens/s)")
