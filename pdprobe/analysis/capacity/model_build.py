"""Building the performance model from the data: fit what it supports, else the profile.

``build_model`` fits prefill and decode from request records or metrics (falling back to,
or scaling, the profile), measures KV capacity and KV bytes per token, and finds the link;
``choose_profile`` picks the profile when none is named. ``estimate.py`` plans with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from pdprobe.analysis.capacity.kv_capacity import MeasuredKv, measured_kv_capacity
from pdprobe.analysis.capacity.perf_fit import (
    BUSY_SEGMENTS,
    MIN_FIT_POINTS,
    RoleFit,
    busy_periods,
    busy_segments,
    decode_from_profile,
    decode_metric_observations,
    decode_observations,
    fit_decode,
    fit_prefill,
    fit_prefill_busy,
    isolated_rows,
    prefill_from_profile,
    prefill_metric_scale,
    prefill_observations,
)
from pdprobe.analysis.capacity.perf_observations import float_column, status_ok
from pdprobe.analysis.capacity.rates import ModelInputs, decode_context
from pdprobe.analysis.capacity.transfer import (
    KV_BYTES_MISMATCH_FACTOR,
    KvBytes,
    kv_bytes_from_profile,
    link_capacity,
    measured_kv_bytes,
    profile_matching_kv_bytes,
)
from pdprobe.profiles import DEFAULT_PROFILE, Profile, load_profile

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.capacity.mix import WorkloadMix
    from pdprobe.analysis.capacity.perf_observations import BusyPeriods
    from pdprobe.dataset import Dataset

@dataclass(frozen=True)
class BuiltModel:
    """The performance model with where each part came from."""

    inputs: ModelInputs
    profile: Profile
    source: str
    fit_quality: dict[str, float]
    notes: tuple[str, ...]
    link_source: str = ""
    kv_capacity_source: str = ""  # "measured: ..." or "profile NAME"


def choose_profile(name: str | None, dataset: Dataset | None, *,
                   measured: KvBytes | str | None = None) -> tuple[Profile, tuple[str, ...]]:
    """The named profile, else one whose model matches the measured KV bytes, else the default.

    ``measured``: ``measured_kv_bytes(dataset)`` when the caller has it already.
    """
    if name:
        return load_profile(name), ()
    if dataset is not None:
        measured = measured if measured is not None else measured_kv_bytes(dataset)
        if isinstance(measured, KvBytes):
            match = profile_matching_kv_bytes(measured.bytes_per_token)
            if match is not None:
                return match, (f"no --profile given: {match.name} chosen because its model "
                               f"shape matches the measured {measured.bytes_per_token:,.0f} KV "
                               "bytes per token",)
    return load_profile(DEFAULT_PROFILE), (
        f"no --profile given: the default profile {DEFAULT_PROFILE} is the fallback wherever "
        "the data cannot calibrate the model (pass --profile for your model and GPUs)",)


def too_thin(requests: pd.DataFrame, periods: BusyPeriods,
             obs: tuple[np.ndarray, np.ndarray, np.ndarray, str] | str) -> bool:
    """Whether sampled busy periods (``obs``: ``prefill_observations`` on them) hold too few
    prefills that ran alone, or too few busy segments, to be fitted (``MIN_FIT_POINTS``) where
    the whole capture may hold enough.

    Then the periods are reconstructed from every prefill instead, so that sampling never
    changes which prefill fit is used (requests alone on their instance are rare under load:
    a sample of one block in 25 holds a 25th of them).
    """
    if periods.sample is None or isinstance(obs, str) or not obs[3].startswith(BUSY_SEGMENTS):
        return False  # not sampled, no prefill times, or enough requests ran alone
    every = periods.sample.every
    rows = isolated_rows(requests, periods)
    usable = np.isfinite(float_column(requests.iloc[rows], "prefill_s")) & np.isfinite(
        float_column(requests.iloc[rows], "prompt_tokens"))
    if "status" in requests:
        usable &= status_ok(requests.iloc[rows])
    if int(usable.sum()) * every >= MIN_FIT_POINTS:  # as prefill_observations counts them
        return True
    seg = busy_segments(requests, periods)
    n = len(seg[2]) if seg is not None else 0
    return n < MIN_FIT_POINTS <= n * every


def _fit_quality(prefix: str, fit: RoleFit) -> dict[str, float]:
    out = {f"{prefix}_n": float(fit.n)}
    if fit.r2 is not None:
        out[f"{prefix}_r2"] = round(fit.r2, 4)
    if fit.median_rel_error is not None:
        out[f"{prefix}_median_rel_error"] = round(fit.median_rel_error, 4)
    if fit.scale_vs_profile is not None:
        out[f"{prefix}_scale_vs_profile"] = round(fit.scale_vs_profile, 4)
    return out


def build_model(dataset: Dataset | None, mix: WorkloadMix, profile: Profile, *,
                measured: KvBytes | str | None = None) -> BuiltModel:
    """Fit what the data supports; fall back to (or scale) the profile for the rest.

    ``measured``: ``measured_kv_bytes(dataset)`` when the caller has it already.
    """
    notes: list[str] = []
    quality: dict[str, float] = {}
    kv_source = f"profile {profile.name}"
    if dataset is None:
        prefill = prefill_from_profile(profile)
        decode = decode_from_profile(profile)
        pfit = dfit = RoleFit("profile", 0)
    else:
        # prefill busy periods serve both the isolated-request and the busy-time fit
        periods = busy_periods(dataset.requests) if all(
            dataset.has_request_column(c) for c in ("prefill_s", "queue_s", "prefill_instance")
        ) else None
        obs = prefill_observations(dataset, periods)
        taken = periods.sample if periods is not None else None
        if periods is not None and taken is not None:
            if too_thin(dataset.requests, periods, obs):
                periods = busy_periods(dataset.requests, sample=False)
                obs = prefill_observations(dataset, periods)
            else:
                notes.append("prefill: busy periods are reconstructed around "
                             + taken.describe("prefills"))
        if isinstance(obs, str):
            scaled = prefill_metric_scale(dataset, mix.uncached_tokens, mix.cached_tokens,
                                          profile) \
                if not dataset.metrics.empty else "no metrics"
            if isinstance(scaled, str):
                prefill, pfit = prefill_from_profile(profile), RoleFit("profile", 0, notes=(
                    f"prefill: {obs} and {scaled}: profile {profile.name} is used",))
            else:
                prefill, pfit = scaled
        else:
            # (every request's prefill_s, perhaps a bounded sample of them: "... (a sample of")
            busy_first = obs[3].startswith(BUSY_SEGMENTS)
            busy_fit = fit_prefill_busy(dataset.requests, profile, periods) if busy_first else None
            if busy_fit is not None:
                prefill, pfit = busy_fit
            else:
                what = "per-request prefill_s" + obs[3].removeprefix(BUSY_SEGMENTS) if busy_first \
                    else obs[3]
                prefill, pfit = fit_prefill(obs[0], obs[1], profile, cached=obs[2], what=what)
        # memory: the busy periods (millions of rows at scale) are not read past the prefill
        # fit; released before the decode reconstruction builds its own arrays
        del periods, obs
        kv_cap = measured_kv_capacity(dataset)
        capacity_tokens = round(kv_cap.tokens) if isinstance(kv_cap, MeasuredKv) \
            else profile.kv_capacity_tokens
        dobs = decode_observations(dataset)
        if isinstance(dobs, str):
            mobs = decode_metric_observations(dataset, capacity_tokens, decode_context(mix))
            if isinstance(mobs, str):
                decode, dfit = decode_from_profile(profile), RoleFit("profile", 0, notes=(
                    f"decode: {dobs} and {mobs}: profile {profile.name} is used",))
            else:
                decode, dfit = fit_decode(mobs[0], mobs[1], mobs[2], profile,
                                          what=f"ITL ({mobs[3]})")
        else:
            decode, dfit = fit_decode(dobs[0], dobs[1], dobs[2], profile,
                                      what=f"per-request tpot_s (batch {dobs[3]})")
        quality.update(_fit_quality("prefill", pfit))
        quality.update(_fit_quality("decode", dfit))
        if isinstance(kv_cap, MeasuredKv):
            decode = replace(decode, kv_capacity_tokens=capacity_tokens)
            kv_source = (f"measured from the {kv_cap.source}, median of "
                         f"{kv_cap.instances}; profile {profile.name} says "
                         f"{profile.kv_capacity_tokens:,}")
            notes.append(f"KV capacity per decode instance: {capacity_tokens:,} tokens "
                         f"{kv_source}; the measurement is used")
        else:
            notes.append(f"KV capacity per decode instance: profile {profile.name}'s "
                         f"{profile.kv_capacity_tokens:,} tokens (not measured: {kv_cap})")
    notes.extend(pfit.notes)
    notes.extend(dfit.notes)
    kv = kv_bytes_from_profile(profile)
    if dataset is not None:
        measured = measured if measured is not None else measured_kv_bytes(dataset)
        if isinstance(measured, KvBytes):
            ratio = measured.bytes_per_token / kv.bytes_per_token
            if ratio >= KV_BYTES_MISMATCH_FACTOR or ratio <= 1 / KV_BYTES_MISMATCH_FACTOR:
                notes.append(f"measured KV bytes per token ({measured.bytes_per_token:,.0f}) "
                             f"differ {ratio:.2f}× from profile {profile.name}'s model shape "
                             f"({kv.bytes_per_token:,.0f}); the measurement is used")
            kv = measured
            quality["kv_bytes_n"] = float(measured.n)
    link = link_capacity(dataset, profile)
    source = f"prefill: {prefill.source}; decode: {decode.source}"
    inputs = ModelInputs(prefill, decode, kv, link.bytes_per_s, profile.link_base_latency_s)
    notes.append(f"KV bytes per token: {kv.bytes_per_token:,.0f} ({kv.source}); link: "
                 f"{link.bytes_per_s / 1e9:.1f} GB/s per instance ({link.source})")
    return BuiltModel(inputs, profile, source, quality, tuple(notes), link.source, kv_source)
