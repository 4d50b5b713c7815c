"""A report view with every string made safe for a terminal or a page, in one pass.

Instance names, file names, warnings and notes come from the inputs: they may carry terminal
escape sequences (an OSC 8 hyperlink, a colour that hides text), control characters or
bidirectional overrides that make a name read as another (``pdprobe/safe_text.py``). Renderers
for people (text, Markdown, HTML) call ``safe_view`` on the ``ReportView`` before printing it,
so no field can be missed; JSON keeps the raw strings (its own escaping makes them inert).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from pdprobe.safe_text import clean

T = TypeVar("T")


def safe_view(view: T) -> T:
    """``view`` with every string in it (dataclass fields, tuples, lists, dicts) cleaned."""
    result: T = _walk(view)
    return result


def _walk(value: Any) -> Any:
    if isinstance(value, str):
        return clean(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _walk(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(_walk(v) for v in value)
    if isinstance(value, list):
        return [_walk(v) for v in value]
    if isinstance(value, dict):
        return {_walk(k): _walk(v) for k, v in value.items()}
    return value
