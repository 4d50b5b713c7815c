"""The capacity section: the ratio, the recommendation and how the model got there, and
the what-if band.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final

from pdprobe.report.cells import (
    Cell,
    KeyValue,
    Table,
    cell,
    count,
    first_reason,
    fmt_ratio,
    is_na,
    num,
    pd_pair,
)
from pdprobe.report.sections import slo_summary
from pdprobe.report.verdict import deployed_counts
from pdprobe.units import (
    NA,
    fmt_bytes,
    fmt_bytes_per_s,
    fmt_count,
    fmt_num,
    fmt_pct,
    fmt_pct_change,
    fmt_seconds,
)
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.base import (
        CapacityResult,
    )
    from pdprobe.report.model import Report


# A mean-based ratio this far (relative) below the distribution-based one is worth a sentence:
# sizing from mean lengths then under-provisions prefill noticeably (Jensen's inequality).
JENSEN_GAP_NOTE: Final = 0.10


def capacity_rows(report: Report) -> list[KeyValue]:
    """The capacity section as label/value rows; one "ratio: pending" row when Missing."""
    cap = report.capacity
    if isinstance(cap, Missing):
        return [KeyValue("ratio", Cell(f"pending — {cap.reason}", cap.reason))]
    dep_p, dep_d = deployed_counts(report)
    deployed_ratio = dep_p / dep_d if dep_p is not None and dep_d else None
    rows = [
        KeyValue("theoretical P/D", cell(
            cap.theoretical_ratio,
            lambda v: f"{v:.2f} prefill per decode instance"
                      + (" (whole window; per window below)" if cap.windows else ""))),
        KeyValue("deployed", Cell(f"{pd_pair(dep_p, dep_d)} (ratio {fmt_ratio(deployed_ratio)})")),
        KeyValue("recommended", Cell(pd_pair(cap.recommended_prefill, cap.recommended_decode),
                                     reason=first_reason(cap.recommended_prefill,
                                                          cap.recommended_decode))),
    ]
    binding = cell(cap.binding, str)
    if not binding.is_na and cap.binding_basis:
        binding = Cell(f"{binding.text} (at the {cap.binding_basis})")
    rows.append(KeyValue("binding stage", binding))
    for label, values in (
            ("utilization (deployed)", (cap.deployed_prefill_utilization,
                                        cap.deployed_decode_utilization,
                                        cap.deployed_transfer_utilization)),
            ("utilization (recommended)", (cap.prefill_utilization, cap.decode_utilization,
                                           cap.transfer_utilization))):
        parts = [f"{stage} {fmt_pct(v)}"
                 for stage, v in zip(("prefill", "decode", "transfer"), map(num, values),
                                     strict=True)
                 if v is not None]
        if parts:  # detail rows appear only when the model computed them
            rows.append(KeyValue(label, Cell(", ".join(parts))))
    for label, value in (("objectives", _objectives(cap)), ("prefill pool", _prefill_pool(cap)),
                         ("decode pool", _decode_pool(cap))):
        if not value.is_na:  # like the utilisations: only what the model computed
            rows.append(KeyValue(label, value))
    rows.append(KeyValue("mean-based planner", _mean_based(cap)))
    rows.append(KeyValue("per-instance capacity", Cell(
        f"prefill {_rate(cap.prefill_capacity_rps)}, decode {_rate(cap.decode_capacity_rps)}",
        reason=first_reason(cap.prefill_capacity_rps, cap.decode_capacity_rps))))
    req, avail = num(cap.transfer_required_bytes_per_s), num(cap.transfer_capacity_bytes_per_s)
    if req is not None and avail is not None and avail > 0:
        xfer = (f"{fmt_bytes_per_s(req)} needed of {fmt_bytes_per_s(avail)} usable "
                f"per node ({fmt_pct(req / avail)})")
        if cap.transfer_capacity_source:
            xfer += f"; link from {cap.transfer_capacity_source}"
        rows.append(KeyValue("KV transfer", Cell(xfer)))
    else:
        why = first_reason(cap.transfer_required_bytes_per_s, cap.transfer_capacity_bytes_per_s)
        rows.append(KeyValue("KV transfer", Cell(NA, why or "not estimated")))
    kvb = cell(cap.kv_bytes_per_token, fmt_bytes)
    if not kvb.is_na and cap.kv_bytes_source:
        kvb = Cell(f"{kvb.text}, from {cap.kv_bytes_source}")
    rows.append(KeyValue("KV bytes per token", kvb))
    kv_cap = num(cap.kv_capacity_tokens)
    if kv_cap is not None:  # only when the model says what it used
        rows.append(KeyValue("KV capacity", Cell(
            f"{kv_cap:,.0f} tokens per decode instance"
            + (f" ({cap.kv_capacity_source})" if cap.kv_capacity_source else ""))))
    check = _model_vs_window(cap)
    if check is not None:
        rows.append(KeyValue("model vs window", check))
    model = cap.model_source
    if cap.profile and cap.profile not in model:
        model += f" {cap.profile}" if model.startswith("profile") else f" (profile {cap.profile})"
    rows.append(KeyValue("model", Cell(model)))
    fit = fit_phrase(cap.fit_quality)
    if fit:
        rows.append(KeyValue("model fit", Cell(fit)))
    rows.append(KeyValue("verified", _verified(cap)))
    rows += [KeyValue("note", Cell(note)) for note in cap.notes]
    return rows


def fit_phrase(quality: dict[str, float]) -> str:
    """``prefill R² 0.97, median error 3.1%, 2,646 requests; decode ...`` from the capacity
    model's fit statistics (keys ``<stage>_r2``, ``_median_rel_error``, ``_n``,
    ``_scale_vs_profile``); keys it does not know are left out."""
    parts = []
    for stage in ("prefill", "decode"):
        bits = []
        r2 = quality.get(f"{stage}_r2")
        if r2 is not None and math.isfinite(r2):
            bits.append(f"R² {r2:.2f}")
        err = quality.get(f"{stage}_median_rel_error")
        if err is not None and math.isfinite(err):
            bits.append(f"median error {fmt_pct(err)}")
        scale = quality.get(f"{stage}_scale_vs_profile")
        if scale is not None and math.isfinite(scale) and abs(scale - 1) >= FIT_SCALE_SHOWN:
            bits.append(f"{scale:.2f}× the profile")
        n = quality.get(f"{stage}_n")
        if n is not None and math.isfinite(n):
            bits.append(fmt_count(int(n), "samples"))
        if bits:
            parts.append(f"{stage} " + ", ".join(bits))
    return "; ".join(parts)


# A fitted speed within this share of the profile's is the profile: not worth a mention.
FIT_SCALE_SHOWN: Final = 0.05


def _objectives(cap: CapacityResult) -> Cell:
    """``TTFT 2 s, TPOT 100 ms (defaults)``: the objectives the counts are sized for."""
    parts = [(f"{key.upper()} {fmt_seconds(value)}", key in cap.slo_defaulted)
             for key, value in (("ttft", cap.slo_ttft_s), ("tpot", cap.slo_tpot_s))
             if value is not None]
    if not parts:
        return Cell(NA, "no objective")
    if len(parts) > 1 and all(d for _, d in parts):
        return Cell(", ".join(t for t, _ in parts) + " (defaults)")
    return Cell(", ".join(t + (" (default)" if d else "") for t, d in parts))


def _prefill_pool(cap: CapacityResult) -> Cell:
    """What sized the prefill pool (ttft-slo, utilization, transfer) and the TTFT it gives."""
    parts = []
    if not is_na(cap.prefill_limit):
        parts.append(f"sized by {cap.prefill_limit}")
    ttft_p90, mean, md1 = (num(cap.ttft_estimate_p90_s), num(cap.ttft_estimate_mean_s),
                           num(cap.md1_ttft_s))
    if ttft_p90 is not None:
        text = f"expected TTFT p90 {fmt_seconds(ttft_p90)}"
        if mean is not None:
            text += f", mean {fmt_seconds(mean)}"
        if md1 is not None:  # DistServe's M/D/1 mean, a cross-check of the G/G/c one
            text += f" (M/D/1 {fmt_seconds(md1)})" if mean is not None else \
                f"; M/D/1 mean {fmt_seconds(md1)}"
        parts.append(text)
    if not parts:
        return Cell(NA, first_reason(cap.prefill_limit, cap.ttft_estimate_p90_s)
                    or "not estimated")
    return Cell("; ".join(parts))


def _decode_pool(cap: CapacityResult) -> Cell:
    """What sized the decode pool (throughput, kv-memory, transfer) and what caps its batch."""
    parts = []
    if not is_na(cap.decode_limit):
        parts.append(f"sized by {cap.decode_limit}")
    batch = num(cap.decode_batch_size)
    limit = None if is_na(cap.decode_batch_limit) else f"capped by {cap.decode_batch_limit}"
    if batch is not None:
        parts.append(f"mean batch {fmt_num(batch)}" + (f", {limit}" if limit else ""))
    elif limit:
        parts.append(f"batch {limit}")
    if not parts:
        return Cell(NA, first_reason(cap.decode_limit, cap.decode_batch_size)
                    or "not estimated")
    return Cell("; ".join(parts))


def _mean_based(cap: CapacityResult) -> Cell:
    """What a mean-based planner (Dynamo's) would deploy, and the Jensen gap behind it."""
    pair = pd_pair(cap.mean_based_prefill, cap.mean_based_decode)
    mean_based = num(cap.mean_based_ratio)
    if pair == NA and mean_based is None:
        return Cell(NA, first_reason(cap.mean_based_prefill, cap.mean_based_ratio)
                    or "not estimated")
    text = f"would deploy {pair}" if pair != NA else f"ratio {fmt_ratio(mean_based)}"
    gaps = [f"{what} {fmt_pct_change(gap)}" for what, gap in
            (("prefill work", num(cap.jensen_gap_prefill)),
             ("decode context", num(cap.jensen_gap_decode))) if gap is not None]
    if gaps:
        return Cell(f"{text}; {', '.join(gaps)} vs f(mean)")
    # Without the model's own gap, the ratios still show how far mean lengths under-size prefill.
    if mean_based is None or pair == NA:
        return Cell(text)
    th = num(cap.theoretical_ratio)
    shortfall = 1 - mean_based / th if th is not None and th > 0 else 0.0
    if shortfall >= JENSEN_GAP_NOTE:
        return Cell(f"{text} (ratio {fmt_ratio(mean_based)}, {fmt_pct(shortfall)} below the "
                    "theoretical)")
    return Cell(f"{text} (ratio {fmt_ratio(mean_based)})")


def _model_vs_window(cap: CapacityResult) -> Cell | None:
    """Predicted (and recalibrated) vs observed TTFT attainment at the deployed counts, and
    the TPOT p90s; None when the window was not compared."""
    pred, obs = num(cap.deployed_ttft_attainment_estimate), num(cap.observed_ttft_attainment)
    if pred is None or obs is None:
        return None
    text = f"TTFT attainment predicted {fmt_pct(pred)}"
    cal = num(cap.calibrated_ttft_attainment_estimate)
    if cap.recalibrated and cal is not None:
        text += f", recalibrated {fmt_pct(cal)}"
    text += f", observed {fmt_pct(obs)}"
    tp, to = num(cap.deployed_tpot_p90_estimate_s), num(cap.observed_tpot_p90_s)
    if tp is not None and to is not None:
        text += f"; TPOT p90 predicted {tp * 1000:.0f} ms, observed {to * 1000:.0f} ms"
    return Cell(text)


def _verified(cap: CapacityResult) -> Cell:
    """Simulated attainment at the recommended counts, next to what the model predicted."""
    ver = cap.verified
    if isinstance(ver, Missing):
        return Cell(NA, ver.reason)
    text = f"{slo_summary(ver)} ({ver.method})"
    predicted = num(cap.ttft_attainment_estimate)
    if predicted is not None and ver.ttft_slo_s is not None:
        text += f"; the model predicted TTFT {fmt_pct(predicted)}"
    return Cell(text)


def _rate(v: Any) -> str:
    return NA if is_na(v) else f"{fmt_num(v)} req/s"





BAND_NOTE: Final = ("P, D: recommended counts; ratio: theoretical P/D; binding: at those counts; "
                    "rows above the recommendation need fewer instances, below as many or more")
# The recommendation's own row in the band, at the observed workload.
BAND_ANSWER_LABEL: Final = "observed workload (the recommendation)"


def band_table(report: Report) -> Table | None:
    """How the recommendation moves under each what-if (load, p90 lengths, hit rate), centred
    on the answer: the recommendation's own row in the middle, the what-ifs that need fewer
    instances (P + D; then fewer prefill) above it and those that need as many or more below,
    each side ordered by that need."""
    cap = report.capacity
    if isinstance(cap, Missing) or not cap.band:
        return None

    def row(label: str, p: int, d: int, ratio: Any, binding: Any) -> tuple[Cell, ...]:
        return (Cell(label), Cell(fmt_num(p)), Cell(fmt_num(d)), Cell(fmt_ratio(ratio)),
                Cell(binding) if isinstance(binding, str) and binding
                else Cell(NA, "not estimated"))

    ordered = sorted(cap.band, key=lambda b: (b.prefill + b.decode, b.prefill))
    p_rec, d_rec = count(cap.recommended_prefill), count(cap.recommended_decode)
    if p_rec is None or d_rec is None:
        rows = tuple(row(b.label, b.prefill, b.decode, b.theoretical_ratio, b.binding)
                     for b in ordered)
    else:
        need = (p_rec + d_rec, p_rec)
        below = [b for b in ordered if (b.prefill + b.decode, b.prefill) < need]
        rest = [b for b in ordered if (b.prefill + b.decode, b.prefill) >= need]
        rows = (*(row(b.label, b.prefill, b.decode, b.theoretical_ratio, b.binding)
                  for b in below),
                row(BAND_ANSWER_LABEL, p_rec, d_rec, cap.theoretical_ratio, cap.binding),
                *(row(b.label, b.prefill, b.decode, b.theoretical_ratio, b.binding)
                  for b in rest))
    return Table(title="what-if band", columns=("what-if", "P", "D", "ratio", "binding"),
                 rows=rows, numeric=(False, True, True, True, False), note=BAND_NOTE)


