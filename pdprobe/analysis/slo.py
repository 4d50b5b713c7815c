"""SLO attainment: the share of requests whose TTFT / TPOT met the objectives.

Per request when the records carry ``ttft_s``/``tpot_s``; otherwise estimated from the TTFT and
TPOT (or inter-token latency) histograms by linear interpolation inside the bucket. A single
scrape has no increase over a window: its cumulative histograms are read since engine start
(``since_start``). ``defaults=True`` (the diagnosis) judges with the default objectives where
none is given, the ones the capacity model uses, and records which were defaulted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.base import SloAttainment
from pdprobe.analysis.row_slices import chunks, has_values
from pdprobe.analysis.table_facts import failed_mask
from pdprobe.dataset import Dataset
from pdprobe.values import Maybe, Missing

# Defaults when the user gives no SLO: interactive chat targets in the range DistServe and
# Dynamo's examples use (TTFT 2 s including queueing; 100 ms per output token ~ 10 tokens/s).
DEFAULT_SLO_TTFT_S: Final = 2.0
DEFAULT_SLO_TPOT_S: Final = 0.1
# docs/contract.md's --slo-target default: 90 % of requests within both objectives.
DEFAULT_SLO_TARGET: Final = 0.9


def slo_attainment(dataset: Dataset, slo_ttft_s: float | None, slo_tpot_s: float | None,
                   target: float = DEFAULT_SLO_TARGET, *,
                   defaults: bool = False) -> SloAttainment | Missing:
    """Attainment of the objectives; with ``defaults`` an absent objective is the default."""
    defaulted: tuple[str, ...] = ()
    if defaults:
        defaulted = tuple(k for k, v in (("ttft", slo_ttft_s), ("tpot", slo_tpot_s)) if not v)
        slo_ttft_s = slo_ttft_s or DEFAULT_SLO_TTFT_S
        slo_tpot_s = slo_tpot_s or DEFAULT_SLO_TPOT_S
    if slo_ttft_s is None and slo_tpot_s is None:
        return Missing("no SLO given (--slo-ttft/--slo-tpot)")
    req = dataset.requests
    has_ttft = bool(dataset.has_request_column("ttft_s") and has_values(req, "ttft_s"))
    has_tpot = bool(dataset.has_request_column("tpot_s") and has_values(req, "tpot_s"))
    if has_ttft or has_tpot:
        res: SloAttainment | Missing = _from_requests(dataset, slo_ttft_s, slo_tpot_s,
                                                      has_ttft, has_tpot)
    else:
        res = _from_histograms(dataset, slo_ttft_s, slo_tpot_s)
    if isinstance(res, Missing):
        return res
    return replace(res, target=target, defaulted=defaulted)


def _from_requests(dataset: Dataset, slo_ttft_s: float | None, slo_tpot_s: float | None,
                   has_ttft: bool, has_tpot: bool) -> SloAttainment:
    """The shares of requests within each objective, counted slice by slice
    (``row_slices.chunks``): each share is a count over the rows, so the figures are those of
    one pass, without the full-length masks of every test (five 10 MB arrays at 10M rows)."""
    req = dataset.requests
    failed = failed_mask(req)  # (cached: the workload's completed rate reads it too)
    ttft: Maybe[float] = Missing("no TTFT SLO given" if slo_ttft_s is None else "no ttft_s column")
    tpot: Maybe[float] = Missing("no TPOT SLO given" if slo_tpot_s is None else "no tpot_s column")
    ttft_values = req["ttft_s"].to_numpy(dtype="float64") \
        if slo_ttft_s is not None and has_ttft else None
    tpot_values = req["tpot_s"].to_numpy(dtype="float64") \
        if slo_tpot_s is not None and has_tpot else None
    outputs = req["output_tokens"].to_numpy() if tpot_values is not None else None
    met_ttft = met_tpot = met_both = 0
    for part in chunks(len(req)):
        ok = ~failed[part]  # a failed request did not meet an objective
        ttft_ok = None
        if ttft_values is not None:  # (no first token: NaN, not within)
            ttft_ok = ttft_values[part] <= slo_ttft_s
            ttft_ok &= ok
            met_ttft += int(np.count_nonzero(ttft_ok))
        if tpot_values is not None:
            values = tpot_values[part]
            tpot_ok = values <= slo_tpot_s
            assert outputs is not None
            # TPOT is undefined for one token: such a request without one met it
            missing = np.isnan(values)
            if missing.any():
                missing &= outputs[part] <= 1
                tpot_ok |= missing
            tpot_ok &= ok
            met_tpot += int(np.count_nonzero(tpot_ok))
            if ttft_ok is not None:
                ttft_ok &= tpot_ok
                met_both += int(np.count_nonzero(ttft_ok))
    n = len(req)
    if ttft_values is not None:
        ttft = met_ttft / n  # (a boolean mean: the count over the rows)
    if tpot_values is not None:
        tpot = met_tpot / n
    both: Maybe[float] = Missing("needs both SLOs and per-request TTFT and TPOT")
    if ttft_values is not None and tpot_values is not None:
        both = met_both / n
    return SloAttainment(ttft_slo_s=slo_ttft_s, tpot_slo_s=slo_tpot_s, ttft=ttft, tpot=tpot,
                         both=both, method="per-request")


def _histogram_instances(dataset: Dataset, signal: str, prefer: tuple[str, ...]) -> list[str] | None:
    """Instances whose histogram best covers whole requests (frontend first, then by role)."""
    present = set(dataset.metrics.loc[dataset.metrics["signal"] == signal, "instance"].dropna()
                  .unique())
    for role in prefer:
        names = [i.name for i in dataset.instances_of(role) if i.name in present]  # type: ignore[arg-type]
        if names:
            return names
    return sorted(present) or None


def _fraction(dataset: Dataset, signal: str, threshold: float,
              prefer: tuple[str, ...]) -> tuple[Maybe[float], bool]:
    """Share within ``threshold`` and whether it was read since engine start (one scrape)."""
    from pdprobe.analysis.promql import fraction_below, histogram_window

    instances = _histogram_instances(dataset, signal, prefer)
    if not instances:
        return Missing(f"no {signal} histogram"), False
    since_start = False
    hist = histogram_window(dataset.metrics, signal, instances=instances)
    if hist.empty or not float(hist["count"].max() if len(hist) else 0) > 0:
        # one scrape (no increase over a window): the cumulative counts since engine start
        since = histogram_window(dataset.metrics, signal, instances=instances, from_zero=True)
        if len(since) and float(since["count"].max()) > 0 and _single_scrape(dataset, signal):
            hist, since_start = since, True
    if hist.empty:
        return Missing(f"the {signal} histogram has no observations in the window"), False
    value = fraction_below(threshold, hist["le"].to_numpy(), hist["count"].to_numpy())
    if not np.isfinite(value):
        return Missing(f"the {signal} histogram is empty"), False
    return float(value), since_start


def _single_scrape(dataset: Dataset, signal: str) -> bool:
    """Whether ``signal`` was scraped at one time only (no window to take an increase over)."""
    ts = dataset.metrics.loc[dataset.metrics["signal"] == signal, "ts"]
    return bool(ts.nunique() <= 1)


def _from_histograms(dataset: Dataset, slo_ttft_s: float | None,
                     slo_tpot_s: float | None) -> SloAttainment | Missing:
    if dataset.metrics.empty:
        return Missing("no per-request TTFT/TPOT and no latency histograms")
    # TTFT on a vLLM decode instance includes the KV-transfer wait, so it covers the whole
    # request; a prefill instance's TTFT only its own leg. Frontend histograms are best.
    ttft: Maybe[float] = Missing("no TTFT SLO given")
    tpot: Maybe[float] = Missing("no TPOT SLO given")
    start_a = start_b = False
    if slo_ttft_s is not None:
        ttft, start_a = _fraction(dataset, S.TTFT_S, slo_ttft_s, ("frontend", "decode", "prefill"))
    if slo_tpot_s is not None:
        tpot, start_b = _fraction(dataset, S.TPOT_S, slo_tpot_s, ("frontend", "decode"))
        if isinstance(tpot, Missing):
            tpot, start_b = _fraction(dataset, S.ITL_S, slo_tpot_s, ("frontend", "decode"))
    if isinstance(ttft, Missing) and isinstance(tpot, Missing):
        return Missing(f"no usable latency histograms ({ttft.reason}; {tpot.reason})")
    since_start = start_a or start_b
    method = "histogram interpolation" + (" (since engine start: one scrape)" if since_start
                                          else "")
    return SloAttainment(ttft_slo_s=slo_ttft_s, tpot_slo_s=slo_tpot_s, ttft=ttft, tpot=tpot,
                         both=Missing("histograms do not pair TTFT and TPOT per request"),
                         method=method, since_start=since_start)
