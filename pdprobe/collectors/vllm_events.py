"""vLLM's KV-transfer warning and error lines: NIXL, KV-load failures and recomputes, aborts.

Split from ``vllm_log`` (which routes these lines as its ``vllm-nixl`` kind). Wordings of every
version are matched: NIXL expiry "... retrieved by N decode worker(s) within N seconds" (0.10,
vllm PR 21753) and "... remote worker(s) before lease expired" (nixl/worker.py, lease
refresh), the scheduler's KV-load failure policy lines (vllm/v1/core/sched/scheduler.py), the V0
connectors' "redo model forwarding", the Mooncake connectors' transfer failures and
AsyncLLM's "Aborted request(s)". Details end with the request / peer / counts the line names
(``signals.event_detail``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

import pandas as pd
import pyarrow as pa

from pdprobe import signals as S
from pdprobe.collectors.log_markers import VLLM_FAILURE_MARKERS
from pdprobe.collectors.log_toolkit import EventRows, as_lines

NIXL_MARKERS: Final = VLLM_FAILURE_MARKERS  # one list: sniffing and routing agree
# vLLM's scheduler after a failed KV load (vllm/v1/core/sched/scheduler.py,
# kv_load_failure_policy): "recompute" reschedules the requests, whose prompts the decode
# instance then computes itself; "fail" fails them. The V0 connectors (simple/Mooncake pipe,
# vllm/distributed/kv_transfer/kv_connector/simple_connector.py) print "[rank%d]: Failed to
# receive all KVs and hidden states, redo model forwarding." and recompute the batch.
_RECOMPUTED: Final = re.compile(r"Recovered from KV load failure: (?P<n>\d+) request\(s\) "
                                r"rescheduled \((?P<tokens>\d+) tokens affected\)")
_LOAD_FAILED: Final = re.compile(r"Failing (?P<n>\d+) request\(s\) due to KV load failure "
                                 r"\((?P<policy>[^,]*), (?P<tokens>\d+) tokens affected\)\. "
                                 r"Request IDs: (?P<ids>.*)$")
_V0_REDO: Final = re.compile(r"\[rank(?P<rank>\d+)\](?:\[D\])?: Failed to receive all KVs "
                             r"and hidden states, redo model forwarding")
# AsyncLLM.abort with --enable-log-requests (vllm/v1/engine/async_llm.py): "Aborted request(s)
# a,b." (0.11+) or "Aborted request a." (earlier V1 and V0).
_ABORTED: Final = re.compile(r"Aborted request(?:\(s\))? (?P<ids>\S.*?)\.?\s*$")
ABORT_ROUTE: Final = r"|Aborted request(?:\(s\))? \S"
_REQUEST_ID: Final = re.compile(r"[^\s,{}'\"\[\]]+")
_RID = r"(?P<rid>[^\s,]+?)"
# (pattern, event, detail template). The root occurrence of an expiry or a failure is its own
# event kind; lines that only report a consequence (declined reads, skipped post-processing)
# are NIXL warnings, so counting EV_KV_EXPIRED / EV_KV_TRANSFER_FAILED does not count twice.
_NIXL: Final[tuple[tuple[re.Pattern[str], str, str], ...]] = (
    (re.compile(rf"Releasing expired KV blocks for request {_RID} which were retrieved by "
                r"(?P<n>\d+) (?:remote|decode) worker\(s\)"
                r"(?: within (?P<secs>\d+) seconds| before lease expired)"),
     S.EV_KV_EXPIRED, "request {rid}: KV blocks released after the lease expired "
                      "(read by {n} remote worker(s){within})"),
    (re.compile(rf"Potentially invalid KV blocks for unrecognized request {_RID} were retrieved"),
     S.EV_NIXL_WARNING, "request {rid}: a decode worker read KV blocks of an unknown request "
                        "(probably expired)"),
    (re.compile(r"NIXL transfer failure:\s*(?P<what>.*?)(?: \| Context: (?P<ctx>.*))?$"),
     S.EV_KV_TRANSFER_FAILED, "request {rid}: NIXL transfer failure: {what}"),
    (re.compile(rf"Declining expired remote read for {_RID} from engine (?P<engine>\S+?)\.?$"),
     S.EV_NIXL_WARNING, "request {rid}: declined a remote read after the KV lease expired "
                        "(engine {engine})"),
    (re.compile(rf"Skipping KV post-processing for failed request {_RID}\.?$"),
     S.EV_NIXL_WARNING, "request {rid}: KV post-processing skipped after a failed transfer"),
    (re.compile(r"Local NIXL metadata for remote engine (?P<engine>\S+) was invalidated"),
     S.EV_NIXL_WARNING, "NIXL metadata for remote engine {engine} invalidated; re-handshaking"),
    (re.compile(r"Got invalid KVTransferParams: (?P<params>.*?)\. This request will not"),
     S.EV_NIXL_WARNING, "invalid KVTransferParams {params}: request served without KV transfer"),
    # The Mooncake connectors (vLLM's and vllm-ascend's mooncake_connector.py): "Mooncake
    # transfer failed for request %s" / "... for request. remote_request_id=%s, ret=%d.", then
    # "Failed to transfer KV cache for request %s: Mooncake transfer failed, ret: -1".
    (re.compile(r"Mooncake transfer failed for request(?:\. remote_request_id=| )(?P<rid>[^\s,]+?)"
                r"(?:, ret=(?P<ret>-?\d+))?\.?\s*$"),
     S.EV_KV_TRANSFER_FAILED, "request {rid}: Mooncake transfer failed"),
    (re.compile(r"Failed to transfer KV cache for request (?P<rid>[^\s:]+): (?P<what>.*?)\s*$"),
     S.EV_KV_TRANSFER_FAILED, "request {rid}: KV transfer failed: {what}"),
)
_CTX_RID: Final = re.compile(r"""['"]?(?:request_id|req_id|request)['"]?\s*[:=]\s*['"]?"""
                             r"""(?P<rid>[^'",}\s]+)""")


def parse_events(lines: Sequence[str] | pa.Array) -> pd.DataFrame:
    """NIXL warnings and errors (0.33 and the older ``decode worker(s) within N seconds`` form),
    KV-load failures and recomputes, and aborted requests.

    Details end with the request / peer engine / counts the line names
    (``signals.event_detail``); a line naming several requests gives one row per request.
    """
    out = EventRows()
    add = out.add

    for i, line in enumerate(as_lines(lines).to_pylist()):  # rare lines: per-line Python is fine
        line = line or ""
        if _other_event(i, line, add):
            continue
        for pattern, event, template in _NIXL:
            hit = pattern.search(line or "")
            if hit is None:
                continue
            fields = {k: (v or "") for k, v in hit.groupdict().items()}
            if "ctx" in fields:
                ctx_rid = _CTX_RID.search(fields["ctx"])
                fields["rid"] = ctx_rid.group("rid") if ctx_rid else "?"
                if fields["ctx"]:
                    fields["what"] = f"{fields['what']} (context {fields['ctx']})"
            fields["within"] = f" within {fields['secs']} s" if fields.get("secs") else ""
            rid = fields.get("rid") or ""
            rid_or_none = rid if rid not in ("", "?") else None
            add(i, event, S.event_detail(template.format(**fields), request=rid_or_none,
                                         peer=fields.get("engine")), rid_or_none)
            break
    return out.frame()


def _other_event(i: int, line: str, add: Callable[..., None]) -> bool:
    """Add the rows of a KV-load failure, recompute or abort line; False if it is none."""
    if hit := _RECOMPUTED.search(line):
        add(i, S.EV_KV_LOAD_RECOMPUTED, S.event_detail(
            f"KV load failed: {hit.group('n')} request(s) rescheduled to recompute "
            f"{hit.group('tokens')} prompt tokens locally",
            requests=hit.group("n"), tokens=hit.group("tokens")))
    elif hit := _LOAD_FAILED.search(line):
        for rid in _REQUEST_ID.findall(hit.group("ids")) or ["?"]:
            known = None if rid == "?" else rid
            add(i, S.EV_KV_TRANSFER_FAILED, S.event_detail(
                f"request {rid}: failed after a KV load failure ({hit.group('policy')})",
                request=known), known)
    elif hit := _V0_REDO.search(line):
        add(i, S.EV_KV_LOAD_RECOMPUTED,
            f"rank {hit.group('rank')}: not all KV received; the batch's prefill is recomputed")
    elif hit := _ABORTED.search(line):
        for rid in _REQUEST_ID.findall(hit.group("ids")):
            add(i, S.EV_REQUEST_ABORTED, S.event_detail(f"request {rid}: aborted", request=rid),
                rid)
    else:
        return False
    return True


def dedup_failures(frame: pd.DataFrame) -> pd.DataFrame:
    """One EV_KV_TRANSFER_FAILED per request: every TP worker, and the connector and the
    scheduler, each log the same request's failure."""
    dup = ((frame["event"] == S.EV_KV_TRANSFER_FAILED) & frame["request_id"].notna()
           & frame.duplicated(["event", "request_id"], keep="first"))
    return frame[~dup.to_numpy()]
