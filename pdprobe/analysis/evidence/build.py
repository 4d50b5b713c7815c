"""``compute_evidence``: the evidence of one diagnosis, from the dataset and the analyses.

The service calls it once per diagnosis and hands the result to every rule on its context;
nothing caches it behind the callers' back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdprobe.analysis.evidence.columns import InstanceColumns, host, instance_names
from pdprobe.analysis.evidence.model import ClusterEvidence, Later, Window
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.base import CapacityResult, SloAttainment, WorkloadSummary
    from pdprobe.dataset import Dataset


def compute_evidence(ds: Dataset, *, workload: WorkloadSummary | Missing,
                     slo: SloAttainment | Missing, capacity: CapacityResult | Missing,
                     slo_ttft_s: float | None = None,
                     slo_tpot_s: float | None = None) -> ClusterEvidence:
    """Every evidence table of ``ds`` over its whole window (see ``registry``)."""
    import pandas as pd

    from pdprobe.analysis.evidence.failures import failure_figures
    from pdprobe.analysis.evidence.frame_bins import FrameBins
    from pdprobe.analysis.evidence.metric_figures import (
        counter_figures,
        gauge_figures,
        histogram_figures,
    )
    from pdprobe.analysis.evidence.network import event_counts, node_figures
    from pdprobe.analysis.evidence.per_instance import request_figures
    from pdprobe.analysis.evidence.precedence import derive_and_choose
    from pdprobe.analysis.evidence.series import alive_bins, cluster_series
    from pdprobe.analysis.evidence.slo_miss import slo_miss_shape
    from pdprobe.analysis.evidence.transfer import (
        arrival_rate,
        mix_figures,
        queue_share,
        slo_figures,
        transfer_figures,
        ttft_sample,
    )
    from pdprobe.analysis.instances import window_of
    from pdprobe.analysis.stats import series_step

    span = window_of(ds)
    start, end = (0.0, 0.0) if span is None else span
    window = Window(start, end, series_step(start, end))
    index = pd.Index(sorted(instance_names(ds)), name="instance", dtype="object")
    role_of = {i.name: i.role for i in ds.instances}
    node_of = {i.name: (i.node or host(i.name)) for i in ds.instances}
    cols = InstanceColumns(index)
    cols.set_text("role", [role_of.get(n, "unknown") for n in index])
    cols.set_text("node", [node_of.get(n, host(n)) for n in index])
    # some frames computed when a rule first reads them (``frame_bins``)
    bins = FrameBins()
    found = request_figures(ds, window, cols, bins)  # the arrival bins' sample and sums
    gauge_figures(ds, window, cols, bins)
    counter_figures(ds, window, cols)
    histogram_figures(ds, window, cols)
    derive_and_choose(cols)
    alive = alive_bins(ds, window, index, bins)  # reads the request counts per cell
    bins["alive"] = alive.set_axis(window.bin_ts, axis=0)
    table = cols.frame()
    cluster = cluster_series(ds, window, table, bins, alive, found)
    del found  # the bins' sample released (as it was when the series took it)
    nodes, rdma_signals, tcp_signals = node_figures(ds, window)
    ttft = ttft_sample(ds)  # read by the queue's, the SLO's and the transfer's figures
    share, q90 = queue_share(ds, ttft)
    slo_fig = slo_figures(slo, slo_ttft_s, slo_tpot_s, ds, table, ttft)
    transfer = transfer_figures(ds, window, table, cluster, ttft)
    # where the missed time went: read by PD801 alone, and only when the objective is missed
    # (at 10M rows ~0.13 CPU-s, most diagnoses of a healthy window never read it), so
    # computed then; from the columns, the whole-column samples above not held till then
    slo_miss = Later(lambda: slo_miss_shape(ds, slo_fig, window))
    return ClusterEvidence(
        window=window, instances=table, bins=bins, cluster=cluster, nodes=nodes,
        events=event_counts(ds), transfer=transfer,
        slo=slo_fig, slo_miss_later=slo_miss,
        capacity=None if isinstance(capacity, Missing) else capacity,
        arrival_rate_rps=arrival_rate(workload, ds, window, table),
        request_columns=frozenset(ds.request_columns), n_requests=len(ds.requests),
        has_metrics=not ds.metrics.empty, has_network=not ds.network.empty,
        rdma_signals=rdma_signals, tcp_signals=tcp_signals,
        mix=mix_figures(ds, window, cluster), queue_share_of_ttft_p50=share, queue_s_p90=q90,
        failures=failure_figures(ds, window, table),
    )
