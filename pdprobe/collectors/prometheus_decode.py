"""Decoding Prometheus HTTP API answers: the JSON envelope, matrix results, joined pieces.

``parse_matrix`` reads a ``query_range`` (or range-vector) answer without building a Python object
per sample: a regular expression finds each series' label object and the sample pairs are parsed
at once as CSV by pandas' C parser; anything that does not fit that shape falls back to ``json``.
The API-level errors (``HttpError``, ``TooLarge``) live here too, so the client, the session and
tests share one definition.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe import safe_text
from pdprobe.errors import SourceError
from pdprobe.redact import redact as redact  # re-exported for callers of this module
from pdprobe.redact import scrub

if TYPE_CHECKING:

    pass


_TOO_LARGE_MARKERS: Final = (
    "too many samples", "exceeded maximum resolution", "maxsamplesperquery",
    "maxpointspertimeseries", "cannot select more than", "exceeded the maximum number of samples",
    "max-samples", "query would load", "exceeds -search.max",
)


@dataclass
class SeriesSet:
    """Series of a range query: labels and flat samples (``offsets`` delimit each series)."""

    labels: list[dict[str, str]]
    ts: np.ndarray
    values: np.ndarray
    offsets: np.ndarray
    start_ts: float
    step_s: float

    @property
    def points(self) -> int:
        return len(self.values)


class HttpError(Exception):
    def __init__(self, status: int, error_type: str, message: str,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.retry_after_s = retry_after_s

    @property
    def too_large(self) -> bool:
        text = self.message.lower()
        return self.error_type == "timeout" or any(m in text for m in _TOO_LARGE_MARKERS)


class TooLarge(Exception):
    pass


# The start of each series of a matrix result, up to its first sample: the label object (no
# braces inside; other labels make the fast path give up). Splitting the result array on it
# leaves each series' ``[ts,"value"],...]]},`` pairs between two label objects, in one pass
# (the pattern begins with a literal, which the regex engine finds with a fast scan).
_SERIES_SPLIT: Final = re.compile(rb'\{"metric":(\{[^{}]*\}),"values":\[')


# Characters of a non-JSON answer quoted in the error (after redaction).
_HEAD_SHOWN: Final = 60


def parse_envelope(body: bytes, what: str,
                   redactor: Callable[[str], str] | None = None) -> dict[str, Any]:
    """The API's JSON envelope (``status``, ``data``, ...); ``SourceError`` when it is not.

    A quoted piece of a non-JSON answer is redacted (``redactor``, else the registered secrets)
    before it is cut, so a cut cannot split a secret into an unrecognised piece.
    """
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        head = body[:4096].decode("utf-8", "replace")
        head = safe_text.clean((redactor or scrub)(head))[:_HEAD_SHOWN]
        raise SourceError(f"Prometheus answered {what} with something that is not JSON "
                          f"({exc.__class__.__name__} near {head!r})",
                          hint="check that --prometheus is the API base URL (no /api/v1, no "
                               "/graph), and any proxy in front of it") from None
    if not isinstance(data, dict) or "status" not in data:
        raise SourceError(f"Prometheus answered {what} with JSON that is not the Prometheus API's",
                          hint="check that --prometheus is the API base URL")
    return data


def _malformed(what: str, detail: str) -> SourceError:
    return SourceError(f"Prometheus answered {what} with a malformed result ({detail})",
                       hint="check that --prometheus is a Prometheus-compatible API, and any "
                            "proxy in front of it")


def parse_matrix(body: bytes, start_ts: float, step_s: float, what: str,
                 redactor: Callable[[str], str] | None = None) -> tuple[SeriesSet, dict[str, Any]]:
    """A ``query_range`` answer: fast path over the raw bytes, ``json`` when it does not fit.

    The fast path finds each ``{"metric":{...},"values":[...]}`` with a regular expression,
    checks that the pieces tile the result array exactly (else falls back), parses the label
    objects with ``json`` and all the ``[ts,"value"]`` pairs at once as CSV (pandas' C parser).
    Anything malformed (``"data": 5``, ragged or non-numeric pairs) is a ``SourceError``.
    """
    anchor = body.find(b'"result":[')
    if anchor >= 0:
        parsed = _fast_matrix(body, anchor + len(b'"result":['), start_ts, step_s, what)
        if parsed is not None:
            return parsed
    env = parse_envelope(body, what, redactor)
    _check_success(env, what)
    data = env.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" \
            or not isinstance(data.get("result"), list):
        raise SourceError(f"Prometheus answered {what} without a matrix result",
                          hint="check that --prometheus is a Prometheus-compatible API")
    labels: list[dict[str, str]] = []
    ts_parts: list[np.ndarray] = []
    val_parts: list[np.ndarray] = []
    counts: list[int] = []
    for item in data["result"]:
        if not isinstance(item, dict) or not isinstance(item.get("metric") or {}, dict) \
                or not isinstance(item.get("values") or [], list):
            raise _malformed(what, "a series is not {metric, values}")
        pairs = item.get("values") or []
        labels.append({str(k): str(v) for k, v in (item.get("metric") or {}).items()})
        counts.append(len(pairs))
        if pairs:
            try:
                arr = np.array(pairs, dtype=object)
                ts_parts.append(arr[:, 0].astype(np.float64))
                val_parts.append(arr[:, 1].astype(np.float64))
            except (ValueError, TypeError, IndexError, OverflowError):
                raise _malformed(what, "sample pairs that are not [time, \"number\"]") from None
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    ts = np.concatenate(ts_parts) if ts_parts else np.empty(0)
    vals = np.concatenate(val_parts) if val_parts else np.empty(0)
    return SeriesSet(labels, ts, vals, offsets, start_ts, step_s), env


def _fast_matrix(body: bytes, pos: int, start_ts: float, step_s: float,
                 what: str) -> tuple[SeriesSet, dict[str, Any]] | None:
    """The result array as one CSV text: a ``nan,nan`` line where each series starts, then
    its ``[ts,"value"]`` pairs one per line. None whenever the text is not exactly that shape
    (native histograms, braces in label values, anything unexpected): the caller then parses
    the body with ``json``."""
    import io

    import pandas as pd

    # The result array ends with its last series' last pair and the series' brace, the one
    # "]]}]" of a well-formed answer searched from the end (each pair ends in "]", which makes
    # a forward search slow); one later in a warning's text fails the checks below and the
    # answer goes to json.
    end = pos if body[pos:pos + 1] == b"]" else body.rfind(b"]]}]") + 3
    if end < pos:
        return None
    span = body[pos:end]
    if b'"histograms"' in span:
        return None
    metrics: list[bytes] = []
    text = b""
    if span:
        parts = _SERIES_SPLIT.split(span)
        metrics, pairs = parts[1::2], parts[2::2]
        # The pieces must tile the array: a header first, each series' pairs closed by "]}"
        # and, but for the last, the comma before the next header.
        if parts[0] or not pairs[-1].endswith(b"]}") or not all(
                map(bytes.endswith, pairs[:-1], repeat(b"]},"))):
            return None
        pairs[:-1] = [p[:-1] for p in pairs[:-1]]
        text = b"nan,nan\n" + b"\nnan,nan\n".join(pairs)
    n_series = len(metrics)
    try:
        env = json.loads(body[:pos] + body[end:])
        labels = json.loads(b"[" + b",".join(metrics) + b"]")
    except (ValueError, RecursionError):
        return None
    if not isinstance(env, dict):
        return None
    _check_success(env, what)
    if n_series:
        text = text.replace(b"],[", b"\n").translate(None, b'[]"}')
        try:
            frame = pd.read_csv(io.BytesIO(text), header=None, names=["t", "v"],
                                dtype={"t": np.float64, "v": np.float64}, engine="c",
                                na_filter=True, keep_default_na=True)
        except (ValueError, pd.errors.ParserError):
            return None
        t = frame["t"].to_numpy(dtype=np.float64)
        starts = np.flatnonzero(np.isnan(t))
        if len(starts) != n_series or (len(t) and starts[0] != 0):
            return None
        keep = np.ones(len(t), dtype=bool)
        keep[starts] = False
        counts = np.diff(np.append(starts, len(t))) - 1
        ts = t[keep]
        vals = frame["v"].to_numpy(dtype=np.float64)[keep]
    else:
        counts = np.zeros(0, dtype=np.int64)
        ts = vals = np.empty(0)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    # JSON object keys are strings; values are too from any Prometheus-compatible server, and
    # checking that is a third of the cost of rebuilding ~100k label dicts per answer.
    if not set(map(type, chain.from_iterable(map(dict.values, labels)))) <= {str}:
        labels = [{str(k): str(v) for k, v in d.items()} for d in labels]
    return SeriesSet(labels, ts, vals, offsets, start_ts, step_s), env


def _check_success(env: dict[str, Any], what: str) -> None:
    if env.get("status") != "success":
        raise HttpError(200, str(env.get("errorType", "")), str(env.get("error", "")) or
                         f"status {env.get('status')!r} for {what}")


def merge_series(parts: Sequence[SeriesSet]) -> SeriesSet:
    """Series of consecutive time pieces of one query (same grid), joined per label set."""
    if len(parts) == 1:
        return parts[0]
    order: dict[tuple[tuple[str, str], ...], list[tuple[np.ndarray, np.ndarray]]] = {}
    labels: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for part in parts:
        for i, lab in enumerate(part.labels):
            key = tuple(sorted(lab.items()))
            labels.setdefault(key, lab)
            a, b = part.offsets[i], part.offsets[i + 1]
            order.setdefault(key, []).append((part.ts[a:b], part.values[a:b]))
    keys = list(order)
    ts = [np.concatenate([p[0] for p in order[k]]) for k in keys]
    vals = [np.concatenate([p[1] for p in order[k]]) for k in keys]
    if parts[0].step_s <= 0:
        # Raw-sample pieces share their boundary sample (closed range selectors): keep one.
        for i, t in enumerate(ts):
            uniq, first = np.unique(t, return_index=True)
            if len(uniq) != len(t):
                ts[i], vals[i] = uniq, vals[i][first]
    counts = [len(t) for t in ts]
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return SeriesSet([labels[k] for k in keys],
                     np.concatenate(ts) if ts else np.empty(0),
                     np.concatenate(vals) if vals else np.empty(0),
                     offsets, parts[0].start_ts, parts[0].step_s)
