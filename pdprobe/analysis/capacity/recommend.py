"""SLO-aware instance counts and the continuous ratio (``alternatives.py``: the mean-based
comparison and the what-if band).

Prefill count: the smallest pool whose queueing keeps TTFT within the objective for the
target share of requests. The wait ``W`` in a pool of ``c`` instances is Allen–Cunneen's G/G/c
(Erlang C × ``(ca² + cs²)/2``, Kingman for one server) with an exponential tail, per load
window, plus the fluid backlog of bursts (``pool.py``); a request ``i`` with bare TTFT ``D_i`` (its prefill + KV transfer) misses
when ``W > SLO − D_i``, so the miss share is ``mean_i P(W > SLO − D_i)`` over the whole length
distribution and every window; and the pool is at most ``PREFILL_MAX_UTILIZATION`` busy.
Decode count:
``ceil(λ / decode capacity)`` with the batch already held to the TPOT objective. Both are at
least what the links need at ``TRANSFER_MAX_UTILIZATION``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from pdprobe.analysis.capacity.calibrate import (
    PER_INSTANCE_SCALE_FACTOR,
    Calibration,
    calibrate,
    observed_ttft_attainment,
    observed_ttft_quantile,
    routing_of,
)
from pdprobe.analysis.capacity.check import MODEL_TOLERANCE, p90_disagrees
from pdprobe.analysis.capacity.mix import WorkloadMix
from pdprobe.analysis.capacity.pool import PrefillPool, ServiceMoments
from pdprobe.analysis.capacity.queueing import md1_ttft_s
from pdprobe.analysis.capacity.rates import (
    TRANSFER_MAX_UTILIZATION,
    ModelInputs,
    OccupancyMoments,
    StageRates,
    bare_ttft_s,
    decode_count_for_memory,
    stage_rates,
    transfer_tokens,
)

# Objectives when none are given. TTFT 2 s is MLPerf's Llama-2-70B server-scenario bound and
# keeps a chat reply feeling immediate; TPOT 0.1 s (10 tokens/s, faster than reading) is
# DistServe's default decode objective.
DEFAULT_SLO_TTFT_S: Final = 2.0
DEFAULT_SLO_TPOT_S: Final = 0.1
# Objectives hold for this share of requests (DistServe's P90 attainment).
SLO_ATTAINMENT: Final = 0.9
# At least this share of the miss budget is left for queueing: when more requests than that
# miss TTFT on bare prefill + transfer alone, no instance count meets the objective and the
# pool is sized against the bare-TTFT quantile instead (Dynamo #11624: extra replicas cannot
# fix single-request TTFT).
QUEUE_MISS_SHARE: Final = 0.5
# Plan prefill instances at most this busy on average. aiconfigurator derates prefill
# throughput by the same 0.9; near saturation a queue takes minutes to settle and the wait
# tail of heavy-tailed prompts is heavier than the exponential the G/G/c estimate assumes
# (the backtest's Mooncake-synthetic cases at 4x load need it).
PREFILL_MAX_UTILIZATION: Final = 0.9
# Bare-TTFT distribution compressed to this many quantiles for the pool search.
TTFT_QUANTILES: Final = 1000
# Ceil with a tolerance so that float noise (3.0000000001) does not add an instance.
CEIL_EPS: Final = 1e-9


@dataclass(frozen=True)
class Slo:
    ttft_s: float
    tpot_s: float
    ttft_default: bool = False
    tpot_default: bool = False
    attainment: float = SLO_ATTAINMENT

    @classmethod
    def of(cls, ttft_s: float | None, tpot_s: float | None) -> Slo:
        return cls(ttft_s if ttft_s else DEFAULT_SLO_TTFT_S,
                   tpot_s if tpot_s else DEFAULT_SLO_TPOT_S,
                   ttft_default=not ttft_s, tpot_default=not tpot_s)


def ceil_count(x: float) -> int:
    if not math.isfinite(x):
        raise ValueError("count is not finite")
    return max(1, math.ceil(x - CEIL_EPS))


def _quantile_sample(values: np.ndarray, n: int) -> np.ndarray:
    """``np.quantile(values, (i + 0.5) / n)`` for ``i < n`` (linear method), bit for bit.

    One sort and the same interpolation numpy applies: ``np.quantile`` partitions around each
    of the ``n`` points instead, tens of times slower for a thousand of them.
    """
    if len(values) <= n:
        return values
    s = np.sort(np.asarray(values, dtype=np.float64))
    virtual = (len(s) - 1) * ((np.arange(n) + 0.5) / n)
    below = np.floor(virtual).astype(np.intp)
    above = np.minimum(below + 1, len(s) - 1)
    t = virtual - below
    a, b = s[below], s[above]
    diff = b - a
    out = a + diff * t
    np.subtract(b, diff * (1 - t), out=out, where=t >= 0.5)  # numpy's _lerp, exactly
    return out


def utilizations(rates: StageRates, rate_rps: float, prefill: int, decode: int,
                 link_bytes_per_s: float) -> tuple[float, float, float, float]:
    """(prefill, decode, transfer) utilisation and transfer bytes/s per node at given counts."""
    up = rate_rps / (prefill * rates.prefill_capacity_rps)
    ud = rate_rps / (decode * rates.decode_capacity_rps)
    per_node = rate_rps * rates.transfer_bytes_per_request / min(prefill, decode)
    return up, ud, per_node / link_bytes_per_s, per_node


def binding_stage(up: float, ud: float, ux: float) -> str:
    """The stage nearest its limit (the short board of the three)."""
    stages = {"prefill": up, "decode": ud, "transfer": ux / TRANSFER_MAX_UTILIZATION}
    return max(stages, key=lambda k: stages[k])


@dataclass(frozen=True, eq=False)
class LengthWork:
    """What a mix's lengths cost on one model, whatever the load: computed once per mix.

    The band's load cases and the main recommendation share the same lengths; only the pool
    (rate) differs between them.
    """

    rates: StageRates
    bare: np.ndarray  # per request: prefill alone + KV transfer
    moments: ServiceMoments
    occupancy: OccupancyMoments
    infeasible: float  # share of requests whose bare TTFT exceeds the objective
    bare_q: float  # the bare-TTFT quantile left after QUEUE_MISS_SHARE of the miss budget

    @classmethod
    def of(cls, mix: WorkloadMix, model: ModelInputs, slo: Slo,
           occupancy: OccupancyMoments | None = None) -> LengthWork:
        """``occupancy``: reuse it when only cached tokens differ (it needs prompt, output)."""
        alone, batched = model.prefill.alone_and_batched_s(mix.uncached_tokens,
                                                           mix.cached_tokens)
        bare = bare_ttft_s(mix, model, alone)
        miss_budget = 1.0 - slo.attainment
        # "higher": a real sample, so at most that share of requests lies above it
        bare_q = float(np.quantile(bare, 1.0 - QUEUE_MISS_SHARE * miss_budget, method="higher"))
        return cls(stage_rates(mix, model, slo.tpot_s, batched), bare,
                   ServiceMoments.of(alone, batched), occupancy or OccupancyMoments.of(mix),
                   float(np.mean(bare > slo.ttft_s)), bare_q)


@dataclass(frozen=True)
class Sizing:
    """Counts for one workload mix and load, and what limits them (no TTFT estimates)."""

    rates: StageRates
    rate_rps: float
    prefill: int
    decode: int
    theoretical_ratio: float
    prefill_limit: str  # "ttft-slo", "utilization" (PREFILL_MAX_UTILIZATION) or "transfer"
    decode_limit: str  # "throughput", "kv-memory" (fluctuation headroom) or "transfer"
    prefill_utilization: float
    decode_utilization: float
    transfer_utilization: float
    binding: str
    ttft_target_s: float
    infeasible_ttft_fraction: float
    transfer_required_bytes_per_s: float
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Recommendation(Sizing):
    """A ``Sizing`` plus the TTFT estimates at its prefill count."""

    ttft_p90_s: float  # estimated at the recommended prefill count
    ttft_mean_s: float  # G/G/c mean wait + mean bare TTFT
    md1_ttft_s: float  # DistServe's M/D/1 cross-check at the same per-instance load
    ttft_attainment: float  # predicted share of requests within the TTFT objective
    # The same predictions at the deployed prefill count (None when not asked for).
    deployed_ttft_attainment: float | None = None
    deployed_ttft_p90_s: float | None = None
    # The deployed prediction recalibrated with the window's measured waits (None without
    # them); ``recalibrated`` when the raw prediction was beyond MODEL_TOLERANCE of what the
    # window observed, so the calibrated one stands (and may have raised ``prefill``).
    calibration: Calibration | None = None
    recalibrated: bool = False
    calibrated_prefill: int | None = None  # prefill count with the recalibrated waits


def size(mix: WorkloadMix, model: ModelInputs, slo: Slo,
         work: LengthWork | None = None) -> Sizing:
    """The instance counts for ``mix`` at ``mix.rate_rps`` (what the band and windows need)."""
    return _size(mix, model, slo, work or LengthWork.of(mix, model, slo))[0]


def _size(mix: WorkloadMix, model: ModelInputs, slo: Slo, work: LengthWork
          ) -> tuple[Sizing, PrefillPool, np.ndarray]:
    """The sizing, and the pool and slack sample it was sized with."""
    rates = work.rates
    lam = mix.rate_rps
    notes: list[str] = []
    bare = work.bare
    miss_budget = 1.0 - slo.attainment
    infeasible = work.infeasible
    target = slo.ttft_s
    bare_q = work.bare_q
    if bare_q > slo.ttft_s:
        target = bare_q
        notes.append(
            f"{infeasible:.0%} of requests miss the {slo.ttft_s:g} s TTFT objective on prefill "
            f"and KV transfer alone (p{100 * (1 - QUEUE_MISS_SHARE * miss_budget):.0f} bare "
            f"TTFT {bare_q:.2f} s); no prefill count fixes that, so the pool is sized to keep "
            f"p{100 * slo.attainment:.0f} queueing within that level instead")
    moments = work.moments
    if mix.load is not None and mix.arrival_ts is not None:
        pool = PrefillPool(lam, mix.arrival_cv2, moments, mix.load, mix.arrival_ts,
                           observed_rps=mix.population.observed_rate_rps
                           if mix.population is not None else None)
        sample = bare  # per request, in arrival order: the backlog depends on the window
    else:
        pool = PrefillPool(lam, mix.arrival_cv2, moments)
        sample = _quantile_sample(bare, TTFT_QUANTILES)
    x_count = ceil_count(lam / rates.transfer_capacity_rps) if lam > 0 else 1
    util_count = ceil_count(lam * moments.batched_mean / PREFILL_MAX_UTILIZATION) \
        if lam > 0 else 1
    # The TTFT count matters only where it exceeds the others; below them, only whether it is
    # below them (for the limit's name). at_least = their max - 1 answers both, usually in
    # one or two evaluations of the pool instead of a search from scratch.
    slo_count = pool.smallest(target - sample, miss_budget,
                              at_least=max(util_count, x_count) - 1)
    prefill = max(slo_count, util_count, x_count)
    prefill_limit = ("transfer" if x_count == prefill and x_count > max(slo_count, util_count)
                     else "utilization" if util_count > slo_count else "ttft-slo")
    d_count = ceil_count(lam / rates.decode_capacity_rps) if lam > 0 else 1
    m_count = decode_count_for_memory(mix, model.decode, lam, work.occupancy) if lam > 0 else 1
    decode = max(d_count, m_count, x_count)
    decode_limit = ("transfer" if x_count >= decode and x_count > max(d_count, m_count) else
                    "kv-memory" if m_count > d_count else "throughput")
    if not rates.decode_slo_feasible:
        notes.append(f"even one sequence per decode step takes "
                     f"{model.decode.step_s(1, rates.decode_context_tokens):.3f} s, over the "
                     f"{slo.tpot_s:g} s TPOT objective: no decode count meets it")
    up, ud, ux, per_node = utilizations(rates, lam, prefill, decode, model.link_bytes_per_s)
    sizing = Sizing(
        rates=rates, rate_rps=lam, prefill=prefill, decode=decode,
        theoretical_ratio=rates.theoretical_ratio,
        prefill_limit=prefill_limit, decode_limit=decode_limit,
        prefill_utilization=up, decode_utilization=ud, transfer_utilization=ux,
        binding=binding_stage(up, ud, ux), ttft_target_s=target,
        infeasible_ttft_fraction=infeasible, transfer_required_bytes_per_s=per_node,
        notes=tuple(notes))
    return sizing, pool, sample


def recommend(mix: WorkloadMix, model: ModelInputs, slo: Slo,
              work: LengthWork | None = None,
              deployed_prefill: int | None = None,
              measured: tuple[np.ndarray, np.ndarray] | None = None,
              failed: float = 0.0) -> Recommendation:
    """Instance counts that serve ``mix`` at ``mix.rate_rps`` within the objectives.

    With ``deployed_prefill`` it also predicts TTFT attainment and p90 at that count, for the
    check of the model against what the window observed; with ``measured`` (the window's
    wait and rest of TTFT per request, ``calibrate.measured_parts``) it recalibrates that
    prediction and, when the raw one is beyond ``MODEL_TOLERANCE`` of the window, uses it;
    ``failed`` (the window's share of failed requests, misses whatever their wait) comes out
    of the miss budget of the count sized with the window's waits.
    """
    work = work or LengthWork.of(mix, model, slo)
    s, pool, sample = _size(mix, model, slo, work)
    lam = mix.rate_rps
    moments = work.moments
    notes = list(s.notes)
    prefill = s.prefill
    at_deployed = _at_deployed(pool, sample, slo, deployed_prefill)
    cal, recalibrated, calibrated_prefill = None, False, None
    if measured is not None and deployed_prefill:
        cal = calibrate(pool, deployed_prefill, measured, work.bare, slo.ttft_s,
                        slo.attainment)
        raw = at_deployed.get("deployed_ttft_attainment")
        observed = observed_ttft_attainment(measured, slo.ttft_s)
        # beyond the tolerance in attainment, or in the TTFT quantile's level (a wait tail
        # mostly inside the objective moves the quantile before the attainment)
        recalibrated = cal is not None and (
            (raw is not None and observed is not None
             and abs(raw - observed) > MODEL_TOLERANCE)
            or p90_disagrees(at_deployed.get("deployed_ttft_p90_s"),
                             observed_ttft_quantile(measured, slo.attainment)))
        shaped = pool
        routing = routing_of(pool, deployed_prefill, measured[0]) if recalibrated else None
        if routing is not None and routing.per_instance:
            # requests wait while other instances idle: the waits' shape is a queue per
            # instance's, their level the window's
            separate = pool.per_instance()
            per = calibrate(separate, deployed_prefill, measured, work.bare, slo.ttft_s,
                            slo.attainment)
            if per is not None and 1.0 / PER_INSTANCE_SCALE_FACTOR <= per.wait_scale <= \
                    PER_INSTANCE_SCALE_FACTOR:
                cal, shaped = replace(per, routing=routing), separate
        if cal is not None and recalibrated and (cal.wait_scale > 1.0 or shaped is not pool):
            # The prefill count with the window's waits (never below the model's). Not
            # applied where the findings name decode short (``check.check_against_window``):
            # the waits may be its back-pressure, which more prefill instances do not remove.
            # each request's measured rest of TTFT where known, as the calibrated
            # attainment takes it (the model's bare TTFT elsewhere)
            due = np.where(np.isfinite(measured[0]), measured[1], work.bare)
            due = due if pool.fluid else _quantile_sample(due, TTFT_QUANTILES)
            # failures come out of the budget while they leave QUEUE_MISS_SHARE of it for
            # queueing; beyond that they are not the prefill pool's to fix and are left in
            cut = failed if failed <= QUEUE_MISS_SHARE * (1.0 - slo.attainment) else 0.0
            budget = 1.0 - slo.attainment - cut
            try:
                calibrated_prefill = shaped.scaled(cal.wait_scale).smallest(
                    s.ttft_target_s - due, budget, at_least=prefill) if budget > 0 else None
            except ValueError:  # no count meets it with these waits
                calibrated_prefill = None
            if cut > 0 and calibrated_prefill is not None:  # a count was sized so
                notes.append(f"the count sized with the window's waits leaves the window's "
                             f"{cut:.1%} failed requests (misses whatever their wait) out "
                             f"of the {1.0 - slo.attainment:.0%} miss budget")
    overloaded = pool.overloaded_share(prefill)
    if overloaded > 0:
        notes.append(f"{overloaded:.1%} of requests arrive in {pool_window(mix)} windows whose "
                     f"rate exceeds what {prefill} prefill instances serve; they queue "
                     "until the burst passes (sized so that the objective still holds for "
                     f"{slo.attainment:.0%} of all requests)")
    attainment = float(1.0 - pool.miss_share(prefill, slo.ttft_s - sample))
    p90 = pool.ttft_quantile(prefill, sample, slo.attainment)
    mean_service = float(moments.at(np.array([lam * moments.batched_mean / prefill]))[0][0])
    return Recommendation(
        rates=s.rates, rate_rps=lam, prefill=prefill, decode=s.decode,
        theoretical_ratio=s.theoretical_ratio,
        prefill_limit=s.prefill_limit, decode_limit=s.decode_limit,
        prefill_utilization=s.prefill_utilization, decode_utilization=s.decode_utilization,
        transfer_utilization=s.transfer_utilization,
        binding=s.binding,
        ttft_target_s=s.ttft_target_s, ttft_p90_s=p90,
        ttft_mean_s=pool.mean_wait_s(prefill, len(sample)) + float(work.bare.mean()),
        md1_ttft_s=md1_ttft_s(mean_service, lam / prefill),
        ttft_attainment=attainment, infeasible_ttft_fraction=s.infeasible_ttft_fraction,
        **at_deployed, calibration=cal, recalibrated=recalibrated,
        calibrated_prefill=calibrated_prefill,
        transfer_required_bytes_per_s=s.transfer_required_bytes_per_s, notes=tuple(notes),
    )


def _at_deployed(pool: PrefillPool, sample: np.ndarray, slo: Slo,
                 prefill: int | None) -> dict[str, float | None]:
    """Predicted TTFT attainment and p90 at ``prefill`` instances (None when not asked)."""
    if not prefill:
        return {}
    try:
        att = float(1.0 - pool.miss_share(prefill, slo.ttft_s - sample))
        p90 = float(pool.ttft_quantile(prefill, sample, slo.attainment))
    except (ValueError, ZeroDivisionError, OverflowError):  # an unstable pool: no prediction
        return {}
    return {"deployed_ttft_attainment": att if math.isfinite(att) else None,
            "deployed_ttft_p90_s": p90 if math.isfinite(p90) else None}


def pool_window(mix: WorkloadMix) -> str:
    return f"{mix.load.width_s:.0f} s" if mix.load is not None else "whole-trace"


def with_notes(rec: Recommendation, *notes: str) -> Recommendation:
    return replace(rec, notes=rec.notes + notes)


__all__ = ["LengthWork", "Recommendation", "Sizing", "Slo", "recommend", "size", "transfer_tokens"]
