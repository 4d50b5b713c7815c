"""Findings and key figures in the Prometheus text format, for node_exporter's textfile
collector, so a cron job can alert on pdprobe's verdict.

Samples carry no timestamps (the textfile collector rejects them); an unknown value is left
out rather than written as 0. ``pdprobe_last_run_timestamp_seconds`` lets an alert catch a
cron job that stopped running. Write the file atomically (``-o`` does: temp file + rename).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from pdprobe.report.base import RenderOptions
from pdprobe.report.cells import is_na
from pdprobe.report.verdict import deployed_counts, unknown_reason
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.report.model import Report

# Same numbers as the exit code, so one mapping serves runbooks and alerts.
STATUS_VALUES: Final = {"ok": 0, "warning": 1, "critical": 2, "unknown": 3}
SEVERITIES: Final = ("info", "warning", "critical")
# The reason is a label of its own family, not of ``pdprobe_status``: a reason that changes
# between runs (a file name, a time) would otherwise restart the ``for:`` timer of
# ``PdprobeCannotJudge``. Long reasons are cut so one bad input cannot bloat the textfile.
REASON_MAX_CHARS: Final = 300
_STATUS_HELP: Final = "Diagnosis status as the exit code: 0 ok, 1 warning, 2 critical, 3 unknown."
_REASON_HELP: Final = "Why the last run could not judge the cluster (always 1; only when unknown)."
_TIMESTAMP_HELP: Final = "When the report was generated (Unix seconds); alert if it stops moving."


def escape_label(value: str) -> str:
    """Label value escaping per the exposition format: backslash, double quote, newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """A HELP text escaped for the Prometheus text format (backslashes and newlines)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def fmt_sample(value: float | int) -> str:
    """A sample value in the Prometheus text format (booleans as 0/1, ``NaN``/``+Inf`` spelt its
    way)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class _Exposition:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self._families: dict[str, set[str]] = {}

    def family(self, name: str, help_text: str,
               samples: Iterable[tuple[dict[str, str], Any]]) -> None:
        """One metric family (gauge); samples with an unknown value are skipped."""
        rows = []
        seen = self._families.setdefault(name, set())
        for labels, value in samples:
            if is_na(value):
                continue
            label_text = ",".join(f'{k}="{escape_label(str(v))}"' for k, v in labels.items())
            series = f"{name}{{{label_text}}}" if label_text else name
            if series in seen:  # one sample per label set, or the file is invalid
                continue
            seen.add(series)
            rows.append(f"{series} {fmt_sample(value)}")
        if not rows:
            return
        self.lines.append(f"# HELP {name} {escape_help(help_text)}")
        self.lines.append(f"# TYPE {name} gauge")
        self.lines.extend(rows)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _generated_ts(report: Report) -> float | None:
    try:
        return datetime.fromisoformat(report.generated_at).timestamp()
    except ValueError:
        return None


def render_unknown(reason: str, now_s: float | None = None) -> str:
    """The textfile of a run that ended before a report existed (bad input, Prometheus
    unreachable): status 3, the reason, the run's time and zero findings, so the previous
    run's findings and status do not stay in the file and keep alerts firing on old data."""
    ex = _Exposition()
    ex.family("pdprobe_status", _STATUS_HELP, [({"status": "unknown"}, STATUS_VALUES["unknown"])])
    ex.family("pdprobe_unknown_reason", _REASON_HELP, [({"reason": _reason(reason)}, 1)])
    ex.family("pdprobe_last_run_timestamp_seconds", _TIMESTAMP_HELP,
              [({}, now_s if now_s is not None else datetime.now(tz=UTC).timestamp())])
    ex.family("pdprobe_findings", "Number of findings by severity.",
              [({"severity": s}, 0) for s in SEVERITIES])
    return ex.text()


def _reason(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= REASON_MAX_CHARS else line[:REASON_MAX_CHARS - 1] + "…"


def render(report: Report, options: RenderOptions) -> str:
    """The report as Prometheus text-format metrics (for the node_exporter textfile collector or
    ``watch``'s ``/metrics``)."""
    ex = _Exposition()
    ex.family("pdprobe_status", _STATUS_HELP,
              [({"status": report.status}, STATUS_VALUES[report.status])])
    if report.status == "unknown":
        ex.family("pdprobe_unknown_reason", _REASON_HELP,
                  [({"reason": _reason(unknown_reason(report))}, 1)])
    ex.family("pdprobe_info", "pdprobe version and input of the last run (always 1).",
              [({"version": report.pdprobe_version, "input": report.input_description}, 1)])
    ex.family("pdprobe_last_run_timestamp_seconds", _TIMESTAMP_HELP,
              [({}, _generated_ts(report))])
    if report.window_start_ts is not None and report.window_end_ts is not None:
        ex.family("pdprobe_window_seconds", "Length of the time window the report covers.",
                  [({}, float(report.window_end_ts - report.window_start_ts))])
    ex.family("pdprobe_finding",
              "A finding of the last run (always 1); absent when the finding is gone.",
              [({"code": f.code, "cause": f.cause, "severity": f.severity.value,
                 "root_cause": "true" if f.is_root_cause else "false"}, 1)
               for f in report.findings])
    ex.family("pdprobe_findings", "Number of findings by severity.",
              [({"severity": s}, sum(1 for f in report.findings if f.severity.value == s))
               for s in SEVERITIES])
    ex.family("pdprobe_inconclusive_rules", "Rules that could not judge for lack of input.",
              [({}, len(report.inconclusive))])
    _capacity(ex, report)
    _workload(ex, report)
    _slo(ex, report)
    ex.family("pdprobe_input_rows", "Records, samples or lines used from each input.",
              [({"source": s.path, "kind": s.kind, "format": s.format}, s.rows)
               for s in report.sources])
    ex.family("pdprobe_input_skipped", "Lines or rows of each input that were not understood.",
              [({"source": s.path, "kind": s.kind, "format": s.format}, s.skipped)
               for s in report.sources])
    ex.family("pdprobe_warnings", "Warnings raised while reading the inputs.",
              [({}, len(report.warnings))])
    return ex.text()


def _capacity(ex: _Exposition, report: Report) -> None:
    cap = report.capacity
    dep_p, dep_d = deployed_counts(report)
    rec: tuple[Any, Any] = (None, None) if isinstance(cap, Missing) else \
        (cap.recommended_prefill, cap.recommended_decode)
    ex.family("pdprobe_instances", "Instances by role: deployed and recommended by the capacity "
              "model.",
              [({"role": "prefill", "kind": "deployed"}, dep_p),
               ({"role": "decode", "kind": "deployed"}, dep_d),
               ({"role": "prefill", "kind": "recommended"}, rec[0]),
               ({"role": "decode", "kind": "recommended"}, rec[1])])
    ex.family("pdprobe_ratio_deployed", "Deployed prefill instances per decode instance.",
              [({}, dep_p / dep_d if dep_p is not None and dep_d else None)])
    ex.family("pdprobe_capacity_known",
              "1 when the capacity model produced a ratio, 0 when it is pending (missing input).",
              [({}, 0 if isinstance(cap, Missing) else 1)])
    if isinstance(cap, Missing):
        return
    ex.family("pdprobe_ratio_theoretical",
              "Prefill instances per decode instance the workload needs.",
              [({}, cap.theoretical_ratio)])
    ex.family("pdprobe_ratio_mean_based",
              "The ratio sized from mean lengths only (compare with the theoretical ratio).",
              [({}, cap.mean_based_ratio)])
    ex.family("pdprobe_capacity_requests_per_second",
              "Estimated capacity of one instance by role.",
              [({"role": "prefill"}, cap.prefill_capacity_rps),
               ({"role": "decode"}, cap.decode_capacity_rps)])
    ex.family("pdprobe_kv_transfer_bytes_per_second",
              "KV transfer bandwidth per node: required by the workload and usable.",
              [({"kind": "required"}, cap.transfer_required_bytes_per_s),
               ({"kind": "usable"}, cap.transfer_capacity_bytes_per_s)])
    binding = cap.binding
    if not is_na(binding):
        ex.family("pdprobe_binding_stage", "The stage that limits throughput (always 1).",
                  [({"stage": str(binding)}, 1)])


def _workload(ex: _Exposition, report: Report) -> None:
    wl = report.workload
    if isinstance(wl, Missing):
        return
    ex.family("pdprobe_workload_requests", "Requests in the window.", [({}, wl.requests)])
    ex.family("pdprobe_workload_failed_requests", "Requests that ended in error, timeout or "
              "abort.", [({}, wl.failed_requests)])
    if not isinstance(wl.arrival_rate_rps, Missing):
        ex.family("pdprobe_workload_arrival_rate_requests_per_second", "Mean arrival rate.",
                  [({}, wl.arrival_rate_rps)])
    for name, dist in (("prompt", wl.prompt_tokens), ("output", wl.output_tokens)):
        if isinstance(dist, Missing):
            continue
        q = dist.quantiles
        ex.family(f"pdprobe_workload_{name}_tokens",
                  f"{name.capitalize()} length in tokens: mean and quantiles.",
                  [({"stat": stat}, getattr(q, stat)) for stat in ("mean", "p50", "p90", "p99")])
    ex.family("pdprobe_workload_cached_ratio", "Share of prompt tokens served from a prefix "
              "cache.", [({}, wl.cached_fraction)])


def _slo(ex: _Exposition, report: Report) -> None:
    slo = report.slo
    if isinstance(slo, Missing):
        return
    ex.family("pdprobe_slo_objective_seconds", "The latency objectives the run judged against.",
              [({"objective": "ttft"}, slo.ttft_slo_s), ({"objective": "tpot"}, slo.tpot_slo_s)])
    samples: list[tuple[dict[str, str], Any]] = []
    if slo.ttft_slo_s is not None:
        samples.append(({"objective": "ttft"}, slo.ttft))
    if slo.tpot_slo_s is not None:
        samples.append(({"objective": "tpot"}, slo.tpot))
    if slo.ttft_slo_s is not None and slo.tpot_slo_s is not None:
        samples.append(({"objective": "both"}, slo.both))
    ex.family("pdprobe_slo_attainment_ratio", "Share of requests that met the objective (0-1).",
              samples)
