"""The Prometheus HTTP API client: one deadline, retries, redacted errors, bounded concurrency.

``PromClient`` issues instant, range, raw-sample and label-value calls through
``prometheus_http`` (watchdog, capped bodies, header policy on redirects) and records each call
(``QueryRecord``); ``Runner`` runs calls on a bounded thread pool whose waits end at the deadline;
``server_info`` and ``discover_names`` are the first two steps of every live session.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from pdprobe import safe_text
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
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.errors import SourceError, UsageError
from pdprobe.redact import Redactor
from pdprobe.redact import redact as redact  # re-exported for callers of this module

if TYPE_CHECKING:

    pass


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


class PrometheusUnreachable(SourceError):
    """No HTTP answer: refused, unresolvable, TLS failure, or nothing within the budget."""


class PrometheusAuthError(SourceError):
    """The server refused the credentials (HTTP 401/403)."""


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
        """The body of a 200 answer and the attempts it took; raises ``HttpError`` on API
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
                reason = self._short_reason(exc)
                refused = PrometheusUnreachable(
                    f"cannot reach Prometheus at {self.shown_url} ({reason})",
                    hint="check --prometheus, the network path and that the server is up")
                if dog.fired or reason == "timed out":
                    raise self._timeout_error(what) from None
                wait = self._backoff(attempt, None)
                if attempt >= MAX_ATTEMPTS or wait >= self.remaining():
                    raise refused from None
                # If the budget ends while waiting (a loaded machine oversleeps), the refusal is
                # the news, not a timeout.
                last_refusal = refused
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
                retry_after = parse_retry_after(headers.get("Retry-After"))
                wait = self._backoff(attempt, retry_after)
                if error_type == "timeout" or (status == 503 and "timed out" in message.lower()):
                    raise HttpError(status, "timeout", message)
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
                raise HttpError(404, "not_found", f"{path} not found (HTTP 404)")
            raise HttpError(status, error_type, message or f"HTTP {status}")

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


def parse_retry_after(value: str | None) -> float | None:
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
