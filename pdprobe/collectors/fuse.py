"""Merge the ``Partial`` pieces of all inputs into one time-aligned ``Dataset``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pdprobe.collectors.roles import RoleOptions, resolve_roles
from pdprobe.dataset import (
    EVENT_COLUMNS,
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    REQUEST_COLUMNS,
    Dataset,
    Partial,
    concat_frames,
)

if TYPE_CHECKING:
    import pandas as pd

# Two inputs whose time ranges are further apart than this probably use different clocks.
CLOCK_GAP_WARNING_S = 6 * 3600.0


def fuse(partials: Sequence[Partial], roles: RoleOptions | None = None) -> Dataset:
    """One dataset from many inputs: concatenated, sorted by time, with roles resolved."""
    roles = roles or RoleOptions()
    requests = concat_frames((p.requests for p in partials), REQUEST_COLUMNS)
    metrics = concat_frames((p.metrics for p in partials), METRIC_COLUMNS)
    network = concat_frames((p.network for p in partials), NETWORK_COLUMNS)
    events = concat_frames((p.events for p in partials), EVENT_COLUMNS)
    warnings: list[str] = [w for p in partials for w in p.warnings]

    requests = _sorted_by(requests, "arrival_ts")
    metrics = _sorted_by(metrics, "ts")
    network = _sorted_by(network, "ts")
    events = _sorted_by(events, "ts")

    warnings.extend(_clock_warnings(partials))

    names: set[str] = set()
    if len(metrics):
        names.update(metrics["instance"].dropna().unique().tolist())
    for col in ("prefill_instance", "decode_instance"):
        if len(requests):
            names.update(requests[col].dropna().unique().tolist())
    if len(events):
        names.update(events["instance"].dropna().unique().tolist())
    names.discard("")
    nodes = {k: v for p in partials for k, v in p.nodes.items()}
    engines = {k: v for p in partials for k, v in p.engines.items()}
    hints = [h for p in partials for h in p.role_hints]
    instances, role_warnings = resolve_roles(names, hints, roles, nodes, engines)
    warnings.extend(role_warnings)

    request_columns = frozenset().union(*(p.request_columns for p in partials)) if partials else frozenset()
    return Dataset(
        requests=requests,
        metrics=metrics,
        network=network,
        events=events,
        instances=instances,
        sources=tuple(p.source for p in partials),
        request_columns=request_columns,
        warnings=tuple(dict.fromkeys(warnings)),
    )


def _sorted_by(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """Inputs may be out of order (concatenated scrapes, several files): sort stably."""
    if len(frame) and not frame[column].is_monotonic_increasing:
        return frame.sort_values(column, kind="stable", ignore_index=True)
    return frame


def _clock_warnings(partials: Sequence[Partial]) -> list[str]:
    spans = []
    for p in partials:
        lo, hi = _time_span(p)
        if lo is not None and hi is not None:
            spans.append((lo, hi, p.source.path))
    out = []
    for i, (lo1, hi1, path1) in enumerate(spans):
        for lo2, hi2, path2 in spans[i + 1:]:
            gap = max(lo2 - hi1, lo1 - hi2)
            if gap > CLOCK_GAP_WARNING_S:
                out.append(f"{path1} and {path2} are {gap / 3600:.1f} h apart in time: different "
                           f"clocks or a wrong --year? Analyses that join them may be empty")
    return out


def _time_span(p: Partial) -> tuple[float | None, float | None]:
    los, his = [], []
    if p.requests is not None and len(p.requests):
        los.append(float(p.requests["arrival_ts"].min()))
        his.append(float(p.requests["arrival_ts"].max()))
    for frame in (p.metrics, p.network, p.events):
        if frame is not None and len(frame):
            los.append(float(frame["ts"].min()))
            his.append(float(frame["ts"].max()))
    return (min(los), max(his)) if los else (None, None)
