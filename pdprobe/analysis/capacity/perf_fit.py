"""Per-role performance models, fitted from what was observed, the profile as fallback.

Prefill (DistServe's form): one forward over uncached chunks ``l_i`` takes
``a + b·Σl + c·Σl²``; a request of ``u`` uncached tokens needs ``ceil(u / T)`` forwards
(``T`` = token budget per forward). Decode: a step over ``B`` sequences holding ``K`` context
tokens takes ``a + b·K + c·B``. Fits are non-negative least squares on *relative* error (as
DistServe fits its coefficients) with Huber reweighting against outliers; the profile is used,
or scaled to the data, when observations are too few or too uniform to identify a curve.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

import numpy as np

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
# Huber tuning constant (in robust standard deviations) and reweighting passes.
HUBER_K: Final = 1.345
HUBER_PASSES: Final = 4
# Beyond this many observations the first reweighting passes use a stratified sample of this
# size and only the last pass all of them: a million-request fit then costs a fifth of a
# second instead of a second, and predictions move by about as much as between two
# independent captures of that size (measured in docs/model.md, "Large captures").
NNLS_MAX_POINTS: Final = 100_000
NNLS_SAMPLE_SEED: Final = 20240601
# Observed speed this far (either way) from the profile means the profile does not describe
# the deployment; say so.
PROFILE_CONTRADICTION_FACTOR: Final = 2.0
# Decode requests need at least this many output tokens to have a meaningful TPOT.
MIN_OUTPUT_FOR_TPOT: Final = 2
# Busy periods of prefill instances are cut into segments this long (by when their requests
# finish): many forwards each, so a forward straddling a boundary is a small error.
BUSY_SEGMENT_S: Final = 10.0
# Bin width for metric-based decode observations: several scrapes per bin, short enough that
# the batch size is roughly constant within it.
METRIC_FIT_STEP_S: Final = 60.0


@dataclass(frozen=True)
class PrefillModel:
    """Prefill forward time ``a + b·Σl + c·Σl²`` with a token budget per forward."""

    a_s: float
    b_s_per_token: float
    c_s_per_token2: float
    max_batch_tokens: int
    source: str = "profile"

    def forwards(self, uncached: np.ndarray) -> np.ndarray:
        return np.maximum(np.ceil(np.asarray(uncached, dtype=np.float64) / self.max_batch_tokens), 1.0)

    def alone_s(self, uncached: np.ndarray, cached: np.ndarray | float = 0.0) -> np.ndarray:
        """Prefill time of each request run on its own (chunked at the token budget)."""
        u = np.asarray(uncached, dtype=np.float64)
        return self.forwards(u) * self.a_s + self.b_s_per_token * u \
            + self.c_s_per_token2 * attention_tokens2(u, cached)

    def batched_s(self, uncached: np.ndarray, cached: np.ndarray | float = 0.0) -> np.ndarray:
        """Each request's share of busy time when forwards are packed to the token budget.

        Attention (the quadratic term) is per sequence, so batching amortises only the fixed
        cost per forward; chunking keeps the quadratic total (chunk ``k`` attends its prefix).
        """
        u = np.asarray(uncached, dtype=np.float64)
        return self.a_s * u / self.max_batch_tokens + self.b_s_per_token * u \
            + self.c_s_per_token2 * attention_tokens2(u, cached)

    def alone_and_batched_s(self, uncached: np.ndarray, cached: np.ndarray | float = 0.0
                            ) -> tuple[np.ndarray, np.ndarray]:
        """``(alone_s, batched_s)`` in one go, sharing the per-token and attention terms."""
        u = np.asarray(uncached, dtype=np.float64)
        linear = self.b_s_per_token * u
        attn = self.c_s_per_token2 * attention_tokens2(u, cached)
        alone = self.forwards(u) * self.a_s
        alone += linear
        alone += attn
        batched = self.a_s * u / self.max_batch_tokens
        batched += linear
        batched += attn
        return alone, batched


def attention_tokens2(uncached: np.ndarray, cached: np.ndarray | float = 0.0) -> np.ndarray:
    """``(C + u)² − C²``: the computed tokens attend to the cached prefix too."""
    u = np.asarray(uncached, dtype=np.float64)
    return u * (u + 2.0 * np.asarray(cached, dtype=np.float64))


@dataclass(frozen=True)
class DecodeModel:
    """Decode step time ``a + b·K + c·B`` and the memory and batch limits."""

    a_s: float
    b_s_per_ctx_token: float
    c_s_per_seq: float
    max_batch: int
    kv_capacity_tokens: int
    source: str = "profile"

    def step_s(self, batch: np.ndarray | float, ctx_tokens: np.ndarray | float) -> np.ndarray:
        return self.a_s + self.b_s_per_ctx_token * np.asarray(ctx_tokens, dtype=np.float64) \
            + self.c_s_per_seq * np.asarray(batch, dtype=np.float64)


def prefill_from_profile(p: Profile) -> PrefillModel:
    return PrefillModel(p.prefill_a_s, p.prefill_b_s_per_token, p.prefill_c_s_per_token2,
                        p.prefill_max_batch_tokens, f"profile {p.name}")


def decode_from_profile(p: Profile) -> DecodeModel:
    return DecodeModel(p.decode_a_s, p.decode_b_s_per_ctx_token, p.decode_c_s_per_seq,
                       p.decode_max_batch, p.kv_capacity_tokens, f"profile {p.name}")


@dataclass(frozen=True)
class FitResult:
    """Coefficients from a constrained fit and how well they explain the data."""

    coef: np.ndarray
    r2: float
    median_rel_error: float
    negative_unconstrained: tuple[int, ...]  # columns an unconstrained fit made negative


def fit_sample(n: int, max_points: int = NNLS_MAX_POINTS) -> np.ndarray | None:
    """Rows for the fit when there are more than ``max_points``: one random row per block.

    Stratified over the observations' order (arrival order here, so every part of the capture
    is represented in proportion): the rows are cut into ``max_points`` consecutive blocks and
    one row is drawn from each, with a fixed seed so a capture always gives the same fit.
    """
    if n <= max_points:
        return None
    rng = np.random.default_rng(NNLS_SAMPLE_SEED)
    edges = (np.arange(max_points + 1) * (n / max_points)).astype(np.int64)
    return edges[:-1] + (rng.random(max_points) * np.diff(edges)).astype(np.int64)


def nnls_relative(x: np.ndarray, y: np.ndarray) -> FitResult:
    """Non-negative coefficients minimising Huber-weighted squared *relative* error.

    Columns are scaled to unit norm for conditioning; relative error keeps short requests
    (small times) from being drowned by long ones, as in DistServe's latency fits. Each
    weighted least-squares problem is reduced to its ``k × k`` triangle
    (``‖Ax − b‖² = ‖Rx − Qᵀb‖² + const``), so the non-negative solve is exact and cheap.
    Beyond ``NNLS_MAX_POINTS`` observations the first reweighting passes run on a stratified
    sample of that size (``fit_sample``) and the last pass on all observations.
    """
    x_all = np.asarray(x, dtype=np.float64)
    y_all = np.asarray(y, dtype=np.float64)
    a_all = x_all / y_all[:, None]
    norms = np.linalg.norm(a_all, axis=0)
    norms = np.where(norms > 0, norms, 1.0)
    a_all = a_all / norms
    rows = fit_sample(len(y_all))
    a_n = a_all if rows is None else a_all[rows]
    ones = np.ones(len(a_n))
    w = np.ones(len(a_n))
    coef_n = np.zeros(a_all.shape[1])
    unconstrained: np.ndarray | None = None
    for i in range(HUBER_PASSES):
        if rows is not None and i == HUBER_PASSES - 1:
            # last pass on everything: the weights from all residuals, one full solve
            a_n, ones = a_all, np.ones(len(a_all))
            w_all = _huber_weights(a_n @ coef_n - ones)
            if w_all is None:
                break
            w = w_all
        r, qb = _reduced(a_n, w, exact=rows is None)
        if unconstrained is None:  # first pass: unit weights, the plain least-squares problem
            unconstrained = np.linalg.lstsq(r, qb, rcond=None)[0]
        coef_n = nnls_triangular(r, qb)
        if i < HUBER_PASSES - 1:
            w_next = _huber_weights(a_n @ coef_n - ones)
            if w_next is None:
                break
            w = w_next
    assert unconstrained is not None
    negative = tuple(int(i) for i in np.flatnonzero(unconstrained < 0))
    coef = coef_n / norms
    pred = x_all @ coef
    ss_res = float(np.sum((y_all - pred) ** 2))
    ss_tot = float(np.sum((y_all - y_all.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    rel = float(np.median(np.abs(pred - y_all) / y_all))
    return FitResult(coef, r2, rel, negative)


def _huber_weights(resid: np.ndarray) -> np.ndarray | None:
    """Huber weights for relative residuals (None when the robust scale is 0: a perfect fit)."""
    scale = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
    if scale <= 0:
        return None
    k = HUBER_K * scale
    return np.where(np.abs(resid) <= k, 1.0, k / np.maximum(np.abs(resid), 1e-300))


# Normal equations lose about cond² of precision; up to this condition number of the scaled
# design that is still below 1e-9 relative, beyond it the QR factorisation is used.
GRAM_MAX_CONDITION: Final = 1e3


def _reduced(a: np.ndarray, w: np.ndarray, exact: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(R, Qᵀb)`` of the weighted problem ``min ‖√w·(a x − 1)‖``.

    ``exact``: Householder QR. Otherwise the Cholesky factor of the Gram matrix (one pass over
    the rows, several times faster on a million), unless the design is ill-conditioned.
    """
    if not exact:
        aw = a * w[:, None]
        gram = a.T @ aw
        try:
            r = np.linalg.cholesky(gram).T
        except np.linalg.LinAlgError:
            r = None
        if r is not None and np.linalg.cond(r) <= GRAM_MAX_CONDITION:
            return r, np.linalg.solve(r.T, aw.sum(axis=0))
    sw = np.sqrt(w)
    q, r = np.linalg.qr(a * sw[:, None])
    return r, q.T @ sw


# Up to this many coefficients the non-negative solve enumerates every active set (2^k
# least-squares solves of at most k unknowns); the models here have 2 or 3.
NNLS_ENUMERATE_MAX: Final = 6


def nnls_triangular(r: np.ndarray, qb: np.ndarray) -> np.ndarray:
    """``argmin ‖r·x − qb‖`` over ``x ≥ 0`` for a small square ``r``.

    The optimum is the least-squares solution on its own support, which is feasible there, so
    the best feasible solution over all supports is exact. Supports are tried smallest first,
    so ties (a degenerate column) keep the sparser answer. Larger problems go to scipy.
    """
    k = r.shape[1]
    if k > NNLS_ENUMERATE_MAX:
        from scipy.optimize import nnls

        return np.asarray(nnls(r, qb, maxiter=50 * k)[0], dtype=np.float64)
    best = np.zeros(k)
    best_cost = float(qb @ qb)
    tol = 1e-12 * max(best_cost, 1e-300)
    supports = sorted(range(1, 2**k), key=lambda m: (bin(m).count("1"), m))
    for mask in supports:  # loop over at most 63 supports, never over observations
        cols = [i for i in range(k) if mask >> i & 1]
        sol = np.linalg.lstsq(r[:, cols], qb, rcond=None)[0]
        if np.any(sol < 0):
            continue
        cand = np.zeros(k)
        cand[cols] = sol
        diff = r @ cand - qb
        cost = float(diff @ diff)
        if cost < best_cost - tol:
            best, best_cost = cand, cost
    return best


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
            for i in fit.negative_unconstrained:
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
            for i in fit.negative_unconstrained:
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


def _col(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame:
        return np.full(len(frame), np.nan)
    return frame[name].to_numpy(dtype=np.float64, na_value=np.nan)


def _status_ok(frame: pd.DataFrame) -> np.ndarray:
    """Whether each request finished ``ok`` (no status counts as ok)."""
    ok = frame["status"].astype("string").fillna("ok") == "ok"  # vectorised string compare
    return ok.to_numpy(dtype=bool)


def prefill_observations(dataset: Dataset, periods: BusyPeriods | None = None
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str] | str:
    """(uncached tokens, prefill time, cached tokens, what they are) per request, or why none.

    A request's ``prefill_s`` includes the other requests batched into its forwards, so under
    load it overstates its own cost. Where the records say when prefill started (``queue_s``)
    and on which instance, only requests that had their instance to themselves (a busy period
    of one request) are used, if there are enough of them: their time is the model's ``alone``
    time exactly. ``periods``: ``busy_periods(dataset.requests)`` if the caller has it.
    """
    if not dataset.has_request_column("prefill_s"):
        return "no prefill_s column in the request records"
    req = dataset.requests
    prompt = _col(req, "prompt_tokens")
    cached = np.nan_to_num(_col(req, "cached_tokens"), nan=0.0)
    t = _col(req, "prefill_s")
    ok = np.isfinite(t) & np.isfinite(prompt)
    if "status" in req:
        ok &= _status_ok(req)
    uncached = np.maximum(prompt - cached, 1.0)
    what = "per-request prefill_s"
    if dataset.has_request_column("queue_s") and dataset.has_request_column("prefill_instance"):
        alone = isolated_prefills(req, periods)
        if int((alone & ok).sum()) >= MIN_FIT_POINTS:
            ok &= alone
            what = "prefill_s of requests alone on their instance"
        else:
            what = BUSY_SEGMENTS
    return uncached[ok], t[ok], cached[ok], what


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


@dataclass(frozen=True, eq=False)
class BusyPeriods:
    """Prefill intervals sorted by instance and start, each with its busy period."""

    row: np.ndarray  # request position
    start: np.ndarray
    end: np.ndarray
    period: np.ndarray  # int64 id from 1, consecutive along the sort order

    def __len__(self) -> int:
        return len(self.row)


def sort_by_group(codes: np.ndarray, n_groups: int, values: np.ndarray) -> np.ndarray:
    """Permutation sorting by (group code, value), stable: a sort by value, then a radix
    sort by the (small integer) codes."""
    order = np.argsort(values, kind="stable")
    if n_groups < 2**15:
        codes = codes.astype(np.int16)  # numpy's stable sort of 16-bit integers is a radix sort
    return order[np.argsort(codes[order], kind="stable")]


def busy_periods(requests: pd.DataFrame) -> BusyPeriods:
    """Prefill intervals grouped into busy periods per instance (overlapping ones merge).

    Sorted by instance (name order) and start; requests without a start, end or instance are
    left out.
    """
    import pandas as pd

    start = _col(requests, "arrival_ts") + _col(requests, "queue_s")
    end = start + _col(requests, "prefill_s")
    codes, names = pd.factorize(requests["prefill_instance"].astype("string"), sort=True)
    codes = np.asarray(codes, dtype=np.int64)
    valid = np.isfinite(start) & np.isfinite(end) & (codes >= 0)
    rows = np.flatnonzero(valid)
    if len(rows) == 0:
        empty = np.zeros(0)
        return BusyPeriods(rows, empty, empty, np.zeros(0, dtype=np.int64))
    order = sort_by_group(codes[rows], len(names), start[rows])
    rows = rows[order]
    s, e, g = start[rows], end[rows], codes[rows]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = g[1:] != g[:-1]
    bounds = np.append(np.flatnonzero(first), len(rows))
    reach = np.empty(len(rows))
    for lo, hi in itertools.pairwise(bounds):  # per instance, not per request
        np.maximum.accumulate(e[lo:hi], out=reach[lo:hi])
    new_period = first.copy()
    new_period[1:] |= s[1:] > reach[:-1]  # starts after everything before it has ended
    return BusyPeriods(rows, s, e, np.cumsum(new_period))


def isolated_prefills(requests: pd.DataFrame, periods: BusyPeriods | None = None) -> np.ndarray:
    """Whether each request's prefill overlapped no other prefill on its instance."""
    busy = periods if periods is not None else busy_periods(requests)
    out = np.zeros(len(requests), dtype=bool)
    if not len(busy):
        return out
    size = np.bincount(busy.period)[busy.period]
    out[busy.row[size == 1]] = True
    return out


def busy_segments(requests: pd.DataFrame, periods: BusyPeriods | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(computed tokens, attention tokens², busy seconds) per segment of prefill busy time.

    Each busy period is cut into ``BUSY_SEGMENT_S`` segments by when requests finish prefill;
    a segment's busy time runs from the previous segment's last finish (or the period start)
    to its own last finish, and is charged to the requests finishing in it. ``periods`` is
    ``busy_periods(requests)`` when the caller has it already.
    """
    busy = periods if periods is not None else busy_periods(requests)
    if not len(busy):
        return None
    rows, period = busy.row, busy.period
    prompt = _col(requests, "prompt_tokens")[rows]
    cached = np.nan_to_num(_col(requests, "cached_tokens")[rows], nan=0.0)
    u = np.maximum(prompt - cached, 1.0)
    attn = attention_tokens2(u, cached)
    # periods are consecutive runs sorted by start: a period's first row has its earliest start
    opens = np.flatnonzero(np.diff(period, prepend=0))
    period_start = busy.start[opens][period - 1]
    seg = ((busy.end - period_start) // BUSY_SEGMENT_S).astype(np.int64)
    seg -= seg.min()  # (a negative prefill_s would end before its period starts)
    key = period * (int(seg.max()) + 1) + seg  # (period, segment) as one sortable integer
    order = np.argsort(key, kind="stable")
    key = key[order]
    heads = np.flatnonzero(np.diff(key, prepend=-1))
    seg_u = np.add.reduceat(u[order], heads)
    seg_attn = np.add.reduceat(attn[order], heads)
    last = np.maximum.reduceat(busy.end[order], heads)
    seg_period = period[order][heads]
    begin = np.empty(len(heads))
    begin[1:] = last[:-1]
    new = np.ones(len(heads), dtype=bool)
    new[1:] = seg_period[1:] != seg_period[:-1]
    begin[new] = period_start[order][heads][new]  # a period's first segment starts with it
    duration = last - begin
    ok = duration > 0
    return seg_u[ok], seg_attn[ok], duration[ok]


def group_codes(group: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense integer codes ``0..k-1`` for group labels (any dtype), and ``k``."""
    g = np.asarray(group)
    if len(g) == 0:
        return np.zeros(0, dtype=np.int64), 0
    if g.dtype.kind in "iub":
        g = g.astype(np.int64)
        lo, hi = int(g.min()), int(g.max())
        if hi - lo <= 4 * len(g):  # compact labels (already codes): renumber by counting
            present = np.bincount(g - lo) > 0
            remap = np.cumsum(present) - 1
            return remap[g - lo], int(present.sum())
        uniq, inv = np.unique(g, return_inverse=True)
        return inv.astype(np.int64).reshape(-1), len(uniq)
    import pandas as pd

    codes, uniq = pd.factorize(g, use_na_sentinel=False)  # a hash, not a sort of strings
    return codes.astype(np.int64), len(uniq)


# Requests per block of the decode sweep: whole instances are swept together until a block
# holds this many, so its working arrays (about 1 MB each) stay in the CPU cache and are
# reused from block to block instead of being fresh memory.
SWEEP_BLOCK_REQUESTS: Final = 1 << 16


def decode_concurrency(start: np.ndarray, end: np.ndarray, ctx0: np.ndarray,
                       growth_tokens: np.ndarray,
                       group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Time-averaged batch size and context tokens each request saw while it decoded.

    Requests ``j`` decode on instance ``group[j]`` from ``start[j]`` to ``end[j]``, their
    context growing linearly from ``ctx0[j]`` (the prompt) by ``growth_tokens[j]`` over the
    interval (one token per step). On each
    instance the batch ``N(t)`` and the context total ``K(t) = A(t) + R(t)·t`` are piecewise
    linear between start/end events, so their integrals are exact cumulative sums; each
    request's average is the integral over its own interval divided by its length.

    Requests are sorted by instance (a radix sort) and swept in blocks of whole instances;
    within a block the start and end events are sorted by (instance, time), running sums and
    integrals are cumulative sums with the segments between two instances' events zeroed, and
    each request reads the integrals at its own two events (equal, at tied times, to the last
    tied event's: tied segments have zero length). ``O(n log n)``, no per-request Python.
    """
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    n = len(start)
    batch = np.full(n, np.nan)
    ctx = np.full(n, np.nan)
    if n == 0:
        return batch, ctx
    codes, n_groups = group_codes(group)
    small = codes.astype(np.int16) if n_groups < 2**15 else codes
    by_group = np.argsort(small, kind="stable")  # radix sort: instances contiguous
    sizes = np.bincount(codes, minlength=n_groups)
    ends = np.cumsum(sizes)
    dur = end - start
    rate = np.divide(np.asarray(growth_tokens, dtype=np.float64), dur, out=np.zeros(n),
                     where=dur > 0)  # context tokens/s
    ctx0 = np.asarray(ctx0, dtype=np.float64)
    lo = 0
    while lo < n:  # loop over blocks of whole instances, vectorised within each
        # up to the first instance that ends at least a block's worth past lo (or the last)
        block_end = int(np.searchsorted(ends, lo + SWEEP_BLOCK_REQUESTS, side="left"))
        hi = int(ends[min(block_end, n_groups - 1)])
        idx = by_group[lo:hi]
        b, k = _sweep(start[idx], end[idx], ctx0[idx], rate[idx], codes[idx], n_groups)
        batch[idx], ctx[idx] = b, k
        lo = hi
    return batch, ctx


def _sweep(start: np.ndarray, end: np.ndarray, ctx0: np.ndarray, rate: np.ndarray,
           codes: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """``decode_concurrency`` for requests sorted by instance (codes non-decreasing)."""
    n = len(start)
    first = np.ones(n, dtype=bool)
    first[1:] = codes[1:] != codes[:-1]
    heads = np.flatnonzero(first)
    # times from each instance's first start, so that the t² terms keep their precision
    origin = np.repeat(np.minimum.reduceat(start, heads), np.diff(np.append(heads, n)))
    s = start - origin
    e = end - origin
    base = ctx0 - rate * s  # K_j(t) = base_j + rate_j·t
    times = np.concatenate([s, e])
    local = np.cumsum(first) - 1  # instance number within the block
    # by instance, then time; stable, so at a tie starts come before ends as in each
    # instance's own event list
    order = sort_by_group(np.concatenate([local, local]), len(heads), times)
    times = times[order]
    n_t = np.cumsum(np.where(order < n, 1.0, -1.0))  # value on [times[k], times[k+1])
    a_t = np.cumsum(np.concatenate([base, -base])[order])
    r_t = np.cumsum(np.concatenate([rate, -rate])[order])
    # events are grouped by instance: no segment joins two instances' events
    last = 2 * np.append(heads[1:], n)[:-1] - 1
    dt = np.diff(times)
    dt[last] = 0.0
    t_hi = times[1:].copy()
    t_hi[last] = times[last]
    seg_n = n_t[:-1] * dt
    seg_k = a_t[:-1] * dt + r_t[:-1] * (t_hi**2 - times[:-1] ** 2) / 2.0
    cum_n = np.concatenate([[0.0], np.cumsum(seg_n)])
    cum_k = np.concatenate([[0.0], np.cumsum(seg_k)])
    pos = np.empty(2 * n, dtype=np.int64)
    pos[order] = np.arange(2 * n)
    span = np.where(e > s, e - s, np.nan)
    batch = (cum_n[pos[n:]] - cum_n[pos[:n]]) / span
    ctx = (cum_k[pos[n:]] - cum_k[pos[:n]]) / span
    return batch, ctx


def decode_observations(dataset: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray, str] | str:
    """(batch, context tokens, TPOT) per finished request and how the batch was known, or why not.

    A request decodes from its first token (``arrival + ttft_s``) for ``tpot_s · (output - 1)``
    seconds; the batch it shared is reconstructed from all requests on the same
    ``decode_instance``.
    """
    if not dataset.has_request_column("tpot_s"):
        return "no tpot_s column in the request records"
    req = dataset.requests
    arrival = _col(req, "arrival_ts")
    prompt = _col(req, "prompt_tokens")
    out = _col(req, "output_tokens")
    tpot = _col(req, "tpot_s")
    ttft = _col(req, "ttft_s")
    e2e = _col(req, "e2e_s")
    steps = np.maximum(out - 1.0, 0.0)
    start = arrival + ttft
    end = start + tpot * steps
    no_ttft = ~np.isfinite(start) & np.isfinite(arrival + e2e)
    end = np.where(no_ttft, arrival + e2e, end)
    start = np.where(no_ttft, end - tpot * steps, start)
    usable = np.isfinite(start) & np.isfinite(end) & (end > start) & np.isfinite(prompt)
    if not usable.any():
        return "no request has tpot_s with ttft_s or e2e_s to place its decode in time"
    how = "per decode_instance"
    if dataset.has_request_column("decode_instance") and req["decode_instance"].notna().any():
        import pandas as pd

        # integer codes straight from the column: no per-row Python strings
        group = pd.factorize(req["decode_instance"].astype("string").fillna("?"))[0]
        share = 1.0
    else:
        group = np.zeros(len(req), dtype=np.int64)
        pool = len(dataset.instances_of("decode"))
        share = 1.0 / pool if pool else 1.0
        how = (f"pool total split evenly over {pool} decode instances" if pool else
               "whole pool as one instance (no decode_instance column and no instance count)")
    batch = np.full(len(req), np.nan)
    ctx = np.full(len(req), np.nan)
    b, k = decode_concurrency(start[usable], end[usable], prompt[usable], steps[usable],
                              np.asarray(group)[usable])
    batch[usable], ctx[usable] = b * share, k * share
    fit_ok = usable & (out >= MIN_OUTPUT_FOR_TPOT) & np.isfinite(tpot)
    if "status" in req:
        fit_ok &= _status_ok(req)
    return batch[fit_ok], ctx[fit_ok], tpot[fit_ok], how


def decode_metric_observations(dataset: Dataset, kv_capacity_tokens: int,
                               mean_context_tokens: float
                               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str] | str:
    """(batch, context, mean ITL) per decode instance and minute from metrics, or why not.

    Batch is the mean running-requests gauge; context the summed sequence lengths gauge, else
    KV tokens in use (or KV usage × the profile's capacity), else batch × the workload's mean
    decode context.
    """
    from pdprobe import signals as S
    from pdprobe.analysis.promql import gauge_series, rate_series

    metrics = dataset.metrics
    decode = {i.name for i in dataset.instances_of("decode")}
    if metrics.empty or not decode:
        return "no decode-instance metrics"
    step = METRIC_FIT_STEP_S
    itl_sum = rate_series(metrics, S.ITL_S, step, kind="sum")
    itl_cnt = rate_series(metrics, S.ITL_S, step, kind="count")
    if itl_sum.empty or itl_cnt.empty:
        return "no inter-token-latency histogram"
    itl = itl_sum.merge(itl_cnt, on=["ts", "instance"], suffixes=("_sum", "_count"))
    itl = itl[itl["instance"].isin(list(decode)) & (itl["rate_count"] > 0)]
    itl = itl.assign(itl_s=itl["rate_sum"] / itl["rate_count"])
    running = gauge_series(metrics, S.REQUESTS_RUNNING, step).rename(columns={"value": "batch"})
    if running.empty:
        return "no running-requests gauge on decode instances"
    frame = itl.merge(running, on=["ts", "instance"])
    how = "summed sequence lengths gauge"
    ctx_frame = gauge_series(metrics, S.DECODE_CONTEXT_TOKENS, step)
    scale = 1.0
    if ctx_frame.empty:
        ctx_frame, how = gauge_series(metrics, S.KV_USED_TOKENS, step), "KV tokens in use"
    if ctx_frame.empty:
        ctx_frame = gauge_series(metrics, S.KV_USAGE_RATIO, step)
        scale, how = float(kv_capacity_tokens), "KV usage × profile KV capacity"
    if ctx_frame.empty:
        frame = frame.assign(ctx=frame["batch"] * mean_context_tokens)
        how = "batch × mean decode context of the workload"
    else:
        ctx_frame = ctx_frame.assign(ctx=ctx_frame["value"] * scale)[["ts", "instance", "ctx"]]
        frame = frame.merge(ctx_frame, on=["ts", "instance"])
    if frame.empty:
        return "decode ITL and gauges share no time bins"
    return (frame["batch"].to_numpy(dtype=np.float64), frame["ctx"].to_numpy(dtype=np.float64),
            frame["itl_s"].to_numpy(dtype=np.float64), f"per-minute ITL vs batch ({how})")


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
