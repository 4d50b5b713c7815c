"""Realistic ``Report`` objects for renderer tests (no collection, fully deterministic).

Four scenarios: ``healthy``, ``prefill_bound`` (critical, with capacity, relative trace times),
``routing_skew`` (warning, one hot decode instance) and ``metrics_only`` (capacity Missing).
Numbers follow the public traces' shapes (Azure conv, Mooncake conversation) so layouts are
exercised with realistic magnitudes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pdprobe.analysis.base import (
    CapacityResult,
    InstanceSummary,
    LengthDistribution,
    Quantiles,
    RatioBandEntry,
    RatioWindow,
    SloAttainment,
    TimeSeries,
    WorkloadSummary,
)
from pdprobe.dataset import SourceInfo
from pdprobe.report.model import SCHEMA_VERSION, Report, RoleCounts, status_for
from pdprobe.rules.base import Evidence, Finding, Inconclusive, Severity
from pdprobe.signals import Role
from pdprobe.values import Missing

AZURE_START = 1700158546.68  # 2023-11-16 18:15:46.68 UTC, the Azure conv trace's first arrival
GENERATED_AT = "2024-05-02T09:30:00Z"
STEP_S = 60.0
N_BINS = 58


def series(fn: Callable[[int], float], start: float, unit: str, n: int = N_BINS,
           step: float = STEP_S) -> TimeSeries:
    return TimeSeries(ts=tuple(start + step * i for i in range(n)),
                      values=tuple(float(fn(i)) for i in range(n)), unit=unit, step_s=step)


def q(mean: float, p50: float, p90: float, p99: float, count: int = 1000,
      estimated: bool = False) -> Quantiles:
    return Quantiles(count=count, mean=mean, p50=p50, p90=p90, p99=p99, max=p99 * 1.3,
                     estimated=estimated)


def lengths(mean: float, p50: float, p90: float, p99: float, cv: float, skew: float,
            shape: str, count: int, estimated: bool = False) -> LengthDistribution:
    return LengthDistribution(quantiles=q(mean, p50, p90, p99, count, estimated), cv=cv,
                              skewness=skew, shape=shape)


def wave(base: float, amp: float, period: float = 20.0, phase: float = 0.0) -> Callable[[int], float]:
    return lambda i: base + amp * math.sin(2 * math.pi * i / period + phase)


NO_KV_TRANSFER = Missing("no KV-transfer data")


def instance(name: str, role: Role, *, share: float | Missing, ttft: Quantiles | Missing,
             tpot: Quantiles | Missing, queue: Quantiles, kv: Quantiles, hit: float | Missing,
             start: float, queue_fn: Callable[[int], float], ttft_fn: Callable[[int], float],
             kv_fn: Callable[[int], float], requests: int | Missing, node: str,
             kv_xfer: Quantiles | Missing = NO_KV_TRANSFER,
             role_source: str = "label engine_type in metrics.prom",
             n: int = N_BINS) -> InstanceSummary:
    return InstanceSummary(
        name=name, role=role, role_source=role_source, requests=requests, traffic_share=share,
        ttft_s=ttft, tpot_s=tpot, queue_s=q(0.4, 0.2, 1.1, 3.0) if role == "prefill" else
        Missing("no queue-time data"), kv_transfer_s=kv_xfer, queue_depth=queue,
        running=q(12, 12, 18, 22), kv_usage_ratio=kv, prefix_hit_ratio=hit,
        preemptions=0.0 if role == "decode" else Missing("no preemption counter"),
        prompt_tokens_per_s=3100.0 if role == "prefill" else Missing("no token counter"),
        generation_tokens_per_s=290.0 if role == "decode" else Missing("no token counter"),
        queue_series=series(queue_fn, start, "requests", n),
        ttft_series=series(ttft_fn, start, "s", n),
        kv_usage_series=series(kv_fn, start, "ratio", n), node=node, engine="vllm",
    )


def sources_files(n_requests: int) -> tuple[SourceInfo, ...]:
    return (
        SourceInfo(path="capture/requests.jsonl.zst", kind="requests", format="jsonl",
                   rows=n_requests, skipped=0),
        SourceInfo(path="capture/metrics.om", kind="metrics", format="openmetrics",
                   rows=412_880, skipped=12,
                   notes=("12 samples of unknown metric families skipped",)),
        SourceInfo(path="capture/logs/prefill-0.log", kind="engine-log", format="vllm-log",
                   rows=3480, skipped=211,
                   notes=("year taken from the file's mtime (2023)",)),
    )


def _report(status_findings: tuple[Finding, ...], **kw: object) -> Report:
    base: dict[str, object] = dict(
        schema_version=SCHEMA_VERSION, status=status_for(status_findings),
        pdprobe_version="0.1.0", generated_at=GENERATED_AT, findings=status_findings,
    )
    base.update(kw)
    return Report(**base)  # type: ignore[arg-type]


# --- healthy ---------------------------------------------------------------------------------

def healthy() -> Report:
    start = AZURE_START
    end = start + 3501.7
    wl = WorkloadSummary(
        requests=19_366, window_start_ts=start, window_end_ts=end, arrival_rate_rps=5.530,
        prompt_tokens=lengths(1154.7, 1020, 2734.5, 4142, 0.86, 2.1, "wide", 19_366),
        output_tokens=lengths(211.1, 129, 424, 601, 0.93, 1.2, "wide", 19_366),
        offered_rate_rps=5.53, completed_rate_rps=5.52, cached_fraction=0.31,
        arrival_cv2=1.34, prompt_output_corr=0.12, failed_requests=4,
    )
    prefill = [instance(f"vllm-prefill-{k}", "prefill", share=0.5, ttft=q(0.41, 0.32, 0.78, 1.6),
                        tpot=Missing("prefill instances emit one token"),
                        queue=q(1.1, 1, 3, 5), kv=q(0.22, 0.2, 0.35, 0.44), hit=0.31,
                        start=start, queue_fn=wave(1.2, 0.9, phase=k), ttft_fn=wave(0.4, 0.1),
                        kv_fn=wave(0.22, 0.06), requests=9683, node=f"gpu-node-{k}")
               for k in range(2)]
    decode = [instance(f"vllm-decode-{k}", "decode", share=0.25, ttft=q(0.45, 0.36, 0.84, 1.7),
                       tpot=q(0.031, 0.029, 0.041, 0.055), queue=q(0.2, 0, 1, 2),
                       kv=q(0.51, 0.5, 0.66, 0.74), hit=Missing("no prefix-cache data"),
                       start=start, queue_fn=wave(0.3, 0.3, phase=k), ttft_fn=wave(0.45, 0.1),
                       kv_fn=wave(0.52, 0.1, phase=k), requests=4841, node=f"gpu-node-{2 + k}",
                       kv_xfer=q(0.012, 0.009, 0.021, 0.048))
              for k in range(4)]
    cap = CapacityResult(
        theoretical_ratio=0.46, recommended_prefill=2, recommended_decode=4, deployed_prefill=2,
        deployed_decode=4, binding="decode", prefill_capacity_rps=3.9, decode_capacity_rps=1.7,
        kv_bytes_per_token=131072.0, transfer_required_bytes_per_s=1.9e9,
        transfer_capacity_bytes_per_s=2.2e10, mean_based_ratio=0.41, mean_based_prefill=2,
        mean_based_decode=4,
        band=(RatioBandEntry("load -20% (4.42 req/s)", 2, 3, 0.46, "decode"),
              RatioBandEntry("load +20% (6.64 req/s)", 2, 5, 0.46, "decode"),
              RatioBandEntry("p90 lengths (prompt 2,734, output 424)", 3, 8, 0.41, "decode"),
              RatioBandEntry("hit rate 41% (+10 pts)", 2, 4, 0.42),
              RatioBandEntry("hit rate 21% (-10 pts)", 2, 4, 0.50, "decode")),
        windows=tuple(RatioWindow(start + 600 * k, start + 600 * (k + 1), 0.44 + 0.01 * k, 2, 4,
                                  2, 4, 5.4 + 0.05 * k, 1150 + 5 * k, 210,
                                  6200.0 + 40 * k, 1150.0 + 10 * k,
                                  requests=round(600 * (5.4 + 0.05 * k)),
                                  offered_rate_rps=5.4 + 0.05 * k,
                                  served_rate_rps=5.39 + 0.05 * k, binding="decode")
                      for k in range(6)),
        model_source="observed fit", fit_quality={"prefill_r2": 0.97, "decode_r2": 0.93},
    )
    slo = SloAttainment(ttft_slo_s=2.0, tpot_slo_s=0.05, ttft=0.991, tpot=0.987, both=0.981)
    info = Finding(code="PD031", cause="ratio-lag", severity=Severity.INFO, confidence=0.6,
                   summary="The deployed 2P:4D followed the recommended ratio in every window.",
                   evidence=(Evidence("windows where deployed = recommended", 6, "windows",
                                      baseline=6),))
    return _report(
        (info,), window_start_ts=start, window_end_ts=end,
        input_description="capture/ (3 files)", sources=sources_files(19_366), workload=wl,
        instance_counts=RoleCounts(2, 4), instances=tuple(prefill + decode), slo=slo,
        capacity=cap,
        inconclusive=(Inconclusive("PD021", "rdma-retransmits",
                                   "node_exporter InfiniBand counters (node_infiniband_*)"),),
    )


# --- prefill-bound (critical, relative times from a Mooncake-trace simulation) ----------------

def prefill_bound() -> Report:
    start = 0.0
    end = 3537.0
    wl = WorkloadSummary(
        requests=12_031, window_start_ts=start, window_end_ts=end, arrival_rate_rps=3.401,
        prompt_tokens=lengths(12035.1, 6909, 27367, 85400.4, 1.21, 3.4, "heavy-tailed", 12_031),
        output_tokens=lengths(342.6, 350, 597, 1118.5, 0.62, 0.9, "wide", 12_031),
        cached_fraction=0.52, arrival_cv2=2.7, prompt_output_corr=0.04,
    )
    # Prefill queues grow through the hour; decode idles.
    def prefill_queue(k: int) -> Callable[[int], float]:
        return lambda i: 2 + 0.7 * i + 3 * math.sin(i / 3 + k)

    prefill = [instance(f"prefill-{k}", "prefill", share=0.5, ttft=q(3.9, 3.1, 8.7, 19.4),
                        tpot=Missing("prefill instances emit one token"),
                        queue=q(21, 18, 37, 52), kv=q(0.61, 0.6, 0.83, 0.91), hit=0.52,
                        start=start, queue_fn=prefill_queue(k),
                        ttft_fn=lambda i: 0.5 + 0.14 * i, kv_fn=wave(0.6, 0.2),
                        requests=6015 + k, node=f"node-{k}", role_source="name pattern 'prefill'")
               for k in range(2)]
    decode = [instance(f"decode-{k}", "decode", share=0.25, ttft=q(4.0, 3.2, 8.9, 19.6),
                       tpot=q(0.024, 0.023, 0.029, 0.036), queue=q(0.0, 0, 0, 0),
                       kv=q(0.18, 0.17, 0.26, 0.31), hit=Missing("no prefix-cache data"),
                       start=start, queue_fn=lambda i: 0.0, ttft_fn=lambda i: 0.55 + 0.14 * i,
                       kv_fn=wave(0.18, 0.05, phase=k), requests=3007 + (k == 0),
                       node=f"node-{2 + k}", kv_xfer=q(0.031, 0.027, 0.052, 0.11),
                       role_source="name pattern 'decode'")
              for k in range(4)]
    # Prompts lengthen through the hour: the first window still fits the deployed 2P:4D, later
    # ones need 3P and then 4P while the cluster stays at 2P (served falls behind offered).
    windows = tuple(RatioWindow(start + 600 * k, min(end, start + 600 * (k + 1)),
                                0.52 + 0.11 * k, min(2 + k, 4), 4, 2, 4, 3.1 + 0.1 * k,
                                11000 + 400 * k, 340,
                                33000.0 + 2000 * k, 1050.0 + 20 * k, requests=1860 + 60 * k,
                                offered_rate_rps=3.1 + 0.1 * k,
                                served_rate_rps=3.1 if k == 0 else 2.2,
                                binding="prefill") for k in range(6))
    cap = CapacityResult(
        theoretical_ratio=0.95, recommended_prefill=4, recommended_decode=4, deployed_prefill=2,
        deployed_decode=4, binding="prefill", prefill_capacity_rps=0.9, decode_capacity_rps=2.6,
        kv_bytes_per_token=163840.0, transfer_required_bytes_per_s=6.7e9,
        transfer_capacity_bytes_per_s=4.4e10, mean_based_ratio=0.62, mean_based_prefill=3,
        mean_based_decode=4,
        # The what-ifs as the model labels them (recommend.band).
        band=(RatioBandEntry("load -20% (2.72 req/s)", 3, 3, 0.95, "prefill"),
              RatioBandEntry("load +20% (4.08 req/s)", 5, 5, 0.95, "prefill"),
              RatioBandEntry("p90 lengths (prompt 27,367, output 597)", 9, 7, 1.21, "prefill"),
              RatioBandEntry("hit rate 62% (+10 pts)", 3, 4, 0.77, "prefill"),
              RatioBandEntry("hit rate 42% (-10 pts)", 5, 4, 1.13, "prefill")),
        windows=windows, model_source="profile", profile="llama-3.1-70b-h100-tp4",
        notes=("per-request compute times absent: capacity from the profile",),
        verified=SloAttainment(ttft_slo_s=2.0, tpot_slo_s=0.05, ttft=0.917, tpot=0.996,
                               both=0.913, method="simulation of 12031 requests on 4P/4D"),
        slo_ttft_s=2.0, slo_tpot_s=0.05, slo_defaulted=("tpot",), arrival_rate_rps=3.401,
        arrival_cv2=2.7, prefill_service_s=1.05, prefill_service_cv2=1.9,
        prefill_limit="ttft-slo", ttft_estimate_p90_s=1.62, ttft_estimate_mean_s=0.74,
        md1_ttft_s=1.41, ttft_attainment_estimate=0.93, infeasible_ttft_fraction=0.012,
        decode_batch_size=38.0, decode_batch_limit="tpot-slo", decode_context_tokens=12206.0,
        decode_step_s=0.041, decode_limit="throughput", prefill_utilization=0.71,
        decode_utilization=0.33, transfer_utilization=0.15, deployed_prefill_utilization=1.42,
        deployed_decode_utilization=0.33, deployed_transfer_utilization=0.15,
        binding_basis="deployed counts", mean_based_prefill_capacity_rps=1.05,
        mean_based_decode_capacity_rps=2.5, jensen_gap_prefill=0.17, jensen_gap_decode=0.04,
        kv_bytes_source="profile (GQA, fp16)", transfer_capacity_source="profile",
    )
    slo = SloAttainment(ttft_slo_s=2.0, tpot_slo_s=0.05, ttft=0.412, tpot=0.998, both=0.41)
    pd001 = Finding(
        code="PD001", cause="prefill-bound", severity=Severity.CRITICAL, confidence=0.92,
        summary="Prefill queues grow all window long and TTFT misses its SLO while decode idles.",
        instances=("prefill-0", "prefill-1"),
        evidence=(
            Evidence("prefill queue depth p90", 37.0, "requests", ("prefill-0", "prefill-1"),
                     baseline=4.0, source="vllm:num_requests_waiting"),
            Evidence("queue growth", 0.7, "requests/min", ("prefill-0", "prefill-1"),
                     window_start_ts=0.0, window_end_ts=3537.0,
                     source="vllm:num_requests_waiting"),
            Evidence("TTFT p90", 8.7, "s", baseline=2.0, source="ttft_s"),
            Evidence("decode KV usage p90", 0.26, "ratio", ("decode-0", "decode-1", "decode-2",
                                                            "decode-3"),
                     source="vllm:kv_cache_usage_perc"),
        ),
        next_steps=("Add 2 prefill instances (4P:4D), or move 1 decode GPU group to prefill.",
                    "Check chunked-prefill size: long prompts (p99 85k tokens) block the queue."),
        component="instance-manager", consequences=("PD004",),
    )
    pd004 = Finding(
        code="PD004", cause="decode-bound", severity=Severity.WARNING, confidence=0.4,
        summary="Decode instances are under-fed: KV usage stays below 30%.",
        instances=("decode-0", "decode-1", "decode-2", "decode-3"),
        evidence=(Evidence("decode KV usage p90", 0.26, "ratio", source="kv_usage_ratio"),),
        next_steps=("Resolves with PD001.",), is_root_cause=False,
    )
    return _report(
        (pd001, pd004), window_start_ts=start, window_end_ts=end,
        input_description="sim/mooncake_conversation.jsonl",
        sources=(SourceInfo(path="sim/mooncake_conversation.jsonl", kind="requests",
                            format="mooncake-trace", rows=12_031, skipped=0,
                            notes=("timestamps in ms from trace start: shown as offsets",)),),
        workload=wl, instance_counts=RoleCounts(2, 4), instances=tuple(prefill + decode),
        slo=slo, capacity=cap,
        inconclusive=(Inconclusive("PD021", "rdma-retransmits",
                                   "node_exporter InfiniBand counters (node_infiniband_*)"),
                      Inconclusive("PD022", "no-rdma", "KV transfer transport (Mooncake or NIXL logs)")),
        warnings=("211 log lines not understood in sim/extra.log (first at line 14)",),
    )


# --- routing skew (warning; one hot decode instance) -----------------------------------------

def routing_skew(hot: str = "10.1.0.24:8200") -> Report:
    start = 1714640400.0  # 2024-05-02 09:00:00 UTC
    end = start + 1800.0
    wl = WorkloadSummary(
        requests=9_954, window_start_ts=start, window_end_ts=end, arrival_rate_rps=5.53,
        prompt_tokens=lengths(1160.2, 1024, 2741, 4150, 0.85, 2.0, "wide", 9_954),
        output_tokens=lengths(209.8, 128, 421, 600, 0.92, 1.2, "wide", 9_954),
        completed_rate_rps=5.5, arrival_cv2=1.1, prompt_output_corr=0.11,
    )
    prefill = [instance(f"10.1.0.{11 + k}:8100", "prefill", share=0.5,
                        ttft=q(0.5, 0.4, 0.9, 1.8), tpot=Missing("prefill instances emit one token"),
                        queue=q(1.0, 1, 2, 4), kv=q(0.25, 0.24, 0.38, 0.45), hit=0.28,
                        start=start, queue_fn=wave(1.0, 0.8, phase=k), ttft_fn=wave(0.5, 0.1),
                        kv_fn=wave(0.25, 0.05), requests=4977, node=f"10.1.0.{11 + k}", n=30)
               for k in range(2)]
    names = ["10.1.0.21:8200", "10.1.0.22:8200", "10.1.0.23:8200", hot]
    decode = []
    for k, name in enumerate(names):
        is_hot = k == 3
        decode.append(instance(
            name, "decode", share=0.41 if is_hot else 0.1967,
            ttft=q(1.6, 1.3, 3.4, 6.0) if is_hot else q(0.5, 0.42, 0.9, 1.9),
            tpot=q(0.071, 0.066, 0.094, 0.13) if is_hot else q(0.03, 0.028, 0.039, 0.05),
            queue=q(9, 8, 17, 25) if is_hot else q(0.3, 0, 1, 2),
            kv=q(0.88, 0.9, 0.97, 0.99) if is_hot else q(0.45, 0.44, 0.6, 0.7),
            hit=0.07 if is_hot else 0.36, start=start,
            queue_fn=wave(9, 6) if is_hot else wave(0.3, 0.3, phase=k),
            ttft_fn=wave(1.6, 0.8) if is_hot else wave(0.5, 0.1),
            kv_fn=wave(0.9, 0.06) if is_hot else wave(0.45, 0.1, phase=k),
            requests=4081 if is_hot else 1958, node=name.split(":")[0],
            kv_xfer=q(0.02, 0.015, 0.03, 0.06), n=30))
    pd011 = Finding(
        code="PD011", cause="routing-skew", severity=Severity.WARNING, confidence=0.85,
        summary=f"The router sends 41% of decode traffic to {hot} (fair share 25%).",
        instances=(hot,),
        evidence=(
            Evidence("decode traffic share", 0.41, "ratio", (hot,), baseline=0.25,
                     source="decode_instance"),
            Evidence("prefix-cache hit rate", 0.07, "ratio", (hot,), baseline=0.36,
                     source="vllm:prefix_cache_hits_total"),
            Evidence("TPOT p90", 0.094, "s", (hot,), baseline=0.039, source="tpot_s"),
        ),
        next_steps=("Check the router's load-balancing policy (KV-aware routing weights).",
                    f"Compare {hot}'s configuration with its peers."),
        component="router",
    )
    return _report(
        (pd011,), window_start_ts=start, window_end_ts=end,
        input_description="Prometheus http://prometheus.monitoring:9090",
        sources=(SourceInfo(path="http://prometheus.monitoring:9090", kind="prometheus",
                            format="prometheus-api", rows=96_400, skipped=0),
                 SourceInfo(path="router/requests.csv", kind="requests", format="csv",
                            rows=9_954, skipped=3, notes=("3 rows with negative ttft_s dropped",))),
        workload=wl, instance_counts=RoleCounts(2, 4), instances=tuple(prefill + decode),
        slo=SloAttainment(ttft_slo_s=2.0, tpot_slo_s=None, ttft=0.93),
        capacity=CapacityResult(
            theoretical_ratio=0.47, recommended_prefill=2, recommended_decode=4,
            deployed_prefill=2, deployed_decode=4, binding="decode", prefill_capacity_rps=3.8,
            decode_capacity_rps=1.6, mean_based_ratio=0.43, mean_based_prefill=2,
            mean_based_decode=4, model_source="observed fit",
            fit_quality={"prefill_r2": 0.95},
        ),
    )


# --- metrics only: capacity Missing ----------------------------------------------------------

def metrics_only() -> Report:
    start = 1714640400.0
    end = start + 1800.0
    wl = WorkloadSummary(
        requests=8_123, window_start_ts=start, window_end_ts=end, arrival_rate_rps=4.51,
        prompt_tokens=lengths(float("nan"), 980, 2600, 4000, float("nan"), float("nan"), "wide",
                              8_123, estimated=True),
        output_tokens=lengths(float("nan"), 140, 410, 590, float("nan"), float("nan"), "wide",
                              8_123, estimated=True),
        offered_rate_rps=4.55, completed_rate_rps=4.51, source="metric histograms",
        arrival_cv2=Missing("metrics give counts per scrape, not arrival times"),
        prompt_output_corr=Missing("no per-request lengths"),
    )
    insts = []
    for k in range(2):
        insts.append(InstanceSummary(
            name=f"sglang-prefill-{k}", role="prefill", role_source="label role=prefill",
            ttft_s=q(float("nan"), 0.35, 0.9, 1.9, estimated=True),
            queue_depth=q(2.0, 2, 4, 6), kv_usage_ratio=q(0.3, 0.3, 0.42, 0.5),
            prefix_hit_ratio=0.22, prompt_tokens_per_s=2600.0,
            queue_series=series(wave(2, 1.5, phase=k), start, "requests", n=30),
            kv_usage_series=series(wave(0.3, 0.1), start, "ratio", n=30),
            node=f"10.2.0.{k + 1}", engine="sglang"))
    for k in range(3):
        insts.append(InstanceSummary(
            name=f"sglang-decode-{k}", role="decode", role_source="label role=decode",
            tpot_s=q(float("nan"), 0.031, 0.045, 0.07, estimated=True),
            queue_depth=q(0.5, 0, 1, 3), kv_usage_ratio=q(0.55, 0.55, 0.7, 0.8),
            generation_tokens_per_s=410.0,
            queue_series=series(wave(0.5, 0.5, phase=k), start, "requests", n=30),
            kv_usage_series=series(wave(0.55, 0.1, phase=k), start, "ratio", n=30),
            node=f"10.2.0.{k + 3}", engine="sglang"))
    info = Finding(code="PD012", cause="straggler", severity=Severity.INFO, confidence=0.3,
                   summary="No instance is markedly slower than its peers.")
    return _report(
        (info,), window_start_ts=start, window_end_ts=end, input_description="dump.om",
        sources=(SourceInfo(path="dump.om", kind="metrics", format="openmetrics", rows=58_210,
                            skipped=0),),
        workload=wl, instance_counts=RoleCounts(2, 3, unknown=1), instances=tuple(insts),
        slo=SloAttainment(ttft_slo_s=2.0, tpot_slo_s=0.05, ttft=0.962, tpot=0.991,
                          both=Missing("needs per-request TTFT and TPOT"),
                          method="histogram interpolation"),
        capacity=Missing("needs per-request lengths or a --profile for the model and GPU"),
        inconclusive=(Inconclusive("PD031", "ratio-lag", "per-request arrival times"),),
        notes=("1 instance (frontend-0) has no role label: pass --prefill-match/--decode-match",),
    )


SCENARIOS: dict[str, Callable[[], Report]] = {
    "healthy": healthy,
    "prefill_bound": prefill_bound,
    "routing_skew": routing_skew,
    "metrics_only": metrics_only,
}


def unknown() -> Report:
    """Nothing could be judged (empty input)."""
    return Report(
        schema_version=SCHEMA_VERSION, status="unknown", pdprobe_version="0.1.0",
        generated_at=GENERATED_AT, window_start_ts=None, window_end_ts=None,
        input_description="empty.jsonl", sources=(), workload=Missing("no request records"),
        instance_counts=RoleCounts(None, None), instances=(), slo=Missing("no latency data"),
        capacity=Missing("no workload"), findings=(),
        warnings=("empty.jsonl: no rows with arrival_ts, prompt_tokens and output_tokens",),
    )


MALICIOUS = "<script>alert(1)</script>"


def malicious() -> Report:
    """Routing skew where every data-derived string tries to break out of its markup."""
    import dataclasses

    r = routing_skew(hot=MALICIOUS)
    bad_source = SourceInfo(path='x"><img src=x onerror=alert(2)>.jsonl', kind="requests",
                            format="jsonl", rows=1, skipped=1,
                            notes=("note with | pipe and `tick` and *star*",))
    return dataclasses.replace(
        r, sources=(*r.sources, bad_source),
        warnings=("<b>bold</b> & </style><script>alert(3)</script>",),
        input_description="</title><script>alert(4)</script>",
    )


# --- transfer path (Kubernetes pod names, network charts) -------------------------------------

POD_PREFIX = "vllm-disagg-llama3-70b-decode-7d9f8b6c4-"


def transfer_path() -> Report:
    """Prefill-bound on Kubernetes: pod names that share a long prefix, per-instance KV
    transfer latency (p90) and per-node RDMA rates in the magnitudes node_exporter reports
    (bytes/s in the hundreds of millions), so chart axes, legends and row labels are tested
    with the widths a real capture gives."""
    import dataclasses

    from pdprobe.analysis.base import LabeledSeries

    r = prefill_bound()
    pods = [f"{POD_PREFIX}{suffix}" for suffix in ("x2kqp", "9wz7m", "r4tnb", "hb6vd")]
    rename = dict(zip((f"decode-{k}" for k in range(4)), pods, strict=True))
    instances = tuple(dataclasses.replace(i, name=rename.get(i.name, i.name))
                      for i in r.instances)
    findings = tuple(dataclasses.replace(f, instances=tuple(rename.get(n, n) for n in f.instances))
                     for f in r.findings)
    start = 0.0
    latency = [LabeledSeries("kv_transfer_latency_s", "s", (("instance", pod), ("stat", "p90")),
                             series(wave(0.012 + 0.002 * k, 0.004, phase=k), start, "s"))
               for k, pod in enumerate(pods)]
    nodes = [f"gpu-node-{k:02d}.cluster.internal" for k in range(3)]
    network = [LabeledSeries(name, unit, (("node", node),),
                             series(wave(base * (1 + k), base / 3, phase=k), start, unit))
               for name, unit, base in (("rdma_retransmits_per_s", "1/s", 0.3),
                                        ("rdma_cnp_per_s", "1/s", 0.1),
                                        ("rdma_tx_bytes_per_s", "bytes/s", 4.2e8))
               for k, node in enumerate(nodes)]
    sources = tuple(dataclasses.replace(s, path=f"/var/log/pdprobe/capture-2024-05-02/{s.path}")
                    for s in sources_files(12_031))
    return dataclasses.replace(r, instances=instances, findings=findings,
                               series=(*latency, *network), sources=sources)
