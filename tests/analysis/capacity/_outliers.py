"""Prefill times on the exact alone law with a few too-short long prompts (fit tests)."""

from __future__ import annotations

import numpy as np

from pdprobe.analysis.capacity.perf_models import attention_tokens2

# the benchmark data's law: a + b*u + c*q per forward of at most T tokens
A_S, B_S, C_S, T_TOKENS = 0.02, 7.9e-5, 7.4e-10, 8192


def alone_times(n_short: int, factor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(forwards, uncached tokens, attention tokens², times) of 2,000 requests within 1 % of
    the law, the ``n_short`` longest prompts' times multiplied by ``factor``: they pull an
    unweighted fit's quadratic term below zero. Two at a fifth of their time the Huber
    passes discount (the kept term comes out positive); six at a twentieth they do not (it
    stays at zero) and the fit is still accepted (R² ~0.7)."""
    rng = np.random.default_rng(5)
    n = 2000
    u = np.round(rng.lognormal(7, 1, n)).clip(1, 30000)
    forwards = np.maximum(np.ceil(u / T_TOKENS), 1.0)
    q = attention_tokens2(u, np.zeros(n))
    t = (A_S * forwards + B_S * u + C_S * q) * rng.uniform(0.99, 1.01, n)
    t[np.argsort(u)[-n_short:]] *= factor
    return np.column_stack([forwards, u, q]), u, t
