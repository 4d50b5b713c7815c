"""Mooncake transfer-engine log lines: periodic metrics, RDMA slice failures, TCP transport.

Formats (docs/inputs/logs.md, Mooncake): the classic TE's current
``[Metrics] Transfer Engine Stats (over last Ns): Throughput: X MB/s | Latency Distribution
(count=n): 10-20μs:1.0%, ...`` and older ``Transfer Engine Throughput: X MB/s (over last Ns)``;
TENT's periodic ``Read: 1.00 MB (100 reqs, 2 fails) | Write: 512.00 KB (50 reqs, 1 fails)``
(cumulative totals, decimal units, requests including failures); ``Worker: Process failed for
slice (...): <ibverbs status>`` with and without ``max_retry_cnt``; ``WR flush error``; and
lines saying the engine uses TCP. glog prefixes with and without the year are handled by
``engine_log``; the thread id in the prefix tells several transfer engines in one log apart.

Failure lines a log may hold alone (kvcache-ai/Mooncake ``mooncake-transfer-engine/src/
transport/rdma_transport/worker_pool.cpp`` and ``worker_pool.h`` before and after PR 2155, and
the Store client ``mooncake-store/src/client.cpp`` / ``client_service.cpp`` /
``transfer_task.cpp``): a local RNIC marked inactive, a peer rail paused, no connection to a peer
endpoint, slices that cannot be redispatched, Store ``TRANSFER_FAIL`` and batch timeouts. Each
event's detail ends with the NIC, peer or key it names (``signals.event_detail``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pdprobe import signals as S
from pdprobe.collectors.log_toolkit import (
    MIB,
    EventRows,
    FamilyOutput,
    LineKind,
    SignalSpec,
    as_lines,
    combine_subseries,
    extract,
    first_bad,
    group,
    literal_route,
    matched,
    numeric,
)

ENGINE: Final = "mooncake"
US_PER_S: Final = 1e6
# Latency Distribution bucket edges of the classic TE, in µs (§4.7); ">10000000μs" is +Inf.
LATENCY_EDGES_US: Final = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                           100000, 200000, 500000, 1000000, 2000000, 5000000, 10000000)
# TENT's summary formats bytes with decimal prefixes (formatBytes divides by 1e3, 1e6, ...).
TENT_UNITS: Final[Mapping[str, float]] = {"B": 1.0, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}

_TE_STATS: Final = (r"Transfer Engine Stats \(over last (?P<win>\d+)s\): Throughput: "
                    r"(?P<tput>[^ ]+) MB/s(?: \| Latency Distribution \(count=(?P<count>[^)]*)\):?"
                    r"(?P<dist>.*))?")
_TE_OLD: Final = (r"Transfer Engine Throughput: (?P<tput>[^ ]+) MB/s"
                  r"(?: \(over last (?P<win>\d+)s\))?")
_TENT: Final = (r"Read: (?P<rb>[^ ]+) (?P<ru>[KMGT]?B) \((?P<rr>[^ ]+) reqs, (?P<rf>[^ ]+) fails\)"
                r" \| Write: (?P<wb>[^ ]+) (?P<wu>[KMGT]?B) \((?P<wr>[^ ]+) reqs, "
                r"(?P<wf>[^ ]+) fails\)")
_TID: Final = r"\b[IWEF]\d{4}(?:\d{4})? \d\d:\d\d:\d\d\.\d+\s+(?P<tid>\d+)\s"
_LABELS: Final = {"window": "over last (s)", "count": "Latency Distribution count",
                  "rb": "Read size", "rr": "Read reqs", "rf": "Read fails", "wb": "Write size",
                  "wr": "Write reqs", "wf": "Write fails"}
_DIST_ITEM: Final = (r"^\s*(?:(?P<lo>\d+)-(?P<hi>\d+)|>(?P<over>\d+))\s*(?:μs|µs|us)\s*:\s*"
                     r"(?P<pct>[^%]*)%\s*$")

_SLICE: Final = re.compile(r"Process failed for slice \((?P<fields>[^)]*)\): (?P<status>.+?)\s*$")
_SLICE_FIELD: Final = re.compile(r"(?P<k>\w+): (?P<v>[^,]+)")
_FLUSH: Final = re.compile(r"WR flush error \(peer_nic: (?P<peer>[^)]*)\)")
RETRY_EXCEEDED: Final = "transport retry counter exceeded"
# RDMA transport health (worker_pool.cpp/.h). Old TE: "Too many errors found in local RNIC
# <nic>, mark it inactive", "Failed to establish peer endpoints in local RNIC <nic>, mark it
# inactive", "Cannot make connection for endpoint: <peer>, mark it inactive"; since PR 2155:
# "All rails failed for context <dev> for N consecutive attempts, marking inactive", "Rail
# paused: peer=<peer> error_count=N pause_ms=M", "Cannot make connection for endpoint: <peer>,
# <what it does>", "Cannot redispatch slice because all peer rails are paused for target T,
# selected peer=<peer>, retry_cnt=N", "Context <dev> is now inactive due to fatal event: E".
_NIC_INACTIVE: Final = re.compile(
    r"(?:Too many errors found|Failed to establish peer endpoints) in local RNIC (?P<nic>[^\s,]+)"
    r"|All rails failed for context (?P<ctx>\S+) for (?P<n>\d+) consecutive attempts"
    r"|Worker: Context (?P<dev>\S+) is now inactive(?: due to (?P<why>.*))?")
_RAIL_PAUSED: Final = re.compile(r"Rail paused: peer=(?P<peer>\S+) error_count=(?P<n>\d+)"
                                 r"(?: pause_ms=(?P<ms>\d+))?")
_CONNECT: Final = re.compile(r"Cannot make connection for endpoint: (?P<peer>[^\s,]+)"
                             r"(?:, (?P<then>.*))?")
_NO_REDISPATCH: Final = re.compile(
    r"Cannot redispatch slice because all peer rails are paused for target (?P<target>\S+?),"
    r" selected peer=(?P<peer>[^\s,]+)")
# Mooncake Store client (client.cpp 2025, client_service.cpp 2026, transfer_task.cpp); ErrorCode
# prints as its name (types.cpp) or, in "with error:", as its number (-800 is TRANSFER_FAIL).
_STORE_KEY: Final = re.compile(
    r"Transfer failed for key:? (?P<key>[^\s:]+?):?(?: replica:[^:]*)?"
    r"(?: with error:? ?(?P<err1>\S+)|: (?P<err2>\S+)(?: \((?P<ctx>[^)]*)\))?)\s*$")
_STORE_CODE: Final = re.compile(r"Transfer failed, error code is (?P<err>\S+)")
_STORE_READ: Final = re.compile(r"transfer_read(?:_range)?_failed key=(?P<key>\S+)")
_STORE_TIMEOUT: Final = re.compile(r"Failed to complete transfers after (?P<n>\d+) "
                                   r"(?P<unit>seconds|milliseconds) for batch (?P<batch>\S+)")
# The Python binding's synchronous transfers (mooncake-integration/transfer_engine/
# transfer_engine_py.cpp), used by the SGLang and vLLM Mooncake connectors.
_SYNC_TIMEOUT: Final = re.compile(r"Sync (?P<what>batch data|data) transfer timeout after "
                                  r"(?P<ns>\d+)ns")
STORE_ERROR_NAMES: Final = {"-800": "TRANSFER_FAIL"}  # types.h: TRANSFER_FAIL = -800
FAILURE_MARKERS: Final = (
    "Too many errors found in local RNIC", "Failed to establish peer endpoints in local RNIC",
    "All rails failed for context", "Rail paused: peer=", "Cannot make connection for endpoint",
    "Cannot redispatch slice", "Transfer failed for key", "Transfer failed, error code is",
    "transfer_read_failed key=", "transfer_read_range_failed key=",
    "Failed to complete transfers after", "transfer timeout after", RETRY_EXCEEDED,
)
# Routed by regex: "is now inactive" alone is too common a phrase.
FAILURE_ROUTE: Final = r"|Worker: Context \S+ is now inactive"
# (pattern, detail) of lines saying KV goes over TCP.
_TCP: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"MC_FORCE_TCP is set"), "MC_FORCE_TCP is set: the transfer engine uses TCP only"),
    (re.compile(r"type=tcp\b"), "the transfer engine installed the TCP transport"),
    (re.compile(r"Found 0 HCAs"), "topology discovery found no RDMA HCA: the transfer engine "
                                  "falls back to TCP"),
    (re.compile(r"TCP host transport"), "the transfer engine uses the TCP host transport"),
    (re.compile(r"transport=\"tcp\""), "a transfer metric reports transport=\"tcp\""),
)
TCP_MARKERS: Final = ("MC_FORCE_TCP is set", "type=tcp", "Found 0 HCAs", "TCP host transport",
                      'transport="tcp"')

METRIC_SPECS: Final = (
    SignalSpec("throughput_bytes_per_s", S.KV_TRANSFER_THROUGHPUT_LOG),
    SignalSpec("latency_count", S.KV_TRANSFER_S, kind=S.HCOUNT, per_interval=True),
    SignalSpec("tent_transfers", S.KV_TRANSFERS_TOTAL, kind=S.COUNTER),
    SignalSpec("tent_failures", S.KV_TRANSFER_FAILURES_TOTAL, kind=S.COUNTER),
)


def parse_metrics(lines: Sequence[str] | pa.Array) -> pd.DataFrame:
    """One row per TE stats, old TE throughput or TENT summary line.

    Columns: ``format`` (te-stats | te-throughput | tent), ``tid`` (glog thread id or ''),
    ``throughput_bytes_per_s`` (MB is MiB), ``window_s``, ``latency_count`` and one column per
    latency bucket (``le`` in seconds as float column names, cumulative within the report, +Inf =
    count), TENT cumulative ``read_bytes``/``read_reqs``/``read_fails``/``write_*`` plus
    ``tent_transfers`` (requests minus failures) and ``tent_failures``.
    """
    arr = as_lines(lines)
    n = len(arr)
    stats, old, tent = extract(arr, _TE_STATS), extract(arr, _TE_OLD), extract(arr, _TENT)
    is_stats, is_old, is_tent = matched(stats), matched(old), matched(tent)
    is_old &= ~is_stats
    is_tent &= ~(is_stats | is_old)
    ok = is_stats | is_old | is_tent
    raw = {
        "Throughput": pc.if_else(pa.array(is_stats), group(stats, "tput"), group(old, "tput")),
        "window": pc.if_else(pa.array(is_stats), group(stats, "win"), group(old, "win")),
        "count": group(stats, "count"),
    }
    for key in ("rb", "rr", "rf", "wb", "wr", "wf"):
        raw[key] = group(tent, key)
    values: dict[str, np.ndarray] = {}
    bad: dict[str, np.ndarray] = {}
    for key, value in raw.items():
        values[key], bad[key] = numeric(value)
    buckets, dist_errors = latency_buckets(group(stats, "dist"), values["count"])
    read_scale = _units(group(tent, "ru"))
    write_scale = _units(group(tent, "wu"))
    errors = first_bad(list(raw), raw, bad, n, _LABELS)
    errors = [e if e is not None else d for e, d in zip(errors, dist_errors, strict=True)]
    tid = np.asarray(group(extract(arr, _TID), "tid").to_numpy(zero_copy_only=False), dtype=object)
    frame = pd.DataFrame({
        "row": np.arange(n),
        "error": errors,
        "format": np.where(is_stats, "te-stats", np.where(is_old, "te-throughput", "tent")),
        "tid": tid,
        "throughput_bytes_per_s": values["Throughput"] * MIB,
        "window_s": values["window"],
        "latency_count": values["count"],
        "read_bytes": values["rb"] * read_scale,
        "read_reqs": values["rr"],
        "read_fails": values["rf"],
        "write_bytes": values["wb"] * write_scale,
        "write_reqs": values["wr"],
        "write_fails": values["wf"],
    })
    frame["tent_transfers"] = (frame["read_reqs"] - frame["read_fails"]
                               + frame["write_reqs"] - frame["write_fails"])
    frame["tent_failures"] = frame["read_fails"] + frame["write_fails"]
    frame = pd.concat([frame, buckets], axis=1)
    return frame[ok].reset_index(drop=True)


def latency_buckets(dist: pa.Array | Sequence[str],
                    count: np.ndarray) -> tuple[pd.DataFrame, list[str | None]]:
    """Cumulative bucket counts per report from ``lo-hiμs:p%`` entries and the report's count.

    Columns are the bucket bounds in seconds (the TE's edges plus any other seen, and +Inf),
    values ``count × (share of entries up to that bound)``; entries the TE dropped (< 0.1 %) make
    the finite buckets slightly low, while +Inf is the exact count. Rows without a count are NaN.
    Also returns, per row, a message for a malformed percentage.
    """
    dist = as_lines(dist)
    count = np.asarray(count, dtype=float)
    n = len(dist)
    items = pc.split_pattern(dist, ",")
    parents = np.asarray(pc.list_parent_indices(items).to_numpy(zero_copy_only=False))
    flat = pc.list_flatten(items)
    m = pc.extract_regex(flat, _DIST_ITEM)
    ok = matched(m)
    hi, _ = numeric(group(m, "hi"))
    over, _ = numeric(group(m, "over"))
    pct, pct_bad = numeric(group(m, "pct"))
    upper_s = np.where(np.isnan(over), hi / US_PER_S, np.inf)  # divide: 20 µs is exactly 2e-05
    edges = np.unique(np.concatenate([np.array(LATENCY_EDGES_US, dtype=float) / US_PER_S,
                                      upper_s[ok & ~np.isnan(upper_s)], [np.inf]]))
    use = ok & ~np.isnan(upper_s) & ~np.isnan(pct)
    wide = np.zeros((n, len(edges)))
    rows = parents[use]
    np.add.at(wide, (rows, np.searchsorted(edges, upper_s[use])), pct[use] / 100.0 * count[rows])
    cumulative = np.cumsum(wide, axis=1)
    cumulative[:, -1] = count
    cumulative[np.isnan(count)] = np.nan
    errors: list[str | None] = [None] * n
    for j in np.flatnonzero(ok & pct_bad):  # rare: malformed entries only
        row = int(parents[j])
        errors[row] = errors[row] or f"latency share {flat[int(j)].as_py()!r} is not a number"
    return pd.DataFrame(cumulative, columns=[float(e) for e in edges]), errors


def _units(unit: pa.Array) -> np.ndarray:
    names = np.asarray(unit.to_numpy(zero_copy_only=False), dtype=object)
    return np.array([TENT_UNITS.get(str(u), np.nan) for u in names], dtype=float)


def parse_events(lines: Sequence[str] | pa.Array) -> pd.DataFrame:
    """Slice failures (and retry-exceeded), WR flush errors, RNIC/rail/endpoint failures, Store
    transfer failures and timeouts, and TCP-transport lines.

    A ``transport retry counter exceeded`` slice failure gives two rows: EV_RDMA_SLICE_FAILED
    and EV_RDMA_RETRY_EXCEEDED, with the same detail.
    """
    out = EventRows(request_ids=False)
    add = out.add

    for i, line in enumerate(as_lines(lines).to_pylist()):  # failures: per-line Python is fine
        line = line or ""
        if hit := _SLICE.search(line):
            fields = {f.group("k"): f.group("v").strip()
                      for f in _SLICE_FIELD.finditer(hit.group("fields"))}
            status = hit.group("status")
            retry = fields.get("retry_cnt", "?")
            if "max_retry_cnt" in fields:
                retry = f"{retry}/{fields['max_retry_cnt']}"
            where = ", ".join(f"{k} {fields[k]}" for k in ("local_nic", "peer_nic", "opcode")
                              if k in fields)
            text = f"{status} ({where}, retry_cnt {retry})" if where else status
            detail = S.event_detail(text, nic=fields.get("local_nic"),
                                    peer=fields.get("peer_nic"))
            add(i, S.EV_RDMA_SLICE_FAILED, detail)
            if RETRY_EXCEEDED in status.lower():
                add(i, S.EV_RDMA_RETRY_EXCEEDED, detail)
        elif hit := _FLUSH.search(line):
            add(i, S.EV_RDMA_SLICE_FAILED,
                S.event_detail(f"WR flush error (peer_nic {hit.group('peer')})",
                               peer=hit.group("peer")))
        elif failure := _failure_event(line):
            for event, detail in failure:
                add(i, event, detail)
        else:
            for pattern, detail in _TCP:
                if pattern.search(line):
                    add(i, S.EV_TRANSPORT_TCP, detail)
                    break
    return out.frame()


def _failure_event(line: str) -> list[tuple[str, str]]:
    """(event, detail) rows for an RDMA-transport or Store failure line; empty if it is none."""
    if hit := _NIC_INACTIVE.search(line):
        nic = hit.group("nic") or hit.group("ctx") or hit.group("dev")
        if hit.group("nic"):
            text = f"local RNIC {nic} marked inactive after repeated errors"
        elif hit.group("ctx"):
            text = (f"local RNIC {nic} marked inactive: all rails failed for {hit.group('n')} "
                    f"consecutive attempts")
        else:
            why = hit.group("why")
            text = f"local RNIC {nic} is now inactive" + (f" ({why.strip()})" if why else "")
        return [(S.EV_RDMA_NIC_INACTIVE, S.event_detail(text, nic=_device(nic)))]
    if hit := _RAIL_PAUSED.search(line):
        ms = f", paused {hit.group('ms')} ms" if hit.group("ms") else ""
        text = f"rail to peer NIC {hit.group('peer')} paused after {hit.group('n')} errors{ms}"
        return [(S.EV_RDMA_RAIL_PAUSED, S.event_detail(text, peer=hit.group("peer")))]
    if hit := _CONNECT.search(line):
        then = f" ({hit.group('then').strip()})" if hit.group("then") else ""
        text = f"cannot connect to peer endpoint {hit.group('peer')}{then}"
        return [(S.EV_RDMA_CONNECT_FAILED, S.event_detail(text, peer=hit.group("peer")))]
    if hit := _NO_REDISPATCH.search(line):
        text = (f"slice failed: all peer rails paused (target {hit.group('target')}, peer "
                f"{hit.group('peer')})")
        return [(S.EV_RDMA_SLICE_FAILED, S.event_detail(text, peer=hit.group("peer")))]
    if hit := _STORE_KEY.search(line):
        err = hit.group("err1") or hit.group("err2") or "?"
        err = STORE_ERROR_NAMES.get(err, err)
        ctx = f" ({hit.group('ctx')})" if hit.group("ctx") else ""
        text = f"Mooncake Store transfer failed for key {hit.group('key')}: {err}{ctx}"
        return [(S.EV_KV_TRANSFER_FAILED, S.event_detail(text, key=hit.group("key")))]
    if hit := _STORE_CODE.search(line):
        err = STORE_ERROR_NAMES.get(hit.group("err"), hit.group("err"))
        return [(S.EV_KV_TRANSFER_FAILED, f"Mooncake Store transfer failed: {err}")]
    if hit := _STORE_READ.search(line):
        return [(S.EV_KV_TRANSFER_FAILED,
                 S.event_detail(f"Mooncake Store read failed for key {hit.group('key')}",
                                key=hit.group("key")))]
    if hit := _STORE_TIMEOUT.search(line):
        unit = "s" if hit.group("unit") == "seconds" else "ms"
        text = (f"Mooncake Store transfer batch {hit.group('batch')} not complete after "
                f"{hit.group('n')} {unit}: TRANSFER_FAIL")
        return [(S.EV_KV_TRANSFER_TIMEOUT, text)]
    if hit := _SYNC_TIMEOUT.search(line):
        text = (f"synchronous {hit.group('what')} transfer timed out after "
                f"{int(hit.group('ns')) / 1e9:.1f} s")
        return [(S.EV_KV_TRANSFER_TIMEOUT, text)]
    if RETRY_EXCEEDED in line.lower():
        return [(S.EV_RDMA_RETRY_EXCEEDED, "transport retry counter exceeded")]
    return []


def _device(nic: str) -> str:
    """``mlx5_1`` from an RNIC path or name (``10.0.0.1:15000@mlx5_1``, ``mlx5_1``)."""
    return nic.rsplit("@", 1)[-1]


def assemble(frames: Mapping[str, pd.DataFrame]) -> FamilyOutput:
    """Instance signals and events from the parsed, timestamped Mooncake lines."""
    metrics = None
    events = None
    notes: list[str] = []
    used = 0
    frame = frames.get("mooncake-metrics")
    if frame is not None and len(frame):
        used += len(frame)
        frame = frame.assign(sub=frame["tid"].astype(str))
        bounds: list[float] = sorted(float(c) for c in frame.columns if isinstance(c, float))
        renamed = {b: f"le_{i}" for i, b in enumerate(bounds)}
        frame = frame.rename(columns=renamed)
        bucket_specs = tuple(SignalSpec(renamed[b], S.KV_TRANSFER_S, kind=S.BUCKET,
                                        per_interval=True, le=b) for b in bounds)
        metrics = combine_subseries(frame, METRIC_SPECS + bucket_specs)
        if frame["sub"].nunique() > 1:
            notes.append(f"Mooncake: {frame['sub'].nunique()} transfer engines (glog thread ids) "
                         f"combined (throughput and counts summed)")
        if (frame["format"] == "te-stats").any():
            notes.append("Mooncake: KV transfer latency histogram rebuilt from the percentage "
                         "distribution × count of each report (entries under 0.1 % are not "
                         "printed, so finite buckets can be slightly low)")
    ev = frames.get("mooncake-event")
    if ev is not None and len(ev):
        used += int(ev["line"].nunique())
        events = ev[["ts", "event", "detail", "line"]]
    return FamilyOutput(metrics=metrics, events=events, notes=tuple(notes), lines_used=used)


LINE_KINDS: Final = (
    LineKind("mooncake-metrics", ENGINE, "Mooncake metrics",
             r"Transfer Engine Stats|Transfer Engine Throughput|reqs, \S+ fails\) \| Write: ",
             parse_metrics, high_volume=True),
    LineKind("mooncake-event", ENGINE, "Mooncake failure/transport",
             literal_route(("Process failed for slice", "WR flush error", *FAILURE_MARKERS,
                            *TCP_MARKERS)) + FAILURE_ROUTE,
             parse_events),
)
