"""The transport under the Prometheus HTTP API client: one deadline, retries, redacted errors.

``PromTransport`` sends one API call through ``prometheus_http`` (watchdog, capped bodies,
header policy on redirects), retries transient answers under the deadline (``Retry-After``
honoured) and turns every failure into one redacted line; it also keeps the call records
(``QueryRecord``) and the server's warnings. ``PromClient`` (``prometheus_client``) adds the API
calls on top of it.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from pdprobe import safe_text
from pdprobe.collectors.prometheus_decode import HttpError
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.errors import SourceError, UsageError
from pdprobe.redact import Redactor

# Transient answers worth another try: rate limiting and gateway/overload errors. 500 is
# included because Thanos/Mimir frontends return it for store hiccups.
RETRYABLE_STATUS: Final = frozenset({429, 500, 502, 503, 504})


MAX_ATTEMPTS: Final = 4


BACKOFF_BASE_S: Final = 0.25  # doubled per attempt, with +-25 % jitter


CONNECT_TIMEOUT_S: Final = 5.0


# Above this URL length a query goes as a POST form (proxies cut long URLs around 8 KiB).
MAX_GET_URL: Final = 4000


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


class PromTransport:
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
