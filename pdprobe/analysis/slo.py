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
from pdprobe.analysis.grouped import category_mask
from pdprobe.analysis.row_slices import has_values
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
    req = dataset.requests
    failed = category_mask(req["status"], lambda s: s != "ok")
    ttft_ok = tpot_ok = None
    ttft: Maybe[float] = Missing("no TTFT SLO given" if slo_ttft_s is None else "no ttft_s column")
    tpot: Maybe[float] = Missing("no TPOT SLO given" if slo_tpot_s is None else "no tpot_s column")
    if slo_ttft_s is not None and has_ttft:
        values = req["ttft_s"].to_numpy(dtype="float64")
        # a failed request or one without a first token did not meet the objective
        ttft_ok = (values <= slo_ttft_s) & ~failed
        ttft = float(ttft_ok.mean())
    if slo_tpot_s is not None and has_tpot:
        values = req["tpot_s"].to_numpy(dtype="float64")
        single = req["output_tokens"].to_numpy() <= 1  # TPOT is undefined for one token
        tpot_ok = ((values <= slo_tpot_s) | (single & np.isnan(values))) & ~failed
        tpot = float(tpot_ok.mean())
    both: Maybe[float] = Missing("needs both SLOs and per-request TTFT and TPOT")
    if ttft_ok is not None and tpot_ok is not None:
        both = float((ttft_ok & tpot_ok).mean())
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
