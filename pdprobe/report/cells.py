"""Numbers, times and table cells as every renderer prints them.

The report's number wording comes from ``pdprobe.units``; this module adds what a report
needs on top: n/a handling with the ``Missing`` reason kept, relative vs absolute times,
``4P:4D`` pairs, and the ``Cell``/``Table``/``KeyValue`` records the renderers lay out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pdprobe.units import (
    COUNT_UNITS,
    NA,
    NON_NEGATIVE_UNITS,
    fmt_bytes,
    fmt_bytes_per_s,
    fmt_count,
    fmt_duration,
    fmt_num,
    fmt_p_value,
    fmt_pct,
    fmt_seconds,
)
from pdprobe.values import Missing

# Window starts before this are offsets from zero, not dates: simulator output and Mooncake
# traces start at t=0 and 1e9 s is September 2001, long before any LLM serving capture.
RELATIVE_TIME_LIMIT_S: Final = 1e9

STATUS_WORDS: Final = {"ok": "OK", "warning": "WARNING", "critical": "CRITICAL",
                       "unknown": "UNKNOWN"}
SEVERITY_WORDS: Final = {"info": "INFO", "warning": "WARNING", "critical": "CRITICAL"}
ROLE_ORDER: Final = ("prefill", "decode", "frontend", "unknown")

# --- numbers ---------------------------------------------------------------------------------

def is_na(value: object) -> bool:
    """True for Missing, None and non-finite floats (all print as n/a)."""
    if value is None or isinstance(value, Missing):
        return True
    return isinstance(value, float) and not math.isfinite(value)


def num(value: object) -> float | None:
    """The value as a float, or None when it is Missing, None or not finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def count(value: object) -> int | None:
    """An instance count, or None when unknown."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


SECONDS_UNITS = {"s", "sec", "seconds"}
RATIO_UNITS = {"ratio", "fraction", "share"}


def fmt_value(value: Any, unit: str = "") -> str:
    """A value with its unit, formatted by unit ("s", "ratio", "B/s", "p-value", counts, ...);
    strings as given."""
    if isinstance(value, Missing) or value is None:
        return NA
    if isinstance(value, str):
        return f"{value} {unit}".rstrip() if unit else value
    if isinstance(value, float) and not math.isfinite(value):
        return NA
    if unit in SECONDS_UNITS:
        return fmt_seconds(float(value))
    if unit in RATIO_UNITS:
        return fmt_pct(float(value))
    if unit == "p-value":
        return fmt_p_value(float(value))
    if unit in ("B/s", "bytes/s", "bytes_per_s"):
        return fmt_bytes_per_s(float(value))
    if unit in ("B", "bytes"):
        return fmt_bytes(float(value))
    if unit in ("%", "percent"):
        return f"{fmt_num(value)}%"
    if unit in ("rps", "req/s", "requests/s"):
        return f"{fmt_num(value)} req/s"
    if unit in COUNT_UNITS:
        return fmt_count(value, unit)
    return f"{fmt_num(value)} {unit}".rstrip()


def baseline_phrase(value: Any, baseline: Any, unit: str) -> str:
    """`` (vs 1,798 tokens)`` — or nothing when the baseline means nothing: absent, the same
    number, or a negative level of a quantity that cannot be negative. A p-value's baseline is
    the significance level: `` (significant below 0.001)``."""
    if baseline is None or is_na(baseline):
        return ""
    if unit == "p-value":
        return f" (significant below {fmt_num(float(baseline))})"
    if isinstance(baseline, (int, float)) and baseline < 0 and unit in NON_NEGATIVE_UNITS:
        return ""
    shown = fmt_value(baseline, unit)
    return "" if shown == fmt_value(value, unit) else f" (vs {shown})"


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 instance`` / ``3 instances`` (``words`` for an irregular plural)."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def pd_pair(prefill: Any, decode: Any) -> str:
    """``4P:4D``; n/a for an unknown side."""
    if is_na(prefill) and is_na(decode):
        return NA
    p = NA if is_na(prefill) else str(prefill)
    d = NA if is_na(decode) else str(decode)
    return f"{p}P:{d}D"


def fmt_ratio(x: Any) -> str:
    """A P/D ratio (prefill per decode instance), two decimals."""
    return NA if is_na(x) else f"{float(x):.2f}"


# --- time ------------------------------------------------------------------------------------

def is_relative(start_ts: float | None) -> bool:
    """Inputs whose clock starts near zero (traces, simulations) show offsets, not dates."""
    return start_ts is not None and math.isfinite(start_ts) and start_ts < RELATIVE_TIME_LIMIT_S


def fmt_offset(seconds: float) -> str:
    """A time relative to the window's start: ``+12m30s`` (a sign, then the duration)."""
    return "+" + fmt_duration(seconds) if seconds >= 0 else fmt_duration(seconds)


def fmt_ts(ts: float | None, relative: bool, *, with_date: bool = True) -> str:
    """``+12m30s`` for relative inputs, else ``2023-11-16 18:17:03 UTC`` (or just the time)."""
    if ts is None or not math.isfinite(ts):
        return NA
    if relative:
        return fmt_offset(ts)
    dt = datetime.fromtimestamp(ts, tz=UTC)
    return dt.strftime("%Y-%m-%d %H:%M:%S UTC") if with_date else dt.strftime("%H:%M:%S")


def window_phrase(start_ts: float | None, end_ts: float | None) -> str:
    """``2023-11-16 18:17:03 → 19:14:19 UTC (57m16s)`` or ``+0s → +58m57s (58m57s)``."""
    if start_ts is None or end_ts is None:
        return NA
    rel = is_relative(start_ts)
    span = fmt_duration(end_ts - start_ts)
    if rel:
        return f"{fmt_offset(start_ts)} → {fmt_offset(end_ts)} ({span}, relative times)"
    a = datetime.fromtimestamp(start_ts, tz=UTC)
    b = datetime.fromtimestamp(end_ts, tz=UTC)
    end = b.strftime("%H:%M:%S UTC") if a.date() == b.date() else b.strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{a.strftime('%Y-%m-%d %H:%M:%S')} → {end} ({span})"


# --- cells and tables ------------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    """One printed value; ``reason`` says why it is n/a; ``flag`` marks an instance to look at."""

    text: str
    reason: str | None = None
    flag: bool = False

    @property
    def is_na(self) -> bool:
        """True when the cell is n/a (it carries the reason why)."""
        return self.reason is not None


def cell(value: Any, fmt: Callable[[Any], str] = fmt_num, *, missing: str = "no value") -> Cell:
    """A cell for a ``Maybe`` value: n/a with the Missing reason, else formatted."""
    if isinstance(value, Missing):
        return Cell(NA, value.reason)
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return Cell(NA, missing)
    return Cell(fmt(value))


def quantile_cell(q: Any, attr: str, fmt: Callable[[Any], str]) -> Cell:
    """One quantile (``p90``) of a ``Maybe[Quantiles]``."""
    if isinstance(q, Missing):
        return Cell(NA, q.reason)
    value = getattr(q, attr)
    if value is None or not math.isfinite(value):
        why = "histograms give quantiles, not the mean" if attr == "mean" and q.estimated else \
            f"no {attr} in the data"
        return Cell(NA, why)
    return Cell(fmt(value) + ("~" if q.estimated else ""))


@dataclass(frozen=True)
class Table:
    """A titled table of cells; ``numeric`` right-aligns columns, ``note`` prints under it."""
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    numeric: tuple[bool, ...]  # right-align these columns
    note: str = ""
    # Columns a narrow terminal may hide, the least needed first (the text view says which).
    drop_order: tuple[str, ...] = ()

    def na_reasons(self) -> list[str]:
        """``column: reason (row names)`` for every n/a, deduplicated, in table order."""
        seen: dict[tuple[str, str], list[str]] = {}
        for row in self.rows:
            for col, c in zip(self.columns[1:], row[1:], strict=True):
                if c.reason is not None:
                    seen.setdefault((col, c.reason), []).append(row[0].text)
        out = []
        for (col, reason), names in seen.items():
            who = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            out.append(f"{col}: {reason} ({who})")
        return out


@dataclass(frozen=True)
class KeyValue:
    """One labelled value of a key/value section (summary, workload, capacity, SLO)."""
    label: str
    value: Cell



# Appended to instance names a warning/critical finding names.
FLAG_MARK: Final = " !"


def first_reason(*values: Any) -> str | None:
    """The reason of the first ``Missing`` among ``values`` (None when all are known)."""
    for v in values:
        if isinstance(v, Missing):
            return v.reason
    return None


def name_list(names: Sequence[str], limit: int) -> str:
    """Names joined by commas, the first ``limit`` shown and the rest counted (``a, b +3 more``)."""
    shown = ", ".join(names[:limit])
    return shown + (f" +{len(names) - limit} more" if len(names) > limit else "")
