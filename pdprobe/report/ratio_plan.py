"""``pdprobe ratio``'s answer and how it reads: the plan records and their text, Markdown
and JSON.

``services/ratio.py`` builds a ``RatioPlan``; this module only words and lays it out (and the
list of built-in profiles), so the service renders nothing itself.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pdprobe.report.cells import fmt_ratio
from pdprobe.units import NA, fmt_bytes_per_s, fmt_num, fmt_pct, fmt_pct_change, fmt_seconds
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.base import CapacityResult
    from pdprobe.profiles import Profile

PLAN_SCHEMA_VERSION: Final = 1


@dataclass(frozen=True)
class LengthSummary:
    """Mean and quantiles of one length distribution (tokens)."""
    mean: float
    p50: float
    p90: float
    p99: float


@dataclass(frozen=True)
class PlanWorkload:
    """The workload the plan is for, as summarised for the reader."""

    source: str
    requests: int  # requests in the trace, or the size of the synthetic sample
    arrival_rate_rps: float
    arrival_cv2: float
    arrival_cv2_source: str
    prompt_tokens: LengthSummary
    output_tokens: LengthSummary
    hit_rate: float
    prompt_output_corr: float | None


@dataclass(frozen=True)
class RatioPlan:
    """The answer of ``pdprobe ratio``."""

    workload: PlanWorkload
    profile: str
    profile_description: str
    capacity: CapacityResult


def render_profiles(profiles: Sequence[Profile], fmt: str) -> str:
    """The given profiles as a table (text/markdown) or JSON; the default one is marked."""
    from pdprobe.profiles import DEFAULT_PROFILE

    if fmt == "json":
        return json.dumps([dict(p.to_dict(), kv_bytes_per_token=p.kv_bytes_per_token,
                                default=p.name == DEFAULT_PROFILE) for p in profiles],
                          indent=2) + "\n"
    rows = [(p.name + (" (default)" if p.name == DEFAULT_PROFILE else ""),
             f"{p.gpus_per_instance}× {p.gpu}", f"{p.kv_bytes_per_token:,}",
             f"{p.kv_capacity_tokens:,}", f"{p.link_bytes_per_s / 1e9:.0f}", p.description)
            for p in profiles]
    head = ("profile", "GPUs", "KV B/token", "KV tokens", "link GB/s", "description")
    return _table(head, rows, fmt)



# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _fmt(value: Any, fn: Callable[[Any], str] = fmt_num) -> str:
    """A plan value worded by a ``pdprobe.units`` function; n/a when unknown, ∞ when unbounded."""
    if isinstance(value, Missing) or value is None:
        return NA
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return "∞"
    return fn(value)


def _table(head: tuple[str, ...], rows: Sequence[tuple[str, ...]], fmt: str) -> str:
    if fmt == "markdown":
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(out) + "\n"


def _lengths(s: LengthSummary) -> str:
    """``mean 2,000 / p50 1,176 / p90 4,998 / p99 10,942`` (tokens)."""
    return " / ".join(f"{k} {fmt_num(v)}" for k, v in
                      (("mean", s.mean), ("p50", s.p50), ("p90", s.p90), ("p99", s.p99)))


def _ratio_words(ratio: Any) -> str:
    if isinstance(ratio, Missing):
        return NA
    return f"{fmt_ratio(ratio)} prefill per decode" if ratio >= 1 else \
        f"1 prefill per {fmt_ratio(1 / ratio)} decode"


def _sections(plan: RatioPlan) -> list[tuple[str, list[tuple[str, str]]]]:
    c = plan.capacity
    w = plan.workload
    from pdprobe.analysis.base import SloAttainment

    verified: object = c.verified
    if isinstance(verified, SloAttainment):
        ver = (f"simulated TTFT within SLO {_fmt(verified.ttft, fmt_pct)}, "
               f"TPOT within SLO {_fmt(verified.tpot, fmt_pct)} ({verified.method})")
    else:
        ver = verified.reason if isinstance(verified, Missing) else "not verified"
    corr = NA if w.prompt_output_corr is None else f"{w.prompt_output_corr:+.2f}"
    return [
        ("Workload", [
            ("source", w.source),
            ("requests", f"{w.requests:,}"),
            ("arrival rate", f"{fmt_num(w.arrival_rate_rps)} req/s (ca² {w.arrival_cv2:.2f}: "
                             f"{w.arrival_cv2_source})"),
            ("prompt tokens", _lengths(w.prompt_tokens)),
            ("output tokens", _lengths(w.output_tokens)),
            ("prefix hit rate", fmt_pct(w.hit_rate)),
            ("prompt×output correlation", corr),
        ]),
        ("Model", [
            ("profile", f"{plan.profile}: {plan.profile_description}"),
            ("performance", c.model_source),
            ("objectives", f"TTFT {_fmt(c.slo_ttft_s, fmt_seconds)}, TPOT {_fmt(c.slo_tpot_s, fmt_seconds)} at p90"
                           + (f" (default: {', '.join(c.slo_defaulted)})" if c.slo_defaulted
                              else "")),
        ]),
        ("Answer", [
            ("theoretical ratio", f"{_fmt(c.theoretical_ratio, fmt_ratio)} "
                                  f"({_ratio_words(c.theoretical_ratio)})"),
            ("recommended", f"{_fmt(c.recommended_prefill, str)} prefill + "
                            f"{_fmt(c.recommended_decode, str)} decode instances"),
            ("binding stage", f"{_fmt(c.binding, str)} (utilisation prefill "
                              f"{_fmt(c.prefill_utilization, fmt_pct)}, decode "
                              f"{_fmt(c.decode_utilization, fmt_pct)}, transfer "
                              f"{_fmt(c.transfer_utilization, fmt_pct)})"),
            ("prefill sized by", f"{_fmt(c.prefill_limit, str)}; est. TTFT p90 "
                                 f"{_fmt(c.ttft_estimate_p90_s, fmt_seconds)}, mean "
                                 f"{_fmt(c.ttft_estimate_mean_s, fmt_seconds)} (M/D/1 "
                                 f"{_fmt(c.md1_ttft_s, fmt_seconds)}); within SLO "
                                 f"{_fmt(c.ttft_attainment_estimate, fmt_pct)}"),
            ("decode sized by", f"{_fmt(c.decode_limit, str)}; batch "
                                f"{_fmt(c.decode_batch_size)} limited by "
                                f"{_fmt(c.decode_batch_limit, str)}, step "
                                f"{_fmt(c.decode_step_s, fmt_seconds)}, context "
                                f"{_fmt(c.decode_context_tokens)} tokens/seq"),
            ("per-instance capacity", f"prefill {_fmt(c.prefill_capacity_rps)} req/s, "
                                      f"decode {_fmt(c.decode_capacity_rps)} req/s"),
            ("KV transfer", f"{_fmt(c.kv_bytes_per_token)} B/token; needs "
                            f"{_fmt(c.transfer_required_bytes_per_s, fmt_bytes_per_s)} of "
                            f"{_fmt(c.transfer_capacity_bytes_per_s, fmt_bytes_per_s)} per node"),
            ("verified by simulation", ver),
        ]),
        ("Mean-based planner (f(mean ISL), ctx = ISL + OSL/2)", [
            ("ratio", f"{_fmt(c.mean_based_ratio, fmt_ratio)}"),
            ("counts", f"{_fmt(c.mean_based_prefill, str)} prefill + "
                       f"{_fmt(c.mean_based_decode, str)} decode"),
            ("Jensen gap", f"prefill work {_fmt(c.jensen_gap_prefill, fmt_pct_change)}, decode context "
                           f"{_fmt(c.jensen_gap_decode, fmt_pct_change)}"),
        ]),
    ]


def _band_rows(plan: RatioPlan) -> list[tuple[str, str, str, str, str]]:
    c = plan.capacity
    rows = [("as given", _fmt(c.recommended_prefill, str), _fmt(c.recommended_decode, str),
             _fmt(c.theoretical_ratio, fmt_ratio), _fmt(c.binding, str))]
    rows += [(b.label, str(b.prefill), str(b.decode), fmt_ratio(b.theoretical_ratio),
              b.binding or NA) for b in c.band]
    return rows


def render_plan(plan: RatioPlan, fmt: str) -> str:
    """The plan as text, markdown or JSON."""
    if fmt == "json":
        return json.dumps(plan_to_json(plan), indent=2, allow_nan=False) + "\n"
    md = fmt == "markdown"
    out: list[str] = ["# pdprobe ratio plan\n" if md else "pdprobe ratio plan\n"]
    for title, items in _sections(plan):
        if md:
            out.append(f"\n## {title}\n\n" + _table(("", ""), [(f"**{k}**", v) for k, v in items],
                                                    "markdown"))
        else:
            width = max(len(k) for k, _ in items)
            out.append(f"\n{title}\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in items)
                       + "\n")
    head = ("what-if", "prefill", "decode", "theoretical", "binding")
    band = _table(head, list(_band_rows(plan)), "markdown" if md else "text")
    out.append(("\n## Band\n\n" if md else "\nBand\n") + band)
    if plan.capacity.notes:
        bullet = "- " if md else "  - "
        out.append(("\n## Notes\n\n" if md else "\nNotes\n")
                   + "\n".join(bullet + n for n in plan.capacity.notes) + "\n")
    return "".join(out)


def plan_to_json(plan: RatioPlan) -> dict[str, Any]:
    """The plan as plain JSON data; Missing values are null with reasons under ``missing``."""
    missing: dict[str, str] = {}

    def value(obj: Any, path: str) -> Any:
        if isinstance(obj, Missing):
            missing[path] = obj.reason
            return None
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else None
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return {f.name: value(getattr(obj, f.name), f"{path}.{f.name}")
                    for f in dataclasses.fields(obj)}
        if isinstance(obj, dict):
            return {str(k): value(v, f"{path}.{k}") for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [value(v, f"{path}[{i}]") for i, v in enumerate(obj)]
        if hasattr(obj, "item"):
            return value(obj.item(), path)
        return obj

    c = plan.capacity
    out = {
        "schema_version": PLAN_SCHEMA_VERSION,
        "kind": "ratio-plan",
        "profile": plan.profile,
        "slo": {"ttft_s": c.slo_ttft_s, "tpot_s": c.slo_tpot_s, "attainment": 0.9,
                "defaulted": list(c.slo_defaulted)},
        "workload": value(plan.workload, "workload"),
        "ratio": {
            "theoretical": value(c.theoretical_ratio, "ratio.theoretical"),
            "recommended": {"prefill": value(c.recommended_prefill, "ratio.recommended.prefill"),
                            "decode": value(c.recommended_decode, "ratio.recommended.decode")},
            "binding": value(c.binding, "ratio.binding"),
            "mean_based": {"theoretical": value(c.mean_based_ratio, "ratio.mean_based.theoretical"),
                           "prefill": value(c.mean_based_prefill, "ratio.mean_based.prefill"),
                           "decode": value(c.mean_based_decode, "ratio.mean_based.decode")},
        },
        "band": value(c.band, "band"),
        "capacity": value(c, "capacity"),
        "notes": list(c.notes),
    }
    out["missing"] = dict(sorted(missing.items()))
    return out
