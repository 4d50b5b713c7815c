"""``pdprobe ratio``: capacity planning from a request trace or a length distribution.

No running cluster is needed: the workload comes from a trace (any request-record format
``diagnose`` reads, including the Azure and Mooncake layouts) or from summary statistics,
and the engines' speed from a model × GPU profile (or, when the trace carries timings, from
a fit to them). The answer is the theoretical P/D ratio, recommended counts, a band of
what-ifs and the comparison with a mean-based planner.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pdprobe.errors import InputError, UsageError
from pdprobe.report.ratio_plan import LengthSummary, PlanWorkload, RatioPlan

if TYPE_CHECKING:
    from pdprobe.profiles import Profile

FORMATS: Final = ("text", "json", "markdown")


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
        from pdprobe.services.verify import verify_recommendation

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

    from pdprobe.analysis.capacity.prefix_hits import ideal_prefix_hits
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
    """The built-in model × GPU profiles, by name."""
    from pdprobe.profiles import BUILTIN_PROFILES

    return [BUILTIN_PROFILES[k] for k in sorted(BUILTIN_PROFILES)]
