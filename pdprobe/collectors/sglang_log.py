"""SGLang log lines: ``Prefill batch`` / ``Decode batch`` stats and KV-transfer failures.

Formats (docs/inputs/logs.md, SGLang): 0.4.6, 0.4.9, 0.5.3, 0.5.10 and
0.5.23 (``. `` or ``, `` after ``batch``, optional `` [iter]``, trailing ``, `` or space, the 0.4.9
``timestamp:`` field, hybrid SWA/mamba/hisparse usage, speculative-decoding and PD fields). The
``key: value`` pairs are parsed generically and mapped afterwards, so new keys are tolerated.
The line is found anywhere, whatever the prefix (``[date DP15 TP15]``, ``.mmm`` ms, custom
logging configs, Ray ``(Name pid=N, ip=...)``); DP/TP/PP ranks are read from the prefix.
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
    MIN_EVIDENCE_LINES,
    ROLE_FROM_ENGINE_FIELDS,
    EventRows,
    FamilyOutput,
    LineKind,
    SignalSpec,
    as_lines,
    combine_subseries,
    extract,
    group,
    literal_route,
    numeric,
    parse_key_values,
)
from pdprobe.dataset import ROLE_FROM_EVIDENCE
from pdprobe.signals import Role

ENGINE: Final = "sglang"

# After "Prefill batch"/"Decode batch": optional " [iter]" (SGLANG_LOG_FORWARD_ITERS), then
# ". " (<= 0.5.3) or ", " (>= 0.5.10) before the key: value pairs.
_BATCH_HEAD: Final = r"^(?: \[\d+\])?[.,] "
_BATCH_ITER: Final = r"^ \[(?P<n>\d+)\]"
_RANKS: Final = {"dp": "DP", "tp": "TP", "pp": "PP"}
_RAY: Final = r"\((?P<ray>[A-Za-z_][\w.-]* pid=\d+[^)]*)\)"
# Numeric keys of every version; other keys (cuda graph, timestamp, ...) are tolerated.
BATCH_KEYS: Final = (
    "#new-seq", "#new-token", "#cached-token", "#token", "token usage",
    "#full token", "full token usage", "#swa token", "swa token usage", "mamba num",
    "mamba usage", "#gpu token", "gpu token usage", "#cpu token", "cpu token usage",
    "#running-req", "#queue-req", "#pending-token", "#replay-token",
    "#bootstrap-req", "#inflight-req", "#optimistic-req", "#unbootstrapped-req",
    "#transferring-req", "#prealloc-req", "#transfer-req", "#host-receive-req",
    "#retracted-req", "pre-allocated usage", "accept len", "accept rate", "cap len",
    "block accept len", "waiting-image-req", "input throughput (token/s)",
    "gen throughput (token/s)",
)
# Fields printed only by a PD-mode engine of that role.
PREFILL_PD_KEYS: Final = ("#bootstrap-req", "#inflight-req", "#unbootstrapped-req",
                          "#transferring-req", "#prealloc-req")
DECODE_PD_KEYS: Final = ("pre-allocated usage", "#prealloc-req", "#transfer-req")

BATCH_SPECS: Final = (
    SignalSpec("prompt_tokens", S.PROMPT_TOKENS_TOTAL, kind=S.COUNTER, per_interval=True),
    SignalSpec("cached_tokens", S.CACHED_TOKENS_TOTAL, kind=S.COUNTER, per_interval=True),
    SignalSpec("kv_usage", S.KV_USAGE_RATIO, combine="mean"),
    SignalSpec("running", S.REQUESTS_RUNNING),
    SignalSpec("waiting", S.REQUESTS_WAITING),
    SignalSpec("bootstrap_queue", S.PREFILL_BOOTSTRAP_QUEUE),
    SignalSpec("inflight_queue", S.PREFILL_INFLIGHT_QUEUE),
    SignalSpec("prompt_tps", S.PROMPT_THROUGHPUT_TPS),
    SignalSpec("kv_used_tokens", S.KV_USED_TOKENS),
    SignalSpec("decode_context_tokens", S.DECODE_CONTEXT_TOKENS),
    SignalSpec("prealloc_queue", S.DECODE_PREALLOC_QUEUE),
    SignalSpec("transfer_queue", S.DECODE_TRANSFER_QUEUE),
    SignalSpec("retracted", S.REQUESTS_RETRACTED),
    SignalSpec("gen_tps", S.GENERATION_THROUGHPUT_TPS),
)

_FAILED: Final = re.compile(
    r"(?P<side>Prefill|Decode) (?P<what>transfer|bootstrap) failed for request"
    r"(?: rank=(?P<rank>\d+))?"
    r"(?: (?:[\w.]*\.)?rid=(?P<rid>'[^']*'|\"[^\"]*\"|\S+))?"
    r"(?: (?:[\w.]*\.)?bootstrap_room=(?P<room>\S+))?"
    r"(?: with exception (?P<exc>.*))?")
_KV_ERROR: Final = re.compile(r"KVTransferError\(bootstrap_room=[^)]*\): (?P<reason>.*)")
_SESSION_FAILED: Final = re.compile(r"Session (?P<sid>\S+) failed\.")
_SESSION_RECOVERED: Final = re.compile(r"Session (?P<sid>\S+) recovered via probe")
_SYNC_FAILED: Final = re.compile(r"Failed to sync status (?P<status>.*?) of room (?P<room>\S+) "
                                 r"to (?P<peer>\S+?): (?P<err>.*)")
# Another rank's failure re-logged by this rank: the same request, keep the original's reason.
_PROPAGATED: Final = "from another rank"
# The peer a failure reason names (python/sglang/srt/disaggregation/mooncake/conn.py,
# nixl/conn.py, common/conn.py): "Failed to send kv chunk of <room> to <host>:<port>", "Decode
# instance could be dead, remote mooncake session <host>:<port> is not alive", "Losing
# connection with prefill instance (bootstrap_addr: <host>:<port>)".
_REASON_PEER: Final = re.compile(r"kv chunk of \S+ to (?P<a>\S+?)\s*$|remote mooncake session "
                                 r"(?P<b>\S+) is not alive|\(bootstrap_addr: (?P<c>[^)]+)\)",
                                 re.IGNORECASE)
# The decode side's heartbeat to a prefill bootstrap server failed: every request waiting on it
# is failed (common/conn.py, mooncake/conn.py _handle_node_failure; three wordings).
_PEER_LOST: Final = re.compile(
    r"Losing connection with prefill instance \(bootstrap_addr: (?P<peer>[^)]+)\)"
    r"(?:,? (?:affected (?P<n>\d+) requests|(?P<n2>\d+) requests affected))?")


def parse_batch_lines(lines: Sequence[str] | pa.Array) -> pd.DataFrame:
    """One row per ``Prefill batch`` / ``Decode batch`` line.

    Columns: ``kind`` (prefill | decode), ``iter``, ranks ``dp``/``tp``/``pp`` (NaN when the
    prefix has none) and ``ray`` (Ray actor), each known key found in the lines under its own
    name (``#new-token``, ``token usage``, ...), and the mapped fields (``map_batch_fields``).
    """
    arr = as_lines(lines)
    # Plain substring splits on the hot path (a regex capturing whole lines is ten times slower).
    parts = pc.split_pattern(arr, " batch", max_splits=1)
    split = _mask(pc.equal(pc.list_value_length(parts), 2))
    index = np.flatnonzero(split)
    pairs = parts.filter(pa.array(split))
    head, rest = pc.list_element(pairs, 0), pc.list_element(pairs, 1)
    is_prefill = _mask(pc.ends_with(head, "Prefill"))
    is_decode = _mask(pc.ends_with(head, "Decode"))
    head_ok = _mask(pc.match_substring_regex(rest, _BATCH_HEAD))
    # The text after the marker is split as it is: its first item is "" (", " form), " [iter]"
    # or ". #key: v" (". " form), whose key parse_key_values cleans with ``strip``.
    kv = parse_key_values(rest, separator=", ", assign=": ", strip=". ",
                          keys={key: (key, 1.0) for key in BATCH_KEYS})
    ok = (is_prefill | is_decode) & head_ok & (kv.known > 0)
    sel = np.flatnonzero(ok)
    take = pa.array(sel)
    prefix = head.take(take)
    frame = pd.DataFrame({
        "row": index[sel],
        "error": [kv.errors[i] for i in sel],
        "kind": np.where(is_prefill[sel], "prefill", "decode"),
    })
    frame["iter"] = numeric(group(extract(rest.take(take), _BATCH_ITER), "n"))[0]
    for name, marker in _RANKS.items():
        frame[name] = _rank(prefix, marker)
    has_ray = len(prefix) and pc.any(pc.match_substring(prefix, " pid=")).as_py()
    frame["ray"] = (np.asarray(group(extract(prefix, _RAY), "ray").to_numpy(zero_copy_only=False),
                               dtype=object) if has_ray else "")
    for key in BATCH_KEYS:
        values = kv.columns[key][sel]
        if not np.isnan(values).all():  # keep the frame narrow: versions print a subset
            frame[key] = values
    return map_batch_fields(frame)


def _mask(values: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), dtype=bool)


def _rank(prefix: pa.Array, marker: str) -> np.ndarray:
    """The number after ``DP``/``TP``/``PP`` starting a word of the prefix; NaN without."""
    if not len(prefix) or not pc.any(pc.match_substring(prefix, marker)).as_py():
        return np.full(len(prefix), np.nan)  # most logs print no ranks: skip the regex
    pattern = rf"(?:^|[^A-Za-z0-9_]){marker}(?P<n>\d+)(?:$|[^A-Za-z0-9_])"
    return numeric(group(extract(prefix, pattern), "n"))[0]


def map_batch_fields(frame: pd.DataFrame) -> pd.DataFrame:
    """Add the signal-level fields, resolving keys whose meaning depends on the line or version.

    ``#prealloc-req`` is the bootstrap queue on 0.5.3-0.5.10 prefill lines and the prealloc queue
    on decode lines; ``#token`` is KV-used tokens on 0.4.9 prefill lines and the decode batch's
    context tokens on decode lines; usage falls back to the hybrid full/gpu usage.
    """
    prefill = (frame["kind"] == "prefill").to_numpy()
    decode = ~prefill

    def col(*keys: str) -> np.ndarray:
        out = np.full(len(frame), np.nan)
        for key in keys:
            if key in frame.columns:
                out = np.where(np.isnan(out), frame[key].to_numpy(dtype=float), out)
        return out

    def only(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
        return np.where(mask, values, np.nan)

    return frame.assign(
        prompt_tokens=only(prefill, col("#new-token")),
        cached_tokens=only(prefill, col("#cached-token")),
        kv_usage=col("token usage", "full token usage", "gpu token usage"),
        running=col("#running-req"),
        waiting=col("#queue-req"),
        bootstrap_queue=only(prefill, col("#bootstrap-req", "#unbootstrapped-req",
                                          "#prealloc-req")),
        inflight_queue=only(prefill, col("#inflight-req", "#transferring-req")),
        prompt_tps=col("input throughput (token/s)"),
        kv_used_tokens=only(prefill, col("#token", "#full token", "#gpu token")),
        decode_context_tokens=only(decode, col("#token", "#full token", "#gpu token")),
        prealloc_queue=only(decode, col("#prealloc-req")),
        transfer_queue=only(decode, col("#transfer-req")),
        retracted=only(decode, col("#retracted-req")),
        gen_tps=col("gen throughput (token/s)"),
    )


def parse_events(lines: Sequence[str] | pa.Array) -> pd.DataFrame:
    """KV-transfer failure, lost-peer, session failure/recovery and status-sync failure lines.

    Details end with the request and the peer the line names (``signals.event_detail``).
    """
    out = EventRows()
    add = out.add

    for i, line in enumerate(as_lines(lines).to_pylist()):  # rare lines: per-line Python is fine
        line = line or ""
        if hit := _FAILED.search(line):
            rid = (hit.group("rid") or "").strip("'\"") or None
            exc = hit.group("exc") or ""
            reason_hit = _KV_ERROR.search(exc)
            reason = reason_hit.group("reason") if reason_hit else exc
            event = (S.EV_KV_BOOTSTRAP_FAILED if hit.group("what") == "bootstrap"
                     else S.EV_KV_TRANSFER_FAILED)
            where = ", ".join(part for part in (
                f"rank {hit.group('rank')}" if hit.group("rank") else "",
                f"bootstrap_room {hit.group('room')}" if hit.group("room") else "") if part)
            text = (f"request {rid or '?'}: {hit.group('side').lower()} {hit.group('what')} "
                    f"failed" + (f" ({where})" if where else "")
                    + (f": {reason}" if reason else ""))
            peer = _REASON_PEER.search(reason)
            peer_addr = next((g for g in peer.groups() if g), None) if peer else None
            add(i, event, S.event_detail(text, request=rid, peer=peer_addr), rid)
        elif hit := _PEER_LOST.search(line):
            n = hit.group("n") or hit.group("n2")
            text = (f"lost the connection to prefill instance {hit.group('peer')}"
                    + (f"; {n} waiting request(s) failed" if n else ""))
            add(i, S.EV_KV_PEER_LOST, S.event_detail(text, peer=hit.group("peer"), requests=n))
        elif hit := _SESSION_FAILED.search(line):
            add(i, S.EV_SESSION_FAILED, S.event_detail(
                f"Mooncake session {hit.group('sid')} failed", peer=hit.group("sid")))
        elif hit := _SESSION_RECOVERED.search(line):
            add(i, S.EV_SESSION_RECOVERED, S.event_detail(
                f"Mooncake session {hit.group('sid')} recovered via probe; un-blacklisted",
                peer=hit.group("sid")))
        elif hit := _SYNC_FAILED.search(line):
            add(i, S.EV_SESSION_FAILED, S.event_detail(
                f"could not sync status {hit.group('status')} of room {hit.group('room')} to "
                f"{hit.group('peer')}: {hit.group('err')}", peer=hit.group("peer")))
    return out.frame()


def subseries_key(frame: pd.DataFrame) -> np.ndarray:
    """An integer per (Ray actor, DP rank): the sub-series of one instance."""
    ray_code = pd.factorize(frame["ray"].to_numpy(dtype=object))[0]
    dp = frame["dp"].fillna(-1).to_numpy(dtype=np.int64) + 1
    return ray_code.astype(np.int64) * 1_000_000 + dp


def leading_ranks(frame: pd.DataFrame) -> np.ndarray:
    """Mask of lines from the first rank (lowest PP, then TP) of each DP group and Ray actor.

    Only TP0 of each DP group normally logs; when more ranks do, they repeat the same batch, and
    counting them would multiply the token counters.
    """
    if frame.empty:
        return np.zeros(0, dtype=bool)
    rank = frame["pp"].fillna(0).to_numpy() * 1e6 + frame["tp"].fillna(0).to_numpy()
    key = pd.Series(subseries_key(frame))
    return rank == pd.Series(rank).groupby(key).transform("min").to_numpy()


def assemble(frames: Mapping[str, pd.DataFrame]) -> FamilyOutput:
    """Instance signals, events and role hints from the parsed, timestamped SGLang lines."""
    metrics = None
    events = None
    hints: list[tuple[Role, str, int]] = []
    notes: list[str] = []
    used = 0
    batches = frames.get("sglang-batch")
    if batches is not None and len(batches):
        lead = leading_ranks(batches)
        if not lead.all():
            notes.append(f"SGLang: {int((~lead).sum())} batch line(s) from TP/PP ranks other than "
                         f"the first of their DP group not counted (they repeat its batches)")
        batches = batches[lead]
        batches = batches.assign(sub=subseries_key(batches))
        if batches["sub"].nunique() > 1:
            notes.append(f"SGLang: {batches['sub'].nunique()} schedulers (DP ranks, Ray actors) "
                         f"combined (requests, tokens and throughput summed, KV usage averaged)")
        used += len(batches)
        metrics = combine_subseries(batches, BATCH_SPECS)
        hints.extend(_hints(batches))
        notes.append("SGLang: prompt_tokens_total counts computed (new) prompt tokens; prefix "
                     "cache hits are in cached_tokens_total")
    failures = frames.get("sglang-event")
    if failures is not None and len(failures):
        used += len(failures)
        events = _dedup_failures(failures)[["ts", "event", "detail", "line"]]
    return FamilyOutput(metrics=metrics, events=events, hints=tuple(hints), notes=tuple(notes),
                        lines_used=used)


def _dedup_failures(frame: pd.DataFrame) -> pd.DataFrame:
    """One event per (event, request): every TP rank logs the same request's failure."""
    with_rid = frame["request_id"].notna()
    keyed = frame[with_rid].assign(
        propagated=frame.loc[with_rid, "detail"].str.contains(_PROPAGATED, regex=False))
    keyed = keyed.sort_values(["propagated", "line"], kind="stable")
    keyed = keyed.drop_duplicates(["event", "request_id"], keep="first")
    return pd.concat([keyed.drop(columns="propagated"), frame[~with_rid]], ignore_index=True)


def _hints(batches: pd.DataFrame) -> list[tuple[Role, str, int]]:
    hints: list[tuple[Role, str, int]] = []
    prefill = (batches["kind"] == "prefill").to_numpy()
    decode = ~prefill

    def seen(key: str, mask: np.ndarray) -> bool:
        return key in batches.columns and bool(batches[key].notna().to_numpy()[mask].any())

    p_keys = [k for k in PREFILL_PD_KEYS if seen(k, prefill)]
    d_keys = [k for k in DECODE_PD_KEYS if seen(k, decode)]
    if p_keys:
        hints.append(("prefill", f"SGLang 'Prefill batch' lines carry PD prefill fields "
                                 f"({', '.join(p_keys)})", ROLE_FROM_ENGINE_FIELDS))
    if d_keys:
        hints.append(("decode", f"SGLang 'Decode batch' lines carry PD decode fields "
                                f"({', '.join(d_keys)})", ROLE_FROM_ENGINE_FIELDS))
    # A colocated server logs both kinds whenever it serves; one kind alone over many lines
    # means the server only ever runs that phase.
    n_prefill, n_decode = int(prefill.sum()), int(decode.sum())
    if n_prefill >= MIN_EVIDENCE_LINES and not n_decode:
        hints.append(("prefill", f"only 'Prefill batch' lines ({n_prefill}), no 'Decode batch'",
                      ROLE_FROM_EVIDENCE))
    if n_decode >= MIN_EVIDENCE_LINES and not n_prefill:
        hints.append(("decode", f"only 'Decode batch' lines ({n_decode}), no 'Prefill batch'",
                      ROLE_FROM_EVIDENCE))
    return hints


LINE_KINDS: Final = (
    LineKind("sglang-batch", ENGINE, "SGLang batch stats", r"(?:Prefill|Decode) batch",
             parse_batch_lines, high_volume=True),
    LineKind("sglang-event", ENGINE, "SGLang KV-transfer failure",
             literal_route(("transfer failed for request", "bootstrap failed for request",
                            "recovered via probe", "Failed to sync status",
                            "Losing connection with prefill instance"))
             + r"|Session \S+ failed\.", parse_events),
)
