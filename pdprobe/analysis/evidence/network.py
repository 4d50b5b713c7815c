"""Per-node evidence: RDMA and TCP traffic, retransmissions, congestion, link rate and ports.

One row per node (host names, the join key to instances) with the registry's ``NODES``
columns; counters are grouped on one integer series key per (node, device, port), never per
row. Also the event counts per (event, instance).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.columns import host
from pdprobe.analysis.evidence.registry import spec
from pdprobe.analysis.evidence.series import binned_increase

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.evidence.model import Window
    from pdprobe.dataset import Dataset

# Active InfiniBand port state (node_exporter state_id / sysfs "4: ACTIVE").
PORT_ACTIVE: Final = 4.0
# When a node has no packet counter, packets are estimated from bytes with a 4 KiB RoCE MTU.
ASSUMED_MTU_BYTES: Final = 4096.0


def node_figures(ds: Dataset, window: Window) -> tuple[pd.DataFrame, frozenset[str],
                                                       frozenset[str]]:
    """The node table, and the RDMA and TCP signals present in the network inputs."""
    import pandas as pd

    from pdprobe.analysis.promql import counter_increase_by_instance
    from pdprobe.analysis.tables import signal_rows

    raw = ds.network
    empty = pd.DataFrame(index=pd.Index([], name="node", dtype="object"))
    if raw.empty:
        return empty, frozenset(), frozenset()
    # Host names from the few distinct node labels, not per row (500k rows on a big cluster).
    _codes, labels = pd.factorize(raw["node"].astype(str), use_na_sentinel=False)
    present = set(raw["signal"].dropna().unique())
    rdma = frozenset(s for s in present if s.startswith("rdma_") or s in (
        S.LINK_RATE_BYTES_PER_S, S.PORT_STATE))
    tcp = frozenset(s for s in present if s in (S.NODE_TCP_TX_BYTES_TOTAL,
                                                S.NODE_TCP_RX_BYTES_TOTAL))
    key = ["node", "device", "port"]
    index = pd.Index(sorted({host(v) for v in labels}), name="node", dtype="object")

    def rows_of(signal: str, kind: str) -> tuple[pd.DataFrame, np.ndarray]:
        """One signal's rows of one kind (from the per-signal split), nodes as host names;
        and each row's node as its position in ``index``."""
        rows = signal_rows(raw, signal)
        rows = rows[(rows["kind"] == kind).to_numpy(dtype=bool, na_value=False)]
        codes, names = pd.factorize(rows["node"].astype(str), use_na_sentinel=False)
        host_names = [host(v) for v in names]
        hosts = pd.Series(host_names, dtype=raw["node"].dtype).array
        filled = {c: rows[c].fillna("") for c in ("device", "port") if rows[c].hasnans}
        return (rows.assign(node=hosts.take(codes), **filled),
                index.get_indexer(pd.Index(host_names, dtype=object))[codes])

    counters: dict[str, tuple[pd.DataFrame, int]] = {}

    def counter_series(signal: str) -> tuple[pd.DataFrame, int]:
        """A counter's samples keyed by one ``_series`` number that orders as (node, device,
        port) do, and the numbers per node (node = number // it). One integer key groups far
        faster than three string columns; one-category signal/kind columns select instantly.
        """
        if signal not in counters:
            rows, node = rows_of(signal, S.COUNTER)
            device_code, devices = pd.factorize(rows["device"], sort=True)
            port_code, ports = pd.factorize(rows["port"], sort=True)
            per_node = len(devices) * len(ports)
            one = np.zeros(len(rows), dtype=np.int64)
            counters[signal] = (pd.DataFrame({
                "signal": pd.Categorical.from_codes(one, dtype=pd.CategoricalDtype([signal])),
                "kind": pd.Categorical.from_codes(one, dtype=pd.CategoricalDtype([S.COUNTER])),
                "ts": rows["ts"].to_numpy(dtype=np.float64),
                "value": rows["value"].to_numpy(dtype=np.float64),
                "_series": node * per_node + device_code * len(ports) + port_code,
            }), per_node)
        return counters[signal]

    cols: dict[str, Any] = {}

    def per_node(signal: str) -> pd.Series:
        if signal in present:
            frame, series_per_node = counter_series(signal)
            inc = counter_increase_by_instance(frame, signal, window.start_ts, window.end_ts,
                                               key="_series", from_zero=True)
            if len(inc):
                node = index[inc.index.to_numpy() // series_per_node]
                return inc.groupby(node).sum(min_count=1).reindex(index)
        return pd.Series(np.nan, index=index)

    for name, signal in (("rdma_tx_bytes", S.RDMA_TX_BYTES_TOTAL),
                         ("rdma_rx_bytes", S.RDMA_RX_BYTES_TOTAL),
                         ("rdma_tx_packets", S.RDMA_TX_PACKETS_TOTAL),
                         ("rdma_rx_packets", S.RDMA_RX_PACKETS_TOTAL),
                         ("tcp_tx_bytes", S.NODE_TCP_TX_BYTES_TOTAL),
                         ("tcp_rx_bytes", S.NODE_TCP_RX_BYTES_TOTAL),
                         ("link_downed", S.RDMA_LINK_DOWNED_TOTAL),
                         ("port_errors", S.RDMA_PORT_ERRORS_TOTAL)):
        cols[name] = per_node(signal)
    retrans = [per_node(s).rename(s) for s in S.RETRANSMIT_SIGNALS if s in present]
    if retrans:
        frame = pd.concat(retrans, axis=1)
        cols["retransmits"] = frame.sum(axis=1, min_count=1)
        cols["retransmit_top_signal"] = frame.fillna(0.0).idxmax(axis=1).where(
            frame.notna().any(axis=1))
    congestion = [per_node(s) for s in S.CONGESTION_SIGNALS if s in present]
    if congestion:
        cols["cnp"] = pd.concat(congestion, axis=1).sum(axis=1, min_count=1)
    both = pd.concat([cols["rdma_tx_bytes"], cols["rdma_rx_bytes"]], axis=1)
    cols["rdma_bytes"] = both.sum(axis=1, min_count=1)
    packets = pd.concat([cols["rdma_tx_packets"], cols["rdma_rx_packets"]], axis=1).sum(
        axis=1, min_count=1)
    cols["rdma_packets_measured"] = packets.notna()
    cols["rdma_packets"] = packets.fillna(cols["rdma_bytes"] / ASSUMED_MTU_BYTES)
    cols["tcp_bytes"] = pd.concat([cols["tcp_tx_bytes"], cols["tcp_rx_bytes"]], axis=1).sum(
        axis=1, min_count=1)
    # Link capacity: sum over a node's ports of their rate, only ports that are ACTIVE.
    if S.PORT_STATE in present:
        state = rows_of(S.PORT_STATE, S.GAUGE)[0].groupby(key)["value"].last()
    if S.LINK_RATE_BYTES_PER_S in present:
        per_port = rows_of(S.LINK_RATE_BYTES_PER_S, S.GAUGE)[0].groupby(key)["value"].max()
        if S.PORT_STATE in present:
            active = state.reindex(per_port.index)
            per_port = per_port.where(active.isna() | (active == PORT_ACTIVE), 0.0)
        cols["link_bytes_per_s"] = per_port.groupby(level="node").sum().reindex(index)
    if S.PORT_STATE in present:
        cols["ports"] = state.groupby(level="node").size().reindex(index).astype("float64")
        cols["ports_active"] = (state == PORT_ACTIVE).groupby(level="node").sum().reindex(
            index).astype("float64")
    # Peak direction rates (p90 over bins) for link utilisation; bins with retransmissions.
    # Per signal, then summed over a node's ports per bin.
    per_node_bin = {}
    for signal in sorted({S.RDMA_TX_BYTES_TOTAL, S.RDMA_RX_BYTES_TOTAL, *S.RETRANSMIT_SIGNALS}
                         & present):
        frame, series_per_node = counter_series(signal)
        if len(frame):
            binned = binned_increase(frame, ["_series"], window)
            if len(binned):
                cell = pd.MultiIndex.from_arrays(
                    [index[binned.index.get_level_values("_series") // series_per_node],
                     binned.index.get_level_values("_bin")], names=["node", "_bin"])
                per_node_bin[signal] = binned.set_axis(cell).groupby(
                    level=["node", "_bin"]).sum()
    for name, signal in (("rdma_tx_p90_bytes_per_s", S.RDMA_TX_BYTES_TOTAL),
                         ("rdma_rx_p90_bytes_per_s", S.RDMA_RX_BYTES_TOTAL)):
        if signal in per_node_bin:
            rate = per_node_bin[signal] / window.step_s
            cols[name] = rate.groupby(level="node").quantile(0.9).reindex(index)
    # in signal order, as the sum over signals was before
    retrans_bins = [b for s, b in per_node_bin.items() if s in S.RETRANSMIT_SIGNALS]
    if retrans_bins:
        node_bin = pd.concat(retrans_bins).groupby(level=["node", "_bin"]).sum()
        cols["retransmit_bins"] = (node_bin > 0).groupby(level="node").sum().reindex(
            index).astype("float64")
        cols["measured_bins"] = node_bin.groupby(level="node").size().reindex(
            index).astype("float64")
    for name in cols:
        spec("nodes", name)  # every node column is declared
    nodes = pd.DataFrame({k: (v.reindex(index) if isinstance(v, pd.Series) else v)
                          for k, v in cols.items()}, index=index)
    return nodes, rdma, tcp


def event_counts(ds: Dataset) -> pd.DataFrame:
    """How many events of each kind each instance logged (columns event, instance, count)."""
    import pandas as pd

    ev = ds.events
    if ev.empty:
        return pd.DataFrame({"event": pd.Series(dtype="object"),
                             "instance": pd.Series(dtype="object"),
                             "count": pd.Series(dtype="int64")})
    counts = ev.assign(instance=ev["instance"].fillna("").astype(str),
                       event=ev["event"].astype(str)).groupby(
        ["event", "instance"], sort=True).size()
    return counts.rename("count").reset_index()

