"""Engine logs as a capture delivers them: per instance, per pod, or merged by a log tool.

The engine writers (``vllm_log``, ``sglang_log``) yield each instance's lines with their times;
this module writes them in the layout ``SimConfig.delivery.logs`` asks for. A merged file
(``logs/cluster.log``) holds every instance's lines interleaved in time order (one stable numpy
sort over all lines), each line with the tool's prefix:

=========================  ========================================================================
logs                       one line
=========================  ========================================================================
kubectl-prefix             ``[pod/vllm-decode-6d8f9c7b5-x2k4q/vllm] msg`` (``kubectl logs --prefix``,
                           https://kubernetes.io/docs/reference/kubectl/generated/kubectl_logs/)
kubectl-prefix-timestamps  ``[pod/NAME/CONTAINER] 2025-06-02T10:00:00.123456000Z msg``
                           (``--prefix --timestamps``: the runtime's RFC 3339 stamp after the prefix)
stern                      ``POD CONTAINER msg`` (stern's default template without colour)
compose                    ``decode-1   | msg`` (``docker compose logs``: the service-replica name
                           left-aligned to the longest one, then `` | ``)
journald                   ``2025-06-02T10:00:00+0000 h100-node-3 vllm-decode-0[4242]: msg``
                           (``journalctl -o short-iso``; the unit sets ``SyslogIdentifier`` to its
                           name, so the identifier is the unit without ``.service``)
loki-jsonl                 ``{"labels":{...},"line":"msg","timestamp":"..."}`` (``logcli query
                           --output=jsonl``: Go's json.Marshal of timestamp, line, labels, keys
                           sorted; labels as promtail's Kubernetes scrape config sets them:
                           ``container``, ``job`` (namespace/container), ``namespace``,
                           ``node_name``, ``pod``)
fluent-bit-jsonl           ``{"date":1748858400.123456,"time":"...","stream":"stderr","log":"msg",
                           "kubernetes":{"pod_name":..,"namespace_name":..,"host":..,
                           "container_name":..}}`` (Fluent Bit's Kubernetes filter,
                           https://docs.fluentbit.io/manual/pipeline/filters/kubernetes, written by
                           the file output with ``format json_lines``: ``date`` is its default
                           ``json_date_key``)
vector-jsonl               ``{"file":..,"kubernetes":{"container_name":..,"pod_name":..,
                           "pod_namespace":..,"pod_node_name":..},"message":"msg",
                           "source_type":"kubernetes_logs","stream":"stderr","timestamp":".."}``
                           (Vector's ``kubernetes_logs`` source, https://vector.dev/docs/reference/
                           configuration/sources/kubernetes_logs/, JSON encoding, keys sorted)
=========================  ========================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.sim.delivery import K8S_NAMESPACE as NS
from pdprobe.sim.delivery import MERGED_LOG_NAME, InstanceNames
from pdprobe.sim.writers import logfmt as L
from pdprobe.sim.writers.common import open_out, out_name

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa

    from pdprobe.sim.cluster import InstanceSpec
    from pdprobe.sim.delivery import Delivery

# One instance's log: its lines from several sources, each with its times (unsorted).
Stream = tuple["InstanceSpec", list["npt.NDArray[np.float64]"], list["pa.Array"]]

WRITE_CHUNK_LINES: Final = 200_000  # lines joined per write: bounds memory on long captures
PID_SEED: Final = 61  # RNG stream of the journald PIDs
STREAM_NAME: Final = "stderr"  # vLLM and SGLang log to stderr (Python logging's default)


def write_logs(streams: Iterable[Stream], out_dir: Path, compress: bool,
               names: Sequence[InstanceNames], delivery: Delivery, seed: int) -> list[Path]:
    """Write the instances' logs under ``out_dir/logs`` in ``delivery.logs``' layout."""
    log_dir = out_dir / "logs"
    log_dir.mkdir(exist_ok=True)
    if delivery.logs in ("per-instance", "per-pod"):
        paths = []
        for spec, times, lines in streams:
            nm = names[spec.index]
            stem = nm.pod if delivery.logs == "per-pod" else f"{nm.host}_{nm.port}"
            paths.append(L.write_lines(log_dir / f"{stem}.log", compress, times, lines))
        return paths
    return [write_merged(streams, log_dir / MERGED_LOG_NAME, compress, names, delivery.logs,
                         seed)]


def write_merged(streams: Iterable[Stream], path: Path, compress: bool,
                 names: Sequence[InstanceNames], tool: str, seed: int) -> Path:
    """One file of every instance's lines, prefixed as ``tool`` prints them, in time order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pids = np.random.default_rng([seed, PID_SEED]).integers(200, 60000, len(names))
    width = max((len(nm.pod) for nm in names), default=0)
    all_t: list[npt.NDArray[np.float64]] = []
    all_lines: list[pa.Array] = []
    for spec, times, lines in streams:
        if not times:
            continue
        t = np.concatenate(times)
        if t.size == 0:
            continue
        text = pa.concat_arrays([a.cast(pa.string()) for a in lines])
        all_t.append(t)
        all_lines.append(prefixed(tool, names[spec.index], t, text, width, int(pids[spec.index])))
    with open_out(path, compress) as fh:
        if all_t:
            t = np.concatenate(all_t)
            ordered = pa.concat_arrays(all_lines).take(pa.array(np.argsort(t, kind="stable")))
            for start in range(0, len(ordered), WRITE_CHUNK_LINES):
                chunk = ordered.slice(start, WRITE_CHUNK_LINES)
                joined = pc.binary_join(
                    pa.ListArray.from_arrays(pa.array([0, len(chunk)], pa.int32()), chunk), "\n")
                fh.write(str(joined[0].as_py()) + "\n")
    return out_name(path, compress)


def prefixed(tool: str, nm: InstanceNames, t: npt.NDArray[np.float64], msg: pa.Array,
             width: int, pid: int) -> pa.Array:
    """``msg`` as ``tool`` prints a line of instance ``nm`` logged at Unix time ``t``."""
    n = len(msg)
    if tool == "kubectl-prefix":
        return L.concat([f"[pod/{nm.pod}/{nm.container}] ", msg], n)
    if tool == "kubectl-prefix-timestamps":
        return L.concat([f"[pod/{nm.pod}/{nm.container}] ", rfc3339_nano(t), " ", msg], n)
    if tool == "stern":
        return L.concat([f"{nm.pod} {nm.container} ", msg], n)
    if tool == "compose":
        return L.concat([nm.pod.ljust(width) + " | ", msg], n)
    if tool == "journald":
        ident = nm.unit.removesuffix(".service")
        return L.concat([short_iso(t), f" {nm.node or nm.host} {ident}[{pid}]: ", msg], n)
    body = json_escape(msg)
    if tool == "loki-jsonl":
        labels = (f'{{"container":"{nm.container}","job":"{NS}/{nm.container}",'
                  f'"namespace":"{NS}","node_name":"{nm.node}","pod":"{nm.pod}"}}')
        return L.concat([f'{{"labels":{labels},"line":"', body, '","timestamp":"',
                         rfc3339_nano(t), '"}'], n)
    if tool == "fluent-bit-jsonl":
        meta = (f'{{"pod_name":"{nm.pod}","namespace_name":"{NS}","host":"{nm.node}",'
                f'"container_name":"{nm.container}"}}')
        return L.concat(['{"date":', L.fixed(t, 6), ',"time":"', rfc3339_nano(t),
                         f'","stream":"{STREAM_NAME}","log":"', body, f'","kubernetes":{meta}}}'], n)
    if tool == "vector-jsonl":
        file = f"/var/log/pods/{NS}_{nm.pod}/{nm.container}/0.log"
        meta = (f'{{"container_name":"{nm.container}","pod_name":"{nm.pod}",'
                f'"pod_namespace":"{NS}","pod_node_name":"{nm.node}"}}')
        return L.concat([f'{{"file":"{file}","kubernetes":{meta},"message":"', body,
                         f'","source_type":"kubernetes_logs","stream":"{STREAM_NAME}",'
                         '"timestamp":"', rfc3339_nano(t), '"}'], n)
    raise ValueError(f"unknown log tool {tool!r}")


def rfc3339_nano(t: npt.NDArray[np.float64]) -> pa.Array:
    """``2025-06-02T10:00:00.123456000Z`` (the container runtime's stamp, nanoseconds)."""
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(L.iso_us(t), "000Z", "")


def short_iso(t: npt.NDArray[np.float64]) -> pa.Array:
    """``2025-06-02T10:00:00+0000`` (journalctl -o short-iso, UTC)."""
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(pc.utf8_slice_codeunits(L.iso_us(t), 0, 19), "+0000", "")


def json_escape(text: pa.Array) -> pa.Array:
    """The body of a JSON string: backslashes and quotes escaped (log lines hold no controls)."""
    import pyarrow.compute as pc

    return pc.replace_substring(pc.replace_substring(text, "\\", "\\\\"), '"', '\\"')
