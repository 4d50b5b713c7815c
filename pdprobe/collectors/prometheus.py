"""Live collection: fill the dataset from the Prometheus HTTP API (Prometheus, Thanos, Mimir,
VictoriaMetrics) with a bounded number of server-side aggregated queries.

Phases (docs/live.md): (1) server time and discovery of the metric families that exist,
(2) in parallel: role labels and the aggregated range queries of ``promql_plan``, then the
network queries for the engines' hosts, (3) sample-by-sample re-reads of the few instances whose
counters dropped (restarts). Everything runs under one deadline (``target.timeout_s``);
credentials never appear in messages (``redact``).

The result is a ``Partial`` in the offline readers' layout (cumulative, reset-corrected counter
and histogram rows per instance), fused with the same role resolution.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import math
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from pdprobe import safe_text
from pdprobe import signals as S
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.metric_catalog import MetricSpec
from pdprobe.collectors.metric_names import backend_address
from pdprobe.collectors.metrics_map import MetricsMap, load_metrics_map
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.collectors.roles import RoleOptions, node_of, resolve_roles, role_from_name
from pdprobe.dataset import (
    DEPLOYMENT_COLUMNS,
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    ROLE_FROM_EVIDENCE,
    ROLE_FROM_LABEL,
    ROLE_FROM_NAME,
    Dataset,
    InstanceInfo,
    Partial,
    RoleHint,
    SourceInfo,
    conform,
)
from pdprobe.errors import InsufficientDataError, SourceError, UsageError
from pdprobe.redact import Redactor, scrub
from pdprobe.redact import redact as redact  # re-exported for callers of this module

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.collectors.identity import AliasMap

T = TypeVar("T")

# --- HTTP behaviour ----------------------------------------------------------------------------
# Transient answers worth another try: rate limiting and gateway/overload errors. 500 is
# included because Thanos/Mimir frontends return it for store hiccups.
RETRYABLE_STATUS: Final = frozenset({429, 500, 502, 503, 504})
MAX_ATTEMPTS: Final = 4
BACKOFF_BASE_S: Final = 0.25  # doubled per attempt, with +-25 % jitter
CONNECT_TIMEOUT_S: Final = 5.0
# Above this URL length a query goes as a POST form (proxies cut long URLs around 8 KiB).
MAX_GET_URL: Final = 4000
# A refused-as-too-large range query is halved in time this many times, then read at a doubled
# step this many times (each answer is warned about) before giving up.
MAX_SPLIT_DEPTH: Final = 3
MAX_STEP_DOUBLINGS: Final = 2
# Raw samples of restarted instances are read in range-vector pieces of this length (1440
# samples per series at a 15 s scrape); windows needing more pieces than this are re-read at the
# query step instead.
RAW_PIECE_S: Final = 6 * 3600.0
MAX_RAW_PIECES: Final = 4
_TOO_LARGE_MARKERS: Final = (
    "too many samples", "exceeded maximum resolution", "maxsamplesperquery",
    "maxpointspertimeseries", "cannot select more than", "exceeded the maximum number of samples",
    "max-samples", "query would load", "exceeds -search.max",
)

# --- data checks -----------------------------------------------------------------------------
# A server clock further from ours than this makes "now" ambiguous: warn (the window follows the
# server's clock). NTP-synced hosts agree within milliseconds.
CLOCK_SKEW_WARN_S: Final = 10.0
# No sample in the last this-many seconds of the window: the cluster or its scraping stopped.
STALE_WARN_S: Final = 300.0
# An instance without samples for this long inside the window had a scrape gap worth a warning
# (four 15 s scrapes).
GAP_WARN_S: Final = 60.0
SHOWN: Final = 5  # instances/names a warning lists

# A metrics-map role selector is the user's own statement about their labels: it beats the
# built-in label conventions but not --prefill-match/--decode-match.
ROLE_FROM_MAP: Final = ROLE_FROM_LABEL + 5

_SCALED_ROWS: Final = frozenset({S.GAUGE, S.COUNTER, S.HSUM})


# --------------------------------------------------------------------------------------------
# Redaction
# --------------------------------------------------------------------------------------------


def display_url(url: str) -> str:
    """The URL without userinfo, query or fragment (safe to print)."""
    from pdprobe.collectors.prometheus_target import split_userinfo

    parts = urlsplit(split_userinfo(url).url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port:
        host = f"{host}:{port}"
    return safe_text.clean(urlunsplit((parts.scheme, host, parts.path, "", "")))


def secrets_of(target: PrometheusTarget) -> tuple[str, ...]:
    """The target's credentials, any userinfo written into the URL included."""
    return target.secrets()


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryRecord:
    """One API call as issued (for capture metadata, ``check`` and the benchmark)."""

    endpoint: str
    promql: str
    seconds: float
    attempts: int
    series: int = 0
    points: int = 0
    start_ts: float | None = None
    end_ts: float | None = None
    step_s: float | None = None
    status: str = "ok"


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


class _HttpError(Exception):
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


class _TooLarge(Exception):
    pass


class PrometheusUnreachable(SourceError):
    """No HTTP answer: refused, unresolvable, TLS failure, or nothing within the budget."""


class PrometheusAuthError(SourceError):
    """The server refused the credentials (HTTP 401/403)."""


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------

# The start of each series of a matrix result, up to its first sample: the label object (no
# braces inside; other labels make the fast path give up) and nothing else. The boundary form
# (the previous series' closing brace first) begins with a literal, which the regex engine
# finds with a fast scan.
_SERIES_LABELS: Final = re.compile(rb'\{"metric":(\{[^{}]*\}),"values":\[')
_SERIES_HEADER: Final = re.compile(rb'\{"metric":\{[^{}]*\},"values":\[')
_SERIES_BOUNDARY: Final = re.compile(rb'\},\{"metric":\{[^{}]*\},"values":\[')


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

    end = pos if body[pos:pos + 1] == b"]" else body.find(b"]]}]", pos) + 3
    if end < pos:
        return None
    span = body[pos:end]
    if b'"histograms"' in span:
        return None
    metrics = _SERIES_LABELS.findall(span)
    text, n_series = b"", 0
    if span:
        first = _SERIES_HEADER.match(span)
        if first is None:
            return None
        text, n_more = _SERIES_BOUNDARY.subn(b"\nnan,nan\n", span[first.end():])
        text, n_series = b"nan,nan\n" + text, n_more + 1
    if n_series != len(metrics):
        return None
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
    lab = [{str(k): str(v) for k, v in d.items()} for d in labels]
    return SeriesSet(lab, ts, vals, offsets, start_ts, step_s), env


def _check_success(env: dict[str, Any], what: str) -> None:
    if env.get("status") != "success":
        raise _HttpError(200, str(env.get("errorType", "")), str(env.get("error", "")) or
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


# --------------------------------------------------------------------------------------------
# HTTP client
# --------------------------------------------------------------------------------------------


class PromClient:
    """The Prometheus HTTP API under one deadline, with retries and redacted errors.

    Requests go through ``prometheus_http``: a watchdog ends each one at the deadline (connect,
    headers and body alike), bodies are read in chunks and decompressed under a cap, and ``-H``
    headers are not sent to another origin on a redirect. Retries honour ``Retry-After`` and the
    deadline; responses are parsed without building a Python object per sample.
    """

    def __init__(self, target: PrometheusTarget, deadline: float) -> None:
        from pdprobe.collectors import prometheus_http as ph
        from pdprobe.collectors.prometheus_target import split_userinfo

        self.target = target
        userinfo = split_userinfo(target.url.strip())
        self.url = userinfo.url.rstrip("/")
        self.shown_url = display_url(self.url)
        self.deadline = deadline
        self.secrets = secrets_of(target)
        self._redactor = Redactor(self.secrets, target.basic_credentials())
        self.records: list[QueryRecord] = []
        self.warnings: list[str] = []
        self.infos: list[str] = []
        self._lock = threading.Lock()
        if target.ca_bundle and not target.insecure:
            from pathlib import Path

            if not Path(target.ca_bundle).is_file():
                raise UsageError(f"--ca-bundle {safe_text.clean(target.ca_bundle)}: no such file",
                                 hint="give the PEM file of the CA that signed the server")
        headers = {k: v for k, v in target.headers}
        if target.bearer_token and not any(k.lower() == "authorization" for k in headers):
            headers["Authorization"] = f"Bearer {target.bearer_token}"
        user, password = target.basic_auth_user, target.basic_auth_password
        if not user and userinfo.user:
            user, password = userinfo.user, userinfo.password
        # Bytes: requests would encode str as Latin-1; RFC 7617 allows UTF-8 credentials.
        self._auth = (user.encode("utf-8"), (password or "").encode("utf-8")) if user else None
        pool = max(10, target.max_concurrency + 2)
        self._session = ph.make_session([k for k, _ in target.headers],
                                        follow=target.headers_follow_redirects, pool_size=pool)
        self._headers = headers
        self._verify: bool | str = False if target.insecure else (target.ca_bundle or True)
        if target.insecure:
            import urllib3

            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

    def close(self) -> None:
        self._session.close()

    # -- plumbing --------------------------------------------------------------------------

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _clean(self, text: str) -> str:
        """Server or library text made safe to show: redacted, one line, no escapes."""
        return safe_text.clean(self._redactor(text)).strip()

    def _timeout_error(self, what: str) -> SourceError:
        return PrometheusUnreachable(
            f"Prometheus at {self.shown_url} did not answer {what} within the "
            f"{self.target.timeout_s:g} s budget",
            hint="raise --timeout, shorten --since, or narrow --selector")

    def _exchange(self, url: str, params: list[tuple[str, str]], use_post: bool,
                  remaining: float) -> tuple[int, Mapping[str, str], bytes]:
        """One request (redirects followed): status, headers and the capped body."""
        from pdprobe.collectors import prometheus_http as ph

        kwargs: dict[str, Any] = {
            "headers": self._headers, "auth": self._auth, "verify": self._verify, "stream": True,
            "timeout": (min(CONNECT_TIMEOUT_S, remaining), remaining)}
        if use_post:
            resp = self._session.post(url, data=params, **kwargs)
        else:
            resp = self._session.get(url, params=params, **kwargs)
        try:
            ok = resp.status_code == 200
            body = ph.read_body(resp, ph.MAX_BODY_BYTES if ok else ph.ERROR_BODY_BYTES,
                                truncate=not ok)
        finally:
            resp.close()
        return resp.status_code, resp.headers, body

    def _send(self, path: str, params: list[tuple[str, str]], what: str,
              allow_post: bool = True) -> tuple[bytes, int]:
        """The body of a 200 answer and the attempts it took; raises ``_HttpError`` on API
        errors that are not retryable and ``SourceError`` on everything fatal."""
        from http.client import HTTPException

        import requests
        import urllib3

        from pdprobe.collectors import prometheus_http as ph

        url = f"{self.url}{path}"
        prepared = requests.Request("GET", url, params=params).prepare()
        use_post = allow_post and len(prepared.url or "") > MAX_GET_URL
        attempt = 0
        last_refusal: SourceError | None = None  # the last retryable answer, if the budget ends
        while True:
            attempt += 1
            remaining = self.remaining()
            if remaining <= 0:
                # Out of time while waiting to retry: what the server last said is the news.
                raise last_refusal or self._timeout_error(what)
            dog = ph.Watchdog(self.deadline)
            try:
                with dog:
                    status, headers, body = self._exchange(url, params, use_post, remaining)
                if dog.fired:  # a cut-off answer can look complete (headers ended by EOF)
                    raise self._timeout_error(what)
            except ph.BodyTooLarge as exc:
                raise SourceError(f"Prometheus at {self.shown_url} answered {what} with {exc} "
                                  f"of data, refused as a decompression bomb or runaway answer",
                                  hint="narrow --selector or shorten --since (docs/safety.md)") from None
            except ph.BodyUndecodable as exc:
                raise SourceError(f"Prometheus at {self.shown_url} answered {what} with "
                                  f"{self._clean(str(exc))[:200]}",
                                  hint="check any proxy in front of Prometheus") from None
            except requests.exceptions.SSLError as exc:
                if dog.fired:
                    raise self._timeout_error(what) from None
                raise PrometheusUnreachable(
                    f"TLS connection to {self.shown_url} failed ({self._short_reason(exc)})",
                    hint="pass --ca-bundle FILE with the server's CA, or --insecure to skip "
                         "verification") from None
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                    requests.exceptions.ChunkedEncodingError, urllib3.exceptions.HTTPError,
                    HTTPException, OSError) as exc:
                if dog.fired or self.remaining() <= 0.05:
                    raise self._timeout_error(what) from None
                reason = self._short_reason(exc)
                wait = self._backoff(attempt, None)
                if attempt >= MAX_ATTEMPTS or wait >= self.remaining():
                    if reason == "timed out":
                        raise self._timeout_error(what) from None
                    raise PrometheusUnreachable(
                        f"cannot reach Prometheus at {self.shown_url} ({reason})",
                        hint="check --prometheus, the network path and that the server is "
                             "up") from None
                time.sleep(wait)
                continue
            except requests.exceptions.RequestException as exc:
                raise SourceError(f"request to Prometheus at {self.shown_url} failed "
                                  f"({self._short_reason(exc)})",
                                  hint="check --prometheus and the options") from None
            if status == 200:
                return body, attempt
            if status in (401, 403):
                raise PrometheusAuthError(
                    f"Prometheus at {self.shown_url} refused the credentials (HTTP {status})",
                    hint="check --bearer-token-file/PDPROBE_BEARER_TOKEN, --basic-auth-user and "
                         "its password, or the X-Scope-OrgID header for Mimir")
            error_type, message = self._api_error(status, body)
            if status in RETRYABLE_STATUS:
                retry_after = _retry_after(headers.get("Retry-After"))
                wait = self._backoff(attempt, retry_after)
                if error_type == "timeout" or (status == 503 and "timed out" in message.lower()):
                    raise _HttpError(status, "timeout", message)
                extra = (f"; it asked to retry after {retry_after:g} s" if retry_after
                         else f" after {attempt} attempts")
                last_refusal = SourceError(
                    f"Prometheus at {self.shown_url} answered {what} with HTTP {status}"
                    f"{extra} ({message[:200]})",
                    hint="try again later or raise --timeout")
                if attempt >= MAX_ATTEMPTS or wait >= self.remaining():
                    raise last_refusal
                time.sleep(wait)
                continue
            if status == 404 and not message:
                raise _HttpError(404, "not_found", f"{path} not found (HTTP 404)")
            raise _HttpError(status, error_type, message or f"HTTP {status}")

    def _api_error(self, status: int, body: bytes) -> tuple[str, str]:
        """The error type and the (cleaned) message of an error answer."""
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            text = body[:4096].decode("utf-8", "replace")
            return "", self._clean(text)[:300] if status != 404 else ""
        if isinstance(data, dict):
            return (self._clean(str(data.get("errorType", "")))[:60],
                    self._clean(str(data.get("error", "")))[:1000])
        return "", ""

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        base = BACKOFF_BASE_S * 2 ** (attempt - 1)
        return base * (0.75 + 0.5 * random.random())

    def _short_reason(self, exc: Exception) -> str:
        text = str(exc)
        low = text.lower()
        for needle, reason in (("refused", "connection refused"),
                               ("name or service not known", "host name does not resolve"),
                               ("nodename nor servname", "host name does not resolve"),
                               ("failed to resolve", "host name does not resolve"),
                               ("certificate verify failed", "certificate verification failed"),
                               ("wrong version number", "the server does not speak TLS"),
                               ("timed out", "timed out"),
                               ("remotedisconnected", "the server closed the connection"),
                               ("connection aborted", "the server closed the connection"),
                               ("connection reset", "connection reset")):
            if needle in low:
                return reason
        lines = self._redactor(text).splitlines()
        return self._clean(f"{type(exc).__name__}: {lines[0] if lines else ''}")[:200]

    def _record(self, rec: QueryRecord) -> None:
        with self._lock:
            self.records.append(rec)

    def warn(self, message: str) -> None:
        with self._lock:
            self.warnings.append(self._clean(message))

    def _collect_notes(self, env: dict[str, Any]) -> None:
        with self._lock:
            if env.get("isPartial") is True:  # VictoriaMetrics: a storage node did not answer
                self.warnings.append("Prometheus warned: partial response (isPartial): some "
                                     "storage nodes did not answer, data may be missing")
            warnings, infos = env.get("warnings"), env.get("infos")
            for w in warnings if isinstance(warnings, list) else ():
                self.warnings.append(f"Prometheus warned: {self._clean(str(w))[:500]}")
            for i in infos if isinstance(infos, list) else ():
                self.infos.append(f"Prometheus: {self._clean(str(i))[:500]}")

    # -- API -------------------------------------------------------------------------------

    def api_json(self, path: str, params: list[tuple[str, str]], what: str,
                 allow_post: bool = True) -> dict[str, Any]:
        t0 = time.monotonic()
        try:
            body, attempts = self._send(path, params, what, allow_post)
        except _HttpError as exc:
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

        Raises ``_TooLarge`` when even halves of halves are refused (the caller may coarsen).
        """
        pieces = pp.chunk_ranges(start_ts, end_ts, step_s)
        return merge_series([self._range_split(promql, a, b, step_s, 0) for a, b in pieces])

    def _range_split(self, promql: str, start_ts: float, end_ts: float, step_s: float,
                     depth: int) -> SeriesSet:
        try:
            return self._range_once(promql, start_ts, end_ts, step_s)
        except _HttpError as exc:
            if not exc.too_large:
                raise
            n = round((end_ts - start_ts) / step_s)
            if depth >= MAX_SPLIT_DEPTH or n < 1:
                raise _TooLarge(exc.message) from None
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
        except _HttpError as exc:
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


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or an HTTP date); None when unreadable
    (negative, not finite, garbage)."""
    if not value:
        return None
    v = value.strip()
    try:
        seconds = float(v)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - time.time())


# --------------------------------------------------------------------------------------------
# Parallel execution under the deadline
# --------------------------------------------------------------------------------------------


class _Runner:
    """A bounded thread pool whose waits end at the client's deadline."""

    def __init__(self, client: PromClient, workers: int, ctx: ReadContext) -> None:
        self.client = client
        self.pool = cf.ThreadPoolExecutor(max_workers=max(1, workers),
                                          thread_name_prefix="pdprobe-prom")
        self.ctx = ctx
        self.done = 0
        self.total = 0

    def submit(self, fn: Callable[[], T]) -> cf.Future[T]:
        self.total += 1
        return self.pool.submit(fn)

    def wait(self, futures: Sequence[cf.Future[Any]], what: str) -> None:
        pending = set(futures)
        while pending:
            remaining = self.client.remaining()
            if remaining <= 0:
                self.close()
                raise self.client._timeout_error(f"{what} ({self.done} of {self.total} queries "
                                                 f"done)")
            finished, pending = cf.wait(pending, timeout=remaining,
                                        return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                exc = fut.exception()
                if exc is not None:
                    self.close()
                    raise exc
                self.done += 1
                self.ctx.report(f"querying Prometheus ({self.done}/{self.total})",
                                min(0.95, self.done / max(1, self.total)))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


# --------------------------------------------------------------------------------------------
# Discovery and server facts
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerInfo:
    now_ts: float
    clock_skew_s: float  # server minus local
    version: str | None


def server_info(client: PromClient) -> ServerInfo:
    """Server time (connectivity, authentication, clock skew) and, when offered, the version."""
    t0 = time.time()
    try:
        result = client.query("time()")
    except _HttpError as exc:
        raise SourceError(f"no Prometheus query API at {client.shown_url} (HTTP {exc.status} for "
                          f"/api/v1/query: {client._clean(exc.message)[:120]})",
                          hint="--prometheus is the base URL, e.g. http://prometheus:9090 or "
                               "https://mimir/prometheus, without /api/v1") from None
    t1 = time.time()
    try:
        now = float(result[0]["value"][0])
        if not (math.isfinite(now) and 0 < now < 253402300799.0):  # 1970 .. year 9999
            raise ValueError(now)
    except (IndexError, KeyError, TypeError, ValueError, OverflowError):
        raise SourceError(f"Prometheus at {client.shown_url} answered time() oddly",
                          hint="check that --prometheus is a Prometheus-compatible API") from None
    version = None
    try:
        env = client.api_json("/api/v1/status/buildinfo", [], "build info", allow_post=False)
        data = env.get("data")
        version = (safe_text.clean(str(data.get("version") or ""))[:60] or None
                   if isinstance(data, dict) else None)
    except (_HttpError, SourceError):
        pass  # Thanos, Mimir and VictoriaMetrics do not all offer it
    return ServerInfo(now_ts=now, clock_skew_s=now - (t0 + t1) / 2, version=version)


def discover_names(client: PromClient, window: pp.Window, engine_match: str,
                   network_match: str) -> tuple[list[str], str]:
    """Metric names present in the window (engine names scoped by the selector).

    ``/api/v1/label/__name__/values`` with ``match[]``; when that endpoint is restricted (some
    multi-tenant gateways deny it), one ``group by (__name__)`` range query per scope.
    """
    try:
        names = client.label_values("__name__", [engine_match, network_match], window.start_ts,
                                    window.end_ts)
        return sorted(set(names)), "label values (/api/v1/label/__name__/values)"
    except _HttpError:
        pass
    out: set[str] = set()
    step = max(window.step_s, window.span_s / 10)
    for match in (engine_match, network_match):
        try:
            sset = client.query_range(f"group by (__name__) ({match})", window.start_ts,
                                      window.end_ts, step)
        except (_HttpError, _TooLarge) as exc:
            raise SourceError(f"Prometheus at {client.shown_url} refused the discovery of metric "
                              f"names ({client._clean(str(exc))[:200]})",
                              hint="narrow --selector, or check the permissions of the "
                                   "credentials") from None
        out.update(lab.get("__name__", "") for lab in sset.labels)
    out.discard("")
    return sorted(out), "group by (__name__) range queries (label values endpoint unavailable)"


# --------------------------------------------------------------------------------------------
# Assembly: series -> per-instance groups -> long tables
# --------------------------------------------------------------------------------------------


@dataclass
class _Groups:
    """One batch's aggregated rows: a key table, a value matrix and a presence matrix."""

    keys: pd.DataFrame  # one row per group (see _KEY_COLUMNS)
    values: np.ndarray  # [groups, columns]
    present: np.ndarray  # [groups, columns] bool
    ts: np.ndarray  # [columns]
    reset_idents: set[str]  # instances whose cumulative series dropped (restart or wrap)


_KINDS: Final = (S.GAUGE, S.COUNTER, S.BUCKET, S.HSUM, S.HCOUNT)
_KIND_CODE: Final = {k: i for i, k in enumerate(_KINDS)}


def _grid(sset: SeriesSet) -> tuple[np.ndarray, np.ndarray]:
    """Column of every sample and the column timestamps: the query's grid, or for raw samples
    (``step_s == 0``) the distinct sample times."""
    if sset.points == 0:
        return np.empty(0, dtype=np.int64), np.empty(0)
    if sset.step_s <= 0:
        grid = np.unique(sset.ts)
        return np.searchsorted(grid, sset.ts).astype(np.int64), grid
    col = np.rint((sset.ts - sset.start_ts) / sset.step_s).astype(np.int64)
    if col.min() < 0:
        raise SourceError("Prometheus answered a range query with samples before its start",
                          hint="check that --prometheus is a Prometheus-compatible API")
    n = int(col.max()) + 1
    return col, sset.start_ts + np.arange(n) * sset.step_s


def _ffill_rows(m: np.ndarray) -> np.ndarray:
    """Forward-fill NaN along each row; NaN before a row's first value becomes 0."""
    valid = ~np.isnan(m)
    idx = np.where(valid, np.arange(m.shape[1])[None, :], 0)
    np.maximum.accumulate(idx, axis=1, out=idx)
    out = m[np.arange(m.shape[0])[:, None], idx]
    seen = np.maximum.accumulate(valid, axis=1)
    return np.where(seen, out, 0.0)


def _group_ids(*columns: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Dense group number of each row of the given key columns (vectorised)."""
    import pandas as pd

    code = np.zeros(len(columns[0]), dtype=np.int64)
    for col in columns:
        codes, uniques = pd.factorize(np.asarray(col), use_na_sentinel=False)
        code = code * max(1, len(uniques)) + codes
    return np.unique(code, return_inverse=True)[1].reshape(-1)


@dataclass(frozen=True)
class _Members:
    """The (series, spec) pairs of one answer, one array element per pair."""

    specs: list[tuple[pp.Family, MetricSpec]]  # indexed by ``spec``
    series: np.ndarray  # row in the answer
    spec: np.ndarray
    kind: np.ndarray  # _KIND_CODE
    le: np.ndarray  # scaled bucket bound, NaN for other kinds
    ident: np.ndarray  # instance (engine scope) or ""
    node: np.ndarray
    device: np.ndarray
    port: np.ndarray


def _members(batch: pp.Batch, labels: Sequence[dict[str, str]],
             by_name: Mapping[str, tuple[pp.Family, str]], node_label: str | None
             ) -> _Members | None:
    """The (series, spec) pairs of a batch's answer, series-major, as arrays.

    A series counts when its name belongs to the batch, it names an instance and, for a
    bucket, its ``le`` is a number; it feeds every spec of its family that has the batch's
    label filter (the server applied that filter). Label lookups run per series in list
    comprehensions, everything else per distinct name or instance.
    """
    import pandas as pd

    network = batch.scope == "network"
    deployment = batch.scope == "deployment"
    inst_label = batch.instance_label
    names = np.array([lab.get("__name__", "") for lab in labels], dtype=object)
    if deployment:  # the deployment's name: first of its labels present, else ""
        insts = np.array([next((lab[d] for d in mc.DEPLOYMENT_LABELS if lab.get(d)), "")
                          for lab in labels], dtype=object)
    else:
        insts = np.array([lab.get(inst_label, "") for lab in labels], dtype=object)
        if inst_label in mc.BACKEND_LABEL_NAMES:  # a router's backend URL: host:port
            addrs = {v: backend_address(str(v)) or "" for v in set(insts.tolist())}
            insts = np.array([addrs[v] for v in insts], dtype=object)
    name_code, uniq_names = pd.factorize(names)
    # Per distinct name: its kind and the ids of the specs it feeds (ids in first-seen order).
    specs: list[tuple[pp.Family, MetricSpec]] = []
    spec_ids: dict[tuple[str, int], int] = {}
    name_kind = np.full(len(uniq_names), -1, dtype=np.int64)
    name_specs: list[list[int]] = [[] for _ in range(len(uniq_names))]
    first_seen = np.full(len(uniq_names), len(labels), dtype=np.int64)
    np.minimum.at(first_seen, name_code, np.arange(len(labels)))
    for u in np.argsort(first_seen, kind="stable"):  # loop over names, in series order
        found = by_name.get(str(uniq_names[u]))
        if found is None:
            continue
        fam, kind = found
        name_kind[u] = _KIND_CODE[kind]
        ids = []
        for j, spec in enumerate(fam.specs):
            if spec.label_filter != batch.label_filter:
                continue
            sid = spec_ids.get((fam.exposed, j))
            if sid is None:
                sid = spec_ids[(fam.exposed, j)] = len(specs)
                specs.append((fam, spec))
            ids.append(sid)
        name_specs[u] = ids
    kinds = name_kind[name_code]
    ok = (kinds >= 0) & ((insts != "") | deployment)
    le = np.full(len(labels), np.nan)
    bucket = ok & (kinds == _KIND_CODE[S.BUCKET])
    if bucket.any():
        raw_le = [labels[int(i)].get("le", "nan") for i in np.flatnonzero(bucket)]
        le[bucket] = pd.to_numeric(pd.Series(raw_le, dtype=object), errors="coerce").to_numpy(
            dtype=np.float64)
        ok &= ~(bucket & np.isnan(le))
    n_specs = np.asarray([len(ids) for ids in name_specs], dtype=np.int64)
    per_series = np.where(ok, n_specs[name_code], 0)
    if not per_series.any():
        return None
    series = np.repeat(np.arange(len(labels)), per_series)
    offsets = np.concatenate(([0], np.cumsum(n_specs)))
    flat_specs = np.asarray([sid for ids in name_specs for sid in ids], dtype=np.int64)
    within = np.arange(len(series)) - np.repeat(np.cumsum(per_series) - per_series, per_series)
    spec_of = flat_specs[offsets[name_code[series]] + within]
    kind_of = kinds[series]
    scale = np.asarray([sp.scale for _, sp in specs], dtype=np.float64)
    m_le = np.where(kind_of == _KIND_CODE[S.BUCKET], le[series] * scale[spec_of], np.nan)
    blank = np.full(len(series), "", dtype=object)
    rows = series.tolist()
    if network:
        inst_code, uniq_insts = pd.factorize(insts[series])
        hosts = np.array([node_of(str(i)) or str(i) for i in uniq_insts], dtype=object)
        return _Members(specs, series, spec_of, kind_of, m_le, blank, hosts[inst_code],
                        np.array([labels[i].get("device", "") for i in rows], dtype=object),
                        np.array([labels[i].get("port", "") for i in rows], dtype=object))
    node = (np.array([labels[i].get(node_label, "") for i in rows], dtype=object)
            if node_label else blank)
    return _Members(specs, series, spec_of, kind_of, m_le, insts[series], node, blank, blank)


def batch_groups(batch: pp.Batch, sset: SeriesSet, *, node_label: str | None = None,
                 raw: bool = False) -> _Groups | None:
    """Turn one batch's series into per-(instance, signal, kind, le) group rows.

    Cumulative rows: each series is reset/wrap-corrected, carried forward across its gaps, and
    summed over the series of a group (sub-series, filter-label values); gauges are combined
    with the spec's aggregation. ``raw`` series (un-aggregated, possibly raw sample times) go
    through the same path.
    """
    import pandas as pd

    from pdprobe.promql_math import correct_counters_grouped

    if not sset.labels:
        return None
    by_name: dict[str, tuple[pp.Family, str]] = {}
    for fam in batch.families:
        for name in fam.series_names():
            kind = fam.row_kind(name)
            if kind is not None:
                by_name[name] = (fam, kind)
    members = _members(batch, sset.labels, by_name, node_label)
    if members is None:
        return None
    specs, m_le, m_node, m_device, m_port = (members.specs, members.le, members.node,
                                             members.device, members.port)

    col, grid_ts = _grid(sset)
    n_series, n_cols = len(sset.labels), len(grid_ts)
    sample_series = np.repeat(np.arange(n_series), np.diff(sset.offsets))
    mat = np.full((n_series, n_cols), np.nan)
    mat[sample_series, col] = sset.values
    present = ~np.isnan(mat)

    series, spec_of, kind_of, ident = members.series, members.spec, members.kind, members.ident
    reset_idents: set[str] = set()
    if batch.cumulative:
        # Correct each series once (a series feeding two specs has one bit width).
        bits = np.zeros(n_series)
        spec_bits = np.asarray([sp.counter_bits or 0 for _, sp in specs], dtype=np.float64)
        np.maximum.at(bits, series, spec_bits[spec_of])
        drops = np.zeros(n_series, dtype=bool)
        if n_cols > 1:
            drops = np.asarray((np.diff(_ffill_rows(mat), axis=1) < 0).any(axis=1), dtype=bool)
        if drops.any() and batch.scope != "network":
            reset_idents = set(ident[drops[series]].tolist())
        corrected = correct_counters_grouped(
            np.repeat(np.arange(n_series), n_cols), mat.reshape(-1),
            np.repeat(bits, n_cols) if bits.any() else None)
        work = _ffill_rows(corrected.reshape(n_series, n_cols))
    else:
        work = mat
    gid = _group_ids(ident, m_node, m_device, m_port, spec_of, kind_of, m_le)
    order = np.argsort(gid, kind="stable")
    gid_sorted = gid[order]
    starts = np.flatnonzero(np.concatenate(([True], gid_sorted[1:] != gid_sorted[:-1])))
    rows = series[order]
    pres = np.add.reduceat(present[rows].astype(np.int64), starts, axis=0)
    rep = order[starts]
    rep_specs = [specs[s] for s in spec_of[rep].tolist()]
    aggs = np.asarray([sp.aggregate if _KINDS[k] == S.GAUGE else "sum"
                       for (_, sp), k in zip(rep_specs, kind_of[rep].tolist(), strict=True)])
    if batch.cumulative:
        vals = np.add.reduceat(work[rows], starts, axis=0)
    else:
        filled_vals = np.where(present[rows], work[rows], 0.0)
        sums = np.add.reduceat(filled_vals, starts, axis=0)
        maxes = np.maximum.reduceat(np.where(present[rows], work[rows], -np.inf), starts, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = sums / pres
        vals = np.where((aggs == "max")[:, None], maxes,
                        np.where((aggs == "mean")[:, None], means, sums))
    kinds = [_KINDS[k] for k in kind_of[rep].tolist()]
    scale = np.asarray([sp.scale if k in _SCALED_ROWS else 1.0
                        for (_, sp), k in zip(rep_specs, kinds, strict=True)])
    vals = vals * scale[:, None]
    keys = pd.DataFrame({
        "ident": ident[rep], "node": m_node[rep], "device": m_device[rep], "port": m_port[rep],
        "signal": [sp.signal for _, sp in rep_specs], "kind": kinds,
        "le": m_le[rep], "agg": aggs,
        "family": [f.exposed for f, _ in rep_specs], "engine": [f.engine for f, _ in rep_specs],
        "chain": [f.chain for f, _ in rep_specs], "rank": [f.rank for f, _ in rep_specs],
        "frontend": [f.exposed.startswith("dynamo_frontend_") and not f.spec.instance_label
                     for f, _ in rep_specs],
    })
    keys["scope"] = batch.scope
    keys["raw"] = raw
    return _Groups(keys, vals, pres > 0, grid_ts, reset_idents)


def select_and_flatten(groups: Sequence[_Groups]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Choose among alternatives and emit the long ``metrics`` and ``network`` tables.

    Per instance (or node/device/port) and signal, the preferred engine's families win, and in
    each rename chain the newest name; families that are genuinely different (e.g. failed
    transfers and failed receives) are added (cumulative) or combined with the spec's
    aggregation (gauges). Also returns the kept group keys (for roles and summaries).
    Rows come out in time order; string columns are built from the (few) group keys.
    """
    import pandas as pd

    frames: list[pd.DataFrame] = []
    for i, g in enumerate(groups):
        frame = g.keys.copy()
        frame["batch"] = i
        frame["local"] = np.arange(len(frame))
        frame["any_present"] = np.asarray(g.present.any(axis=1), dtype=bool)
        frames.append(frame)
    if not frames:
        return (conform(pd.DataFrame(), METRIC_COLUMNS), conform(pd.DataFrame(), NETWORK_COLUMNS),
                pd.DataFrame())
    keys = pd.concat(frames, ignore_index=True)
    keys = keys[keys["any_present"]]
    if not keys.empty:
        keys = keys.assign(eprio=keys["engine"].map(pp.ENGINE_PRIORITY).fillna(9))
        ident = ["scope", "ident", "node", "device", "port", "signal", "kind"]
        best_engine = keys.groupby(ident, dropna=False)["eprio"].transform("min")
        keys = keys[keys["eprio"] == best_engine]
        best_rank = keys.groupby([*ident, "engine", "chain"], dropna=False)["rank"].transform("min")
        keys = keys[keys["rank"] == best_rank]
    keys = keys.reset_index(drop=True)
    metrics = _flatten(groups, keys[keys["scope"] == "instance"], METRIC_COLUMNS)
    network = _flatten(groups, keys[keys["scope"] == "network"], NETWORK_COLUMNS)
    return metrics, network, keys


def deployment_rows(groups: Sequence[_Groups], keys: pd.DataFrame) -> pd.DataFrame:
    """The deployment-scope rows of the kept group keys (``select_and_flatten``'s third
    result), in ``DEPLOYMENT_COLUMNS`` (their ``ident`` is the deployment's name)."""
    import pandas as pd

    kept = keys[keys["scope"] == "deployment"] if len(keys) else keys
    if kept.empty:
        return conform(pd.DataFrame(), DEPLOYMENT_COLUMNS)
    flat = _flatten(groups, kept, METRIC_COLUMNS)
    return conform(flat.rename(columns={"instance": "deployment"}), DEPLOYMENT_COLUMNS)


def _time_order(ts: np.ndarray, grids: Sequence[np.ndarray]) -> np.ndarray:
    """Stable time order of ``ts``, whose values all come from the query grids ``grids``.

    The grids hold a few hundred distinct times: sorting their 16-bit ranks is a radix sort,
    several times faster than sorting a million floats. Raw re-reads (other times) fall back.
    """
    grid = np.unique(np.concatenate([np.asarray(g, dtype=np.float64) for g in grids]))
    if len(grid) <= np.iinfo(np.uint16).max:
        rank = np.searchsorted(grid, ts)
        if np.array_equal(grid[np.minimum(rank, len(grid) - 1)], ts):
            return np.argsort(rank.astype(np.uint16), kind="stable")
    return np.argsort(ts, kind="stable")


def _flatten(groups: Sequence[_Groups], kept: pd.DataFrame,
             columns: Mapping[str, str]) -> pd.DataFrame:
    """The present cells of the kept groups as rows of ``columns`` (time order)."""
    import pandas as pd
    import pyarrow as pa

    if kept.empty:
        return conform(pd.DataFrame(), columns)
    kept = kept.reset_index(drop=True)
    dest_cols = ["ident", "node", "device", "port", "signal", "kind", "le"]
    dest = _group_ids(*(kept[c].to_numpy() for c in dest_cols))
    shared = np.bincount(dest)[dest] > 1
    ts_parts: list[np.ndarray] = []
    val_parts: list[np.ndarray] = []
    row_parts: list[np.ndarray] = []
    slow: list[pd.DataFrame] = []
    for b, sel in kept.groupby("batch", sort=True):
        g = groups[int(str(b))]
        local = sel["local"].to_numpy()
        krow = sel.index.to_numpy()
        gi, cj = np.nonzero(g.present[local])
        vals = g.values[local][gi, cj]
        rows = krow[gi]
        fast = ~shared[rows]
        ts_parts.append(g.ts[cj][fast])
        val_parts.append(vals[fast])
        row_parts.append(rows[fast])
        if not fast.all():
            slow.append(pd.DataFrame({"dest": dest[rows[~fast]], "ts": g.ts[cj][~fast],
                                      "value": vals[~fast], "row": rows[~fast],
                                      "agg": kept["agg"].to_numpy()[rows[~fast]]}))
    if slow:
        # Distinct families feeding one signal of one instance: added (cumulative, sum gauges)
        # or combined with the gauge's aggregation, per timestamp.
        part = pd.concat(slow, ignore_index=True)
        for how, sub in part.groupby("agg", sort=True):
            func = {"mean": "mean", "max": "max"}.get(str(how), "sum")
            combined = sub.groupby(["dest", "ts"], sort=False).agg(
                value=("value", func), row=("row", "first")).reset_index()
            ts_parts.append(combined["ts"].to_numpy(dtype=np.float64))
            val_parts.append(combined["value"].to_numpy(dtype=np.float64))
            row_parts.append(combined["row"].to_numpy(dtype=np.int64))
    ts = np.concatenate(ts_parts)
    values = np.concatenate(val_parts)
    rows = np.concatenate(row_parts)
    order = _time_order(ts, [g.ts for g in groups])
    ts, values, rows = ts[order], values[order], rows[order]
    source = {"instance": "ident"}
    out: dict[str, object] = {}
    for name, dtype in columns.items():
        if name == "ts":
            out[name] = ts
        elif name == "value":
            out[name] = values
        elif name == "le":
            out[name] = kept["le"].to_numpy(dtype=np.float64)[rows]
        else:
            codes, uniques = pd.factorize(kept[source.get(name, name)].to_numpy(dtype=object))
            dictionary = pa.DictionaryArray.from_arrays(
                pa.array(codes[rows].astype(np.int32)), pa.array(list(uniques), type=pa.string()))
            out[name] = pd.arrays.ArrowStringArray(dictionary.dictionary_decode())
            assert dtype == "string"
    return conform(pd.DataFrame(out), columns)


# --------------------------------------------------------------------------------------------
# Roles
# --------------------------------------------------------------------------------------------


@dataclass
class _InstanceFacts:
    hints: list[RoleHint] = field(default_factory=list)
    engines: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)  # hosts of `instance` labels (network join)
    notes: list[str] = field(default_factory=list)


def role_facts(results: Sequence[tuple[pp.RoleQuery, list[dict[str, Any]]]],
               metrics_map: MetricsMap | None, source: str) -> _InstanceFacts:
    """Role hints, engines and nodes from the ``group by`` answers (same rules as offline)."""
    from pdprobe.collectors.openmetrics import _label_role, generic_component_hints

    facts = _InstanceFacts()
    seen: set[tuple[str, str, str]] = set()
    role_labels = (*(metrics_map.role_labels if metrics_map else ()), *mc.ROLE_LABELS)
    default_inst = (metrics_map.instance_label if metrics_map else None) or "instance"
    node_label = metrics_map.node_label if metrics_map else None
    unified = False
    labelled: list[tuple[str, str, str]] = []  # every (instance, role label, value) seen
    for rq, vector in results:
        for item in vector:
            lab = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
            inst = lab.get(rq.instance_label, "")
            if not inst:
                continue
            if rq.role is not None:
                facts.hints.append(RoleHint(inst, rq.role, rq.how, ROLE_FROM_MAP, source))
                continue
            rank = pp.ENGINE_PRIORITY.get(rq.engine, 9)
            cur = facts.engines.get(inst)
            if cur is None or rank < pp.ENGINE_PRIORITY.get(cur, 9):
                facts.engines[inst] = rq.engine
            for label in role_labels:
                value = lab.get(label)
                if not value or (inst, label, value) in seen:
                    continue
                seen.add((inst, label, value))
                if label == "engine_type" and value.lower() in ("unified", "dynamic"):
                    unified = unified or value.lower() == "unified"
                    continue
                labelled.append((inst, label, value))
                mapped = metrics_map.role_of_value(value) if metrics_map else None
                if mapped is not None:
                    facts.hints.append(RoleHint(inst, mapped, f"label {label}={value!r}",
                                                ROLE_FROM_LABEL, source))
                    continue
                decided = _label_role(label, value)
                if decided is not None:
                    facts.hints.append(RoleHint(inst, decided[0], f"label {label}={value!r}",
                                                decided[1], source))
            if rq.instance_label == default_inst:
                for label in ("pod", "instance", "job"):
                    value = lab.get(label)
                    role = role_from_name(value) if value else None
                    if role and (inst, "name", label) not in seen:
                        seen.add((inst, "name", label))
                        facts.hints.append(RoleHint(inst, role, f"name pattern in {label} "
                                                    f"{value!r}", ROLE_FROM_NAME, source))
                        break
            node = ""
            for label in (*((node_label,) if node_label else ()), *pp.NODE_LABELS):
                if lab.get(label):
                    node = lab[label]
                    break
            host = node_of(lab.get("instance", "")) if lab.get("instance") else None
            if host:
                facts.hosts.add(host)
            if node:
                facts.nodes.setdefault(inst, node)
                facts.hosts.add(node)
            elif host and rq.instance_label == "instance":
                facts.nodes.setdefault(inst, host)
    # A `backend`/`worker` Dynamo component is decode only beside a prefill one (as offline).
    facts.hints.extend(generic_component_hints(labelled, source))
    if unified:
        facts.notes.append('SGLang engine_type="unified" names no role (<=0.5.3 printed it even '
                           "in PD mode); roles come from names or behaviour")
    # One hint per (instance, how): several engines may repeat a label.
    facts.hints = list(dict.fromkeys(facts.hints))
    return facts



# --------------------------------------------------------------------------------------------
# The collection
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveMeta:
    """How a live collection went (for the capture file, ``check`` and the benchmark)."""

    url: str  # without credentials
    window: pp.Window
    selector: str
    network_selector: str | None
    server_version: str | None
    clock_skew_s: float
    discovery: str
    found: pp.Found
    queries: tuple[QueryRecord, ...]
    elapsed_s: float
    metrics_map: str | None = None


@dataclass(frozen=True)
class LiveResult:
    partial: Partial
    meta: LiveMeta


@dataclass(frozen=True)
class Probe:
    """What ``pdprobe check`` needs: reachability, families, roles, without the data queries."""

    meta: LiveMeta
    instances: tuple[InstanceInfo, ...]
    role_warnings: tuple[str, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    batches: tuple[pp.Batch, ...]


class _Session:
    """Shared setup of ``collect_partial`` and ``probe``: client, window, discovery, plan."""

    def __init__(self, target: PrometheusTarget, ctx: ReadContext) -> None:
        # Imported here, once: worker threads importing pandas on first use would queue
        # behind the import lock and their query timings would include it.
        import pandas  # noqa: F401

        self.t0 = time.monotonic()
        self.target = target
        self.ctx = ctx
        self.mmap = load_metrics_map(target.metrics_map) if target.metrics_map else None
        self.selector = pp.combine_selectors(target.selector,
                                             self.mmap.selector if self.mmap else "")
        net = self.mmap.network_selector if self.mmap else None
        self.network_selector = pp.combine_selectors(net) if net else None
        self.client = PromClient(target, self.t0 + target.timeout_s)
        self.warnings: list[str] = []
        self.notes: list[str] = []
        if target.insecure:
            self.warnings.append("TLS certificate verification is off (--insecure)")

    def close(self) -> None:
        self.client.close()

    def prepare(self) -> tuple[ServerInfo, pp.Window, list[pp.Family], str]:
        self.ctx.report("contacting Prometheus", 0.0)
        info = server_info(self.client)
        until = self.target.until_ts if self.target.until_ts is not None else info.now_ts
        if abs(info.clock_skew_s) > CLOCK_SKEW_WARN_S:
            ahead = "ahead of" if info.clock_skew_s > 0 else "behind"
            self.warnings.append(f"Prometheus' clock is {abs(info.clock_skew_s):.0f} s {ahead} "
                                 f"this machine's: the window follows the server's clock")
        if until > info.now_ts:
            # No data exists after the server's "now"; a clamp beyond clock noise is worth a note.
            if until - info.now_ts > CLOCK_SKEW_WARN_S:
                self.notes.append(f"window end moved from {_iso(until)} to the server's time "
                                  f"{_iso(info.now_ts)} (no data exists after it)")
            until = info.now_ts
        window = pp.choose_window(self.target.since_s, until, self.target.step_s)
        if self.target.step_s is not None and abs(window.span_s - self.target.since_s) > 1e-6:
            self.notes.append(f"window shortened to {window.span_s:g} s, a whole number of "
                              f"--step {self.target.step_s:g} s steps")
        index = pp.SpecIndex.build(self.mmap)
        engine_match, net_match = pp.discovery_matchers(self.selector, self.network_selector,
                                                        index)
        self.ctx.report("discovering metric families", 0.05)
        names, how = discover_names(self.client, window, engine_match, net_match)
        families = pp.families_from_names(names, index)
        return info, window, families, how

    def meta(self, info: ServerInfo, window: pp.Window, families: Sequence[pp.Family],
             how: str) -> LiveMeta:
        return LiveMeta(
            url=self.client.shown_url, window=window, selector=self.selector,
            network_selector=self.network_selector, server_version=info.version,
            clock_skew_s=info.clock_skew_s, discovery=how, found=pp.summarise(families),
            queries=tuple(self.client.records), elapsed_s=time.monotonic() - self.t0,
            metrics_map=self.target.metrics_map)


def collect_partial(target: PrometheusTarget, ctx: ReadContext | None = None) -> LiveResult:
    """Query Prometheus and build the ``Partial`` (see the module docstring)."""
    ctx = ctx or ReadContext()
    session = _Session(target, ctx)
    try:
        return _collect(session)
    except (SourceError, UsageError, InsufficientDataError):
        raise
    except _TooLarge as exc:
        raise SourceError(f"Prometheus at {session.client.shown_url} refuses the queries as too "
                          f"large ({session.client._clean(str(exc))[:160]})",
                          hint="shorten --since, raise --step or narrow --selector") from None
    except _HttpError as exc:
        raise SourceError(f"Prometheus at {session.client.shown_url} answered with an error: "
                          f"{session.client._clean(exc.message)[:200]} (HTTP {exc.status})",
                          hint="check --selector and the metrics map") from None
    finally:
        session.close()


def _collect(session: _Session) -> LiveResult:
    client, ctx, mmap = session.client, session.ctx, session.mmap
    info, window, families, how = session.prepare()
    found = pp.summarise(families)
    if not found.engines:
        where = f" matching {{{session.selector}}}" if session.selector else ""
        raise InsufficientDataError(
            f"Prometheus at {client.shown_url} has no vLLM, SGLang or Dynamo metrics{where} "
            f"between {_iso(window.start_ts)} and {_iso(window.end_ts)}",
            hint="check --selector, --since/--until, or map custom names with --metrics-map")
    batches = pp.plan_batches(pp.analysed(families), window,
                              mmap.instance_label if mmap else None)
    engine_batches = [b for b in batches if b.scope == "instance"]
    deployment_batches = [b for b in batches if b.scope == "deployment"]
    net_batches = [b for b in batches if b.scope == "network"]
    role_queries = pp.plan_role_queries(families, window, session.selector, mmap)
    source = f"Prometheus {client.shown_url}"
    failed: list[str] = []
    node_label = mmap.node_label if mmap else None

    def run_batch(batch: pp.Batch, promql: str) -> SeriesSet | None:
        step, start_ts = batch.step_s, _batch_start(batch, window)
        for doubling in range(MAX_STEP_DOUBLINGS + 1):
            try:
                return client.query_range(promql, start_ts, window.end_ts, step)
            except _TooLarge:
                if doubling == MAX_STEP_DOUBLINGS:
                    raise
                n = math.floor((window.end_ts - start_ts) / (2 * step) + 1e-9)
                step *= 2
                start_ts = window.end_ts - max(1, n) * step
                client.warn(f"Prometheus found the query for {_families_text(batch)} too large; "
                            f"read it at a {step:g} s step instead")
            except _HttpError as exc:
                if exc.status in (400, 422) or exc.error_type in ("bad_data", "execution"):
                    with client._lock:
                        failed.append(f"{_families_text(batch)} "
                                      f"({client._clean(exc.message)[:120]})")
                    return None
                raise
        return None

    def run_raw(batch: pp.Batch, instances: Sequence[str]) -> SeriesSet | None:
        selector = batch.raw_promql(session.selector, instances)
        if window.span_s <= RAW_PIECE_S * MAX_RAW_PIECES:
            return client.raw_samples(selector, window.start_ts, window.end_ts)
        return run_batch(replace(batch, step_s=window.step_s), selector)

    def run_grouped(batch: pp.Batch, promql: str) -> _Groups | None:
        # Grouped in the worker, so that it overlaps the queries still running.
        sset = run_batch(batch, promql)
        return batch_groups(batch, sset, node_label=node_label) if sset is not None else None

    runner = _Runner(client, session.target.max_concurrency, ctx)
    try:
        # The role queries are quick and tell the hosts the network queries need: run them
        # first, then every data query at once, the costliest first so none trails alone.
        role_futs = [(rq, runner.submit(partial(client.query, rq.promql, window.end_ts)))
                     for rq in role_queries]
        runner.wait([f for _, f in role_futs], "the role queries")
        facts = role_facts([(rq, f.result()) for rq, f in role_futs], mmap, source)
        net_matcher = session.network_selector
        if net_batches and not net_matcher and facts.hosts:
            net_matcher = pp.network_host_matcher(facts.hosts)
        planned = [(b, b.promql(session.selector))
                   for b in (*engine_batches, *deployment_batches)]
        planned += [(b, b.promql(net_matcher)) for b in net_batches if net_matcher]
        planned.sort(key=lambda bq: pp.batch_cost(bq[0], window), reverse=True)
        futs = {b.id: runner.submit(partial(run_grouped, b, q)) for b, q in planned}
        net_asked = bool(net_batches and net_matcher)
        if ctx.while_waiting is not None:
            ctx.while_waiting()
        runner.wait(list(futs.values()), "the data queries")
        ctx.report("assembling the dataset", 0.9)
        groups: dict[str, _Groups] = {}
        restarted: dict[str, set[str]] = {}  # instance label -> instances
        for b in batches:
            fut = futs.get(b.id)
            g = fut.result() if fut is not None else None
            if g is None:
                continue
            groups[b.id] = g
            if b.cumulative and b.scope == "instance":
                restarted.setdefault(b.instance_label, set()).update(g.reset_idents)
        n_restarted = sum(len(v) for v in restarted.values())
        raw_futs: dict[str, cf.Future[SeriesSet | None]] = {}
        if 0 < n_restarted <= pp.MAX_RAW_INSTANCES:
            # Between two grid points a restart hides what was counted before it; the raw
            # samples of these few instances give exactly what the offline reader sees.
            raw_futs = {b.id: runner.submit(partial(run_raw, b, sorted(restarted[b.instance_label])))
                        for b in engine_batches
                        if b.cumulative and restarted.get(b.instance_label)}
            runner.wait(list(raw_futs.values()), "the re-reads of restarted instances")
    finally:
        runner.close()

    warnings = list(session.warnings)
    notes = list(session.notes) + facts.notes
    shown = _shown(i for v in restarted.values() for i in v)
    if raw_futs:
        notes.append(f"{n_restarted} instance(s) restarted or had a counter reset in the window; "
                     f"their counters and histograms were re-read sample by sample: {shown}")
    elif n_restarted:
        warnings.append(f"{n_restarted} instances restarted in the window; above "
                        f"{pp.MAX_RAW_INSTANCES} they are not re-read sample by sample, so what "
                        f"they counted between the last grid point and the restart is missing: "
                        f"{shown}")
    group_list: list[_Groups] = []
    for b in batches:
        g = groups.get(b.id)
        if g is None:
            continue
        raw_fut = raw_futs.get(b.id)
        raw = raw_fut.result() if raw_fut is not None else None
        if raw is not None:
            g.present[g.keys["ident"].isin(restarted[b.instance_label]).to_numpy()] = False
            rg = batch_groups(b, raw, node_label=node_label, raw=True)
            if rg is not None:
                group_list.append(rg)
        group_list.append(g)
    metrics, network, kept = select_and_flatten(group_list)
    deployment = deployment_rows(group_list, kept)
    if failed:
        warnings.append(f"Prometheus refused {len(failed)} quer{'y' if len(failed) == 1 else 'ies'}"
                        f"; those signals are missing: {'; '.join(failed[:SHOWN])}")
    miss_w, miss_n = pp.missing_warnings(found)
    warnings.extend(miss_w)
    notes.extend(miss_n)
    if net_batches and not net_asked:
        warnings.append("node_infiniband_*/netdev series exist but the engine instances' hosts "
                        "are unknown: network findings will be inconclusive (set [scope] "
                        "network_selector in --metrics-map)")
    elif net_batches and network.empty:
        warnings.append("node_infiniband_*/netdev series exist but none on the engine instances' "
                        "hosts: network findings will be inconclusive (set [scope] "
                        "network_selector in --metrics-map)")
    if metrics.empty:
        raise InsufficientDataError(
            f"Prometheus at {client.shown_url} returned no samples of the {len(families)} metric "
            f"families found between {_iso(window.start_ts)} and {_iso(window.end_ts)}",
            hint="check --since/--until and --selector")
    warnings.extend(_gap_warnings(metrics, window))
    hints = list(facts.hints)
    hints.extend(_frontend_hints(kept, source))
    hints.extend(_evidence(metrics, source, warnings))
    warnings.extend(client.warnings)
    notes.extend(client.infos)
    meta = session.meta(info, window, families, how)
    notes[0:0] = _summary_notes(meta)
    src = SourceInfo(path=client.shown_url, kind="prometheus", format="prometheus-api",
                     rows=len(metrics) + len(network), notes=tuple(dict.fromkeys(notes)))
    piece = Partial(source=src, metrics=metrics, network=network if len(network) else None,
                    role_hints=tuple(dict.fromkeys(hints)), nodes=facts.nodes,
                    engines=facts.engines, warnings=tuple(dict.fromkeys(warnings)),
                    deployment=deployment if len(deployment) else None)
    ctx.report("collected", 1.0)
    return LiveResult(piece, meta)


def _batch_start(batch: pp.Batch, window: pp.Window) -> float:
    return window.end_ts - round(window.span_s / batch.step_s) * batch.step_s


def _families_text(batch: pp.Batch) -> str:
    names = [f.exposed for f in batch.families]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _shown(items: Any) -> str:
    lst = sorted(set(items))
    return ", ".join(lst[:SHOWN]) + (f" and {len(lst) - SHOWN} more" if len(lst) > SHOWN else "")


def _frontend_hints(kept: pd.DataFrame, source: str) -> list[RoleHint]:
    if kept.empty:
        return []
    fronts = kept.loc[kept["frontend"].astype(bool) & (kept["scope"] == "instance"), "ident"]
    return [RoleHint(str(i), "frontend", "Dynamo frontend metrics (dynamo_frontend_*)",
                     ROLE_FROM_EVIDENCE, source) for i in sorted(set(fronts))]


def _evidence(metrics: pd.DataFrame, source: str, warnings: list[str]) -> list[RoleHint]:
    """Behavioural role evidence, with the offline reader's rules."""
    from pdprobe.collectors.openmetrics import _evidence_hints, _Notes

    out = _Notes()
    hints = _evidence_hints(metrics, source, out)
    warnings.extend(out.warnings)
    return hints


def _gap_warnings(metrics: pd.DataFrame, window: pp.Window) -> list[str]:
    """Instances without samples for a while inside the window, and data that stops early."""
    import pandas as pd

    out: list[str] = []
    base = metrics[metrics["kind"] == S.GAUGE]  # the gauges are on the fine grid
    if base.empty:
        return out
    col = np.rint((base["ts"].to_numpy() - window.start_ts) / window.step_s).astype(np.int64)
    inst_codes, insts = pd.factorize(base["instance"])
    n_cols = window.points
    seen = np.zeros((len(insts), n_cols), dtype=bool)
    ok = (col >= 0) & (col < n_cols)
    seen[inst_codes[ok], col[ok]] = True
    gaps: list[tuple[str, float]] = []
    for k, name in enumerate(insts):
        cols = np.flatnonzero(seen[k])
        if len(cols) < 2:
            continue
        longest = int(np.max(np.diff(cols))) - 1
        if longest * window.step_s >= GAP_WARN_S:
            gaps.append((str(name), longest * window.step_s))
    if gaps:
        gaps.sort(key=lambda g: -g[1])
        shown = ", ".join(f"{n} ({s:.0f} s)" for n, s in gaps[:SHOWN])
        out.append(f"{len(gaps)} instance(s) have no samples for a stretch of the window (scrape "
                   f"gaps or restarts; rates across a gap are averages): {shown}")
    last = float(metrics["ts"].max())
    if window.end_ts - last >= STALE_WARN_S:
        out.append(f"the newest sample is {(window.end_ts - last) / 60:.0f} min before the window "
                   f"end {_iso(window.end_ts)}: the cluster or its scraping may have stopped "
                   f"(pass --until for a past incident)")
    return out


def _summary_notes(meta: LiveMeta) -> list[str]:
    w = meta.window
    out = [f"window {_iso(w.start_ts)} to {_iso(w.end_ts)} at a {w.step_s:g} s step "
           f"(counters and histograms {w.coarse_step_s:g} s)"]
    if meta.selector:
        out.append(f"selector {{{meta.selector}}}")
    by_engine = meta.found.by_engine()
    found = "; ".join(f"{e}: {len(v)}" for e, v in sorted(by_engine.items()))
    out.append(f"metric families found ({meta.discovery}): {found}")
    if meta.server_version:
        out.append(f"server version {meta.server_version}")
    return out


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def collect_live(target: PrometheusTarget, ctx: ReadContext, roles: RoleOptions,
                 aliases: AliasMap | None = None) -> Dataset:
    """The dataset of a live cluster, with names and roles resolved like the offline path."""
    from pdprobe.collectors.fuse import fuse
    from pdprobe.collectors.validate import checked_partial

    result = collect_partial(target, ctx)
    # The same edge checks as files: a negative or absurd sample from an exporter is dropped
    # with a warning, not turned into a negative rate.
    return fuse([checked_partial(result.partial)], roles, aliases)


def probe(target: PrometheusTarget, ctx: ReadContext | None = None,
          roles: RoleOptions | None = None) -> Probe:
    """Connectivity, discovery and roles without the data queries (``pdprobe check``)."""
    ctx = ctx or ReadContext()
    session = _Session(target, ctx)
    try:
        info, window, families, how = session.prepare()
        mmap = session.mmap
        batches = pp.plan_batches(pp.analysed(families), window,
                              mmap.instance_label if mmap else None)
        role_queries = pp.plan_role_queries(families, window, session.selector, mmap)
        runner = _Runner(session.client, target.max_concurrency, ctx)
        try:
            futs = [(rq, runner.submit(partial(session.client.query, rq.promql, window.end_ts)))
                    for rq in role_queries]
            runner.wait([f for _, f in futs], "the role queries")
            results = [(rq, f.result()) for rq, f in futs]
        finally:
            runner.close()
        facts = role_facts(results, mmap, f"Prometheus {session.client.shown_url}")
        names = {str((item.get("metric") or {}).get(rq.instance_label, ""))
                 for rq, vec in results if rq.role is None for item in vec}
        names.discard("")
        instances, role_warnings = resolve_roles(names, facts.hints, roles or RoleOptions(),
                                                 facts.nodes, facts.engines)
        found = pp.summarise(families)
        miss_w, miss_n = pp.missing_warnings(found)
        meta = session.meta(info, window, families, how)
        return Probe(meta=meta, instances=instances, role_warnings=role_warnings,
                     warnings=tuple(dict.fromkeys([*session.warnings, *miss_w,
                                                   *session.client.warnings])),
                     notes=tuple(dict.fromkeys([*session.notes, *miss_n, *facts.notes])),
                     batches=tuple(batches))
    except _HttpError as exc:
        raise SourceError(f"Prometheus at {session.client.shown_url} answered with an error: "
                          f"{session.client._clean(exc.message)[:200]} (HTTP {exc.status})",
                          hint="check --selector and the metrics map") from None
    finally:
        session.close()

