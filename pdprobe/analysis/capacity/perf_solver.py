"""Non-negative least squares on relative error with Huber reweighting (the fits' solver).

Fits are non-negative least squares on *relative* error (as DistServe fits its coefficients)
with Huber reweighting against outliers; each weighted problem is reduced to its ``k × k``
triangle, so the non-negative solve is exact and cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

# Huber tuning constant (in robust standard deviations) and reweighting passes.
HUBER_K: Final = 1.345
HUBER_PASSES: Final = 4
# Beyond this many observations the first reweighting passes use a stratified sample of this
# size and only the last pass all of them: a million-request fit then costs a fifth of a
# second instead of a second, and predictions move by about as much as between two
# independent captures of that size (measured in docs/model.md, "Large captures").
NNLS_MAX_POINTS: Final = 100_000
NNLS_SAMPLE_SEED: Final = 20240601


@dataclass(frozen=True)
class FitResult:
    """Coefficients from a constrained fit and how well they explain the data."""

    coef: np.ndarray
    r2: float
    median_rel_error: float
    # columns an unconstrained fit made negative and the returned coefficients hold at zero
    # (a note saying so must describe the number reported: a column the first, unweighted
    # pass made negative may come out positive from the reweighted ones)
    held_at_zero: tuple[int, ...]


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
    coef = coef_n / norms
    held = tuple(int(i) for i in np.flatnonzero((unconstrained < 0) & (coef <= 0)))
    pred = x_all @ coef
    ss_res = float(np.sum((y_all - pred) ** 2))
    ss_tot = float(np.sum((y_all - y_all.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    rel = float(np.median(np.abs(pred - y_all) / y_all))
    return FitResult(coef, r2, rel, held)


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


