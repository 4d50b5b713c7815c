"""The capacity model recalibrated against the window it diagnoses (issue 16).

At the deployed counts the model predicts TTFT attainment and p90 from its own waits and bare
TTFTs (``recalibrate.check_model``). When request records carry the measured stages, the same
prediction is repeated with what the window measured:

- **wait scale** (burst scale): the measured p90 wait before prefill (``queue_s``) over the
  model's p90 wait at the deployed prefill count. Every wait of the pool (fluid backlog and
  stochastic tail) is multiplied by it, so the model keeps the *shape* of its waits over time
  and across requests, and takes their *level* from the window;
- **the rest of TTFT** per request: measured ``ttft_s − queue_s`` (prefill compute with its
  batch-mates, KV transfer, decode admission and the first step) instead of the model's bare
  prefill + transfer.

The calibrated attainment is then ``1 − mean_i P(k·W_i > SLO − R_i)``. It is not the observed
attainment restated: only the wait's p90 is taken from the window, so a model whose waits have
the wrong shape (misses in the wrong windows, a wrong tail) still disagrees. When the raw
prediction misses the observed attainment by more than ``check.MODEL_TOLERANCE``, the
calibrated one is used: it is reported, and when its waits are longer than the model's (a
scale above 1, or a queue per instance) they become a sizing input (``CalibratedWaits``,
``recalibrate.py``): the prefill count re-sized with them (``calibrated_prefill``, never
below the model's) and, when ``check.py`` takes it (not where a finding names decode short:
the waits may be its back-pressure), the windows, band and estimates sized with them too.

TPOT at the deployed decode count (``tpot_at``): per instance, the batch is the Poisson count
of sequences in flight (M/G/∞, mean ``r·E[O]·τ``), each step ``a + (b·κ + c)·B``; its p90 is
the step at the batch's mean + 1.28 σ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.capacity.rates import OccupancyMoments, decode_occupancy

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.capacity.mix import WorkloadMix
    from pdprobe.analysis.capacity.perf_fit import DecodeModel
    from pdprobe.analysis.capacity.pool import PrefillPool

# The wait scale is kept within these bounds: beyond them the model's waits have nothing in
# common with the window's (a queue the model cannot see at all, or one it invents), and the
# note says the bound was hit.
WAIT_SCALE_MIN: Final = 1.0 / 64.0
WAIT_SCALE_MAX: Final = 64.0
# Fewer requests with a measured wait and TTFT than this: no recalibration (a mean of a few
# waits says little about the level).
MIN_CALIBRATION_REQUESTS: Final = 50
# A model mean wait below this (1 ms) is "no queue": a scale against it is meaningless.
MIN_MODEL_WAIT_S: Final = 1e-3
# Normal quantile of the p90 used for the decode batch's spread.
P90_Z: Final = 1.2816


# The wait statistic matched: 0 = the mean; else this quantile of the waits.
WAIT_QUANTILE: Final = 0.9


def _wait_level(pool: PrefillPool, servers: int, n: int) -> float:
    """The model's mean wait, or its ``WAIT_QUANTILE`` over the requests."""
    if not WAIT_QUANTILE:
        return pool.mean_wait_s(servers, n)
    try:
        return float(pool.ttft_quantile(servers, np.zeros(n), WAIT_QUANTILE))
    except (ValueError, ZeroDivisionError, OverflowError):
        return math.inf


# The window's share of requests that waited is compared with each discipline's only when the
# two predict shares at least this far apart (0.1 = 10 points): at low load both queues make
# almost nobody wait and the share cannot tell them apart.
MIN_SHARE_GAP: Final = 0.1


# A queue per instance is taken as the waits' shape only when, recalibrated with it, the
# window's wait level is within this factor of its own: per instance the arrivals' variability
# is what the router leaves (round-robin ~ca²/c, random ~1), which moves Kingman's
# (ca² + cs²)/2 by at most ~3x for the service spreads seen (cs² >= 0.5). Far beyond it the
# waits are something else (a saturated decode pool's back-pressure, a stall), which also
# makes nearly every request wait, and the pooled recalibration stands.
PER_INSTANCE_SCALE_FACTOR: Final = 4.0


@dataclass(frozen=True)
class Routing:
    """Which queueing discipline the window's waits look like at the deployed prefill count."""

    waited: float  # share of the window's requests that waited (queue_s > MIN_MODEL_WAIT_S)
    pooled: float  # share the model's one pooled queue (G/G/c) makes wait
    separate: float  # share a queue per instance (c x G/G/1) makes wait

    @property
    def per_instance(self) -> bool:
        """The waits look like a queue per instance: requests wait while others are idle."""
        return (abs(self.separate - self.pooled) >= MIN_SHARE_GAP
                and abs(self.waited - self.separate) < abs(self.waited - self.pooled))


def _waiting_share(pool: PrefillPool, servers: int, n: int) -> float:
    """Share of requests that wait at all: every one in a window with a backlog, else the
    window's probability of waiting."""
    w = pool.waits(servers, n)
    per_window = np.where(w.fluid_window_s > 0, 1.0, w.p_wait) if len(w.fluid_window_s) \
        == len(w.p_wait) else w.p_wait
    counts = np.bincount(w.window, minlength=len(per_window))
    return float(np.dot(counts, per_window) / max(len(w.window), 1))


def routing_of(pool: PrefillPool, servers: int, queue: np.ndarray) -> Routing | None:
    """The window's share of requests that waited against a pooled queue's and a queue per
    instance's at ``servers`` (None without enough measured waits)."""
    known = np.isfinite(queue)
    n = int(known.sum())
    if n < MIN_CALIBRATION_REQUESTS:
        return None
    try:
        pooled = _waiting_share(pool, servers, len(queue))
        separate = _waiting_share(pool.per_instance(), servers, len(queue))
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return Routing(waited=float(np.count_nonzero(queue[known] > MIN_MODEL_WAIT_S)) / n,
                   pooled=pooled, separate=separate)


@dataclass(frozen=True)
class Calibration:
    """The model's TTFT prediction at the deployed counts, recalibrated with the window."""

    wait_scale: float  # measured mean wait / the model's (bounded)
    observed_mean_wait_s: float
    model_mean_wait_s: float
    attainment: float  # calibrated share of requests within the TTFT objective
    p90_s: float  # calibrated TTFT p90 (inf when the tail has no end)
    requests: int  # requests with a measured wait and TTFT
    bounded: bool  # the scale hit WAIT_SCALE_MIN or WAIT_SCALE_MAX
    # set when the waits were recalibrated with a queue per instance (``Routing``)
    routing: Routing | None = None


@dataclass(frozen=True, eq=False)
class CalibratedWaits:
    """The wait model recalibrated against the window, as an input every sizing takes.

    The model's waits in the queue shape the window showed (a queue per instance, or the
    pooled G/G/c), multiplied by the window's level (``wait_scale``); each request's measured
    rest of TTFT (``rest_s``: prefill with its batch-mates, KV transfer, decode admission)
    in place of the model's bare TTFT (``bare_s``, the same requests'); the window's failed
    requests (``failed_cut``, a share) out of the miss budget. Arrays are per request of the
    mix it was measured on, in the mix's order; ``rows`` takes a time window's run of them.
    The overall count, each window's and the band's are sized with the same instance, so
    they describe one model (``sizings.Sizings``, ``recommend.sizing_of``).
    """

    wait_scale: float
    per_instance: bool
    rest_s: np.ndarray  # NaN where a request's wait or TTFT was not measured
    bare_s: np.ndarray
    failed_cut: float = 0.0

    def pool(self, pool: PrefillPool) -> PrefillPool:
        """``pool`` with the window's queue shape and wait level."""
        return (pool.per_instance() if self.per_instance else pool).scaled(self.wait_scale)

    def due_s(self, bare: np.ndarray) -> np.ndarray:
        """Each request's TTFT without waiting, for a what-if of the same requests whose
        model bare TTFT is ``bare``: the measured rest moved by the model's change
        (``bare − bare_s``: zero at the observed lengths, so exactly the measured rest), the
        model's bare TTFT where nothing was measured."""
        if len(bare) != len(self.rest_s):
            # a programming error, not "no count meets the objective" (the ValueError that
            # sizing's callers catch): it must not pass for a window that cannot be sized
            raise RuntimeError("calibrated waits and the mix sized do not line up")
        known = np.isfinite(self.rest_s)
        return np.where(known, self.rest_s + (bare - self.bare_s), bare)

    def rows(self, lo: int, hi: int) -> CalibratedWaits:
        """The same model for requests ``lo..hi-1`` of the mix (a time window's run)."""
        return replace(self, rest_s=self.rest_s[lo:hi], bare_s=self.bare_s[lo:hi])


def measured_parts(requests: pd.DataFrame, mix: WorkloadMix) -> tuple[np.ndarray, np.ndarray] | None:
    """Per request, in the mix's order: (wait before prefill, rest of TTFT), NaN where unknown.

    The mix keeps the records with a prompt, an output and an arrival time, sorted by arrival
    (``mix.mix_from_requests``): the same filter and order apply here; a sampled mix names
    its requests' rows (``Population.source_rows``). None when the records lack ``queue_s``
    or ``ttft_s`` or the rows do not line up.
    """
    if "queue_s" not in requests.columns or "ttft_s" not in requests.columns:
        return None
    pop = mix.population
    if pop is not None:  # a sampled mix: its requests' own rows
        if pop.source_rows is None or len(pop.source_rows) != mix.size:
            return None
        queue = requests["queue_s"].take(pop.source_rows).to_numpy(dtype=np.float64,
                                                                   na_value=np.nan)
        ttft = requests["ttft_s"].take(pop.source_rows).to_numpy(dtype=np.float64,
                                                                 na_value=np.nan)
        return _parts(queue, ttft)
    prompt = requests["prompt_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)
    output = requests["output_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)
    ts = requests["arrival_ts"].to_numpy(dtype=np.float64, na_value=np.nan)
    ok = np.isfinite(prompt) & np.isfinite(output) & (prompt >= 1) & np.isfinite(ts)
    queue = requests["queue_s"].to_numpy(dtype=np.float64, na_value=np.nan)[ok]
    ttft = requests["ttft_s"].to_numpy(dtype=np.float64, na_value=np.nan)[ok]
    ts = ts[ok]
    if len(ts) != mix.size:
        return None
    if len(ts) > 1 and not bool(np.all(ts[1:] >= ts[:-1])):
        order = np.argsort(ts, kind="stable")
        queue, ttft = queue[order], ttft[order]
    return _parts(queue, ttft)


def failed_share(requests: pd.DataFrame, mix: WorkloadMix) -> float:
    """Share of the mix's requests whose status is not ok: the SLO's attainment counts them
    as misses whatever their TTFT (``slo.py``), so a count sized with the window's waits
    leaves them out of the miss budget. Read on a sampled mix's own rows."""
    from pdprobe.analysis.row_slices import category_mask

    if "status" not in requests.columns or not len(requests):
        return 0.0
    column = requests["status"]
    pop = mix.population
    if pop is not None and pop.source_rows is not None:
        column = column.take(pop.source_rows)
    failed = category_mask(column, lambda s: s != "ok")
    return float(np.count_nonzero(failed)) / len(failed) if len(failed) else 0.0


def _parts(queue: np.ndarray, ttft: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(wait, rest of TTFT) where both are known and consistent, NaN elsewhere."""
    known = np.isfinite(queue) & np.isfinite(ttft) & (queue >= 0) & (ttft >= queue)
    return np.where(known, queue, np.nan), np.where(known, ttft - queue, np.nan)


def calibrate(pool: PrefillPool, servers: int, parts: tuple[np.ndarray, np.ndarray],
              bare: np.ndarray, slo_ttft_s: float, attainment: float) -> Calibration | None:
    """The TTFT prediction at ``servers`` prefill instances with the window's wait level and
    measured rest of TTFT (``parts`` from ``measured_parts``; ``bare``: the model's bare TTFT
    per request, standing in where a request's rest was not measured)."""
    queue, rest = parts
    known = np.isfinite(queue)
    n = int(known.sum())
    if n < MIN_CALIBRATION_REQUESTS:
        return None
    model_wait = _wait_level(pool, servers, len(bare))
    observed_wait = float(np.quantile(queue[known], WAIT_QUANTILE)) if WAIT_QUANTILE \
        else float(np.mean(queue[known]))
    if not math.isfinite(model_wait):
        return None  # an unbounded queue in the model: no scale brings it to the window
    if model_wait < MIN_MODEL_WAIT_S:
        scale = WAIT_SCALE_MAX if observed_wait > MIN_MODEL_WAIT_S else 1.0
    else:
        scale = observed_wait / model_wait
    bounded = not WAIT_SCALE_MIN <= scale <= WAIT_SCALE_MAX
    scale = min(max(scale, WAIT_SCALE_MIN), WAIT_SCALE_MAX)
    scaled = pool.scaled(scale)
    due = np.where(known, rest, bare)
    waits = scaled.waits(servers, len(due))
    miss = waits.exceed(slo_ttft_s - due)
    att = float(1.0 - np.mean(miss[known]))
    try:
        p90 = float(scaled.ttft_quantile(servers, due, attainment))
    except (ValueError, ZeroDivisionError, OverflowError):
        p90 = math.inf
    return Calibration(wait_scale=scale, observed_mean_wait_s=observed_wait,
                       model_mean_wait_s=float(model_wait), attainment=att, p90_s=p90,
                       requests=n, bounded=bounded)


def observed_ttft_attainment(parts: tuple[np.ndarray, np.ndarray],
                             slo_ttft_s: float) -> float | None:
    """Share of the requests with a measured wait and TTFT that met the TTFT objective."""
    queue, rest = parts
    known = np.isfinite(queue)
    if int(known.sum()) < MIN_CALIBRATION_REQUESTS:
        return None
    return float(np.mean(queue[known] + rest[known] <= slo_ttft_s))


def observed_ttft_quantile(parts: tuple[np.ndarray, np.ndarray], q: float) -> float | None:
    """The ``q``-quantile of TTFT over the requests with a measured wait and TTFT (the
    statistic ``PrefillPool.ttft_quantile`` predicts: the window's p90 at ``q`` = 0.9)."""
    queue, rest = parts
    known = np.isfinite(queue)
    if int(known.sum()) < MIN_CALIBRATION_REQUESTS:
        return None
    return float(np.quantile(queue[known] + rest[known], q))


@dataclass(frozen=True)
class TpotEstimate:
    """TPOT at a decode count: p90, attainment of the objective, and the mean batch."""

    p90_s: float
    attainment: float
    batch_mean: float


def tpot_at(mix: WorkloadMix, model: DecodeModel, rate_rps: float, decode: int,
            slo_tpot_s: float, moments: OccupancyMoments | None = None) -> TpotEstimate | None:
    """TPOT p90 and attainment at ``decode`` instances, None when decode is overloaded there
    (the batch grows without bound: requests wait for admission instead)."""
    if decode < 1 or rate_rps <= 0:
        return None
    m = moments or OccupancyMoments.of(mix)
    r = rate_rps / decode
    occ = decode_occupancy(mix, model, r, m)
    if not math.isfinite(occ.step_s):
        return None
    batch = r * m.mean_output_tokens * occ.step_s
    per_seq = model.b_s_per_ctx_token * m.kappa + model.c_s_per_seq
    sd = math.sqrt(max(batch, 0.0))
    p90 = model.a_s + per_seq * min(batch + P90_Z * sd, float(model.max_batch))
    if per_seq <= 0:
        att = 1.0 if model.a_s <= slo_tpot_s else 0.0
    else:
        limit = (slo_tpot_s - model.a_s) / per_seq  # the largest batch within the objective
        if sd <= 0:
            att = 1.0 if batch <= limit else 0.0
        else:
            att = 0.5 * (1.0 + math.erf((limit - batch) / (sd * math.sqrt(2.0))))
    return TpotEstimate(p90_s=float(p90), attainment=float(att), batch_mean=float(batch))


def recalibration_note(cal: Calibration) -> str:
    """What the recalibration measured and did, in one note."""
    text = (f"recalibrated against the window: its p{WAIT_QUANTILE * 100:.0f} wait before "
            f"prefill is {cal.observed_mean_wait_s:.2f} s against the model's "
            f"{cal.model_mean_wait_s:.2f} s, so every wait is scaled by {cal.wait_scale:.2g}"
            + (" (the bound)" if cal.bounded else "")
            + ", and each request's measured rest of TTFT (prefill, transfer, decode "
            f"admission) replaces the model's; {cal.requests} requests")
    r = cal.routing
    if r is not None:
        text += (f"; {r.waited:.0%} of the window's requests waited before prefill, where one "
                 f"pooled queue would make {r.pooled:.0%} wait and a queue per instance "
                 f"{r.separate:.0%}: the router keeps a queue per prefill instance (requests "
                 "wait while other instances are idle: round-robin or random routing), so "
                 "the recalibrated waits are those of a queue per instance")
    elif cal.wait_scale < 1.0:
        text += "; the model's waits are longer than measured, so its counts are kept"
    return text
