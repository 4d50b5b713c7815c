"""What the live Prometheus collector needs to know: where, which window, how to authenticate.

Credentials live only here, never in reports, logs, errors or capture files: ``__repr__`` hides
them, ``secrets``/``basic_credentials`` list them for the redaction layer (``pdprobe.redact``)
and the collector redacts every message it raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote

# "user:password@" before the host. The password may hold "/", "#" or "?" typed raw (it is
# then taken up to the last "@"); without a ":" such characters end the authority instead.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class Userinfo:
    """Credentials written into a URL, and the URL without them."""

    url: str
    user: str | None = None
    password: str | None = None
    raw_password: str | None = None  # as typed (possibly percent-encoded)


def split_userinfo(url: str) -> Userinfo:
    """``http://bob:pa%23ss@host/`` -> ``http://host/``, ``bob``, ``pa#ss``.

    Passwords typed unencoded (``p#ss``, ``p/ss``) are understood: the authority then ends at
    the last ``@``. A URL without userinfo comes back unchanged.
    """
    scheme = _SCHEME.match(url)
    if scheme is None or "@" not in url:
        return Userinfo(url)
    rest = url[scheme.end():]
    at = rest.rfind("@")
    info = rest[:at]
    cut = re.search(r"[/?#]", info)
    if cut is not None and ":" not in info[:cut.start()]:
        # "host/path@x": an "@" in the path, not userinfo.
        at = rest.find("@", 0, cut.start()) if "@" in rest[:cut.start()] else -1
        if at < 0:
            return Userinfo(url)
        info = rest[:at]
    user, sep, password = info.partition(":")
    return Userinfo(url=url[:scheme.end()] + rest[at + 1:], user=unquote(user) or None,
                    password=unquote(password) if sep else None,
                    raw_password=password if sep else None)


@dataclass(frozen=True)
class PrometheusTarget:
    url: str = field(repr=False)  # may embed user:password@ (the CLI moves it to basic auth)
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
    # Custom headers (-H) go only to the URL's origin unless this is set: a redirect to another
    # host, port or scheme drops them (requests drops Authorization the same way).
    headers_follow_redirects: bool = False
    # Files the options named (token, password, CA bundle, metrics map): inputs of the run
    # that no output may overwrite.
    files: tuple[str, ...] = field(default=(), repr=False)

    def secrets(self) -> tuple[str, ...]:
        """Strings that must never appear in output (for redaction), URL userinfo included."""
        out = [s for s in (self.bearer_token, self.basic_auth_password) if s]
        out.extend(v for _, v in self.headers if v)
        info = split_userinfo(self.url)
        out.extend(s for s in (info.password, info.raw_password) if s)
        return tuple(dict.fromkeys(out))

    def basic_credentials(self) -> tuple[tuple[str, str], ...]:
        """(user, password) pairs whose ``Basic`` base64 form must be redacted too."""
        out = []
        if self.basic_auth_user and self.basic_auth_password:
            out.append((self.basic_auth_user, self.basic_auth_password))
        info = split_userinfo(self.url)
        if info.user and info.password:
            out.append((info.user, info.password))
        return tuple(out)
