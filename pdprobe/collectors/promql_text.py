"""PromQL text: label matchers parsed from ``--selector`` and metrics maps, string and RE2
escaping, selectors combined. Everything a query string is built from, nothing about what to ask.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from pdprobe.errors import UsageError

_MATCHER_RE: Final = re.compile(
    r"""\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)\s*(?:,|$)""")


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str  # unescaped

    def render(self) -> str:
        return f"{self.label}{self.op}{promql_string(self.value)}"


def _unquote(literal: str) -> str:
    body = literal[1:-1]
    if literal[0] == "`":
        return body
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def parse_matchers(text: str, where: str = "--selector") -> tuple[Matcher, ...]:
    """``namespace="llm", job=~"vllm-.*"`` -> matchers; ``UsageError`` when it is not that."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    out: list[Matcher] = []
    pos = 0
    body = body.strip()
    while pos < len(body):
        m = _MATCHER_RE.match(body, pos)
        if m is None or m.end() == pos:
            raise UsageError(f"{where} {text!r} is not a list of PromQL label matchers "
                             f"(stuck at {body[pos:pos + 20]!r})",
                             hint='use e.g. namespace="llm", job=~"vllm-.*"')
        out.append(Matcher(m.group(1), m.group(2), _unquote(m.group(3))))
        pos = m.end()
        while pos < len(body) and body[pos].isspace():
            pos += 1
    return tuple(out)


def promql_string(value: str) -> str:
    """A double-quoted PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def re2_escape(value: str) -> str:
    """Escape ``value`` for a (fully anchored) RE2 regular expression."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", value)


def combine_selectors(*parts: str | None) -> str:
    """Matchers joined with commas, normalised; empty parts dropped."""
    out: list[str] = []
    for part in parts:
        if part and part.strip().strip("{}").strip():
            out.extend(m.render() for m in parse_matchers(part))
    return ", ".join(dict.fromkeys(out))


def selector_text(*parts: str) -> str:
    return "{" + ", ".join(p for p in parts if p) + "}"
