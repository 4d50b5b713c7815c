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
from typing import TYPE_CHECKING, Final

import numpy as np

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

if TYPE_CHECKING:
    from pdprobe.analysis.capacity.calibrate import CalibratedWaits
    from pdprobe.analysis.capacity.sizings import Sizings

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
    """A ``Sizing`` plus the TTFT estimates at its prefill count, by the wait model it was
    sized with (the model's own, or the window-calibrated one: ``calibrated``)."""

    ttft_p90_s: float  # estimated at the recommended prefill count
    ttft_mean_s: float  # mean wait + mean TTFT without waiting
    md1_ttft_s: float  # DistServe's M/D/1 cross-check at the same per-instance load
    ttft_attainment: float  # predicted share of requests within the TTFT objective
    calibrated: bool = False  # sized and estimated with the window-calibrated waits


def size(mix: WorkloadMix, model: ModelInputs, slo: Slo,
         work: LengthWork | None = None, waits: CalibratedWaits | None = None) -> Sizing:
    """The instance counts for ``mix`` at ``mix.rate_rps`` (what the band and windows need);
    with ``waits`` the prefill count is also sized with the window-calibrated waits (never
    below the model's own count)."""
    return sizing_of(mix, model, slo, work or LengthWork.of(mix, model, slo), waits)[0]


def prefill_pool(mix: WorkloadMix, work: LengthWork) -> tuple[PrefillPool, np.ndarray]:
    """The model's prefill pool for ``mix`` and the bare-TTFT sample it is sized on (per
    request in arrival order when the pool has load windows, else quantiles)."""
    if mix.load is not None and mix.arrival_ts is not None:
        pool = PrefillPool(mix.rate_rps, mix.arrival_cv2, work.moments, mix.load,
                           mix.arrival_ts, observed_rps=mix.population.observed_rate_rps
                           if mix.population is not None else None)
        return pool, work.bare  # per request: the backlog depends on the window
    return (PrefillPool(mix.rate_rps, mix.arrival_cv2, work.moments),
            _quantile_sample(work.bare, TTFT_QUANTILES))


@dataclass(frozen=True)
class Sized:
    """The pool and TTFT-without-waiting sample a prefill count was sized with (the
    calibrated ones when sized with calibrated waits)."""

    pool: PrefillPool
    sample: np.ndarray
    mean_due_s: float  # mean TTFT without waiting over every request


@dataclass(frozen=True, eq=False)
class OwnSizing:
    """A mix's sizing by the model's own waits, with what it was sized with: sizing the
    same mix with calibrated waits starts from it (``sizing_of``'s ``own``) instead of
    repeating the model's pool search and the mix's ``LengthWork``."""

    mix: WorkloadMix
    work: LengthWork
    sizing: Sizing
    sized: Sized
    headroom: int = 0  # the TTFT count less the other floors' count less one (the search's)


def own_sizing(mix: WorkloadMix, model: ModelInputs, slo: Slo, work: LengthWork,
               headroom: int | None = None) -> OwnSizing:
    """``mix`` sized by the model's own waits (raises ``ValueError`` when no count meets
    the objective). ``headroom``: how far above its start the TTFT count probably is (another
    mix's ``OwnSizing.headroom``): where the pool search starts, not its answer."""
    rates = work.rates
    lam = mix.rate_rps
    notes: list[str] = []
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
    pool, sample = prefill_pool(mix, work)
    x_count = ceil_count(lam / rates.transfer_capacity_rps) if lam > 0 else 1
    util_count = ceil_count(lam * moments.batched_mean / PREFILL_MAX_UTILIZATION) \
        if lam > 0 else 1
    # The TTFT count matters only where it exceeds the others; below them, only whether it is
    # below them (for the limit's name). at_least = their max - 1 answers both, usually in
    # one or two evaluations of the pool instead of a search from scratch.
    start = max(util_count, x_count) - 1
    slo_count = pool.smallest(target - sample, miss_budget, at_least=start,
                              guess=start + headroom if headroom else None)
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
    return OwnSizing(mix, work, sizing, Sized(pool, sample, float(work.bare.mean())),
                     slo_count - start)


def sizing_of(mix: WorkloadMix, model: ModelInputs, slo: Slo, work: LengthWork,
          waits: CalibratedWaits | None = None, own: OwnSizing | None = None,
          guess: int | None = None) -> tuple[Sizing, Sized]:
    """The sizing, and what its prefill count was sized with. ``own``: this mix's
    ``own_sizing`` when the caller has it; ``guess``: where the calibrated count probably
    is (``PrefillPool.smallest``)."""
    own = own or own_sizing(mix, model, slo, work)
    if waits is None:
        return own.sizing, own.sized
    # The same objective with the window's waits and each request's measured rest of
    # TTFT; the window's failures come out of the budget (``CalibratedWaits``). Never
    # below the model's own count: a wait scale below 1 lowers nothing.
    s = own.sizing
    pool = own.sized.pool
    due = waits.due_s(work.bare)
    sample = due if pool.fluid else _quantile_sample(due, TTFT_QUANTILES)
    pool = waits.pool(pool)
    count = pool.smallest(s.ttft_target_s - sample, 1.0 - slo.attainment - waits.failed_cut,
                          at_least=s.prefill, guess=guess)
    if count > s.prefill:
        up, ud, ux, per_node = utilizations(s.rates, s.rate_rps, count, s.decode,
                                            model.link_bytes_per_s)
        s = replace(s, prefill=count, prefill_limit="ttft-slo", prefill_utilization=up,
                    decode_utilization=ud, transfer_utilization=ux,
                    binding=binding_stage(up, ud, ux), transfer_required_bytes_per_s=per_node)
    return s, Sized(pool=pool, sample=sample, mean_due_s=float(due.mean()))


def recommend(mix: WorkloadMix, model: ModelInputs, slo: Slo,
              work: LengthWork | None = None, waits: CalibratedWaits | None = None,
              at_least: int = 0, before: tuple[str, ...] = (),
              sizings: Sizings | None = None) -> Recommendation:
    """Instance counts that serve ``mix`` at ``mix.rate_rps`` within the objectives, and the
    TTFT estimates at the prefill count, all by one wait model: the model's own, or with
    ``waits`` the window-calibrated one (``recalibrate.check_model``). ``at_least``: a floor
    on the prefill count set by a policy (the deployed count kept); the estimates, notes
    and utilisations are at the count returned. ``before``: notes placed after the sizing's
    own and before the estimates' (the model check's). ``sizings``: the plan's
    (``sizings.Sizings``; the whole mix is its ``PLAN``, with ``work``).
    """
    work = work or LengthWork.of(mix, model, slo)
    s, sized = sizing_of(mix, model, slo, work, waits) if sizings is None else \
        sizings.whole(mix, work, model, slo, waits)
    lam = mix.rate_rps
    moments = work.moments
    notes = list(s.notes) + list(before)
    prefill = max(s.prefill, at_least)
    pool, sample = sized.pool, sized.sample
    if prefill != s.prefill:
        up, ud, ux, per_node = utilizations(s.rates, lam, prefill, s.decode,
                                            model.link_bytes_per_s)
        s = replace(s, prefill=prefill, prefill_utilization=up, transfer_utilization=ux,
                    binding=binding_stage(up, ud, ux), transfer_required_bytes_per_s=per_node)
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
        ttft_mean_s=pool.mean_wait_s(prefill, len(sample)) + sized.mean_due_s,
        md1_ttft_s=md1_ttft_s(mean_service, lam / prefill),
        ttft_attainment=attainment, infeasible_ttft_fraction=s.infeasible_ttft_fraction,
        calibrated=waits is not None,
        transfer_required_bytes_per_s=s.transfer_required_bytes_per_s, notes=tuple(notes),
    )


def pool_window(mix: WorkloadMix) -> str:
    return f"{mix.load.width_s:.0f} s" if mix.load is not None else "whole-trace"


def with_notes(rec: Recommendation, *notes: str) -> Recommendation:
    return replace(rec, notes=rec.notes + notes)


__all__ = ["LengthWork", "Recommendation", "Sizing", "Slo", "recommend", "size", "transfer_tokens"]
