"""Numbers with units, worded one way everywhere (bottom layer: no pandas, no project imports).

One register for table cells, report prose and finding sentences alike: "93.4%", "1.24 s",
"12m30s", "4.12 GB/s", "p < 0.001", "3 instances". The report's cells (``report/cells.py``)
and every renderer call the ``fmt_*`` functions; the rules call the same functions by their
short names (``pct``, ``secs``, ``duration``, ``rate_bytes``, re-exported by
``rules/common.py``), so a finding and the table beside it print a number identically.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Final

NA: Final = "n/a"


def fmt_num(x: float | int) -> str:
    """A plain number with sensible precision: 12,031 / 137 / 12.3 / 1.24 / 0.0123."""
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return f"{x:,}"
    if not math.isfinite(x):
        return NA
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a == 0:
        return "0"
    return f"{x:.3g}"  # three significant digits: 37, 12.3, 1.24, 0.0123


def fmt_seconds(x: float) -> str:
    """A duration in the unit people read it in: 85 µs, 850 ms, 1.24 s, 2m05s."""
    if not math.isfinite(x):
        return NA
    a = abs(x)
    if a == 0:
        return "0 s"
    if a < 1e-3:
        return f"{x * 1e6:.0f} µs"
    if a < 0.01:
        return f"{x * 1e3:.1f} ms"
    if a < 1:
        return f"{x * 1e3:.0f} ms"
    if a < 60:
        return f"{x:.3g} s"
    return fmt_duration(x)


def fmt_duration(seconds: float) -> str:
    """A span: 45 s, 12m30s, 2h05m, 3d04h."""
    s = round(abs(seconds))
    sign = "-" if seconds < 0 else ""
    if s < 60:
        return f"{sign}{s}s"
    if s < 3600:
        return f"{sign}{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{sign}{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{sign}{s // 86400}d{(s % 86400) // 3600:02d}h"


# One duration syntax for every option (--window, --since, --interval, --step): plain seconds,
# or number+unit parts from largest to smallest, as fmt_duration prints them ("6m30s", "2h05m").
DURATION_UNITS_S: Final = {"w": 604800.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0,
                           "ms": 0.001}
_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|[wdhms])")
DURATION_EXAMPLES: Final = "90s, 5m, 6m30s, 1h or plain seconds"


def parse_duration_s(text: str) -> float:
    """``"6m30s"`` -> 390.0. Plain numbers are seconds; parts (``w d h m s ms``) go from the
    largest unit down, each once. Raises ``ValueError`` for anything else (negative, empty,
    ``"5 minutes"``, ``"30s5m"``, NaN, infinity)."""
    t = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(?:\.\d*)?|\.\d+", t):
        return float(t)
    order = list(DURATION_UNITS_S)
    total, pos, last = 0.0, 0, -1
    for m in _DURATION_PART.finditer(t):
        rank = order.index(m.group(2))
        if m.start() != pos or rank <= last:
            raise ValueError(f"not a duration: {text!r}")
        total += float(m.group(1)) * DURATION_UNITS_S[m.group(2)]
        pos, last = m.end(), rank
    if pos != len(t) or pos == 0 or not math.isfinite(total):
        raise ValueError(f"not a duration: {text!r}")
    return total


def fmt_pct(x: float) -> str:
    """A 0-1 ratio as a percentage: 0.934 -> 93.4%."""
    if not math.isfinite(x):
        return NA
    pct = x * 100
    if pct != 0 and abs(pct) < 0.1:
        return f"{pct:.2g}%"
    if 99.95 <= pct < 100:  # 99.97% of requests within SLO is not 100%
        return ">99.9%"
    return f"{pct:.1f}%"


def fmt_pct_change(x: float) -> str:
    """A relative change with its sign: 0.17 -> +17.0%, -0.086 -> -8.6%."""
    if not math.isfinite(x):
        return NA
    return f"{x * 100:+.1f}%"


def _si(x: float, unit: str, base: float = 1000.0) -> str:
    """``x`` with the largest SI prefix that keeps it under ``base``."""
    if not math.isfinite(x):
        return NA
    for prefix in ("", "k", "M", "G", "T", "P"):
        if abs(x) < base or prefix == "P":
            return f"{fmt_num(x)} {prefix}{unit}"
        x /= base
    raise AssertionError("unreachable")


def fmt_bytes(x: float) -> str:
    """Bytes with a decimal SI prefix: 1.5 GB."""
    return _si(float(x), "B")


def fmt_bytes_per_s(x: float) -> str:
    """Bytes per second with a decimal SI prefix: 4.1 GB/s."""
    return _si(float(x), "B/s")


# The short names the rules' sentences use: the same functions as the table cells, so a finding
# says "41.3%" and "1.24 s" exactly as the instance table beside it does.
pct: Final = fmt_pct
secs: Final = fmt_seconds
duration: Final = fmt_duration
rate_bytes: Final = fmt_bytes_per_s


def names(items: Sequence[str], limit: int = 4) -> str:
    """A list of names, the first ``limit`` spelled out: "a, b, c, d and 3 more"."""
    items = list(items)
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f" and {len(items) - limit} more"


# p-values under this print as "p < 0.001": more digits claim a precision the tests lack.
P_VALUE_FLOOR: Final = 0.001


def fmt_p_value(p: float) -> str:
    """A test's p-value: "p < 0.001", "p = 0.012", "p = 0.48"."""
    if not math.isfinite(p):
        return NA
    if p < P_VALUE_FLOOR:
        return f"p < {P_VALUE_FLOOR:g}"
    return f"p = {p:.2g}"


# Count units: the plural as the rules write it, and its singular.
COUNT_UNITS: Final = {"instances": "instance", "windows": "window", "events": "event",
                      "requests": "request", "nodes": "node", "sequences": "sequence",
                      "tokens": "token", "packets": "packet", "failures": "failure",
                      "retransmits": "retransmit", "lines": "line", "samples": "sample"}


def fmt_count(x: float | int, unit: str) -> str:
    """A count with its unit, singular when it is one: "1 instance", "94,710,790 events";
    a fractional count (a median of counts) keeps three significant digits."""
    if isinstance(x, float) and not math.isfinite(x):
        return NA
    whole = float(x) == round(float(x))
    text = f"{round(float(x)):,}" if whole and abs(float(x)) >= 1 else fmt_num(x)
    word = COUNT_UNITS.get(unit, unit) if whole and abs(float(x)) == 1 else unit
    return f"{text} {word}"


# Units whose quantities cannot be negative: a negative baseline of one (a fitted trend's
# intercept) is not a level anything was at, so it is not shown.
NON_NEGATIVE_UNITS: Final = frozenset({"s", "sec", "seconds", "requests", "tokens", "B", "B/s",
                                       "bytes", "bytes/s", "req/s", *COUNT_UNITS})
