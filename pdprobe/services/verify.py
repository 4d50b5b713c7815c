"""Confirm a recommendation by simulating it on the workload (``--verify``).

The workload (the observed requests, or a Poisson replay of a synthetic length sample) is
written as a temporary request trace and replayed by ``pdprobe.sim`` on a cluster of the
recommended counts, with a profile whose coefficients are the model's (fitted ones where the
data allowed). The simulated TTFT and TPOT then give the attainment of the objectives.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.base import SloAttainment
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.base import CapacityResult
    from pdprobe.analysis.capacity.estimate import BuiltModel, CapacityOptions
    from pdprobe.analysis.capacity.mix import WorkloadMix
    from pdprobe.analysis.capacity.recommend import Slo
    from pdprobe.profiles import Profile
    from pdprobe.services.diagnose import DiagnoseRequest

# A synthetic mix (no arrival times) is replayed for this long, or for this many requests.
SYNTHETIC_REPLAY_S: Final = 1200.0
SYNTHETIC_REPLAY_REQUESTS: Final = 4000
REPLAY_SEED: Final = 7


@dataclass(frozen=True)
class SimOutcome:
    """What one simulated run says about the objectives."""

    prefill: int
    decode: int
    requests: int
    ttft_attainment: float
    tpot_attainment: float
    both_attainment: float
    ttft_p90_s: float
    tpot_p90_s: float
    wall_s: float


def model_profile(built: BuiltModel) -> Profile:
    """The built model's coefficients as a simulator profile."""
    m = built.inputs
    return dataclasses.replace(
        built.profile,
        name=f"{built.profile.name} (as modelled)",
        prefill_a_s=m.prefill.a_s, prefill_b_s_per_token=m.prefill.b_s_per_token,
        prefill_c_s_per_token2=m.prefill.c_s_per_token2,
        prefill_max_batch_tokens=m.prefill.max_batch_tokens,
        decode_a_s=m.decode.a_s, decode_b_s_per_ctx_token=m.decode.b_s_per_ctx_token,
        decode_c_s_per_seq=m.decode.c_s_per_seq, decode_max_batch=m.decode.max_batch,
        kv_capacity_tokens=m.decode.kv_capacity_tokens, link_bytes_per_s=m.link_bytes_per_s,
    )


def write_replay_trace(mix: WorkloadMix, path: Path) -> float:
    """Write the mix as a canonical JSONL request trace; returns its time span in seconds."""
    import pandas as pd

    if mix.arrival_ts is not None and len(mix.arrival_ts) > 1:
        ts = np.asarray(mix.arrival_ts, dtype=np.float64)
        prompt, output = mix.prompt_tokens, mix.output_tokens
    else:
        rng = np.random.default_rng(REPLAY_SEED)
        n = int(min(SYNTHETIC_REPLAY_REQUESTS, max(mix.rate_rps * SYNTHETIC_REPLAY_S, 200)))
        ts = np.cumsum(rng.exponential(1.0 / mix.rate_rps, n))
        pick = rng.integers(0, mix.size, n)
        prompt, output = mix.prompt_tokens[pick], mix.output_tokens[pick]
    frame = pd.DataFrame({"arrival_ts": ts - ts[0] + 1.0,
                          "prompt_tokens": np.maximum(np.round(prompt), 1).astype(np.int64),
                          "output_tokens": np.maximum(np.round(output), 1).astype(np.int64)})
    frame.to_json(path, orient="records", lines=True)
    return float(ts[-1] - ts[0])


def outcome_from_result(result: object, slo: Slo) -> SimOutcome:
    """Attainment of the objectives over every request the run replayed (failures miss)."""
    req = result.requests  # type: ignore[attr-defined]
    arrival = req["arrival_s"]
    ttft = req["t_first"] - arrival
    gen = req["generated"].astype(np.float64)
    tpot = np.divide(req["t_finish"] - req["t_first"], gen - 1.0,
                     out=np.full(len(gen), np.nan), where=gen > 1)
    ok = req["status"] == 0
    ttft_ok = ok & np.isfinite(ttft) & (ttft <= slo.ttft_s)
    # single-token outputs have no TPOT: they meet it by definition when they finish
    tpot_ok = ok & np.isfinite(req["t_finish"]) & ((gen <= 1) | (tpot <= slo.tpot_s))
    n = len(arrival)
    cfg = result.config  # type: ignore[attr-defined]

    def p90(values: np.ndarray) -> float:
        finite = values[np.isfinite(values)]
        return float(np.quantile(finite, 0.9)) if len(finite) else math.nan

    return SimOutcome(cfg.prefill, cfg.decode, n, float(ttft_ok.mean()), float(tpot_ok.mean()),
                      float((ttft_ok & tpot_ok).mean()), p90(ttft), p90(tpot),
                      float(result.wall_s))  # type: ignore[attr-defined]


def simulate_counts(trace: Path, span_s: float, profile: Profile, prefill: int, decode: int,
                    slo: Slo, hit_rate: float = 0.0, seed: int = 0,
                    rate_rps: float | None = None) -> SimOutcome:
    """Replay ``trace`` on ``prefill``/``decode`` instances of ``profile`` and score the SLOs."""
    from pdprobe.sim.config import SimConfig
    from pdprobe.sim.engine import simulate

    config = SimConfig(profile=profile, prefill=prefill, decode=decode,
                       duration_s=max(span_s, 1.0) + 1.0, rate_rps=rate_rps, trace=str(trace),
                       prefix_hit_rate=min(max(hit_rate, 0.0), 0.99), slo_ttft_s=slo.ttft_s,
                       slo_tpot_s=slo.tpot_s, seed=seed)
    return outcome_from_result(simulate(config), slo)


def verify_recommendation(mix: WorkloadMix, built: BuiltModel, slo: Slo,
                          result: CapacityResult) -> SloAttainment | Missing:
    """Simulated attainment of the objectives at the recommended counts, or why not."""
    p, d = result.recommended_prefill, result.recommended_decode
    if isinstance(p, Missing) or isinstance(d, Missing):
        return Missing("no recommendation to verify")
    try:
        import pdprobe.sim.engine  # noqa: F401
    except ImportError as exc:
        return Missing(f"the simulator (pdprobe.sim) is not available in this build ({exc})")
    with tempfile.TemporaryDirectory(prefix="pdprobe-verify-") as tmp:
        trace = Path(tmp) / "replay.jsonl"
        span = write_replay_trace(mix, trace)
        out = simulate_counts(trace, span, model_profile(built), p, d, slo,
                              hit_rate=mix.hit_rate)
    return SloAttainment(
        ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s, ttft=out.ttft_attainment,
        tpot=out.tpot_attainment, both=out.both_attainment,
        method=f"simulation of {out.requests} requests on {p}P/{d}D (pdprobe.sim)",
    )


def capacity_options(request: DiagnoseRequest) -> CapacityOptions:
    """The capacity model's options from a diagnosis request; ``--verify`` passes the replay."""
    from pdprobe.analysis.capacity.estimate import CapacityOptions

    return CapacityOptions(slo_ttft_s=request.slo_ttft_s, slo_tpot_s=request.slo_tpot_s,
                           slo_target=request.slo_target, profile=request.profile,
                           window_s=request.window_s,
                           verifier=verify_recommendation if request.verify else None)
