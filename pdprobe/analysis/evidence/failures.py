"""KV-transfer failure evidence: events and counters of transfers that failed, timed out or were
abandoned, the requests they touched, the NICs/peers they name, and TTFT where they happened.

The ``failures`` figure of ``ClusterEvidence``: read by PD303 (kv-transfer-failures) and PD901
(not-disaggregated: decode-side recompute after failed loads). Events come from logs (see
docs/inputs/logs.md, "Failure events for rules"); each event's ``detail`` ends with
`` [request=… peer=… nic=… requests=… tokens=…]`` fields read with
``signals.detail_field_pattern``. Counters are increases over the window, summed over instances.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.row_slices import category_count, category_mask
from pdprobe.analysis.table_facts import column_finite

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.evidence.model import Window
    from pdprobe.dataset import Dataset

# One request's (or one batch's) KV did not arrive: the transfer failed, timed out, was never
# pulled (expired), its handshake failed, or its peer died (``requests=`` counts the victims).
TRANSFER_EVENTS: Final = (S.EV_KV_TRANSFER_FAILED, S.EV_KV_TRANSFER_TIMEOUT, S.EV_KV_EXPIRED,
                          S.EV_KV_BOOTSTRAP_FAILED, S.EV_KV_PEER_LOST)
# The transfer engine gave up on a path: a NIC, a peer rail or a connection (names nic/peer).
FABRIC_EVENTS: Final = (S.EV_RDMA_NIC_INACTIVE, S.EV_RDMA_CONNECT_FAILED, S.EV_RDMA_RAIL_PAUSED,
                        S.EV_RDMA_RETRY_EXCEEDED, S.EV_SESSION_FAILED)
# Slice failures are retried and redispatched; they name NICs but are not failed transfers.
NAMING_ONLY_EVENTS: Final = (S.EV_RDMA_SLICE_FAILED,)
RECOMPUTE_EVENTS: Final = (S.EV_KV_LOAD_RECOMPUTED,)
ABORT_EVENTS: Final = (S.EV_REQUEST_ABORTED,)
FAILURE_EVENTS: Final = (*TRANSFER_EVENTS, *FABRIC_EVENTS, *NAMING_ONLY_EVENTS,
                         *RECOMPUTE_EVENTS, *ABORT_EVENTS)
# Request statuses that mean a request did not complete (the status column of docs/contract.md).
NOT_OK: Final = ("error", "timeout", "aborted")


@dataclass(frozen=True)
class Failures:
    """KV-transfer failures in the window; counts are 0 and figures None when not carried."""

    by_event: Mapping[str, int] = field(default_factory=dict)  # failure event kind -> count
    transfer_events: int = 0  # TRANSFER_EVENTS
    fabric_events: int = 0  # FABRIC_EVENTS
    requests_logged: int = 0  # requests the transfer events name or count (request=, requests=)
    recomputed_requests: int = 0  # decode recomputed these prompts after a failed KV load
    recomputed_tokens: int = 0
    recompute_events: int = 0
    aborted_logged: int = 0  # requests the engine logged as aborted
    counter_failures: float | None = None  # kv_transfer_failures_total increase (all instances)
    counter_expired: float | None = None  # kv_expired_total increase
    counter_transfers: float | None = None  # kv_transfers_total increase (successful)
    finished: float | None = None  # finished requests (records, else decode counters)
    records: int = 0  # request records in the window
    records_error: int | None = None  # records with status error (None: no status column)
    records_not_ok: int | None = None  # error, timeout or aborted
    # records with status error whose prefill finished but that never got a first token: the
    # request failed at the KV hand-off (None: the records carry no prefill_s/ttft_s)
    records_handoff: int | None = None
    # share of completed records (status ok, else all) that moved no KV bytes (kv_bytes == 0):
    # near 1, the KV never crossed (None: no kv_bytes column)
    records_no_kv_share: float | None = None
    per_bin: pd.Series | None = None  # failure events per bin (transfer, else fabric events)
    by_instance: tuple[tuple[str, int], ...] = ()  # instances logging them, most first
    by_nic: tuple[tuple[str, int], ...] = ()  # "nic on instance" (local NIC) named, most first
    by_peer: tuple[tuple[str, int], ...] = ()  # remote end named, most first
    first_ts: float | None = None
    last_ts: float | None = None
    ttft_p90_failing_bins_s: float | None = None  # request TTFT p90 in bins with failures
    ttft_p90_other_bins_s: float | None = None  # ... and in the other bins
    error_share_failing_bins: float | None = None  # not-ok share of records in failure bins
    error_share_other_bins: float | None = None

    @property
    def any(self) -> bool:
        """Whether the inputs carry any failure evidence at all."""
        return bool(self.transfer_events or self.fabric_events or self.recompute_events
                    or self.counter_failures or self.counter_expired or self.records_error)

    @property
    def failed_transfers(self) -> float:
        """Failed hand-offs: the larger of the logged requests (failed, expired, recomputed) and
        the failure counters (the two count the same failures from two sides, so they are not
        added)."""
        counted = (self.counter_failures or 0.0) + (self.counter_expired or 0.0)
        return float(max(self.requests_logged + self.recomputed_requests, counted))


def failure_figures(ds: Dataset, window: Window, table: pd.DataFrame) -> Failures:
    """The ``failures`` figure of ``ds`` over ``window`` (see ``Failures``); the counter
    increases come from the instance table (``c_kv_failures``, ``c_kv_expired``, ...)."""
    import pandas as pd

    from pdprobe.analysis.evidence.model import column

    def total(name: str, rows: pd.DataFrame = table) -> float | None:
        values = column(rows, name)
        return float(values.sum()) if values.notna().any() else None

    def one_side(name: str) -> float | None:
        """Sum over one role, the larger: a failed transfer counts on both of its ends
        (vLLM Mooncake: failed sends on prefill, failed receives on decode)."""
        values = column(table, name)
        if not values.notna().any():
            return None
        return float(values.groupby(table["role"]).sum().max())

    ev = ds.events
    sub = ev[ev["event"].astype(str).isin(FAILURE_EVENTS)] if not ev.empty else ev
    records, rec_error, rec_not_ok, finished, handoff = _records(ds)
    if finished is None:  # the decode side finishes requests; without roles, every instance
        decode = table[table["role"] == "decode"]
        finished = total("c_finished", decode if len(decode) else table)
    base = dict(counter_failures=one_side("c_kv_failures"),
                counter_expired=total("c_kv_expired"), counter_transfers=one_side("c_kv_transfers"), finished=finished,
                records=records, records_error=rec_error, records_not_ok=rec_not_ok,
                records_handoff=handoff, records_no_kv_share=_no_kv_share(ds))
    if sub is None or sub.empty:
        return Failures(**base)  # type: ignore[arg-type]
    kind = sub["event"].astype(str)
    detail = sub["detail"].fillna("").astype(str)
    fields = {k: detail.str.extract(S.detail_field_pattern(k))[0]
              for k in (S.DETAIL_REQUEST, S.DETAIL_REQUESTS, S.DETAIL_TOKENS, S.DETAIL_NIC,
                        S.DETAIL_PEER)}
    counts = kind.value_counts()
    transfer = kind.isin(TRANSFER_EVENTS)
    fabric = kind.isin(FABRIC_EVENTS)
    recompute = kind.isin(RECOMPUTE_EVENTS)
    n_req = pd.to_numeric(fields[S.DETAIL_REQUESTS], errors="coerce")
    n_tok = pd.to_numeric(fields[S.DETAIL_TOKENS], errors="coerce")
    rid = fields[S.DETAIL_REQUEST]
    named = rid[transfer].dropna().nunique()
    # lines that count requests without naming them (peer lost: "affected N requests")
    unnamed = float(n_req[transfer & rid.isna()].fillna(0).sum())
    unnamed += int((transfer & rid.isna() & n_req.isna()).sum())  # one line, one failure
    rate_rows = transfer if transfer.any() else fabric
    ts = sub["ts"].to_numpy(dtype="float64")
    per_bin = None
    if rate_rows.any():
        b = window.bin_of(ts[rate_rows.to_numpy()])
        per_bin = pd.Series(np.bincount(b, minlength=window.n_bins).astype("float64"),
                            index=window.bin_ts)
    instance = sub["instance"].fillna("").astype(str)
    nic = (fields[S.DETAIL_NIC] + " on " + instance).where(fields[S.DETAIL_NIC].notna())
    ttft_fail, ttft_other, err_fail, err_other = _by_failure_bins(ds, window, per_bin)
    return Failures(
        **base,  # type: ignore[arg-type]
        by_event={str(k): int(v) for k, v in counts.items()},
        transfer_events=int(transfer.sum()), fabric_events=int(fabric.sum()),
        requests_logged=int(named + unnamed),
        recomputed_requests=int(n_req[recompute].fillna(1).sum()),
        recomputed_tokens=int(n_tok[recompute].fillna(0).sum()),
        recompute_events=int(recompute.sum()),
        aborted_logged=int(rid[kind.isin(ABORT_EVENTS)].nunique()),
        per_bin=per_bin,
        by_instance=_ranked(instance[(transfer | fabric | recompute) & (instance != "")]),
        by_nic=_ranked(nic.dropna()), by_peer=_ranked(fields[S.DETAIL_PEER].dropna()),
        first_ts=float(np.nanmin(ts)) if np.isfinite(ts).any() else None,
        last_ts=float(np.nanmax(ts)) if np.isfinite(ts).any() else None,
        ttft_p90_failing_bins_s=ttft_fail, ttft_p90_other_bins_s=ttft_other,
        error_share_failing_bins=err_fail, error_share_other_bins=err_other,
    )


def _ranked(values: pd.Series) -> tuple[tuple[str, int], ...]:
    counts = values.astype(str).value_counts()
    return tuple((str(k), int(v)) for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _records(ds: Dataset) -> tuple[int, int | None, int | None, float | None, int | None]:
    """Records in the window, those with status error / not ok, the finished count, and the
    errors at the hand-off (prefill done, no first token)."""
    req = ds.requests
    n = len(req)
    if not n or "status" not in ds.request_columns:
        return n, None, None, (float(n) if n else None), None
    def is_error(s: str) -> bool:
        return s.lower() == "error"

    # counts from the rows per status value; the hand-off test reads the error rows alone
    n_error = category_count(req, "status", is_error)
    handoff = None
    if {"prefill_s", "ttft_s"} <= ds.request_columns:
        handoff = 0
        if n_error:
            rows = np.flatnonzero(category_mask(req["status"], is_error))
            prefill = req["prefill_s"].to_numpy(dtype="float64", na_value=np.nan)[rows]
            ttft = req["ttft_s"].to_numpy(dtype="float64", na_value=np.nan)[rows]
            handoff = int(np.count_nonzero(~np.isnan(prefill) & np.isnan(ttft)))
    n_not_ok = category_count(req, "status", lambda s: s.lower() in NOT_OK)
    return n, n_error, n_not_ok, float(n), handoff


def _no_kv_share(ds: Dataset) -> float | None:
    """Share of completed records whose ``kv_bytes`` is 0 (None without that column)."""
    req = ds.requests
    if req.empty or "kv_bytes" not in ds.request_columns:
        return None
    kv = req["kv_bytes"].to_numpy(dtype="float64")

    def is_ok(s: str) -> bool:
        return s.lower() == "ok"

    with_status = "status" in ds.request_columns
    # a finite sum of every row's bytes (cached: the transfer figures add them) has no NaN
    # or infinity in it: no test of every row for one
    finite = None if column_finite(req, "kv_bytes") else np.isfinite(kv)
    if with_status and (finite is None or finite.all()):
        n_done = category_count(req, "status", is_ok)  # every row's bytes known: per status
    elif finite is None:  # (no status: every row)
        n_done = kv.size
    else:
        done = finite & category_mask(req["status"], is_ok) if with_status else finite
        n_done = int(np.count_nonzero(done))
    if not n_done:
        return None
    # the rows without bytes (few, as a rule), tested alone: the same count as a mask of
    # every row combined with the done rows'
    rows = np.flatnonzero(kv <= 0)
    none = np.ones(rows.size, dtype=bool) if finite is None else finite[rows]
    if with_status and rows.size:
        none &= category_mask(req["status"].iloc[rows], is_ok)
    return float(np.count_nonzero(none) / n_done)


def _by_failure_bins(ds: Dataset, window: Window, per_bin: pd.Series | None,
                     ) -> tuple[float | None, float | None, float | None, float | None]:
    """TTFT p90 and not-ok share of the records arriving in bins with failures and without."""
    req = ds.requests
    if per_bin is None or req.empty or not (per_bin > 0).any() or (per_bin > 0).all():
        return None, None, None, None
    failing = (per_bin.to_numpy() > 0)[window.bin_of(req["arrival_ts"].to_numpy(dtype="float64"))]
    ttft_fail = ttft_other = err_fail = err_other = None
    if "ttft_s" in ds.request_columns:
        ttft = req["ttft_s"].to_numpy(dtype="float64")
        a, b = ttft[failing], ttft[~failing]
        if np.isfinite(a).any() and np.isfinite(b).any():
            ttft_fail = float(np.nanquantile(a, 0.9))
            ttft_other = float(np.nanquantile(b, 0.9))
    if "status" in ds.request_columns:
        bad = category_mask(req["status"], lambda s: s.lower() in NOT_OK)
        if failing.any() and (~failing).any():
            err_fail = float(bad[failing].mean())
            err_other = float(bad[~failing].mean())
    return ttft_fail, ttft_other, err_fail, err_other
