"""Options shared by commands that talk to a live Prometheus (diagnose, collect, check)."""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from pdprobe.cli.common import env
from pdprobe.collectors.prometheus_target import PrometheusTarget

PrometheusOpt = Annotated[str | None, typer.Option(
    "--prometheus", envvar=env("prometheus"),
    help="Base URL of a Prometheus HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics).")]
SinceOpt = Annotated[str, typer.Option(
    "--since", envvar=env("since"), help="Window length, e.g. 30m, 2h, 900s.")]
UntilOpt = Annotated[str | None, typer.Option(
    "--until", envvar=env("until"),
    help="Window end: ISO 8601 time or Unix timestamp (default now), for a past incident.")]
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
    help="Give up on Prometheus after this many seconds in total.")]


# The live options, in the order --help lists them, with their defaults. build_target takes
# them by these names.
LIVE_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("prometheus", PrometheusOpt, None),
    ("since", SinceOpt, "30m"),
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
           for name, p in signature.parameters.items() if name != "target"]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                               annotation=annotation)
             for name, annotation, default in LIVE_OPTIONS]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        live = {name: kwargs.pop(name, default) for name, _, default in LIVE_OPTIONS}
        return command(*args, target=build_target(**live), **kwargs)

    params = [*own, *added]
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=params, return_annotation=resolved.get("return", signature.empty))
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper  # type: ignore[return-value]


def parse_duration(text: str, option: str) -> float:
    """``30m`` -> 1800.0; accepts s, m, h, d and plain seconds."""
    from pdprobe.errors import UsageError

    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
    t = text.strip().lower()
    for suffix in sorted(units, key=len, reverse=True):
        if t.endswith(suffix):
            number = t[: -len(suffix)]
            break
    else:
        suffix, number = "s", t
    try:
        value = float(number) * units[suffix]
    except ValueError:
        raise UsageError(f"{option} {text!r} is not a duration", hint="use e.g. 30m, 2h or 900s") from None
    if value <= 0:
        raise UsageError(f"{option} {text!r} must be positive", hint="use e.g. 30m")
    return value


def parse_time(text: str, option: str) -> float:
    """ISO 8601 (naive = UTC) or a Unix timestamp -> Unix seconds."""
    from pdprobe.errors import UsageError

    t = text.strip()
    try:
        return float(t)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option} {text!r} is neither ISO 8601 nor a Unix timestamp",
                         hint="use e.g. 2026-11-30T14:00:00Z or 1796047200") from None
    if parsed.tzinfo is None:
        from datetime import UTC

        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


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
    since: str = "30m",
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
) -> PrometheusTarget | None:
    """The target described by the live options, or None when --prometheus is not given."""
    from pdprobe.errors import UsageError

    if not prometheus:
        return None
    if not prometheus.startswith(("http://", "https://")):
        raise UsageError(f"--prometheus {prometheus!r} is not an http(s) URL",
                         hint="use e.g. http://prometheus:9090")
    headers = []
    for item in header or []:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise UsageError(f"--header {name.strip()!r}... is not 'Name: value'",
                             hint="use e.g. -H 'X-Scope-OrgID: tenant1'")
        headers.append((name.strip(), value.strip()))
    password = _read_secret(basic_auth_password_file, "PDPROBE_BASIC_AUTH_PASSWORD",
                            "basic-auth password")
    if basic_auth_user and password is None:
        raise UsageError("--basic-auth-user needs a password",
                         hint="set PDPROBE_BASIC_AUTH_PASSWORD or --basic-auth-password-file")
    return PrometheusTarget(
        url=prometheus.rstrip("/"),
        since_s=parse_duration(since, "--since"),
        until_ts=parse_time(until, "--until") if until else time.time(),
        step_s=parse_duration(step, "--step") if step else None,
        selector=selector.strip().strip("{}"),
        metrics_map=str(metrics_map) if metrics_map else None,
        bearer_token=_read_secret(bearer_token_file, "PDPROBE_BEARER_TOKEN", "bearer token"),
        basic_auth_user=basic_auth_user,
        basic_auth_password=password,
        headers=tuple(headers),
        ca_bundle=str(ca_bundle) if ca_bundle else None,
        insecure=insecure,
        timeout_s=timeout,
    )


def require_target(command: str, target: PrometheusTarget | None) -> PrometheusTarget:
    """The target of a command that only works live (collect, check)."""
    from pdprobe.errors import UsageError

    if target is None:
        raise UsageError(f"{command} needs --prometheus URL",
                         hint="e.g. --prometheus http://prometheus:9090")
    return target
