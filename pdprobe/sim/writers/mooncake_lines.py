"""Mooncake transfer-engine glog lines (docs/inputs/logs.md, Mooncake): start-up and slice failures.

At start-up the engine logs its topology discovery (``Found N HCAs.``; with no HCAs it falls
back to TCP) and, with RDMA, ``installTransport, type=rdma``. Under RDMA loss, slices that
exhaust their retries log ``Worker: Process failed for slice (...): transport retry counter
exceeded`` at ERROR on the sending (prefill) side. Used by both engines' logs when KV moves
through Mooncake (vLLM's MooncakeConnector, SGLang's default transfer backend).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.sim.engine import SimResult
from pdprobe.sim.writers import logfmt as L

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa

SLICE_BYTES: Final = 65536  # Mooncake's default slice size
SLICE_FAIL_LINENO: Final = 271  # rdma_transport/worker_pool.cpp, as in real logs
TOPOLOGY_LINENO: Final = 233
NIC_INACTIVE_LINENO: Final = 287  # worker_pool.cpp "Too many errors found in local RNIC"


def uses_mooncake(result: SimResult) -> bool:
    """True when the run's KV moves through Mooncake (SGLang, or vLLM with the Mooncake connector),
    so Mooncake transfer-engine log lines are written."""
    return result.config.engine == "sglang" or result.config.kv_connector == "mooncake"


def mooncake_lines(result: SimResult, inst: int, tid: int) -> tuple[npt.NDArray[np.float64], pa.Array]:
    """The Mooncake transfer-engine log lines of one instance: their times and texts (empty when
    Mooncake is not used)."""
    import pyarrow as pa

    if not uses_mooncake(result):
        return np.zeros(0), pa.array([], pa.string())
    cfg = result.config
    spec = result.layout.instances[inst]
    node = result.layout.nodes[spec.node]
    start = cfg.start_ts + spec.start_s
    hcas = 0 if result.eff.transport == "tcp" else node.devices
    boot = [
        f"Transfer Engine parseHostNameWithPort. server_name: {spec.host} port: {spec.port + 100}",
        "Auto-discovering topology...",
        f"Topology discovery complete. Found {hcas} HCAs.",
    ]
    if hcas:
        boot.append("installTransport, type=rdma")
    boot_t = (start + 0.2 + 0.013 * np.arange(len(boot))).astype(np.float64)
    boot_lines = L.concat(["I", L.glog_time(boot_t), f" {tid} transfer_engine_impl.cpp:{TOPOLOGY_LINENO}] ",
                           pa.array(boot)], len(boot))
    times = [boot_t]
    lines = [boot_lines]
    ev = [e for e in result.events if e[1] == inst and e[2] == "slice_failed"]
    if ev:
        rng = np.random.default_rng([cfg.seed, 41, inst])
        t = np.repeat(np.array([e[0] for e in ev]), [e[4] for e in ev])
        rid = np.repeat(np.array([e[3] for e in ev]), [e[4] for e in ev])
        n = t.size
        t = cfg.start_ts + t + rng.uniform(0.0, 0.05, n)
        dst_host = np.array([result.layout.instances[int(d)].host for d in result.requests["d_inst"][rid]])
        devices = max(1, node.devices)
        src_addr = 0x7F0000000000 + rng.integers(0, 2**36, n) * 64
        dst_addr = 0x7F0000000000 + rng.integers(0, 2**36, n) * 64
        line = L.concat([
            "E", L.glog_time(t), f" {tid + 1} worker_pool.cpp:{SLICE_FAIL_LINENO}] ",
            "Worker: Process failed for slice (opcode: 1, source_addr: ", _hex(src_addr),
            f", length: {SLICE_BYTES}, dest_addr: ", _hex(dst_addr), ", local_nic: mlx5_",
            L.ints(rng.integers(0, devices, n)), ", peer_nic: ", pa.array(dst_host), "@mlx5_",
            L.ints(rng.integers(0, devices, n)), ", dest_rkey: ", L.ints(rng.integers(1, 2**31, n)),
            ", retry_cnt: 7, max_retry_cnt: 7): transport retry counter exceeded",
        ], n)
        times.append(t)
        lines.append(line)
    bad = [e for e in result.events if e[1] == inst and e[2] == "nic_failed"]
    if bad:
        # kv-transfer-failures: the transfer engine gives up on the sending NIC (old TE wording,
        # kvcache-ai/Mooncake rdma_transport/worker_pool.cpp; one line per failed transfer)
        t = cfg.start_ts + np.array([e[0] for e in bad]) + 0.002
        nic = L.ints(np.array([e[4] for e in bad], dtype=np.int64))
        times.append(t)
        lines.append(L.concat([
            "W", L.glog_time(t), f" {tid + 1} worker_pool.cpp:{NIC_INACTIVE_LINENO}] ",
            f"Too many errors found in local RNIC {spec.host}:{spec.port + 100}@mlx5_", nic,
            ", mark it inactive"], t.size))
    return np.concatenate(times), pa.concat_arrays(lines)


def _hex(values: npt.NDArray[np.int64]) -> pa.Array:
    import pyarrow as pa

    return pa.array(np.char.add("0x", np.char.lower(np.char.mod("%x", values))))
