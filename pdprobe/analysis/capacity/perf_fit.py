"""Per-role performance models, fitted from what was observed, the profile as fallback.

Prefill (DistServe's form): one forward over uncached chunks ``l_i`` takes
``a + b·Σl + c·Σl²``; a request of ``u`` uncached tokens needs ``ceil(u / T)`` forwards
(``T`` = token budget per forward). Decode: a step over ``B`` sequences holding ``K`` context
tokens takes ``a + b·K + c·B``. Fits are non-negative least squares on *relative* error (as
DistServe fits its coefficients) with Huber reweighting against outliers; the profile is used,
or scaled to the data, when observations are too few or too uniform to identify a curve.

This module is the public face of four parts: ``perf_models`` (the two models),
``perf_solver`` (the constrained fit), ``perf_observations`` (busy periods, decode
concurrency, metric points) and ``perf_policy`` (which fit is kept, notes, fallbacks).
"""

from __future__ import annotations

from pdprobe.analysis.capacity.perf_models import (
    DecodeModel,
    PrefillModel,
    attention_tokens2,
    decode_from_profile,
    prefill_from_profile,
)
from pdprobe.analysis.capacity.perf_observations import (
    BUSY_SEGMENT_S,
    METRIC_FIT_STEP_S,
    MIN_OUTPUT_FOR_TPOT,
    SWEEP_BLOCK_REQUESTS,
    BusyPeriods,
    busy_periods,
    busy_segments,
    decode_concurrency,
    decode_metric_observations,
    decode_observations,
    group_codes,
    isolated_rows,
    sort_by_group,
)
from pdprobe.analysis.capacity.perf_policy import (
    BUSY_SEGMENTS,
    MIN_BATCH_SPREAD,
    MIN_FIT_POINTS,
    MIN_FIT_R2,
    MIN_LENGTH_SPREAD,
    MIN_SCALE_POINTS,
    PROFILE_CONTRADICTION_FACTOR,
    RoleFit,
    fit_decode,
    fit_prefill,
    fit_prefill_busy,
    prefill_metric_scale,
    prefill_observations,
)
from pdprobe.analysis.capacity.perf_solver import (
    HUBER_K,
    HUBER_PASSES,
    NNLS_MAX_POINTS,
    NNLS_SAMPLE_SEED,
    FitResult,
    fit_sample,
    nnls_relative,
    nnls_triangular,
)

__all__ = [
    "BUSY_SEGMENTS", "BUSY_SEGMENT_S", "HUBER_K", "HUBER_PASSES", "METRIC_FIT_STEP_S",
    "MIN_BATCH_SPREAD", "MIN_FIT_POINTS", "MIN_FIT_R2", "MIN_LENGTH_SPREAD",
    "MIN_OUTPUT_FOR_TPOT", "MIN_SCALE_POINTS", "NNLS_MAX_POINTS", "NNLS_SAMPLE_SEED",
    "PROFILE_CONTRADICTION_FACTOR", "SWEEP_BLOCK_REQUESTS", "BusyPeriods", "DecodeModel",
    "FitResult", "PrefillModel", "RoleFit", "attention_tokens2", "busy_periods",
    "busy_segments", "decode_concurrency", "decode_from_profile", "decode_metric_observations",
    "decode_observations", "fit_decode", "fit_prefill", "fit_prefill_busy", "fit_sample",
    "group_codes", "isolated_rows", "nnls_relative", "nnls_triangular",
    "prefill_from_profile", "prefill_metric_scale", "prefill_observations", "sort_by_group",
]
