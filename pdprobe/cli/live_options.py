"""Options shared by commands that talk to a live Prometheus (diagnose, collect, check).

``build_target`` validates them all before any query (docs/safety.md): URL, credentials,
window and timeout.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import re
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Final, TypeVar

import typer

from pdprobe.cli.common import env
from pdprobe.collectors.prometheus_target import PrometheusTarget, split_userinfo
from pdprobe.safe_text import clean

PrometheusOpt = Annotated[str | None, typer.Option(
    "--prometheus", envvar=env("prometheus"),
    help="Base URL of a Prometheus HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics).")]
SinceOpt = Annotated[str | None, typer.Option(
    "--since", envvar=env("since"),
    help="Window length, e.g. 30m, 2h, 900s, or its start as an ISO 8601 time (live default "
         "30m; with files the default is the whole capture and a length ends at the "
         "capture's end).")]
UntilOpt = Annotated[str | None, typer.Option(
    "--until", envvar=env("until"),
    help="Window end: ISO 8601 time or Unix timestamp (default now, or the capture's end "
         "with files), for a past incident.")]
StepOpt = Annotated[str | None, typer.Option(
    "--step", envvar=env("step"), help="Query resolution, e.g. 15s (default: from the window).")]
SelectorOpt = Annotated[str, typer.Option(
    "--selector", envvar=env("selector"),
    help="Extra PromQL label matchers that scope the cluster, e.g. 'namespace=\"llm\"'.")]
MetricsMapOpt = Annotated[Path | None, typer.Option(
    "--metrics-map", envvar=env("metrics-map"),
    help="TOML file mapping custom metric names, labels and role selectors.")]
BearerTokenFileOpt = Annotated[Path | None, typer.Option(
    "--bearer-token-file", envvar=env("bearer-token-file"),
    help="File holding a bearer token (or set PDPROBE_BEARER_TOKEN).")]
BasicAuthUserOpt = Annotated[str | None, typer.Option(
    "--basic-auth-user", envvar=env("basic-auth-user"),
    help="Basic-auth user; the password comes from PDPROBE_BASIC_AUTH_PASSWORD or "
         "--basic-auth-password-file.")]
BasicAuthPasswordFileOpt = Annotated[Path | None, typer.Option(
    "--basic-auth-password-file", envvar=env("basic-auth-password-file"),
    help="File holding the basic-auth password.")]
HeaderOpt = Annotated[list[str] | None, typer.Option(
    "--header", "-H", envvar=env("header"),
    help="Extra HTTP header 'Name: value' (repeatable), e.g. 'X-Scope-OrgID: tenant1'.")]
CaBundleOpt = Annotated[Path | None, typer.Option(
    "--ca-bundle", envvar=env("ca-bundle"), help="CA bundle for TLS verification.")]
InsecureOpt = Annotated[bool, typer.Option(
    "--insecure", envvar=env("insecure"), help="Do not verify TLS certificates.")]
TimeoutOpt = Annotated[float, typer.Option(
    "--timeout", envvar=env("timeout"), min=1.0,
    help="Give up on Prometheus after this many seconds in total (connect, headers and body "
         "of every request).")]
HeadersFollowOpt = Annotated[bool, typer.Option(
    "--headers-follow-redirects", envvar=env("headers-follow-redirects"),
    help="Send the --header values also to the host a redirect leads to (by default they go "
         "only to the --prometheus origin).")]

# --- limits on the window (docs/safety.md) -----------------------------------------------------
# Prometheus resolves timestamps to the millisecond; a finer step is a typo.
MIN_STEP_S: Final = 0.001
# Points per series in the window (window / step). Prometheus answers at most 11,000 per query,
# so this is ~90 range queries per batch: beyond it no --timeout would be met, and the grid
# alone would take gigabytes.
MAX_WINDOW_POINTS: Final = 1_000_000
# Window ends are Unix seconds from 1970 to the end of year 9999 (what dates can print).
MAX_UNTIL_TS: Final = 253402300799.0
# --timeout above a day is a typo (and a watchdog timer cannot wait for ever).
MAX_TIMEOUT_S: Final = 86400.0
# RFC 9110 header names: tokens.
_HEADER_NAME: Final = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


# The live options, in the order --help lists them, with their defaults. build_target takes
# them by these names.
LIVE_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("prometheus", PrometheusOpt, None),
    ("since", SinceOpt, None),  # live: 30m (cli/window.py); files: the whole capture
    ("until", UntilOpt, None),
    ("step", StepOpt, None),
    ("selector", SelectorOpt, ""),
    ("metrics_map", MetricsMapOpt, None),
    ("bearer_token_file", BearerTokenFileOpt, None),
    ("basic_auth_user", BasicAuthUserOpt, None),
    ("basic_auth_password_file", BasicAuthPasswordFileOpt, None),
    ("header", HeaderOpt, None),
    ("ca_bundle", CaBundleOpt, None),
    ("insecure", InsecureOpt, False),
    ("timeout", TimeoutOpt, 30.0),
    ("headers_follow_redirects", HeadersFollowOpt, False),
)

F = TypeVar("F", bound=Callable[..., Any])


def live_options(command: F) -> F:
    """Give a command the live options; it receives them as one ``target`` parameter.

    ``target`` is the ``PrometheusTarget`` they describe, or None without ``--prometheus``.
    Typer reads a command's options from its signature and has no option groups, so the
    wrapper's signature replaces ``target`` with the options of ``LIVE_OPTIONS``, appended
    after the command's own.
    """
    import typing

    # Typer reads the signature as it is; this package's annotations are strings (postponed
    # evaluation), so the wrapper's signature carries them resolved.
    resolved = typing.get_type_hints(command, include_extras=True)
    signature = inspect.signature(command)
    own = [p.replace(annotation=resolved.get(name, p.annotation))
           for name, p in signature.parameters.items() if name not in ("target", "file_window")]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                               annotation=annotation)
             for name, annotation, default in LIVE_OPTIONS]

    # A command that also reads captured files (diagnose) takes the window for them as
    # ``file_window``: --since/--until without --prometheus (cli/window.py).
    wants_file_window = "file_window" in signature.parameters

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        live = {name: kwargs.pop(name, default) for name, _, default in LIVE_OPTIONS}
        target = build_target(**live)
        if wants_file_window:
            from pdprobe.cli.window import file_window

            kwargs["file_window"] = (None if target is not None
                                     else file_window(live["since"], live["until"]))
        return command(*args, target=target, **kwargs)

    params = [*own, *added]
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=params, return_annotation=resolved.get("return", signature.empty))
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper  # type: ignore[return-value]


def parse_duration(text: str, option: str) -> float:
    """``6m30s`` -> 390.0, with the one duration syntax of every option
    (``pdprobe.units.parse_duration_s``); a usage error naming ``option`` otherwise."""
    from pdprobe.errors import UsageError
    from pdprobe.units import DURATION_EXAMPLES, parse_duration_s

    try:
        value = parse_duration_s(text)
    except ValueError:
        raise UsageError(f"{option} {text!r} is not a duration",
                         hint=f"use e.g. {DURATION_EXAMPLES}") from None
    if value <= 0:
        raise UsageError(f"{option} {text!r} must be positive", hint="use e.g. 30m")
    return value


def parse_time(text: str, option: str) -> float:
    """ISO 8601 (naive = UTC) or a Unix timestamp -> Unix seconds."""
    from pdprobe.errors import UsageError

    t = text.strip()
    try:
        value = float(t)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(t.replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(f"{option} {text!r} is neither ISO 8601 nor a Unix timestamp",
                             hint="use e.g. 2026-11-30T14:00:00Z or 1796047200") from None
        if parsed.tzinfo is None:
            from datetime import UTC

            parsed = parsed.replace(tzinfo=UTC)
        value = parsed.timestamp()
    if not (math.isfinite(value) and 0 < value <= MAX_UNTIL_TS):
        raise UsageError(f"{option} {text!r} is not a time between 1970 and 9999",
                         hint="use e.g. 2026-11-30T14:00:00Z or 1796047200")
    return value


def _read_secret(path: Path | None, env_name: str, what: str) -> str | None:
    from pdprobe.errors import UsageError

    if path is not None:
        try:
            return path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageError(f"cannot read {what} file {path} ({exc.strerror})",
                             hint="check the path and permissions") from exc
    return os.environ.get(env_name) or None


def build_target(
    prometheus: str | None,
    since: str | None = "30m",
    until: str | None = None,
    step: str | None = None,
    selector: str = "",
    metrics_map: Path | None = None,
    bearer_token_file: Path | None = None,
    basic_auth_user: str | None = None,
    basic_auth_password_file: Path | None = None,
    header: list[str] | None = None,
    ca_bundle: Path | None = None,
    insecure: bool = False,
    timeout: float = 30.0,
    headers_follow_redirects: bool = False,
) -> PrometheusTarget | None:
    """The target described by the live options, or None when --prometheus is not given.

    Everything that could hang, leak or crash later is refused here with a usage error: a URL
    without a host or with a bad port, credentials that cannot go into an HTTP header, windows
    with absurd ends or too many points. The secrets are registered with the redaction layer.
    """
    from pdprobe import redact
    from pdprobe.errors import UsageError

    if not prometheus:
        return None
    info = split_userinfo(prometheus.strip())
    redact.register([s for s in (info.password, info.raw_password) if s],
                    [(info.user or "", info.password)] if info.password else [])
    url = _check_url(info.url)
    headers = []
    for item in header or []:
        name, sep, value = item.partition(":")
        name, value = name.strip(), value.strip()
        if value and redact.secret_header(name, value):
            redact.register([value])
        if not sep or not name:
            raise UsageError(f"--header {clean(name)!r}... is not 'Name: value'",
                             hint="use e.g. -H 'X-Scope-OrgID: tenant1'")
        if not _HEADER_NAME.match(name):
            raise UsageError(f"--header {clean(name)!r} is not a valid header name",
                             hint="letters, digits and -, e.g. X-Scope-OrgID")
        _check_credential(value, f"the value of --header {name}")
        headers.append((name, value))
    token = _read_secret(bearer_token_file, "PDPROBE_BEARER_TOKEN", "bearer token")
    password = _read_secret(basic_auth_password_file, "PDPROBE_BASIC_AUTH_PASSWORD",
                            "basic-auth password")
    redact.register([s for s in (token, password) if s],
                    [(basic_auth_user or "", password)] if password else [])
    if token is not None:
        _check_credential(token, "the bearer token")
    if info.user is not None:
        if basic_auth_user:
            raise UsageError("--prometheus has a user in its URL and --basic-auth-user is given",
                             hint="give the credentials one way")
        basic_auth_user, password = info.user, info.password or ""
    if basic_auth_user:
        if ":" in basic_auth_user or not clean(basic_auth_user) == basic_auth_user:
            raise UsageError("the basic-auth user holds ':' or control characters",
                             hint="check --basic-auth-user")
        if password is None:
            raise UsageError("--basic-auth-user needs a password",
                             hint="set PDPROBE_BASIC_AUTH_PASSWORD or --basic-auth-password-file")
        _check_credential(password, "the basic-auth password", latin1=False)
    from pdprobe.cli.window import DEFAULT_LIVE_SINCE, parse_since

    since = since or DEFAULT_LIVE_SINCE
    until_ts = parse_time(until, "--until") if until else time.time()
    length_s, since_ts = parse_since(since)
    since_s = length_s if length_s is not None else until_ts - (since_ts or 0.0)
    if since_s <= 0:
        raise UsageError(f"--since {since!r} is not before --until", hint="use e.g. 30m")
    step_s = parse_duration(step, "--step") if step else None
    _check_window(since, since_s, until_ts, step, step_s)
    if not (math.isfinite(timeout) and timeout <= MAX_TIMEOUT_S):
        raise UsageError(f"--timeout {timeout:g} is not a number of seconds up to a day",
                         hint="use e.g. --timeout 30")
    files = tuple(str(p) for p in (metrics_map, bearer_token_file, basic_auth_password_file,
                                   ca_bundle) if p is not None)
    return PrometheusTarget(
        url=url,
        since_s=since_s,
        until_ts=until_ts,
        step_s=step_s,
        selector=selector.strip().strip("{}"),
        metrics_map=str(metrics_map) if metrics_map else None,
        bearer_token=token,
        basic_auth_user=basic_auth_user,
        basic_auth_password=password,
        headers=tuple(headers),
        ca_bundle=str(ca_bundle) if ca_bundle else None,
        insecure=insecure,
        timeout_s=timeout,
        headers_follow_redirects=headers_follow_redirects,
        files=files,
    )


def _check_url(url: str) -> str:
    """``url`` (userinfo already removed) if it is a usable http(s) base URL."""
    from urllib.parse import urlsplit

    from pdprobe.errors import UsageError

    shown = clean(url)
    hint = "use e.g. http://prometheus:9090 or https://host/prometheus"
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--prometheus {shown!r} is not an http(s) URL", hint=hint)
    if not clean(url) == url or any(c.isspace() for c in url):
        raise UsageError(f"--prometheus {shown!r} holds spaces or control characters", hint=hint)
    parts = urlsplit(url)
    if not parts.hostname:
        raise UsageError(f"--prometheus {shown!r} has no host", hint=hint)
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 and parts.netloc.rpartition("]")[2].count(":"):
        raise UsageError(f"--prometheus {shown!r} has a port that is not a number 1-65535",
                         hint=hint)
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise UsageError(f"--prometheus {shown!r} has a query or fragment",
                         hint="give the API base URL only (a password with '#' or '?' goes "
                              "percent-encoded, or in --basic-auth-password-file)")
    return url.rstrip("/")


def _check_credential(value: str, what: str, *, latin1: bool = True) -> None:
    """Refuse a credential that HTTP cannot carry as typed: it would be sent mangled or
    fail inside the HTTP library with a message quoting it."""
    from pdprobe.errors import UsageError

    if any(c in value for c in "\r\n\0") or not clean(value) == value:
        raise UsageError(f"{what} holds a newline or control character",
                         hint="remove it from the file or option (a token is one line)")
    if latin1:
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise UsageError(f"{what} holds characters HTTP headers cannot carry "
                             "(outside Latin-1)", hint="check the value; tokens are ASCII") from None


def _check_window(since: str, since_s: float, until_ts: float, step: str | None,
                  step_s: float | None) -> None:
    from pdprobe.errors import UsageError

    if since_s >= until_ts:
        raise UsageError(f"--since {since!r} reaches before 1970", hint="use e.g. 30m")
    if step_s is None:
        return
    if step_s < MIN_STEP_S:
        raise UsageError(f"--step {step!r} is below Prometheus' 1 ms resolution",
                         hint="use e.g. 15s")
    if since_s / step_s > MAX_WINDOW_POINTS:
        raise UsageError(f"--since {since!r} at --step {step!r} is {since_s / step_s:.3g} points "
                         f"per series (at most {MAX_WINDOW_POINTS:,})",
                         hint="raise --step or shorten --since")


def require_target(command: str, target: PrometheusTarget | None) -> PrometheusTarget:
    """The target of a command that only works live (collect, check)."""
    from pdprobe.errors import UsageError

    if target is None:
        raise UsageError(f"{command} needs --prometheus URL",
                         hint="e.g. --prometheus http://prometheus:9090")
    return target
