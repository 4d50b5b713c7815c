"""``pdprobe collect``: capture what ``diagnose`` needs from a live cluster into one file."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.prometheus_target import PrometheusTarget


@dataclass(frozen=True)
class CollectResult:
    """What was written and how long it took."""

    path: Path
    rows: dict[str, int]
    bytes: int
    instances: dict[str, int]  # role -> count (roles resolved without options)
    queries: int
    seconds: float
    warnings: tuple[str, ...]


def collection_metadata(meta: Any) -> dict[str, Any]:
    """The JSON-able description of a live collection (``LiveMeta``) for the capture file."""
    w = meta.window
    return {
        "url": meta.url,
        "window": {"start": _iso(w.start_ts), "end": _iso(w.end_ts), "start_ts": w.start_ts,
                   "end_ts": w.end_ts, "step_s": w.step_s, "coarse_step_s": w.coarse_step_s},
        "selector": meta.selector,
        "network_selector": meta.network_selector,
        "metrics_map": meta.metrics_map,
        "server_version": meta.server_version,
        "clock_skew_s": round(meta.clock_skew_s, 3),
        "discovery": meta.discovery,
        "families": meta.found.by_engine(),
        "versions": dict(meta.found.versions),
        "elapsed_s": round(meta.elapsed_s, 3),
        "queries": [asdict(q) for q in meta.queries],
    }


def collect(target: PrometheusTarget, output: Path, ctx: ReadContext | None = None) -> CollectResult:
    """Query ``target`` and write a capture file at ``output`` (a file, or a folder for it)."""
    from pdprobe.collectors.capture import capture_path, write_capture
    from pdprobe.collectors.fuse import fuse
    from pdprobe.collectors.prometheus import collect_partial
    from pdprobe.redact import WORD_REDACT_BELOW, Redactor

    path = capture_path(output)  # fail on a missing folder before querying anything
    result = collect_partial(target, ctx)
    # write_capture refuses a document holding any of these: every spelling of every secret
    # (short ones, like a tenant "a7", would match innocent text and are left to redaction).
    forms = Redactor(target.secrets(), target.basic_credentials()).forms
    info = write_capture(result.partial, path, collection_metadata(result.meta),
                         secrets=sorted(f for f in forms if len(f) >= WORD_REDACT_BELOW))
    dataset = fuse([result.partial])
    roles = Counter(i.role for i in dataset.instances)
    return CollectResult(path=info.path, rows=info.rows, bytes=info.bytes, instances={str(k): v for k, v in roles.items()},
                         queries=len(result.meta.queries), seconds=result.meta.elapsed_s,
                         warnings=dataset.warnings)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
