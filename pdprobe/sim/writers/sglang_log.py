"""SGLang 0.5.23 scheduler logs, one file per instance (docs/inputs/logs.md, SGLang).

Prefill servers print one ``Prefill batch`` line per forward pass (PD-prefill fields included);
decode servers print ``Decode batch`` every ``--decode-log-interval`` iterations, written here
once per 5 s snapshot (as with a large interval). Failed KV transfers print the prefill-side
WARNING and decode-side ERROR lines; the Mooncake transfer engine's glog lines are interleaved.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from pdprobe.sim.engine import PASS_COLUMNS, F, SimResult
from pdprobe.sim.writers import logfmt as L
from pdprobe.sim.writers.merged_log import Stream
from pdprobe.sim.writers.mooncake_lines import mooncake_lines

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa

PC = {name: i for i, name in enumerate(PASS_COLUMNS)}


def sglang_log_streams(result: SimResult) -> Iterator[Stream]:
    """Per instance, its scheduler, failure and Mooncake lines with their Unix times."""
    cfg = result.config
    rank = " TP0" if cfg.profile.gpus_per_instance > 1 else ""
    rng = np.random.default_rng([cfg.seed, 51])
    tids = rng.integers(1000, 60000, len(result.layout.instances))
    for spec in result.layout.instances:
        times: list[npt.NDArray[np.float64]] = []
        lines: list[pa.Array] = []
        if spec.role == "prefill":
            t, ln = _prefill_lines(result, spec.index, rank)
        else:
            t, ln = _decode_lines(result, spec.index, rank)
        times.append(t)
        lines.append(ln)
        ft, fl = _failure_lines(result, spec.index, spec.role, rank)
        times.append(ft)
        lines.append(fl)
        mt, ml = mooncake_lines(result, spec.index, int(tids[spec.index]))
        times.append(mt)
        lines.append(ml)
        yield spec, times, lines


def _head(unix_ts: npt.NDArray[np.float64], rank: str) -> list[pa.Array | str]:
    return ["[", L.sglang_time(unix_ts), f"{rank}] "]


def _prefill_lines(result: SimResult, inst: int, rank: str) -> tuple[npt.NDArray[np.float64], pa.Array]:
    import pyarrow as pa

    cfg = result.config
    passes = result.passes[result.passes[:, PC["instance"]] == inst] if result.passes.size else np.zeros((0, len(PASS_COLUMNS)))
    n = passes.shape[0]
    if n == 0:
        return np.zeros(0), pa.array([], pa.string())
    t = passes[:, PC["t"]]
    tokens = passes[:, PC["new_tokens"]]
    # input throughput: tokens since the previous prefill log over the time since it
    gap = np.diff(t, prepend=t[0] - 1.0)
    thr = np.divide(tokens, gap, out=np.zeros(n), where=gap > 0)
    cap = result.eff.prefill_kv_tokens
    ts = cfg.start_ts + t
    pieces: list[pa.Array | str] = [
        *_head(ts, rank),
        "Prefill batch, #new-seq: ", L.ints(passes[:, PC["seqs"]]),
        ", #new-token: ", L.ints(tokens),
        ", #cached-token: ", L.ints(passes[:, PC["cached_tokens"]]),
        ", token usage: ", L.fixed(passes[:, PC["kv_used"]] / cap, 2),
        ", #running-req: ", L.ints(passes[:, PC["seqs"]]),
        ", #queue-req: ", L.ints(passes[:, PC["queue"]]),
        ", #pending-token: ", L.ints(np.clip(passes[:, PC["pending_tokens"]], 0, None)),
        ", #bootstrap-req: ", L.ints(passes[:, PC["bootstrap"]]),
        ", #inflight-req: ", L.ints(passes[:, PC["inflight"]]),
        ", #optimistic-req: 0, cuda graph: False, input throughput (token/s): ", L.fixed(thr, 2),
    ]
    return ts, L.concat(pieces, n)


def _decode_lines(result: SimResult, inst: int, rank: str) -> tuple[npt.NDArray[np.float64], pa.Array]:
    import pyarrow as pa

    cfg = result.config
    X = result.inst[:, inst, :]
    t_s = result.tick_s
    gen = X[:, F["gen_total"]]
    dgen = np.diff(gen, prepend=0.0)
    dt = np.diff(t_s, prepend=t_s[0] - 5.0 if t_s.size else 0.0)
    show = result.alive[:, inst] & (X[:, F["running"]] > 0)
    sel = np.flatnonzero(show)
    n = sel.size
    if n == 0:
        return np.zeros(0), pa.array([], pa.string())
    cap = X[sel, F["kv_capacity_tokens"]]
    used = X[sel, F["kv_used_tokens"]]
    prealloc = np.clip(used - X[sel, F["context_tokens"]], 0, None)
    ts = cfg.start_ts + t_s[sel]
    pieces: list[pa.Array | str] = [
        *_head(ts, rank),
        "Decode batch, #running-req: ", L.ints(X[sel, F["running"]]),
        ", #token: ", L.ints(used),
        ", token usage: ", L.fixed(used / cap, 2),
        ", pre-allocated usage: ", L.fixed(prealloc / cap, 2),
        ", #prealloc-req: ", L.ints(X[sel, F["waiting"]]),
        ", #transfer-req: ", L.ints(X[sel, F["kv_fetch_in_progress"]]),
        ", #retracted-req: ", L.ints(X[sel, F["retracted"]]),
        ", cuda graph: True, gen throughput (token/s): ", L.fixed(dgen[sel] / dt[sel], 2),
        ", #queue-req: ", L.ints(X[sel, F["kv_fetch_completed"]] + X[sel, F["retracted"]]),
    ]
    return ts, L.concat(pieces, n)


def _failure_lines(result: SimResult, inst: int, role: str, rank: str,
                   ) -> tuple[npt.NDArray[np.float64], pa.Array]:
    import pyarrow as pa

    cfg = result.config
    ev = [e for e in result.events if e[1] == inst and e[2] == "transfer_failed"]
    if not ev:
        return np.zeros(0), pa.array([], pa.string())
    t = cfg.start_ts + np.array([e[0] for e in ev])
    rid = np.array([e[3] for e in ev], dtype=np.int64)
    n = t.size
    rids = pa.array([request_uuid(cfg.seed, int(r)) for r in rid])
    rooms = L.ints(bootstrap_room(cfg.seed, rid))
    if role == "prefill":
        pieces: list[pa.Array | str] = [
            *_head(t, rank), "Prefill transfer failed for request rank=0 req.rid='", rids,
            "' req.bootstrap_room=", rooms, " with exception KVTransferError(bootstrap_room=",
            rooms, "): KV transfer failed"]
    else:
        pieces = [
            *_head(t, rank), "Decode transfer failed for request rank=0 decode_req.req.rid='",
            rids, "' decode_req.req.bootstrap_room=", rooms,
            " with exception KVTransferError(bootstrap_room=", rooms, "): KV transfer failed"]
    return t, L.concat(pieces, n)


def request_uuid(seed: int, rid: int) -> str:
    """A stable 32-hex request id (SGLang's ``rid`` is a uuid4 hex)."""
    import hashlib

    return hashlib.blake2b(f"{seed}:{rid}".encode(), digest_size=16).hexdigest()


def bootstrap_room(seed: int, rid: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """A stable 63-bit bootstrap room per request."""
    mixed = (rid.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(seed & 0xFFFFFFFF)
    return (mixed >> np.uint64(1)).astype(np.int64)
