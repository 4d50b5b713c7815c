"""One redaction layer: every credential pdprobe was given, in every spelling it can take.

A secret reaches output in more forms than the one the user typed: a message built with
``{value!r}`` or a JSON report escapes a newline as ``\\n``, a URL quotes ``#`` as ``%23``, an
``Authorization: Basic`` header carries ``user:password`` in base64, a server may echo any of
them back. ``spellings`` lists those forms; ``Redactor`` replaces all of them in one regular
expression pass.

The CLI registers the run's secrets once (``register``, called when the live options are
parsed); ``scrub`` then applies them to every error line, warning and report that leaves the
process (``cli/app.py``, ``cli/common.py``). Code that holds a target applies its own
``Redactor`` too, so a library caller gets the same protection without the registry.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

REDACTED = "***"

# Secrets shorter than this (a tenant id "a7") are replaced only as whole words and only as
# typed, so redaction does not shred every message that happens to contain those letters.
WORD_REDACT_BELOW = 4

_PCT = re.compile(r"%[0-9A-F]{2}")

# Header names that carry credentials (Authorization, Cookie, X-Api-Key, X-Auth-Token,
# X-Amz-Security-Token, CF-Access-Client-Secret, X-Vault-Token, ...). Other headers (a tenant
# such as X-Scope-OrgID: prod, Accept-Encoding: gzip) are not secrets: redacting their values
# shredded every report line holding those letters ("prod-decode-0" became "***-decode-0").
_SECRET_HEADER = re.compile(
    r"authorization|cookie|token|secret|passw|auth|key|session|signature|credential|jwt",
    re.IGNORECASE)
# A value that looks like a credential whatever its header's name: an auth scheme, or a long
# run of letters and digits (an API key, a JWT, a UUID-like tenant secret).
_SECRET_VALUE = re.compile(r"(?i)^(?:bearer|basic|token|digest|negotiate|apikey)\s+\S")
CREDENTIAL_LIKE_MIN_CHARS = 20


def secret_header(name: str, value: str) -> bool:
    """Whether an extra HTTP header's value is to be treated as a secret (and redacted).

    True for credential-like names (``Authorization``, ``Cookie``, anything with token, key,
    secret, auth, password, session, signature, credential or JWT in it), for values starting
    with an auth scheme (``Bearer ...``), and for values of at least 20 characters mixing
    letters and digits; False for plain values such as a tenant id or ``gzip``.
    """
    if _SECRET_HEADER.search(name) or _SECRET_VALUE.match(value):
        return True
    return (len(value) >= CREDENTIAL_LIKE_MIN_CHARS
            and any(c.isdigit() for c in value) and any(c.isalpha() for c in value))


def _escaped(text: str) -> set[str]:
    """``text`` as it appears inside a JSON string, a Python repr and a URL."""
    out = {text,
           json.dumps(text)[1:-1],
           json.dumps(text, ensure_ascii=False)[1:-1],
           repr(text)[1:-1],
           text.encode("unicode_escape").decode("ascii")}
    for quoted in (quote(text, safe=""), quote(text), quote_plus(text), quote(text, safe="@:/")):
        out.add(quoted)
        out.add(_PCT.sub(lambda m: m.group().lower(), quoted))  # %2f as well as %2F
    return out


def _b64(data: bytes) -> set[str]:
    encoded = base64.b64encode(data).decode("ascii")
    return {encoded, encoded.rstrip("="), base64.urlsafe_b64encode(data).decode("ascii")}


def spellings(secret: str, *, user: str | None = None) -> set[str]:
    """Every form of ``secret`` that output may carry (raw, escaped twice, quoted, base64).

    With ``user``, ``secret`` is a basic-auth password and ``user:password`` in base64 (the
    ``Authorization: Basic`` value, UTF-8 and Latin-1) is included too.
    """
    if not secret:
        return set()
    if len(secret) < WORD_REDACT_BELOW:
        return {secret}
    once = _escaped(secret)
    out = set(once)
    for form in once:  # a JSON report of a message that quoted the secret with !r
        out.update(_escaped(form))
    for encoding in ("utf-8", "latin-1"):
        try:
            raw = secret.encode(encoding)
        except UnicodeEncodeError:
            continue
        out |= _b64(raw)
        if user is not None:
            out |= _b64(f"{user}:".encode(encoding) + raw)
    # A secret split over lines shows its pieces on their own when a message keeps one line.
    out.update(p for p in re.split(r"[\r\n]+", secret) if len(p) >= WORD_REDACT_BELOW)
    out.discard("")
    return out


class Redactor:
    """Replaces every spelling of the given secrets with ``***`` (longest match first)."""

    def __init__(self, secrets: Iterable[str] = (), basic: Iterable[tuple[str, str]] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            forms |= spellings(secret)
        for user, password in basic:
            forms |= spellings(password, user=user)
        self.forms = frozenset(forms)
        long_forms = sorted((f for f in forms if len(f) >= WORD_REDACT_BELOW), key=len, reverse=True)
        short_forms = sorted((f for f in forms if len(f) < WORD_REDACT_BELOW), key=len, reverse=True)
        parts = [re.escape(f) for f in long_forms]
        if short_forms:
            words = "|".join(re.escape(f) for f in short_forms)
            parts.append(rf"(?<![A-Za-z0-9])(?:{words})(?![A-Za-z0-9])")
        self._pattern = re.compile("|".join(parts)) if parts else None

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(REDACTED, text)

    def leaks(self, text: str) -> bool:
        """Whether ``text`` holds any spelling of a secret."""
        return self._pattern is not None and self._pattern.search(text) is not None


_lock = threading.Lock()
_secrets: set[str] = set()
_basic: set[tuple[str, str]] = set()
_current = Redactor()


def register(secrets: Iterable[str] = (), basic: Iterable[tuple[str, str]] = ()) -> None:
    """Add the run's credentials to the process-wide layer ``scrub`` applies."""
    global _current
    with _lock:
        _secrets.update(s for s in secrets if s)
        _basic.update((u, p) for u, p in basic if p)
        _current = Redactor(_secrets, _basic)


def clear() -> None:
    """Forget every registered secret (tests; a new run in the same process)."""
    global _current
    with _lock:
        _secrets.clear()
        _basic.clear()
        _current = Redactor()


def scrub(text: str) -> str:
    """``text`` with every registered secret, in every spelling, replaced by ``***``."""
    return _current(text)


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with the given secrets (and their spellings) replaced by ``***``."""
    return Redactor(secrets)(text)
