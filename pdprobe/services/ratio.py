"""``pdprobe ratio``: capacity planning from a request trace or a length distribution.

No running cluster is needed: the workload comes from a trace (any request-record format
``diagnose`` reads, including the Azure and Mooncake layouts) or from summary statistics,
and the engines' speed from a model × GPU profile (or, when the trace carries timings, from
a fit to them). The answer is the theoretical P/D ratio, recommended counts, a band of
what-ifs and the comparison with a mean-based planner.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pdprobe.errors import InputError, UsageError
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.base import CapacityResult
    from pdprobe.profiles import Profile

FORMATS: Final = ("text", "json", "markdown")
PLAN_SCHEMA_VERSION: Final = 1


@dataclass(frozen=True)
class RatioRequest:
    """What to plan for (a trace, or lengths + rate) and against what (profile, objectives)."""

    trace: Path | None = None
    prompt_mean: float | None = None
    prompt_p90: float | None = None
    output_mean: float | None = None
    output_p90: float | None = None
    rate_rps: float | None = None
    hit_rate: float | None = None
    arrival_cv2: float | None = None
    profile: str | None = None
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    verify: bool = False


@dataclass(frozen=True)
class LengthSummary:
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


def _validate(req: RatioRequest) -> None:
    lengths = (req.prompt_mean, req.prompt_p90, req.output_mean, req.output_p90)
    if req.trace is not None and any(v is not None for v in lengths):
        raise UsageError("give either --trace or --prompt-*/--output-* lengths, not both",
                         hint="the trace already carries its length distribution")
    if req.trace is None:
        missing = [name for name, v in (("--prompt-mean", req.prompt_mean),
                                        ("--output-mean", req.output_mean),
                                        ("--rate", req.rate_rps)) if v is None]
        if missing:
            raise UsageError(f"without --trace, {', '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} required",
                             hint="e.g. pdprobe ratio --prompt-mean 2000 --prompt-p90 5000 "
                                  "--output-mean 300 --rate 5, or --trace FILE")
    if req.rate_rps is not None and not req.rate_rps > 0:
        raise UsageError(f"--rate must be positive (got {req.rate_rps:g})", hint="requests/s")
    if req.hit_rate is not None and not 0.0 <= req.hit_rate < 1.0:
        raise UsageError(f"--hit-rate must be within 0..1 (got {req.hit_rate:g})",
                         hint="it is the share of prompt tokens served from a prefix cache")
    if req.arrival_cv2 is not None and not req.arrival_cv2 >= 0.0:
        raise UsageError(f"--arrival-cv2 must not be negative (got {req.arrival_cv2:g})",
                         hint="1 is Poisson; bursty traffic is above 1")
    for name, v in (("--slo-ttft", req.slo_ttft_s), ("--slo-tpot", req.slo_tpot_s)):
        if v is not None and not v > 0:
            raise UsageError(f"{name} must be positive (got {v:g})", hint="give seconds")


def plan_ratio(req: RatioRequest) -> RatioPlan:
    """Build the workload mix and the model, and size the cluster."""
    import numpy as np

    from pdprobe.analysis.capacity import build_model, choose_profile, plan_capacity
    from pdprobe.analysis.capacity.mix import mix_from_requests, mix_from_summary
    from pdprobe.analysis.capacity.recommend import Slo

    _validate(req)
    slo = Slo.of(req.slo_ttft_s, req.slo_tpot_s)
    dataset = None
    notes: list[str] = []
    if req.trace is not None:
        from pdprobe.collectors.files import read_paths

        dataset = read_paths([req.trace])
        if dataset.requests.empty:
            raise InputError(f"{req.trace}: holds no per-request records",
                             hint="give a request trace (JSONL/CSV/Parquet, Azure or Mooncake "
                                  "layout), or use --prompt-mean/--output-mean/--rate")
        try:
            mix = mix_from_requests(dataset.requests, rate_rps=req.rate_rps,
                                    timescale_s=slo.ttft_s, description=req.trace.name)
        except ValueError as exc:
            raise InputError(f"{req.trace}: {exc}", hint="check the trace's columns") from exc
        if not (mix.rate_rps > 0 and math.isfinite(mix.rate_rps)):
            raise InputError(f"{req.trace}: all requests share one arrival time",
                             hint="give the arrival rate with --rate")
        if req.hit_rate is not None:
            cached = np.minimum(mix.prompt_tokens * req.hit_rate, mix.prompt_tokens - 1.0)
            mix = dataclasses.replace(mix, cached_tokens=np.maximum(cached, 0.0))
        if req.arrival_cv2 is not None:
            mix = dataclasses.replace(mix, arrival_cv2=req.arrival_cv2, arrival_cv2_source="given")
        if req.rate_rps is not None:
            notes.append(f"arrivals of {req.trace.name} replayed at {req.rate_rps:g} req/s")
        ideal = _trace_prefix_hit_rate(req.trace)
        if ideal is not None and req.hit_rate is None and mix.hit_rate == 0.0:
            notes.append(f"the trace's hash_ids show that one shared prefix cache could serve "
                         f"{ideal:.0%} of prompt tokens (an upper bound: per-instance caches "
                         f"and routing reach less); plan with --hit-rate to count it")
    profile, profile_notes = choose_profile(req.profile, dataset)
    notes.extend(profile_notes)
    if req.trace is None:
        assert req.prompt_mean is not None and req.output_mean is not None
        assert req.rate_rps is not None
        mix = mix_from_summary(prompt_mean=req.prompt_mean, prompt_p90=req.prompt_p90,
                               output_mean=req.output_mean, output_p90=req.output_p90,
                               rate_rps=req.rate_rps, hit_rate=req.hit_rate or 0.0,
                               arrival_cv2=1.0 if req.arrival_cv2 is None else req.arrival_cv2,
                               max_prompt_tokens=profile.max_model_len)
        if req.prompt_p90 is None or req.output_p90 is None:
            fixed = [w for w, v in (("prompt", req.prompt_p90), ("output", req.output_p90))
                     if v is None]
            notes.append(f"no p90 for {' and '.join(fixed)} lengths: taken as fixed, so the "
                         "plan has no length variance (give --prompt-p90/--output-p90)")
        else:
            notes.append("lengths: gamma distributions with the given mean and p90, prompt and "
                         "output independent")
    built = build_model(dataset, mix, profile)
    hit_known = req.hit_rate is not None or (
        dataset is not None and dataset.has_request_column("cached_tokens"))
    try:
        capacity = plan_capacity(mix, built, slo, hit_rate_known=hit_known,
                                 extra_notes=tuple(notes))
    except ValueError as exc:
        raise UsageError(f"no cluster size serves this workload ({exc})",
                         hint="check --rate and the lengths against the profile") from exc
    if req.verify:
        from pdprobe.analysis.capacity.verify import verify_recommendation

        capacity = dataclasses.replace(
            capacity, verified=verify_recommendation(mix, built, slo, capacity))
    return RatioPlan(_summarise(mix), profile.name, profile.description, capacity)


def _trace_prefix_hit_rate(path: Path) -> float | None:
    """Token share an ideal shared prefix cache would serve, from Mooncake ``hash_ids``."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    if b"hash_ids" not in head:
        return None
    import numpy as np

    from pdprobe.analysis.capacity.mix import ideal_prefix_hits
    from pdprobe.collectors.base import ReadContext
    from pdprobe.collectors.requests_file import load_hash_ids, read_requests

    ids = load_hash_ids(path)
    frame = read_requests(path, ReadContext()).requests
    if ids is None or frame is None or len(frame) != len(ids):
        return None
    prompt = frame["prompt_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)
    prompt = np.nan_to_num(prompt, nan=0.0)
    values = ids.values.to_numpy(zero_copy_only=False)
    cached = ideal_prefix_hits(np.asarray(ids.offsets), np.asarray(values), prompt)
    total = float(prompt.sum())
    return float(cached.sum() / total) if total > 0 else None


def _summarise(mix: Any) -> PlanWorkload:
    import numpy as np

    def summary(values: Any) -> LengthSummary:
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return LengthSummary(float(values.mean()), float(p50), float(p90), float(p99))

    corr: float | None = None
    if mix.size > 2 and mix.prompt_tokens.std() > 0 and mix.output_tokens.std() > 0:
        corr = float(np.corrcoef(mix.prompt_tokens, mix.output_tokens)[0, 1])
    return PlanWorkload(mix.description, mix.size, mix.rate_rps, mix.arrival_cv2,
                        mix.arrival_cv2_source, summary(mix.prompt_tokens),
                        summary(mix.output_tokens), mix.hit_rate, corr)


def list_profiles() -> list[Profile]:
    from pdprobe.profiles import BUILTIN_PROFILES

    return [BUILTIN_PROFILES[k] for k in sorted(BUILTIN_PROFILES)]


def render_profiles(fmt: str) -> str:
    """The built-in profiles as a table (text/markdown) or JSON."""
    from pdprobe.profiles import DEFAULT_PROFILE

    profiles = list_profiles()
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


def _fmt(value: Any, spec: str = ".3g", unit: str = "") -> str:
    if isinstance(value, Missing) or value is None:
        return "n/a"
    if isinstance(value, float) and not math.isfinite(value):
        return "∞"
    return f"{value:{spec}}{unit}"


def _table(head: tuple[str, ...], rows: Sequence[tuple[str, ...]], fmt: str) -> str:
    if fmt == "markdown":
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(out) + "\n"


def _ratio_words(ratio: Any) -> str:
    if isinstance(ratio, Missing):
        return "n/a"
    return f"{ratio:.2f} prefill per decode" if ratio >= 1 else \
        f"1 prefill per {1 / ratio:.2f} decode"


def _sections(plan: RatioPlan) -> list[tuple[str, list[tuple[str, str]]]]:
    c = plan.capacity
    w = plan.workload
    gbps = 1e9
    from pdprobe.analysis.base import SloAttainment

    verified: object = c.verified
    if isinstance(verified, SloAttainment):
        ver = (f"simulated TTFT within SLO {_fmt(verified.ttft, '.1%')}, "
               f"TPOT within SLO {_fmt(verified.tpot, '.1%')} ({verified.method})")
    else:
        ver = verified.reason if isinstance(verified, Missing) else "not verified"
    corr = "n/a" if w.prompt_output_corr is None else f"{w.prompt_output_corr:+.2f}"
    return [
        ("Workload", [
            ("source", w.source),
            ("requests", f"{w.requests:,}"),
            ("arrival rate", f"{w.arrival_rate_rps:.3g} req/s (ca² {w.arrival_cv2:.2f}: "
                             f"{w.arrival_cv2_source})"),
            ("prompt tokens", f"mean {w.prompt_tokens.mean:,.0f} / p50 {w.prompt_tokens.p50:,.0f}"
                              f" / p90 {w.prompt_tokens.p90:,.0f} / p99 {w.prompt_tokens.p99:,.0f}"),
            ("output tokens", f"mean {w.output_tokens.mean:,.0f} / p50 {w.output_tokens.p50:,.0f}"
                              f" / p90 {w.output_tokens.p90:,.0f} / p99 {w.output_tokens.p99:,.0f}"),
            ("prefix hit rate", f"{w.hit_rate:.0%}"),
            ("prompt×output correlation", corr),
        ]),
        ("Model", [
            ("profile", f"{plan.profile}: {plan.profile_description}"),
            ("performance", c.model_source),
            ("objectives", f"TTFT {c.slo_ttft_s:g} s, TPOT {c.slo_tpot_s:g} s at p90"
                           + (f" (default: {', '.join(c.slo_defaulted)})" if c.slo_defaulted
                              else "")),
        ]),
        ("Answer", [
            ("theoretical ratio", f"{_fmt(c.theoretical_ratio, '.3f')} "
                                  f"({_ratio_words(c.theoretical_ratio)})"),
            ("recommended", f"{_fmt(c.recommended_prefill, 'd')} prefill + "
                            f"{_fmt(c.recommended_decode, 'd')} decode instances"),
            ("binding stage", f"{_fmt(c.binding, 's')} (utilisation prefill "
                              f"{_fmt(c.prefill_utilization, '.0%')}, decode "
                              f"{_fmt(c.decode_utilization, '.0%')}, transfer "
                              f"{_fmt(c.transfer_utilization, '.1%')})"),
            ("prefill sized by", f"{_fmt(c.prefill_limit, 's')}; est. TTFT p90 "
                                 f"{_fmt(c.ttft_estimate_p90_s, '.2f', ' s')}, mean "
                                 f"{_fmt(c.ttft_estimate_mean_s, '.2f', ' s')} (M/D/1 "
                                 f"{_fmt(c.md1_ttft_s, '.2f', ' s')}); within SLO "
                                 f"{_fmt(c.ttft_attainment_estimate, '.1%')}"),
            ("decode sized by", f"{_fmt(c.decode_limit, 's')}; batch "
                                f"{_fmt(c.decode_batch_size, '.0f')} limited by "
                                f"{_fmt(c.decode_batch_limit, 's')}, step "
                                f"{_fmt(c.decode_step_s, '.3f', ' s')}, context "
                                f"{_fmt(c.decode_context_tokens, ',.0f')} tokens/seq"),
            ("per-instance capacity", f"prefill {_fmt(c.prefill_capacity_rps, '.3g')} req/s, "
                                      f"decode {_fmt(c.decode_capacity_rps, '.3g')} req/s"),
            ("KV transfer", f"{_fmt(c.kv_bytes_per_token, ',.0f')} B/token; needs "
                            f"{_fmt(_div(c.transfer_required_bytes_per_s, gbps), '.2f')} of "
                            f"{_fmt(_div(c.transfer_capacity_bytes_per_s, gbps), '.1f')} GB/s "
                            "per node"),
            ("verified by simulation", ver),
        ]),
        ("Mean-based planner (f(mean ISL), ctx = ISL + OSL/2)", [
            ("ratio", f"{_fmt(c.mean_based_ratio, '.3f')}"),
            ("counts", f"{_fmt(c.mean_based_prefill, 'd')} prefill + "
                       f"{_fmt(c.mean_based_decode, 'd')} decode"),
            ("Jensen gap", f"prefill work {_fmt(c.jensen_gap_prefill, '+.1%')}, decode context "
                           f"{_fmt(c.jensen_gap_decode, '+.1%')}"),
        ]),
    ]


def _div(value: Any, by: float) -> Any:
    return value if isinstance(value, Missing) else value / by


def _band_rows(plan: RatioPlan) -> list[tuple[str, str, str, str, str]]:
    c = plan.capacity
    rows = [("as given", _fmt(c.recommended_prefill, "d"), _fmt(c.recommended_decode, "d"),
             _fmt(c.theoretical_ratio, ".3f"), _fmt(c.binding, "s"))]
    rows += [(b.label, str(b.prefill), str(b.decode), f"{b.theoretical_ratio:.3f}",
              b.binding or "n/a") for b in c.band]
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
