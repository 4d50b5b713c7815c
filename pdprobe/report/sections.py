"""The report's descriptive sections as rows of text: instances, lengths, workload, SLO,
inputs, identity.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from pdprobe.report.cells import (
    FLAG_MARK,
    ROLE_ORDER,
    Cell,
    KeyValue,
    Table,
    cell,
    is_na,
    quantile_cell,
)
from pdprobe.report.verdict import flagged_instances
from pdprobe.units import (
    NA,
    fmt_num,
    fmt_pct,
    fmt_seconds,
)
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.base import (
        InstanceSummary,
        LengthDistribution,
        Quantiles,
    )
    from pdprobe.report.model import Report


# Arrival CV² above this reads as bursty (Poisson arrivals have CV² = 1; a 2x margin keeps
# ordinary sampling noise of an hour-long window from being called bursty).
BURSTY_CV2: Final = 2.0


INSTANCE_COLUMNS: Final = ("instance", "share", "TTFT p50", "TTFT p90", "TPOT p50", "TPOT p90",
                           "queue p90", "KV p90", "hit rate")


def instance_row(inst: InstanceSummary, flagged: bool) -> tuple[Cell, ...]:
    """One instance's row of its role table: traffic share, TTFT, TPOT, queue, KV usage and hit
    rate."""
    return (
        Cell(inst.name, flag=flagged),
        cell(inst.traffic_share, fmt_pct),
        quantile_cell(inst.ttft_s, "p50", fmt_seconds),
        quantile_cell(inst.ttft_s, "p90", fmt_seconds),
        quantile_cell(inst.tpot_s, "p50", fmt_seconds),
        quantile_cell(inst.tpot_s, "p90", fmt_seconds),
        quantile_cell(inst.queue_depth, "p90", fmt_num),
        quantile_cell(inst.kv_usage_ratio, "p90", fmt_pct),
        cell(inst.prefix_hit_ratio, fmt_pct),
    )


DETAIL_COLUMNS: Final = ("instance", "reqs", "wait p90", "xfer p50", "xfer p90", "running",
                         "preempt", "in tok/s", "out tok/s")
DETAIL_NOTE: Final = ("wait: queue time before prefill; xfer: KV transfer time; running: "
                      "running requests p50; preempt: preemptions in the window")


def detail_row(inst: InstanceSummary, flagged: bool) -> tuple[Cell, ...]:
    """One instance's row of the ``-v`` detail table: requests, wait, KV transfer, running,
    preemptions and token rates."""
    return (
        Cell(inst.name, flag=flagged),
        cell(inst.requests, fmt_num),
        quantile_cell(inst.queue_s, "p90", fmt_seconds),
        quantile_cell(inst.kv_transfer_s, "p50", fmt_seconds),
        quantile_cell(inst.kv_transfer_s, "p90", fmt_seconds),
        quantile_cell(inst.running, "p50", fmt_num),
        cell(inst.preemptions, fmt_num),
        cell(inst.prompt_tokens_per_s, fmt_num),
        cell(inst.generation_tokens_per_s, fmt_num),
    )


def role_tables(report: Report, *, detail: bool = False) -> list[Table]:
    """One table per role (prefill, decode, then others), instances in report order."""
    flagged = flagged_instances(report)
    tables = []
    for role in ROLE_ORDER:
        members = [i for i in report.instances if i.role == role]
        if not members:
            continue
        if detail:
            rows = tuple(detail_row(i, i.name in flagged) for i in members)
            cols = DETAIL_COLUMNS
        else:
            rows = tuple(instance_row(i, i.name in flagged) for i in members)
            cols = INSTANCE_COLUMNS
        sources = sorted({i.role_source for i in members})
        note = "role from " + "; ".join(sources) if sources else ""
        if detail:
            note = DETAIL_NOTE
        elif any(r[0].flag for r in rows):
            note = FLAG_MARK.strip() + " named by a finding; " + note
        tables.append(Table(title=f"{role} ({len(members)})", columns=cols, rows=rows,
                            numeric=(False,) + (True,) * (len(cols) - 1), note=note,
                            drop_order=() if detail else NARROW_DROP_ORDER))
    return tables


# At 80 columns the instance table cannot show all nine columns: the p50s go first (the p90s
# carry the tail a finding is about), then the queue (the sparklines show it over time).
NARROW_DROP_ORDER: Final = ("TPOT p50", "TTFT p50", "queue p90")


def length_table(report: Report) -> Table | None:
    """Prompt and output length quantiles, shape and CV (None without a workload)."""
    wl = report.workload
    if isinstance(wl, Missing):
        return None
    rows = tuple(_length_row(label, dist) for label, dist in
                 (("prompt tokens", wl.prompt_tokens), ("output tokens", wl.output_tokens)))
    estimated = any(c.text.endswith("~") for row in rows for c in row)
    return Table(title="lengths", columns=("", "mean", "p50", "p90", "p99", "CV", "shape"),
                 rows=rows, numeric=(False, True, True, True, True, True, False),
                 note="~ marks quantiles interpolated from histogram buckets" if estimated else "")


def _length_row(label: str, dist: Any) -> tuple[Cell, ...]:
    if isinstance(dist, Missing):
        return (Cell(label), *(Cell(NA, dist.reason) for _ in range(6)))
    d: LengthDistribution = dist
    q: Quantiles = d.quantiles
    return (Cell(label), quantile_cell(q, "mean", fmt_num), quantile_cell(q, "p50", fmt_num),
            quantile_cell(q, "p90", fmt_num), quantile_cell(q, "p99", fmt_num),
            cell(d.cv, lambda v: f"{v:.2f}"), Cell(d.shape or NA, None if d.shape else "unknown"))


def workload_rows(report: Report) -> list[KeyValue]:
    """The workload section: requests, arrival rate and burstiness, offered and completed rates,
    prefix caching and the prompt/output correlation."""
    wl = report.workload
    if isinstance(wl, Missing):
        return [KeyValue("workload", Cell(NA, wl.reason))]
    requests = fmt_num(wl.requests)
    if wl.failed_requests:
        requests += f" ({fmt_num(wl.failed_requests)} failed)"
    arrival = wl.arrival_rate_rps
    rate = (Cell(NA, arrival.reason) if isinstance(arrival, Missing)
            else Cell(f"{fmt_num(arrival)} req/s") if math.isfinite(arrival) else Cell(NA))
    rows = [
        KeyValue("requests", Cell(requests + f" from {wl.source}")),
        KeyValue("arrival rate", rate),
    ]
    cv2 = wl.arrival_cv2
    if isinstance(cv2, Missing) or not math.isfinite(cv2):
        rows.append(KeyValue("arrival burstiness", cell(cv2)))
    else:
        shape = "bursty" if cv2 > BURSTY_CV2 else "near Poisson" if cv2 > 1 / BURSTY_CV2 else "smooth"
        rows.append(KeyValue("arrival burstiness", Cell(f"CV² {cv2:.2f} ({shape})")))
    rows += [
        KeyValue("offered rate", cell(wl.offered_rate_rps, lambda v: f"{fmt_num(v)} req/s")),
        KeyValue("completed rate", cell(wl.completed_rate_rps, lambda v: f"{fmt_num(v)} req/s")),
        KeyValue("prefix-cached prompt", cell(wl.cached_fraction, fmt_pct)),
        KeyValue("prompt/output correlation", cell(wl.prompt_output_corr, lambda v: f"{v:+.2f}")),
    ]
    return rows



def slo_summary(slo: Any) -> str:
    """``TTFT ≤ 2 s: 93.4%, TPOT ≤ 100 ms: 88.0%, both: 85.1%`` for the objectives given."""
    parts = []
    if slo.ttft_slo_s is not None:
        parts.append(f"TTFT ≤ {fmt_seconds(slo.ttft_slo_s)}: {_pct_or_na(slo.ttft)}")
    if slo.tpot_slo_s is not None:
        parts.append(f"TPOT ≤ {fmt_seconds(slo.tpot_slo_s)}: {_pct_or_na(slo.tpot)}")
    if slo.ttft_slo_s is not None and slo.tpot_slo_s is not None:
        parts.append(f"both: {_pct_or_na(slo.both)}")
    return ", ".join(parts) if parts else "no SLO given"


def _pct_or_na(v: Any) -> str:
    return NA if is_na(v) else fmt_pct(float(v))


def slo_rows(report: Report) -> list[KeyValue]:
    """The SLO section: attainment per objective and for both, the target and how it was measured."""
    slo = report.slo
    if isinstance(slo, Missing):
        return [KeyValue("SLO attainment", Cell(NA, slo.reason))]
    rows = []
    defaulted = getattr(slo, "defaulted", ())
    if slo.ttft_slo_s is not None:
        rows.append(KeyValue(f"TTFT ≤ {fmt_seconds(slo.ttft_slo_s)}"
                             + (" (default)" if "ttft" in defaulted else ""),
                             cell(slo.ttft, fmt_pct)))
    if slo.tpot_slo_s is not None:
        rows.append(KeyValue(f"TPOT ≤ {fmt_seconds(slo.tpot_slo_s)}"
                             + (" (default)" if "tpot" in defaulted else ""),
                             cell(slo.tpot, fmt_pct)))
    if slo.ttft_slo_s is not None and slo.tpot_slo_s is not None:
        rows.append(KeyValue("both", cell(slo.both, fmt_pct)))
    if not rows:
        return [KeyValue("SLO attainment", Cell(NA, "no SLO given (use --slo-ttft / --slo-tpot)"))]
    rows.append(KeyValue("target", Cell(f"{fmt_pct(slo.target)} of requests within both")))
    rows.append(KeyValue("method", Cell(slo.method)))
    return rows


def sources_table(report: Report) -> Table:
    """One row per input; paths relative to the folder they share (named in the note), so
    rows differ in their first characters, not after a long common prefix."""
    paths = [s.path for s in report.sources]
    base = common_folder(paths)
    shown = [_relative(p, base) for p in paths]
    rows = tuple((Cell(path), Cell(s.kind), Cell(s.format), Cell(fmt_num(s.rows)),
                  Cell(fmt_num(s.skipped), flag=s.skipped > 0))
                 for path, s in zip(shown, report.sources, strict=True))
    notes = [f"paths under {base}"] if base else []
    if any(s.skipped for s in report.sources):
        notes.append("! some lines or rows were not understood and were skipped")
    return Table(title="inputs", columns=("source", "kind", "format", "used", "skipped"),
                 rows=rows, numeric=(False, False, False, True, True), note="; ".join(notes))


def common_folder(paths: Sequence[str]) -> str:
    """The folder every path lies in ("" when there is none worth stripping: one input,
    URLs, stdin, or nothing in common)."""
    import os.path

    files = [p for p in paths if "/" in p and "://" not in p and p != "-"]
    if len(files) < 2 or len(files) != len(paths):
        return ""
    try:
        base = os.path.commonpath(files)
    except ValueError:  # absolute and relative mixed
        return ""
    if base in ("", "/") or base in files:
        return ""
    return base


def _relative(path: str, base: str) -> str:
    return path[len(base):].lstrip("/") if base and path.startswith(base + "/") else path


def source_notes(report: Report) -> list[str]:
    """Per-input notes, one line per kind of note: the same note about six logs is printed
    once, with the count and the first few files (the words that differ are the file's); the
    kinds about the same files share one line."""
    base = common_folder([s.path for s in report.sources])
    groups: dict[str, list[tuple[str, str]]] = {}
    for s in report.sources:
        for n in s.notes:
            groups.setdefault(_NOTE_SHAPE.sub("…", n), []).append((_relative(s.path, base), n))
    by_files: dict[tuple[str, ...], list[str]] = {}
    for items in groups.values():
        files = tuple(dict.fromkeys(p for p, _ in items))
        text = items[0][1]
        if len({n for _, n in items}) > 1:
            text += " (likewise for the others)"
        by_files.setdefault(files, []).append(text)
    out = []
    for files, texts in by_files.items():
        if len(files) == 1:
            who = files[0]
        else:
            shown = ", ".join(_short_path(p) for p in files[:MAX_NOTE_FILES])
            more = (f" and {len(files) - MAX_NOTE_FILES} more"
                    if len(files) > MAX_NOTE_FILES else "")
            who = f"{len(files)} inputs ({shown}{more})"
        out.append(f"{who}: " + "; ".join(texts))
    return out


# What differs between two notes of the same kind: quoted names and numbers.
_NOTE_SHAPE: Final = re.compile(r"'[^']*'|\"[^\"]*\"|\d+(?:[.,:]\d+)*")
# Files named in a grouped note; the rest are counted.
MAX_NOTE_FILES: Final = 3


def group_lines(lines: Sequence[str]) -> list[str]:
    """Warnings or notes, one line per kind: lines that differ only in names and numbers
    (the same warning for each of six files) print once, with how many there were."""
    groups: dict[str, list[str]] = {}
    for line in lines:
        groups.setdefault(_NOTE_SHAPE.sub("…", line), []).append(line)
    return [items[0] if len(items) == 1 else f"{items[0]} (and {len(items) - 1} more like it)"
            for items in groups.values()]


def _short_path(path: str) -> str:
    """The file name, with its folder when that is all that tells two inputs apart."""
    from pathlib import PurePath

    return PurePath(path).name


def identity_table(report: Report) -> Table | None:
    """Per instance: role, how decided, and the other names the inputs gave it (``-v``, HTML)."""
    if not report.identity:
        return None
    rows = []
    for entry in report.identity:
        names = "; ".join(f"{a.name} in {_short_path(a.source)} ({a.how})"
                          for a in entry.aliases if a.name != entry.name)
        names = names or "same name in every input"
        rows.append((Cell(entry.name), Cell(entry.role), Cell(entry.role_source), Cell(names)))
    return Table(title="identity", columns=("instance", "role", "role from", "other names"),
                 rows=tuple(rows), numeric=(False, False, False, False))


def inconclusive_lines(report: Report) -> list[str]:
    """``PD303 kv-transfer-failures: needs ...`` for every rule that could not judge."""
    return [f"{i.code} {i.cause}: needs {i.needs}" for i in report.inconclusive]


