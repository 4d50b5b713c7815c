"""vLLM 0.33 engine logs, one file per instance (docs/inputs/logs.md, vLLM).

Every 10 s (``VLLM_LOG_STATS_INTERVAL``) the APIServer prints the stats line; an interval with
no prompt or generation throughput (and none in the previous one) is logged at DEBUG and so
absent. ``KV Transfer metrics:`` follows on the side that observes transfers (Mooncake pushes:
prefill; NIXL pulls: decode). The Mooncake transfer engine's glog lines (topology at start-up,
slice failures under RDMA loss) are interleaved, as they share the process's stderr.

The prefix-cache hit rate is a sliding window in vLLM (last 1000 requests); here it is the
ratio over the last ``HIT_RATE_WINDOW_S`` seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.sim.config import LOG_INTERVAL_S
from pdprobe.sim.engine import F, SimResult
from pdprobe.sim.writers import logfmt as L
from pdprobe.sim.writers.merged_log import Stream
from pdprobe.sim.writers.mooncake_lines import mooncake_lines

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa

HIT_RATE_WINDOW_S: Final = 60.0
STATS_LINENO: Final = 259  # loggers.py line of the stats log call in 0.33 (as in real logs)
KV_METRICS_LINENO: Final = 98  # kv_connector/v1/metrics.py
MIB: Final = float(2**20)


def vllm_log_streams(result: SimResult) -> Iterator[Stream]:
    """Per instance, its log lines (stats, KV transfer, Mooncake) with their Unix times."""
    cfg = result.config
    idx = np.flatnonzero(np.isclose(np.mod(result.tick_s, LOG_INTERVAL_S), 0.0))
    t_s = result.tick_s[idx]
    rng = np.random.default_rng([cfg.seed, 31])
    pids = rng.integers(200, 60000, len(result.layout.instances))
    window = max(1, round(HIT_RATE_WINDOW_S / LOG_INTERVAL_S))
    for spec in result.layout.instances:
        i = spec.index
        pid = int(pids[i])
        alive = result.alive[idx, i]
        X = result.inst[idx, i, :]
        times: list[npt.NDArray[np.float64]] = []
        lines: list[pa.Array] = []
        st, sl = _stats_lines(X, t_s, alive, cfg.start_ts, pid, spec.role, window)
        times.append(st)
        lines.append(sl)
        kt, kl = _kv_lines(result, i, spec.role, t_s, cfg.start_ts, pid)
        times.append(kt)
        lines.append(kl)
        mt, ml = mooncake_lines(result, i, pid + 7)
        times.append(mt)
        lines.append(ml)
        yield spec, times, lines


def _prefix(unix_ts: npt.NDArray[np.float64], pid: int, level: str, where: str,
            process: str = "APIServer") -> list[pa.Array | str]:
    return [f"({process} pid={pid}) {level} ", L.vllm_time(unix_ts), f" [{where}] "]


def _stats_lines(X: npt.NDArray[np.float64], t_s: npt.NDArray[np.float64],
                 alive: npt.NDArray[np.bool_], start_ts: float, pid: int, role: str,
                 window: int) -> tuple[npt.NDArray[np.float64], pa.Array]:
    import pyarrow as pa
    import pyarrow.compute as pc

    def delta(field: str, lag: int = 1) -> npt.NDArray[np.float64]:
        col = X[:, F[field]]
        return col - np.concatenate([np.zeros(lag), col[:-lag]])[: col.size] if col.size else col

    prompt_tp = delta("prompt_computed") / LOG_INTERVAL_S
    gen_tp = delta("gen_total") / LOG_INTERVAL_S
    busy = (prompt_tp > 0) | (gen_tp > 0)
    prev_busy = np.concatenate([[False], busy[:-1]])
    show = alive & (busy | prev_busy) & (t_s > 0)
    n = int(show.sum())
    if n == 0:
        return np.zeros(0), pa.array([], pa.string())
    sel = np.flatnonzero(show)
    running = X[sel, F["running"]]
    deferred = X[sel, F["deferred"]]
    waiting = X[sel, F["waiting"]] + deferred
    usage = 100.0 * np.divide(X[sel, F["kv_used_tokens"]], X[sel, F["kv_capacity_tokens"]],
                              out=np.zeros(n), where=X[sel, F["kv_capacity_tokens"]] > 0)
    preempt = delta("preemptions")[sel]
    q = delta("prefix_queries", window)[sel]
    h = delta("prefix_hits", window)[sel]
    hit = 100.0 * np.divide(h, q, out=np.zeros(n), where=q > 0)
    eq = delta("ext_queries", window)[sel]
    eh = delta("ext_hits", window)[sel]
    ext = 100.0 * np.divide(eh, eq, out=np.zeros(n), where=eq > 0)
    ts = start_ts + t_s[sel]

    def optional(mask: npt.NDArray[np.bool_], text: pa.Array) -> pa.Array:
        return pc.if_else(pa.array(mask), text, pa.scalar(""))

    fetch_any = (X[sel, F["kv_fetch_in_progress"]] + X[sel, F["kv_fetch_completed"]]) > 0
    pieces: list[pa.Array | str] = [
        *_prefix(ts, pid, "INFO", f"loggers.py:{STATS_LINENO}"),
        "Engine 000: Avg prompt throughput: ", L.fixed(prompt_tp[sel], 1),
        " tokens/s, Avg generation throughput: ", L.fixed(gen_tp[sel], 1),
        " tokens/s, Running: ", L.ints(running), " reqs, Waiting: ", L.ints(waiting), " reqs",
        optional(deferred > 0, L.concat([", Deferred: ", L.ints(deferred), " reqs"], n)),
        optional((role == "decode") & fetch_any, L.concat([
            ", KV fetch: 0 waiting to start, ", L.ints(X[sel, F["kv_fetch_in_progress"]]),
            " in progress, ", L.ints(X[sel, F["kv_fetch_completed"]]), " completed waiting"], n)),
        optional(preempt > 0, L.concat([", Preemptions: ", L.ints(preempt)], n)),
        ", GPU KV cache usage: ", L.fixed(usage, 1), "%",
        optional(X[sel, F["prefix_queries"]] > 0,
                 L.concat([", Prefix cache hit rate: ", L.fixed(hit, 1), "%"], n)),
        optional(X[sel, F["ext_queries"]] > 0,
                 L.concat([", External prefix cache hit rate: ", L.fixed(ext, 1), "%"], n)),
    ]
    return ts, L.concat(pieces, n)


def _kv_lines(result: SimResult, inst: int, role: str, t_s: npt.NDArray[np.float64],
              start_ts: float, pid: int) -> tuple[npt.NDArray[np.float64], pa.Array]:
    """``KV Transfer metrics:`` per interval with transfers, on the observing side."""
    import pandas as pd
    import pyarrow as pa

    cfg = result.config
    side = "prefill" if cfg.kv_connector == "mooncake" else "decode"
    if role != side or t_s.size == 0:
        return np.zeros(0), pa.array([], pa.string())
    r = result.requests
    col = r["p_inst"] if side == "prefill" else r["d_inst"]
    ok = (col == inst) & np.isfinite(r["t_kv"])
    failed_t = np.array([e[0] for e in result.events if e[1] == inst and e[2] == "transfer_failed"])
    # the interval (t_s[k-1], t_s[k]] a transfer completes in is logged at t_s[k]
    k_ok = np.searchsorted(t_s, r["t_kv"][ok], side="left")
    k_fail = np.searchsorted(t_s, failed_t, side="left") if failed_t.size else np.zeros(0, int)
    frame = pd.DataFrame({
        "k": k_ok,
        "ms": (r["t_kv"][ok] - r["t_xfer"][ok]) * 1e3,
        "mb": r["kv_bytes"][ok] / MIB,
        "desc": np.ceil((r["prompt"][ok] - r["cached_d"][ok]) / 16.0),
    })
    frame = frame[frame["k"] < t_s.size]
    if frame.empty and not k_fail.size:
        return np.zeros(0), pa.array([], pa.string())
    g = frame.groupby("k")
    agg = pd.DataFrame({
        "n": g.size(),
        "avg_ms": g["ms"].mean(),
        "p90_ms": g["ms"].quantile(0.9),
        "avg_mb": g["mb"].mean(),
        "tot_mb": g["mb"].sum(),
        "tot_s": g["ms"].sum() / 1e3,
        "desc": g["desc"].mean(),
    })
    fails = pd.Series(np.bincount(k_fail[k_fail < t_s.size], minlength=t_s.size)) \
        if k_fail.size else pd.Series(np.zeros(t_s.size, dtype=int))
    keys = np.union1d(agg.index.to_numpy(), np.flatnonzero(fails.to_numpy() > 0))
    agg = agg.reindex(keys).fillna(0.0)
    n = len(agg)
    ts = start_ts + t_s[keys] + 0.001  # right after the stats line of the same interval
    thr = np.divide(agg["tot_mb"].to_numpy(), agg["tot_s"].to_numpy(), out=np.zeros(n),
                    where=agg["tot_s"].to_numpy() > 0)
    nfail = fails.to_numpy()[keys]
    pieces: list[pa.Array | str] = [
        *_prefix(ts, pid, "INFO", f"metrics.py:{KV_METRICS_LINENO}"),
        "KV Transfer metrics: Num successful transfers=", L.ints(agg["n"].to_numpy()),
        ", Avg xfer time (ms)=", L.fixed(agg["avg_ms"].to_numpy(), 3),
        ", P90 xfer time (ms)=", L.fixed(agg["p90_ms"].to_numpy(), 3),
    ]
    if cfg.kv_connector == "nixl":
        post = np.full(n, 0.05) * (agg["n"].to_numpy() > 0)  # descriptor posting: tens of us
        pieces += [", Avg post time (ms)=", L.fixed(post, 3), ", P90 post time (ms)=",
                   L.fixed(post * 1.5, 3)]
    pieces += [
        ", Avg MB per transfer=", L.fixed(agg["avg_mb"].to_numpy(), 3),
        ", Throughput (MB/s)=", L.fixed(thr, 3),
        ", Avg number of descriptors=", L.fixed(agg["desc"].to_numpy(), 1),
        ", Num failed transfers=", L.ints(nfail),
    ]
    if cfg.kv_connector == "nixl":
        pieces += [", Num KV expired reqs=0, Num notifs after expiry=0"]
    else:
        pieces += [", Num failed recvs=0, Num KV expired reqs=0"]
    return ts, L.concat(pieces, n)
