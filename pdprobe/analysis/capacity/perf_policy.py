"""Fit policy: which observations to fit, when a fit is kept, and the profile fallback.

Fits are kept only when the data identifies a curve (enough observations, varied lengths or
batches, a good R²); otherwise the profile's curve is scaled to the data (one number), and
with too few observations the profile is used as is. Every decision is said in a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.capacity.perf_columns import FloatColumns
from pdprobe.analysis.capacity.perf_models import (
    DecodeModel,
    PrefillModel,
    attention_tokens2,
    decode_from_profile,
    prefill_from_profile,
)
from pdprobe.analysis.capacity.perf_observations import (
    BUSY_SEGMENT_S,
    BusyPeriods,
    busy_segments,
    isolated_rows,
    status_ok,
)
from pdprobe.analysis.capacity.perf_solver import FitResult, nnls_relative
from pdprobe.analysis.capacity.prefill_sample import sample_prefill_rows
from pdprobe.analysis.sampling import PASS_CHUNK, SAMPLED_MARK, positions
from pdprobe.profiles import Profile

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.dataset import Dataset


# A full three-coefficient fit needs this many observations: with fewer, the quadratic and the
# linear term trade off against each other within noise.
MIN_FIT_POINTS: Final = 30
# With at least this many, the profile's curve is kept and only scaled to the data (one number).
MIN_SCALE_POINTS: Final = 10
# Lengths must span this factor (p90/p10) for a slope to be identifiable; narrower mixes only
# calibrate the profile's scale.
MIN_LENGTH_SPREAD: Final = 2.0
# Decode batch sizes must vary by this factor to separate the per-sequence from the fixed cost.
MIN_BATCH_SPREAD: Final = 1.5
# A fit explaining less than this share of the variance is no better than the scaled profile.
MIN_FIT_R2: Final = 0.5
# Observed speed this far (either way) from the profile means the profile does not describe
# the deployment; say so.
PROFILE_CONTRADICTION_FACTOR: Final = 2.0
# Decode requests need at least this many output tokens to have a meaningful TPOT.


@dataclass(frozen=True)
class RoleFit:
    """What the fitting step concluded for one role."""

    method: str  # "fit", "scaled profile", "profile"
    n: int
    r2: float | None = None
    median_rel_error: float | None = None
    scale_vs_profile: float | None = None  # observed time / profile time at typical load
    notes: tuple[str, ...] = ()


def _spread(values: np.ndarray) -> float:
    lo, hi = np.percentile(values, [10, 90])
    return float(hi / lo) if lo > 0 else math.inf


def _role_fit(fit: FitResult | None, pred: np.ndarray, t: np.ndarray, scale: float,
              notes: list[str]) -> RoleFit:
    """The outcome of one role's fitting: the curve ``fit`` when it was kept, else the profile
    scaled by ``scale``, judged by its predictions ``pred`` of the observed times ``t``."""
    if fit is not None:
        return RoleFit("fit", len(t), fit.r2, fit.median_rel_error, scale, tuple(notes))
    # Denormal or absurd durations (1e-320 s from a broken export) overflow the squares and
    # ratios: they give an inf/nan figure, which is what such data deserves, not a warning.
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        ss_tot = float(np.sum((t - t.mean()) ** 2))
        r2 = 1.0 - float(np.sum((t - pred) ** 2)) / ss_tot if ss_tot > 0 else 0.0
        rel = float(np.median(np.abs(pred - t) / t))
    return RoleFit("scaled profile", len(t), r2, rel, scale, tuple(notes))


def _differs(ratio: float) -> str | None:
    """``"2.3× slower"``/``"faster"`` when observed/profile is beyond
    ``PROFILE_CONTRADICTION_FACTOR`` either way, else None."""
    if 1.0 / PROFILE_CONTRADICTION_FACTOR < ratio < PROFILE_CONTRADICTION_FACTOR:
        return None
    return f"{ratio:.1f}× slower" if ratio > 1 else f"{1.0 / ratio:.1f}× faster"


def fit_prefill(uncached: np.ndarray, prefill_s: np.ndarray, profile: Profile,
                what: str = "per-request prefill_s",
                cached: np.ndarray | None = None) -> tuple[PrefillModel, RoleFit]:
    """Prefill model from (uncached tokens, prefill time) pairs, or the profile when thin."""
    base = prefill_from_profile(profile)
    u = np.asarray(uncached, dtype=np.float64)
    t = np.asarray(prefill_s, dtype=np.float64)
    cp = np.zeros(len(u)) if cached is None else np.nan_to_num(np.asarray(cached, float), nan=0.0)
    ok = np.isfinite(u) & np.isfinite(t) & (t > 0) & (u >= 1)
    u, t, cp = u[ok], t[ok], cp[ok]
    n = len(u)
    if n < MIN_SCALE_POINTS:
        return base, RoleFit("profile", n, notes=(
            f"prefill: only {n} requests with {what}; {MIN_SCALE_POINTS} are needed to "
            f"calibrate the profile and {MIN_FIT_POINTS} with varied lengths to fit a curve, "
            f"so profile {profile.name} is used",))
    prof_t = base.alone_s(u, cp)
    scale = float(np.median(t / prof_t))
    notes: list[str] = []
    if SAMPLED_MARK in what:  # the observations are a bounded sample: say how large
        notes.append("prefill: the fit observes " + what[what.index(SAMPLED_MARK):].removesuffix(")"))
    model: PrefillModel | None = None
    fit: FitResult | None = None
    if n >= MIN_FIT_POINTS and _spread(u) >= MIN_LENGTH_SPREAD:
        x = np.column_stack([base.forwards(u), u, attention_tokens2(u, cp)])
        fit = nnls_relative(x, t)
        a, b, c = (float(v) for v in fit.coef)
        if b <= 0 and c <= 0:
            notes.append(f"prefill: fit rejected: time does not grow with prompt length over "
                         f"{n} requests (b = c = 0); profile curve scaled to the data instead")
        elif fit.r2 < MIN_FIT_R2:
            notes.append(f"prefill: fit rejected: it explains only R² = {fit.r2:.2f} of the "
                         f"variance of {what} (batching noise?); profile curve scaled instead")
        else:
            names = ("fixed cost", "linear term", "quadratic (attention) term")
            for i in fit.held_at_zero:
                notes.append(f"prefill: an unconstrained fit made the {names[i]} negative; "
                             "it is held at zero")
            model = PrefillModel(a, b, c, base.max_batch_tokens,
                                 f"fit to {n} requests' {what}")
    elif n >= MIN_FIT_POINTS:
        notes.append(f"prefill: prompt lengths vary too little (p90/p10 < {MIN_LENGTH_SPREAD:g}) "
                     "to fit a curve; profile curve scaled to the data")
    else:
        notes.append(f"prefill: {n} requests with {what} (< {MIN_FIT_POINTS} to fit a curve); "
                     "profile curve scaled to the data")
    if model is None:
        model = replace(base, a_s=base.a_s * scale, b_s_per_token=base.b_s_per_token * scale,
                        c_s_per_token2=base.c_s_per_token2 * scale,
                        source=f"profile {profile.name} × {scale:.2f} from {n} requests' {what}")
        fit = None  # rejected or never tried: the scaled profile is judged instead
    role = _role_fit(fit, model.alone_s(u, cp), t, scale, notes)
    typical = float(np.median(u))
    ratio = float(model.alone_s(np.array([typical]))[0] / base.alone_s(np.array([typical]))[0])
    differs = _differs(ratio)
    if differs:
        role = replace(role, notes=(*role.notes,
                       f"prefill: observed prefill is {differs} than profile "
                       f"{profile.name} at the median prompt ({typical:,.0f} uncached tokens): "
                       "the profile does not describe this deployment; the observed model is used"))
    return model, role


def fit_decode(batch: np.ndarray, ctx_tokens: np.ndarray, tpot_s: np.ndarray, profile: Profile,
               what: str = "per-request tpot_s") -> tuple[DecodeModel, RoleFit]:
    """Decode step model from (batch size, context tokens, TPOT) points, or the profile."""
    base = decode_from_profile(profile)
    bt = np.asarray(batch, dtype=np.float64)
    k = np.asarray(ctx_tokens, dtype=np.float64)
    t = np.asarray(tpot_s, dtype=np.float64)
    ok = np.isfinite(bt) & np.isfinite(k) & np.isfinite(t) & (t > 0) & (bt > 0) & (k >= 0)
    bt, k, t = bt[ok], k[ok], t[ok]
    n = len(t)
    if n < MIN_SCALE_POINTS:
        return base, RoleFit("profile", n, notes=(
            f"decode: only {n} observations of {what}; {MIN_SCALE_POINTS} are needed to "
            f"calibrate the profile and {MIN_FIT_POINTS} with varied batch sizes to fit, "
            f"so profile {profile.name} is used",))
    prof_t = base.step_s(bt, k)
    scale = float(np.median(t / prof_t))
    notes: list[str] = []
    if SAMPLED_MARK in what:  # the reconstruction ran on a sample: say how large
        notes.append("decode: the fit observes " + what[what.index(SAMPLED_MARK):].removesuffix(")"))
    model: DecodeModel | None = None
    fit: FitResult | None = None
    if n >= MIN_FIT_POINTS and _spread(bt) >= MIN_BATCH_SPREAD:
        fit = nnls_relative(np.column_stack([np.ones(n), k, bt]), t)
        a, b, c = (float(v) for v in fit.coef)
        if b <= 0 and c <= 0:
            notes.append(f"decode: fit rejected: step time does not grow with batch or context "
                         f"over {n} observations; profile curve scaled to the data instead")
        elif a <= 0:
            notes.append("decode: fit rejected: it gives no fixed per-step cost (weights must "
                         "be read every step); profile curve scaled to the data instead")
        elif fit.r2 < MIN_FIT_R2:
            notes.append(f"decode: fit rejected: it explains only R² = {fit.r2:.2f} of the "
                         f"variance of {what}; profile curve scaled to the data instead")
        else:
            names = ("fixed cost", "per-context-token term", "per-sequence term")
            for i in fit.held_at_zero:
                notes.append(f"decode: an unconstrained fit made the {names[i]} negative; "
                             "it is held at zero")
            model = DecodeModel(a, b, c, base.max_batch, base.kv_capacity_tokens,
                                f"fit to {n} observations of {what}")
    elif n >= MIN_FIT_POINTS:
        notes.append(f"decode: batch sizes vary too little (p90/p10 < {MIN_BATCH_SPREAD:g}) to "
                     "fit; profile curve scaled to the data")
    else:
        notes.append(f"decode: {n} observations of {what} (< {MIN_FIT_POINTS} to fit); profile "
                     "curve scaled to the data")
    if model is None:
        model = replace(base, a_s=base.a_s * scale, b_s_per_ctx_token=base.b_s_per_ctx_token * scale,
                        c_s_per_seq=base.c_s_per_seq * scale,
                        source=f"profile {profile.name} × {scale:.2f} from {n} observations "
                               f"of {what}")
        fit = None  # rejected or never tried: the scaled profile is judged instead
    role = _role_fit(fit, model.step_s(bt, k), t, scale, notes)
    b_med, k_med = float(np.median(bt)), float(np.median(k))
    differs = _differs(float(model.step_s(b_med, k_med) / base.step_s(b_med, k_med)))
    if differs:
        role = replace(role, notes=(*role.notes,
                       f"decode: observed decode steps are {differs} than profile "
                       f"{profile.name} at the median batch ({b_med:.0f} sequences): the profile "
                       "does not describe this deployment; the observed model is used"))
    return model, role


# --------------------------------------------------------------------------------------------
# Observations from the dataset
# --------------------------------------------------------------------------------------------



def prefill_observations(dataset: Dataset, periods: BusyPeriods | None = None,
                         max_points: int | None = None
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str] | str:
    """(uncached tokens, prefill time, cached tokens, what they are) per request, or why none.

    A request's ``prefill_s`` includes the other requests batched into its forwards, so under
    load it overstates its own cost. Where the records say when prefill started (``queue_s``)
    and on which instance, only requests that had their instance to themselves (a busy period
    of one request) are used, if there are enough of them: their time is the model's ``alone``
    time exactly. ``periods``: ``busy_periods(dataset.requests)`` if the caller has it.

    Above ``max_points`` usable observations (default
    ``prefill_sample.PREFILL_FIT_MAX_POINTS``) only a stratified sample of that many is read
    (``sample_prefill_rows``), and ``what`` says so ("... (a sample of ...)"; the fallback to
    every request then starts with ``BUSY_SEGMENTS`` and the sample's description follows).
    """
    if not dataset.has_request_column("prefill_s"):
        return "no prefill_s column in the request records"
    req = dataset.requests
    what = "per-request prefill_s"
    if dataset.has_request_column("queue_s") and dataset.has_request_column("prefill_instance"):
        # the requests alone first: under load they are few, and only they are read then
        rows = isolated_rows(req, periods)
        taken = sample_prefill_rows(req, rows, max_points)
        alone = _observations(req, rows if taken is None else taken.rows)
        del rows
        if len(alone[1]) >= MIN_FIT_POINTS:
            what = "prefill_s of requests alone on their instance"
            return (*alone, what if taken is None else f"{what} ({taken.describe()})")
        what = BUSY_SEGMENTS
    taken = sample_prefill_rows(req, None, max_points)
    if taken is None:
        return (*_observations(req), what)
    return (*_observations(req, taken.rows), f"{what} ({taken.describe()})")


def _observations(req: pd.DataFrame, rows: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(uncached tokens, prefill time, cached tokens) of the requests at ``rows`` (ascending
    positions; None: every request) with both times known, in row order.

    Memory: the columns are read at the rows kept (every request's validity a chunk at a
    time): no whole-size float copies, and no copy of the frame's rows.
    """
    cols = FloatColumns(req, ("prompt_tokens", "cached_tokens", "prefill_s"))
    if rows is None:
        ok = np.empty(len(req), dtype=bool)
        for lo in range(0, len(req), PASS_CHUNK):  # chunks: no whole-size temporaries
            at = slice(lo, lo + PASS_CHUNK)
            ok[at] = np.isfinite(cols("prefill_s", at)) & np.isfinite(cols("prompt_tokens", at))
        rows = positions(ok)
        del ok
    else:
        rows = rows[np.isfinite(cols("prefill_s", rows)) & np.isfinite(cols("prompt_tokens", rows))]
    if "status" in req:
        rows = rows[status_ok(req, rows)]
    cached = np.nan_to_num(cols("cached_tokens", rows), nan=0.0)
    uncached = np.maximum(cols("prompt_tokens", rows) - cached, 1.0)
    return uncached, cols("prefill_s", rows), cached


BUSY_SEGMENTS: Final = "busy time of prefill instances"


def fit_prefill_busy(requests: pd.DataFrame, profile: Profile,
                     periods: BusyPeriods | None = None
                     ) -> tuple[PrefillModel, RoleFit] | None:
    """Prefill model from busy time against computed tokens, when few requests ran alone.

    Under sustained load forwards are packed to the token budget, so a segment's busy time is
    ``(a/T + b)·Σu + c·Σattn``: the fixed cost per forward is not separable from the per-token
    cost; it is split in the profile's proportion. ``periods`` as in ``prefill_observations``.
    """
    seg = busy_segments(requests, periods)
    base = prefill_from_profile(profile)
    if seg is None or len(seg[2]) < MIN_FIT_POINTS:
        return None
    u, attn, busy = seg
    fit = nnls_relative(np.column_stack([u, attn]), busy)
    b_eff, c = (float(v) for v in fit.coef)
    if b_eff <= 0 or fit.r2 < MIN_FIT_R2:
        return None
    base_eff = base.a_s / base.max_batch_tokens + base.b_s_per_token
    scale = b_eff / base_eff
    model = PrefillModel(base.a_s * scale, base.b_s_per_token * scale, c, base.max_batch_tokens,
                         f"fit to {len(busy)} segments of prefill busy time")
    notes = (f"prefill: few requests ran alone, so the fit uses busy time against computed "
             f"tokens ({len(busy)} segments of {BUSY_SEGMENT_S:g} s); the fixed cost per "
             f"forward is split from the per-token cost in profile {profile.name}'s proportion",)
    return model, RoleFit("fit", len(busy), fit.r2, fit.median_rel_error, scale, notes)


def prefill_metric_scale(dataset: Dataset, uncached_sample: np.ndarray,
                         cached_sample: np.ndarray, profile: Profile
                         ) -> tuple[PrefillModel, RoleFit] | str:
    """The profile's prefill curve scaled so its mean matches the prefill-time histogram."""
    from pdprobe import signals as S
    from pdprobe.analysis.promql import histogram_window

    prefill = [i.name for i in dataset.instances_of("prefill")] or None
    hist = histogram_window(dataset.metrics, S.PREFILL_S, instances=prefill)
    count = float(hist.attrs.get("count", float("nan"))) if len(hist) else float("nan")
    total = float(hist.attrs.get("sum", float("nan"))) if len(hist) else float("nan")
    if not (count >= MIN_SCALE_POINTS and total > 0):
        return "no prefill-time histogram with enough requests"
    base = prefill_from_profile(profile)
    expected = float(base.alone_s(uncached_sample, cached_sample).mean())
    scale = (total / count) / expected
    model = replace(base, a_s=base.a_s * scale, b_s_per_token=base.b_s_per_token * scale,
                    c_s_per_token2=base.c_s_per_token2 * scale,
                    source=f"profile {profile.name} × {scale:.2f} from the prefill-time "
                           f"histogram ({count:.0f} requests)")
    notes: list[str] = ["prefill: only histograms (no per-request prefill_s): the profile's "
                        "curve shape is kept and its scale matched to the mean prefill time"]
    if scale >= PROFILE_CONTRADICTION_FACTOR or scale <= 1.0 / PROFILE_CONTRADICTION_FACTOR:
        word = "slower" if scale > 1 else "faster"
        notes.append(f"prefill: observed prefill is {max(scale, 1 / scale):.1f}× {word} than "
                     f"profile {profile.name}: the profile does not describe this deployment")
    return model, RoleFit("scaled profile", int(count), None, None, scale, tuple(notes))
