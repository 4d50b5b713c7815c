"""Capacity per window next to what was deployed (ratio lag), and the planner's own view.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from pdprobe.report.cells import (
    FLAG_MARK,
    Cell,
    Table,
    cell,
    count,
    first_reason,
    fmt_ratio,
    fmt_ts,
    is_na,
    is_relative,
    pd_pair,
    plural,
)
from pdprobe.units import (
    NA,
    fmt_duration,
    fmt_num,
    fmt_seconds,
)
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.base import (
        RatioWindow,
    )
    from pdprobe.report.model import Report


def window_differs(w: RatioWindow) -> bool:
    """True when both counts are known and the deployed ones are not the recommended ones."""
    rec = (count(w.recommended_prefill), count(w.recommended_decode))
    dep = (count(w.deployed_prefill), count(w.deployed_decode))
    return None not in rec and None not in dep and rec != dep


WINDOWS_NOTE: Final = "offered/served: req/s; prompt/output: mean tokens; ratio: theoretical P/D"
WINDOWS_FLAG_NOTE: Final = FLAG_MARK.strip() + " deployed ≠ recommended; "


def windows_table(report: Report) -> Table | None:
    """The capacity estimate per window next to what was deployed (ratio lag)."""
    cap = report.capacity
    if isinstance(cap, Missing) or not cap.windows:
        return None
    rel = is_relative(report.window_start_ts)
    planner = has_planner(cap.windows)
    rows = []
    for w in cap.windows:
        deployed = Cell(pd_pair(w.deployed_prefill, w.deployed_decode),
                        reason=first_reason(w.deployed_prefill, w.deployed_decode),
                        flag=window_differs(w))
        rows.append((
            Cell(fmt_ts(w.start_ts, rel, with_date=False)),
            Cell(fmt_num(w.requests)),
            cell(w.offered_rate_rps),
            cell(w.served_rate_rps),
            cell(w.mean_prompt_tokens),
            cell(w.mean_output_tokens),
            cell(w.theoretical_ratio, fmt_ratio),
            Cell(pd_pair(w.recommended_prefill, w.recommended_decode),
                 reason=first_reason(w.recommended_prefill, w.recommended_decode)),
            deployed,
            cell(w.binding, str),
            *(_planner_cells(w) if planner else ()),
        ))
    columns = ("from", "reqs", "offered", "served", "prompt", "output", "ratio",
               "recommended", "deployed", "binding")
    return Table(title="capacity per window",
                 columns=columns + (PLANNER_COLUMNS if planner else ()),
                 rows=tuple(rows),
                 numeric=(False,) + (True,) * 8 + (False,) + (True,) * (
                     len(PLANNER_COLUMNS) if planner else 0),
                 note=(WINDOWS_FLAG_NOTE if any(r[8].flag for r in rows) else "") + WINDOWS_NOTE
                 + ratio_fit_note(cap.windows) + (PLANNER_NOTE if planner else ""))


def ratio_fit_note(windows: Iterable[RatioWindow]) -> str:
    """``; counts ≠ ratio in 4 of 5 windows: decode at its floor … (latest)``, or nothing.

    Integer counts of at least one per pool cannot follow a theoretical ratio of 2.6 at 0.3
    decode instance of load: the note says which pool and load explain the difference.
    """
    wins = list(windows)
    off = [w for w in wins if isinstance(w.ratio_fit, str) and w.ratio_fit != "consistent"]
    if not off:
        return ""
    return (f"; recommended counts ≠ ratio in {len(off)} of {plural(len(wins), 'window')}: "
            f"{off[-1].ratio_fit} (latest)")


# Controller audit: a planner's own view (Dynamo dynamo_planner_*) next to pdprobe's, per window.
PLANNER_COLUMNS: Final = ("planner rec", "planner saw", "planner ITL obs/est")
PLANNER_NOTE: Final = ("; planner rec: the replicas the planner decided on; planner saw: the "
                       "replicas it saw deployed; ITL observed/estimated by its model")


def has_planner(windows: Iterable[RatioWindow]) -> bool:
    """True when any window carries the planner's recommended or deployed counts."""
    return any(not is_na(w.planner_predicted_decode) or not is_na(w.planner_decode)
               for w in windows)


def _replicas(x: Any) -> Any:
    return x if is_na(x) else round(float(x))


def _planner_cells(w: RatioWindow) -> tuple[Cell, ...]:
    rec = (_replicas(w.planner_predicted_prefill), _replicas(w.planner_predicted_decode))
    saw = (_replicas(w.planner_prefill), _replicas(w.planner_decode))
    obs, est = w.planner_observed_itl_s, w.planner_estimated_itl_s
    itl = (NA if is_na(obs) and is_na(est) else
           f"{NA if is_na(obs) else fmt_seconds(float(obs))}/"  # type: ignore[arg-type]
           f"{NA if is_na(est) else fmt_seconds(float(est))}")  # type: ignore[arg-type]
    return (Cell(pd_pair(*rec), reason=first_reason(w.planner_predicted_prefill,
                                                      w.planner_predicted_decode),
                 flag=None not in rec and rec != saw and not any(map(is_na, rec + saw))),
            Cell(pd_pair(*saw), reason=first_reason(w.planner_prefill, w.planner_decode)),
            Cell(itl))


def windows_summary(report: Report) -> str | None:
    """``deployed ≠ recommended in 3 of 5 windows of 5m00s; latest 10:20:00 needs 3P:1D, has
    2P:4D`` (or that they matched, or that the counts are unknown)."""
    cap = report.capacity
    if isinstance(cap, Missing) or not cap.windows:
        return None
    wins = cap.windows
    length = fmt_duration(wins[0].end_ts - wins[0].start_ts)
    known = [w for w in wins if None not in (
        count(w.recommended_prefill), count(w.recommended_decode), count(w.deployed_prefill),
        count(w.deployed_decode))]
    audit = planner_summary(wins)
    if not known:
        return (f"{plural(len(wins), 'window')} of {length}; deployed or recommended counts "
                f"unknown{audit}")
    rest = len(wins) - len(known)
    tail = f" (and {rest} without both counts)" if rest else ""
    differ = [w for w in known if window_differs(w)]
    if not differ:
        return (f"deployed = recommended in all {plural(len(known), 'window')} of {length}"
                f"{tail}{audit}")
    last = differ[-1]
    when = fmt_ts(last.start_ts, is_relative(report.window_start_ts), with_date=False)
    return (f"deployed ≠ recommended in {len(differ)} of {plural(len(known), 'window')} of "
            f"{length}{tail}; latest {when} needs "
            f"{pd_pair(last.recommended_prefill, last.recommended_decode)}, has "
            f"{pd_pair(last.deployed_prefill, last.deployed_decode)}{audit}")


def planner_summary(wins: Sequence[RatioWindow]) -> str:
    """``; the planner's recommendation ≠ what it saw deployed in 2 of 5 windows (latest
    2P:4D vs 2P:2D)``, or "" without planner data."""
    if not has_planner(wins):
        return ""
    pairs = [((_replicas(w.planner_predicted_prefill), _replicas(w.planner_predicted_decode)),
              (_replicas(w.planner_prefill), _replicas(w.planner_decode))) for w in wins]
    both = [(r, d) for r, d in pairs if not any(map(is_na, r + d))]
    if not both:
        return "; planner: recommended or deployed replicas unknown"
    apart = [(r, d) for r, d in both if r != d]
    if not apart:
        return f"; the planner's replicas followed its recommendation in all {len(both)}"
    r, d = apart[-1]
    return (f"; the planner's recommendation ≠ what it saw deployed in {len(apart)} of "
            f"{len(both)} (latest {pd_pair(*r)} vs {pd_pair(*d)})")


