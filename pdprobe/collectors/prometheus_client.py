"""The Prometheus HTTP API client: instant, range, raw-sample and label-value calls.

``PromClient`` issues the API calls on top of ``PromTransport`` (``prometheus_transport``: one
deadline, retries, redacted errors, call records); a range query the server refuses as too large
is split in time, and raw samples are read in range-vector pieces. The transport's public names
are re-exported here, the module callers import the client from.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.prometheus_decode import (
    HttpError,
    SeriesSet,
    TooLarge,
    _check_success,
    _malformed,
    merge_series,
    parse_envelope,
    parse_matrix,
)
from pdprobe.collectors.prometheus_transport import BACKOFF_BASE_S as BACKOFF_BASE_S
from pdprobe.collectors.prometheus_transport import CONNECT_TIMEOUT_S as CONNECT_TIMEOUT_S
from pdprobe.collectors.prometheus_transport import MAX_ATTEMPTS, PromTransport, QueryRecord
from pdprobe.collectors.prometheus_transport import MAX_GET_URL as MAX_GET_URL
from pdprobe.collectors.prometheus_transport import RETRYABLE_STATUS as RETRYABLE_STATUS
from pdprobe.collectors.prometheus_transport import PrometheusAuthError as PrometheusAuthError
from pdprobe.collectors.prometheus_transport import PrometheusUnreachable as PrometheusUnreachable
from pdprobe.collectors.prometheus_transport import display_url as display_url
from pdprobe.collectors.prometheus_transport import parse_retry_after as parse_retry_after
from pdprobe.collectors.prometheus_transport import secrets_of as secrets_of
from pdprobe.errors import SourceError
from pdprobe.redact import redact as redact  # re-exported for callers of this module

# A refused-as-too-large range query is halved in time this many times, then read at a doubled
# step this many times (each answer is warned about) before giving up.
MAX_SPLIT_DEPTH: Final = 3


MAX_STEP_DOUBLINGS: Final = 2


# Raw samples of restarted instances are read in range-vector pieces of this length (1440
# samples per series at a 15 s scrape); windows needing more pieces than this are re-read at the
# query step instead.
RAW_PIECE_S: Final = 6 * 3600.0


MAX_RAW_PIECES: Final = 4


class PromClient(PromTransport):
    """The Prometheus HTTP API under one deadline: instant, range (split when too large),
    raw-sample and label-value calls, each recorded; the transport is ``PromTransport``."""

    # -- API -------------------------------------------------------------------------------

    def api_json(self, path: str, params: list[tuple[str, str]], what: str,
                 allow_post: bool = True) -> dict[str, Any]:
        t0 = time.monotonic()
        try:
            body, attempts = self._send(path, params, what, allow_post)
        except HttpError as exc:
            self._record(QueryRecord(path, what, time.monotonic() - t0, MAX_ATTEMPTS,
                                     status=f"HTTP {exc.status}"))
            raise
        env = parse_envelope(body, what, self._redactor)
        _check_success(env, what)
        self._collect_notes(env)
        self._record(QueryRecord(path, what, time.monotonic() - t0, attempts))
        return env

    def query(self, promql: str, at_ts: float | None = None) -> list[dict[str, Any]]:
        """An instant query's vector (or a one-element list holding a scalar's value)."""
        params = [("query", promql)]
        if at_ts is not None:
            params.append(("time", _fmt_ts(at_ts)))
        t0 = time.monotonic()
        body, attempts = self._send("/api/v1/query", params, f"query {promql!r}")
        env = parse_envelope(body, "an instant query", self._redactor)
        _check_success(env, f"query {promql!r}")
        self._collect_notes(env)
        data = env.get("data")
        result = data.get("result") if isinstance(data, dict) else None
        if isinstance(data, dict) and data.get("resultType") == "scalar" \
                and isinstance(result, list):
            out = [{"metric": {}, "value": result}]
        elif isinstance(result, list):
            out = result
            if not all(isinstance(i, dict) and isinstance(i.get("metric") or {}, dict)
                       for i in out):
                raise _malformed("an instant query", "a series is not {metric, value}")
        else:
            raise SourceError("Prometheus answered an instant query without a result",
                              hint="check that --prometheus is a Prometheus-compatible API")
        self._record(QueryRecord("/api/v1/query", promql, time.monotonic() - t0, attempts,
                                 series=len(out), points=len(out), end_ts=at_ts))
        return out

    def query_range(self, promql: str, start_ts: float, end_ts: float, step_s: float) -> SeriesSet:
        """A range query on the grid ``start + k*step``; split when the server finds it too large.

        Raises ``TooLarge`` when even halves of halves are refused (the caller may coarsen).
        """
        pieces = pp.chunk_ranges(start_ts, end_ts, step_s)
        return merge_series([self._range_split(promql, a, b, step_s, 0) for a, b in pieces])

    def _range_split(self, promql: str, start_ts: float, end_ts: float, step_s: float,
                     depth: int) -> SeriesSet:
        try:
            return self._range_once(promql, start_ts, end_ts, step_s)
        except HttpError as exc:
            if not exc.too_large:
                raise
            n = round((end_ts - start_ts) / step_s)
            if depth >= MAX_SPLIT_DEPTH or n < 1:
                raise TooLarge(exc.message) from None
            mid = start_ts + (n // 2) * step_s
            left = self._range_split(promql, start_ts, mid, step_s, depth + 1)
            right = self._range_split(promql, mid + step_s, end_ts, step_s, depth + 1) \
                if mid + step_s <= end_ts + 1e-9 else None
            return merge_series([p for p in (left, right) if p is not None])

    def _range_once(self, promql: str, start_ts: float, end_ts: float, step_s: float) -> SeriesSet:
        params = [("query", promql), ("start", _fmt_ts(start_ts)), ("end", _fmt_ts(end_ts)),
                  ("step", _fmt_step(step_s))]
        t0 = time.monotonic()
        what = "a range query"
        try:
            body, attempts = self._send("/api/v1/query_range", params, what)
        except HttpError as exc:
            self._record(QueryRecord("/api/v1/query_range", promql, time.monotonic() - t0, 1,
                                     start_ts=start_ts, end_ts=end_ts, step_s=step_s,
                                     status=f"HTTP {exc.status} {exc.error_type}".strip()))
            raise
        sset, env = parse_matrix(body, start_ts, step_s, what, self._redactor)
        self._collect_notes(env)
        self._record(QueryRecord("/api/v1/query_range", promql, time.monotonic() - t0, attempts,
                                 series=len(sset.labels), points=sset.points, start_ts=start_ts,
                                 end_ts=end_ts, step_s=step_s))
        return sset

    def raw_samples(self, selector: str, start_ts: float, end_ts: float) -> SeriesSet:
        """Every stored sample of ``selector`` in ``[start_ts, end_ts]`` (range-vector instant
        queries of at most ``RAW_PIECE_S`` each): what the offline reader would see."""
        parts: list[SeriesSet] = []
        edge = end_ts
        while edge > start_ts + 1e-9:
            lo = max(start_ts, edge - RAW_PIECE_S)
            # One more millisecond: Prometheus 3 range selectors exclude their left edge.
            span_ms = math.ceil((edge - lo) * 1000) + 1
            promql = f"{selector}[{span_ms}ms]"
            params = [("query", promql), ("time", _fmt_ts(edge))]
            t0 = time.monotonic()
            body, attempts = self._send("/api/v1/query", params, "a raw-sample query")
            sset, env = parse_matrix(body, lo, 0.0, "a raw-sample query", self._redactor)
            self._collect_notes(env)
            self._record(QueryRecord("/api/v1/query", promql, time.monotonic() - t0, attempts,
                                     series=len(sset.labels), points=sset.points, start_ts=lo,
                                     end_ts=edge))
            parts.append(sset)
            edge = lo
        merged = merge_series(parts[::-1])
        keep = (merged.ts >= start_ts - 1e-6) & (merged.ts <= end_ts + 1e-6)
        if keep.all():
            return merged
        owner = np.repeat(np.arange(len(merged.labels)), np.diff(merged.offsets))
        counts = np.bincount(owner[keep], minlength=len(merged.labels))
        return SeriesSet(merged.labels, merged.ts[keep], merged.values[keep],
                         np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
                         merged.start_ts, 0.0)

    def label_values(self, label: str, matches: Sequence[str], start_ts: float,
                     end_ts: float) -> list[str]:
        params = [("match[]", m) for m in matches]
        params += [("start", _fmt_ts(start_ts)), ("end", _fmt_ts(end_ts))]
        env = self.api_json(f"/api/v1/label/{label}/values", params,
                            f"label values of {label}", allow_post=False)
        data = env.get("data")
        if not isinstance(data, list):
            raise SourceError("Prometheus answered the label-values call without a list",
                              hint="check that --prometheus is a Prometheus-compatible API")
        return [str(v) for v in data]


def _fmt_ts(ts: float) -> str:
    return f"{ts:.3f}"


def _fmt_step(step_s: float) -> str:
    return f"{step_s:.3f}".rstrip("0").rstrip(".")
