"""What the live Prometheus collector needs to know: where, which window, how to authenticate.

Credentials live only here, never in reports, logs, errors or capture files: ``__repr__`` hides
them and the collector redacts them from any message it raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PrometheusTarget:
    url: str = field(repr=False)  # may embed user:password@
    since_s: float = 1800.0  # window length
    until_ts: float | None = None  # window end (Unix s); None = now
    step_s: float | None = None  # None = chosen from the window
    selector: str = ""  # extra PromQL label matchers, e.g. 'namespace="llm"'
    metrics_map: str | None = None  # TOML file mapping custom names/labels/roles
    bearer_token: str | None = field(default=None, repr=False)
    basic_auth_user: str | None = None
    basic_auth_password: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    ca_bundle: str | None = None
    insecure: bool = False
    timeout_s: float = 30.0  # whole-collection budget
    max_concurrency: int = 8

    def secrets(self) -> tuple[str, ...]:
        """Strings that must never appear in output (for redaction)."""
        out = [s for s in (self.bearer_token, self.basic_auth_password) if s]
        out.extend(v for _, v in self.headers if v)
        return tuple(out)
