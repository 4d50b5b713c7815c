"""KV-transfer side of the balance: bytes per token and the usable link bandwidth.

Bytes per token come from the model shape (``Profile.kv_bytes_per_token``: grouped-query
heads, replicated when tensor parallelism exceeds the KV heads; MLA latent) or, better, from
what was measured on the wire (``kv_bytes`` per request, or the transfer-bytes histogram
against KV-received tokens). Link bandwidth comes from node_exporter's InfiniBand port rates
(or the highest throughput observed), else the profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.capacity.chunked import leaf_ranges, leaf_sums, sums_of_leaves, tree_sums
from pdprobe.analysis.capacity.perf_columns import FloatColumns
from pdprobe.profiles import BUILTIN_PROFILES, Profile

if TYPE_CHECKING:
    from pdprobe.dataset import Dataset

# Share of the line rate KV transfer really gets: Mooncake's transfer engine reached 82 % of
# 200 GB/s (164.3 GB/s) between H20 nodes; protocol headers and descriptor posting take the rest.
LINK_USABLE_FRACTION: Final = 0.8
# Fewer transfers than this and a bytes-per-token figure is anecdotal.
MIN_KV_OBSERVATIONS: Final = 5
# A measured bytes-per-token this far from the profile's model shape means another model,
# dtype or parallelism; the measurement wins and a note says so.
KV_BYTES_MISMATCH_FACTOR: Final = 1.5
# A built-in profile is taken as the deployment's model when its KV bytes per token match the
# measured figure this closely (replication and dtype make the figure quite distinctive).
KV_BYTES_MATCH_TOLERANCE: Final = 0.05
# Bin width for the highest observed RDMA throughput: long enough to average out bursts of a
# single large transfer, short enough to catch sustained peaks.
OBSERVED_THROUGHPUT_STEP_S: Final = 10.0
PORT_ACTIVE: Final = 4.0


@dataclass(frozen=True)
class KvBytes:
    """Bytes moved per transferred token and which tokens count ("uncached" or "prompt")."""

    bytes_per_token: float
    basis: str
    source: str
    n: int = 0


def kv_bytes_from_profile(profile: Profile) -> KvBytes:
    shape = profile.model
    kind = "MLA latent" if shape.is_mla else (
        f"{shape.num_kv_heads} KV heads, TP{profile.gpus_per_instance}"
        + (" (heads replicated)" if shape.num_kv_heads < profile.gpus_per_instance else ""))
    return KvBytes(float(profile.kv_bytes_per_token), "uncached",
                   f"model shape of {shape.name} ({kind}) in profile {profile.name}")


def measured_kv_bytes(dataset: Dataset) -> KvBytes | str:
    """Bytes per token from measured transfers, or why not.

    Memory: the per-request ratios and token counts are computed a chunk at a time and summed
    in numpy's order (``chunked.tree_sum``): the figures of whole arrays, without the five
    whole-size arrays (about 380 MB at 10 million requests) they took.
    """
    if dataset.has_request_column("kv_bytes"):
        found = _from_records(dataset)
        if found is not None:
            return found
    from pdprobe import signals as S
    from pdprobe.analysis.promql import counter_increase_by_instance, histogram_window

    if dataset.metrics.empty:
        return "no kv_bytes column and no transfer metrics"
    hist = histogram_window(dataset.metrics, S.KV_TRANSFER_BYTES)
    received = counter_increase_by_instance(dataset.metrics, S.KV_RECEIVED_TOKENS_TOTAL)
    total_bytes = float(hist.attrs.get("sum", float("nan"))) if len(hist) else float("nan")
    count = float(hist.attrs.get("count", float("nan"))) if len(hist) else float("nan")
    tokens = float(received.sum()) if len(received) else float("nan")
    if not (total_bytes > 0 and tokens > 0 and count >= MIN_KV_OBSERVATIONS):
        return "no kv_bytes column, and no transfer-bytes histogram with a KV-received-token counter"
    return KvBytes(total_bytes / tokens, "uncached",
                   f"transfer-bytes histogram over KV-received tokens ({count:.0f} transfers)",
                   int(count))


def _from_records(dataset: Dataset) -> KvBytes | None:
    """``kv_bytes`` per token from the request records, or None when fewer than
    ``MIN_KV_OBSERVATIONS`` requests have one (with a prompt length)."""
    req = dataset.requests
    cols = FloatColumns(req, ("kv_bytes", "prompt_tokens", "cached_tokens"))
    n = len(req)
    cached_known = dataset.has_request_column("cached_tokens")

    def ratios_of(kv: np.ndarray, prompt: np.ndarray, rows: slice | np.ndarray
                  ) -> tuple[np.ndarray, ...]:
        """kv/prompt, kv/uncached, kv, uncached (prompt less cached, at least 1) and prompt
        (``prompt`` is written into no more: ``uncached`` is a new array)."""
        if cached_known:
            cached = cols.read("cached_tokens", rows)  # read only: a view where it can
            if not np.isfinite(cached).all():  # (the usual chunk: no copy to replace none)
                cached = np.nan_to_num(cached, nan=0.0)
            uncached = np.subtract(prompt, cached)
        else:
            uncached = prompt.copy()  # (prompt - 0.0: the same values)
        np.maximum(uncached, 1.0, out=uncached)
        return kv / prompt, kv / uncached, kv, uncached, prompt

    # One pass finds the usable rows and, while every row so far is usable (the usual case),
    # sums the ratios leaf by leaf of ``tree_sums``' recursion over all of them: no second
    # read of the columns for the sums when every row is.
    ok = np.empty(n, dtype=bool)
    leaves: list[list[float]] | None = []
    spreads: list[tuple[int, float, float, float, float]] = []  # per leaf, as the sums
    for lo, hi in leaf_ranges(n):  # leaves: at most PASS_CHUNK rows, no whole-size temporaries
        chunk = slice(lo, hi)
        b, p = cols("kv_bytes", chunk), cols("prompt_tokens", chunk)
        good = ok[chunk]
        np.isfinite(b, out=good)
        good &= b > 0
        good &= np.isfinite(p)
        good &= p >= 1
        if leaves is not None and bool(good.all()):
            values = ratios_of(b, p, chunk)
            leaves.append(leaf_sums(values))
            spreads.append(_leaf_spread(hi - lo, leaves[-1][0], leaves[-1][1], *values[:2]))
        else:
            leaves = None
    n_ok = int(np.count_nonzero(ok))
    if n_ok < MIN_KV_OBSERVATIONS:
        return None
    # all of them, usually: then no positions at all
    rows = None if n_ok == n else np.flatnonzero(ok).astype(np.int32 if n < 2**31 else np.int64)
    del ok

    def at(lo: int, hi: int) -> slice | np.ndarray:
        return slice(lo, hi) if rows is None else rows[lo:hi]

    def ratios(lo: int, hi: int) -> tuple[np.ndarray, ...]:
        return ratios_of(cols.read("kv_bytes", at(lo, hi)), cols("prompt_tokens", at(lo, hi)),
                         at(lo, hi))

    # The basis whose per-request ratio varies less is the one the connector moves: the
    # whole prompt, or only what the decode side does not already hold. Every sum the
    # figures need in two passes (one for the sums, one for the squared deviations), each
    # ``chunked.tree_sum``'s additions, instead of a pass per sum.
    # (the leaves were summed in the scan exactly when every row is usable: rows is None)
    sum_p, sum_u, sum_kv, sum_uncached, sum_prompt = sums_of_leaves(leaves, n) \
        if leaves is not None else tree_sums(ratios, n_ok)
    mean_p, mean_u = sum_p / n_ok, sum_u / n_ok

    def squares(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        by_prompt, by_uncached = ratios(lo, hi)[:2]
        for dev, mean in ((by_prompt, mean_p), (by_uncached, mean_u)):
            np.subtract(dev, mean, out=dev)
            np.multiply(dev, dev, out=dev)
        return by_prompt, by_uncached

    # every row usable (the usual case): the squared deviations from the leaves' own means,
    # combined (Chan et al.), not a second pass over the columns recomputing the ratios; they
    # only choose the basis (the figure is the sums'), which moves only on an exact tie
    sq_p, sq_u = _combined_spread(spreads, mean_p, mean_u) if leaves is not None \
        else tree_sums(squares, n_ok)
    cv_prompt = math.sqrt(sq_p / n_ok) / mean_p
    cv_uncached = math.sqrt(sq_u / n_ok) / mean_u
    basis = "uncached" if cv_uncached < cv_prompt else "prompt"
    value = sum_kv / (sum_uncached if basis == "uncached" else sum_prompt)
    return KvBytes(value, basis, f"measured kv_bytes of {n_ok} requests "
                                 f"per {'uncached prompt' if basis == 'uncached' else 'prompt'} token",
                   n_ok)


def _leaf_spread(rows: int, sum_p: float, sum_u: float, by_prompt: np.ndarray,
                 by_uncached: np.ndarray) -> tuple[int, float, float, float, float]:
    """One leaf's rows, its two ratios' means and their squared deviations from those means
    (``by_prompt`` and ``by_uncached`` are overwritten)."""
    mean_p, mean_u = sum_p / rows, sum_u / rows
    np.subtract(by_prompt, mean_p, out=by_prompt)
    np.subtract(by_uncached, mean_u, out=by_uncached)
    # (einsum: single-threaded, unlike BLAS)
    return (rows, mean_p, mean_u, float(np.einsum("i,i->", by_prompt, by_prompt)),
            float(np.einsum("i,i->", by_uncached, by_uncached)))


def _combined_spread(spreads: list[tuple[int, float, float, float, float]], mean_p: float,
                     mean_u: float) -> tuple[float, float]:
    """The two ratios' squared deviations from their overall means, from each leaf's
    (``_leaf_spread``): a leaf's own plus its rows times its mean's squared offset."""
    sq_p = sq_u = 0.0
    for rows, leaf_p, leaf_u, leaf_sq_p, leaf_sq_u in spreads:
        sq_p += leaf_sq_p + rows * (leaf_p - mean_p) ** 2
        sq_u += leaf_sq_u + rows * (leaf_u - mean_u) ** 2
    return sq_p, sq_u


def profile_matching_kv_bytes(bytes_per_token: float) -> Profile | None:
    """The built-in profile whose model shape gives this many KV bytes per token, if one does."""
    from pdprobe.profiles import DEFAULT_PROFILE

    matches = [p for p in BUILTIN_PROFILES.values()
               if abs(p.kv_bytes_per_token / bytes_per_token - 1.0) <= KV_BYTES_MATCH_TOLERANCE]
    if not matches:
        return None
    for p in matches:
        if p.name == DEFAULT_PROFILE:
            return p
    return matches[0]


@dataclass(frozen=True)
class LinkCapacity:
    """Usable KV-transfer bandwidth per instance, and how it was found."""

    bytes_per_s: float
    source: str


def link_capacity(dataset: Dataset | None, profile: Profile) -> LinkCapacity:
    """Per-instance usable bandwidth: measured port rates or observed peaks, else the profile."""
    fallback = LinkCapacity(profile.link_bytes_per_s, f"profile {profile.name}")
    if dataset is None or dataset.network.empty:
        return fallback
    import pandas as pd

    from pdprobe import signals as S
    from pdprobe.analysis.promql import rate_series
    from pdprobe.analysis.tables import signal_rows

    net = dataset.network
    rates = signal_rows(net, S.LINK_RATE_BYTES_PER_S)
    rates = rates[rates["value"].notna()]
    per_node: dict[str, float] = {}
    how = ""
    if len(rates):
        # (only the value column: a grouped last() of the label columns cost more than this)
        last = rates.sort_values("ts").groupby(["node", "device", "port"], dropna=False)[
            ["value"]].last()
        state = signal_rows(net, S.PORT_STATE).sort_values("ts")
        if len(state):
            st = state.groupby(["node", "device", "port"], dropna=False)["value"].last()
            active = st.reindex(last.index)
            last = last[active.isna() | (active == PORT_ACTIVE)]
        node_rate = last.groupby(level="node")["value"].sum() * LINK_USABLE_FRACTION
        per_node = {str(k): float(v) for k, v in node_rate.items() if v > 0}
        how = f"port rates × {LINK_USABLE_FRACTION:g}"
    tx = rate_series(net, S.RDMA_TX_BYTES_TOTAL, OBSERVED_THROUGHPUT_STEP_S,
                     key=["node", "device", "port"])
    rx = rate_series(net, S.RDMA_RX_BYTES_TOTAL, OBSERVED_THROUGHPUT_STEP_S,
                     key=["node", "device", "port"])
    peaks: dict[str, float] = {}
    for frame in (tx, rx):
        if len(frame):
            # Summed over a node's ports per bin, then the highest bin: grouped on integer
            # codes (sorted as the labels) instead of (ts, node) strings.
            ts_code, _ = pd.factorize(frame["ts"], sort=True)
            node_code, nodes = pd.factorize(frame["node"], sort=True)
            ok = (ts_code >= 0) & (node_code >= 0)  # (groupby leaves missing labels out)
            per_bin = frame["rate"][ok].groupby((ts_code * len(nodes) + node_code)[ok],
                                                sort=True).sum()
            cell = per_bin.index.to_numpy()
            top = per_bin.groupby(cell % len(nodes), sort=True).max()
            for code, peak in zip(top.index.tolist(), top.tolist(), strict=True):
                node = str(nodes[code])
                peaks[node] = max(peaks.get(node, 0.0), float(peak))
    raised = [node for node, peak in peaks.items() if peak > per_node.get(node, 0.0)]
    for node in raised:
        per_node[node] = peaks[node]
    if raised:
        how = (how + "; " if how else "") + f"observed peak throughput on {len(raised)} nodes"
    if not per_node:
        return fallback
    # A node's NICs are shared by the instances on it; KV flows out of prefill nodes.
    by_node: dict[str, int] = {}
    for inst in dataset.instances:
        if inst.node and inst.role in ("prefill", "decode"):
            by_node[inst.node] = by_node.get(inst.node, 0) + 1
    shares = [rate / max(by_node.get(node, 1), 1) for node, rate in per_node.items()]
    value = float(np.median(shares))
    if not math.isfinite(value) or value <= 0:
        return fallback
    return LinkCapacity(value, f"measured on {len(per_node)} nodes ({how}), per instance")
