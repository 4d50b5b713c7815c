"""``--since``/``--until`` for captured files: the flags as a ``TimeWindow``.

Live, ``--since`` is the window's length (default 30m) ending at ``--until`` (default now).
For files the same flags mean the same, with the capture's end in place of now, and the
default is the whole capture: the live default must not cut a day-long capture to its last
half hour. ``--since`` also takes an absolute time (ISO 8601 / RFC 3339), live and offline.
"""

from __future__ import annotations

from pdprobe.collectors.time_window import TimeWindow

# The live window's length when --since is not given (docs/contract.md).
DEFAULT_LIVE_SINCE = "30m"


def parse_since(text: str) -> tuple[float | None, float | None]:
    """``(length_s, since_ts)``: a duration (``90m``, plain seconds) or an absolute time
    (``2026-11-30T13:00:00Z``); a usage error naming ``--since`` otherwise."""
    from pdprobe.cli.live_options import parse_duration, parse_time
    from pdprobe.errors import UsageError
    from pdprobe.units import DURATION_EXAMPLES, parse_duration_s

    try:
        parse_duration_s(text)
    except ValueError:
        pass
    else:
        return parse_duration(text, "--since"), None
    if any(c in text for c in "-:T"):  # a date-time, not a mistyped duration
        return None, parse_time(text, "--since")
    raise UsageError(f"--since {text!r} is not a duration (nor an ISO 8601 time)",
                     hint=f"use e.g. {DURATION_EXAMPLES} or 2026-11-30T13:00:00Z")


def file_window(since: str | None, until: str | None) -> TimeWindow | None:
    """The window for captured files, or None (the whole capture) when neither flag is given."""
    from pdprobe.cli.live_options import parse_time
    from pdprobe.errors import UsageError

    if since is None and until is None:
        return None
    length_s, since_ts = parse_since(since) if since is not None else (None, None)
    until_ts = parse_time(until, "--until") if until is not None else None
    if since_ts is not None and until_ts is not None and since_ts >= until_ts:
        raise UsageError(f"--since {since!r} is not before --until {until!r}",
                         hint="give the window's start first, e.g. --since "
                              "2026-11-30T13:00:00Z --until 2026-11-30T14:00:00Z")
    text = " ".join(f"{flag} {value}" for flag, value in (("--since", since),
                                                          ("--until", until)) if value)
    if length_s is not None and until_ts is None:
        text += " before the capture's end"
    return TimeWindow(since_ts=since_ts, length_s=length_s, until_ts=until_ts, text=text)
