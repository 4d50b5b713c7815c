"""Small synthetic datasets for rule tests, generated with vectorised numpy.

``Cluster`` describes a P/D deployment over a window (instances, traffic, lengths, per-role
gauge levels over time, per-instance speed factors, network behaviour) and renders the same
story as request records, engine metrics, node network counters and events, so a test can
hand a rule any mix of inputs and check it says less, never something else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from pdprobe import signals as S
from pdprobe.analysis.base import CapacityResult, RatioWindow, WorkloadSummary
from pdprobe.dataset import (
    EVENT_COLUMNS,
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    REQUEST_COLUMNS,
    Dataset,
    InstanceInfo,
    SourceInfo,
    concat_frames,
    conform,
)
from pdprobe.rules.base import RuleContext, RuleOptions
from pdprobe.values import Missing

T0 = 1_700_000_000.0
LATENCY_LE = np.array([0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4,
                       0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, np.inf])
TOKENS_LE = np.array([1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768,
                      65536, np.inf], dtype=float)
# Signals an engine's periodic log lines give (vLLM stats lines, SGLang batch lines).
LOG_GAUGES = (S.REQUESTS_WAITING, S.REQUESTS_RUNNING, S.KV_USAGE_RATIO, S.PREFIX_HIT_RATIO,
              S.PROMPT_THROUGHPUT_TPS, S.GENERATION_THROUGHPUT_TPS, S.DECODE_PREALLOC_QUEUE,
              S.DECODE_TRANSFER_QUEUE, S.PREFILL_BOOTSTRAP_QUEUE, S.PREFILL_INFLIGHT_QUEUE,
              S.REQUESTS_RETRACTED, S.KV_TRANSFER_AVG_S_LOG, S.KV_TRANSFER_THROUGHPUT_LOG)

Level = float | Callable[[np.ndarray], np.ndarray]  # constant, or a function of time 0..1


def ramp(start: float, end: float, *, begin: float = 0.0) -> Callable[[np.ndarray], np.ndarray]:
    """A level flat at ``start`` until fraction ``begin`` of the window, then linear to ``end``."""
    def f(x: np.ndarray) -> np.ndarray:
        frac = np.clip((x - begin) / max(1.0 - begin, 1e-9), 0.0, 1.0)
        return start + (end - start) * frac
    return f


def step(before: float, after: float, *, at: float) -> Callable[[np.ndarray], np.ndarray]:
    def f(x: np.ndarray) -> np.ndarray:
        return np.where(x < at, before, after)
    return f


def _level(level: Level, x: np.ndarray) -> np.ndarray:
    if callable(level):
        return np.asarray(level(x), dtype=float)
    return np.full(x.shape, float(level))


# --------------------------------------------------------------------------------------------
# long-format row builders


def gauge(instance: str, signal: str, ts: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"ts": ts, "instance": instance, "signal": signal, "kind": S.GAUGE,
                         "le": np.nan, "value": np.asarray(values, dtype=float)})


def counter(instance: str, signal: str, ts: np.ndarray, cumulative: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"ts": ts, "instance": instance, "signal": signal, "kind": S.COUNTER,
                         "le": np.nan, "value": np.asarray(cumulative, dtype=float)})


def cumulative_at(event_ts: np.ndarray, weights: np.ndarray | None,
                  scrape_ts: np.ndarray) -> np.ndarray:
    """Cumulative sum of ``weights`` (or counts) of events at or before each scrape time."""
    order = np.argsort(event_ts, kind="stable")
    t = np.asarray(event_ts, dtype=float)[order]
    w = np.ones(len(t)) if weights is None else np.asarray(weights, dtype=float)[order]
    csum = np.concatenate([[0.0], np.cumsum(w)])
    return csum[np.searchsorted(t, scrape_ts, side="right")]


def histogram(instance: str, signal: str, obs_ts: np.ndarray, obs: np.ndarray,
              scrape_ts: np.ndarray, le: np.ndarray = LATENCY_LE) -> pd.DataFrame:
    """Cumulative bucket/sum/count rows of a histogram at each scrape (vectorised)."""
    obs_ts = np.asarray(obs_ts, dtype=float)
    obs = np.asarray(obs, dtype=float)
    ok = np.isfinite(obs)
    obs_ts, obs = obs_ts[ok], obs[ok]
    # counts[i, j]: observations in bucket j (first bound >= value) up to scrape i.
    scrape_of = np.searchsorted(scrape_ts, obs_ts, side="left")
    bucket_of = np.searchsorted(le, obs, side="left")
    counts = np.zeros((len(scrape_ts) + 1, len(le)))
    np.add.at(counts, (scrape_of, bucket_of), 1.0)
    cum = np.cumsum(np.cumsum(counts, axis=0), axis=1)[:-1]  # over time, then over buckets
    buckets = pd.DataFrame({"ts": np.repeat(scrape_ts, len(le)), "instance": instance,
                            "signal": signal, "kind": S.BUCKET,
                            "le": np.tile(le, len(scrape_ts)), "value": cum.ravel()})
    tail = pd.DataFrame({"ts": np.concatenate([scrape_ts, scrape_ts]), "instance": instance,
                         "signal": signal,
                         "kind": [S.HSUM] * len(scrape_ts) + [S.HCOUNT] * len(scrape_ts),
                         "le": np.nan,
                         "value": np.concatenate([cumulative_at(obs_ts, obs, scrape_ts),
                                                  cumulative_at(obs_ts, None, scrape_ts)])})
    return pd.concat([buckets, tail], ignore_index=True)


def net(node: str, signal: str, ts: np.ndarray, values: np.ndarray, kind: str = S.COUNTER,
        device: str = "mlx5_0", port: str = "1") -> pd.DataFrame:
    return pd.DataFrame({"ts": ts, "node": node, "device": device, "port": port,
                         "signal": signal, "kind": kind, "value": np.asarray(values, float)})


def event_rows(ts: np.ndarray, instance: str, event: str, detail: str = "") -> pd.DataFrame:
    return pd.DataFrame({"ts": np.asarray(ts, float), "instance": instance, "event": event,
                         "detail": detail, "source": "test"})


def make_dataset(requests: pd.DataFrame | None = None, metrics: Iterable[pd.DataFrame] = (),
                 network: Iterable[pd.DataFrame] = (), events: Iterable[pd.DataFrame] = (),
                 instances: Iterable[InstanceInfo] = (), request_columns: Iterable[str] | None
                 = None, sources: Iterable[SourceInfo] = ()) -> Dataset:
    req = conform(requests, REQUEST_COLUMNS) if requests is not None else \
        concat_frames([], REQUEST_COLUMNS)
    cols = frozenset(request_columns) if request_columns is not None else (
        frozenset(c for c in requests.columns if c in REQUEST_COLUMNS)
        if requests is not None else frozenset())
    m, n, e = (concat_frames(list(frames), columns).sort_values(
        "ts", kind="stable", ignore_index=True) for frames, columns in (
        (metrics, METRIC_COLUMNS), (network, NETWORK_COLUMNS), (events, EVENT_COLUMNS)))
    return Dataset(requests=req, metrics=m, network=n, events=e, instances=tuple(instances),
                   sources=tuple(sources), request_columns=cols)


def make_context(ds: Dataset, *, slo_ttft_s: float | None = None,
                 slo_tpot_s: float | None = None,
                 capacity: CapacityResult | Missing | None = None,
                 summaries: bool = False) -> RuleContext:
    """A RuleContext with the real SLO analysis and a simple workload.

    The rules read the evidence (computed here, as the service does), so the per-instance
    summaries (slow to build) are only added with ``summaries=True``.
    """
    from pdprobe.analysis.evidence.build import compute_evidence
    from pdprobe.analysis.instances import summarize_instances
    from pdprobe.analysis.slo import slo_attainment

    workload: WorkloadSummary | Missing = Missing("no request records")
    if len(ds.requests) >= 2:
        t = ds.requests["arrival_ts"]
        span = float(t.max() - t.min()) or 1.0
        workload = WorkloadSummary(requests=len(ds.requests), window_start_ts=float(t.min()),
                                   window_end_ts=float(t.max()),
                                   arrival_rate_rps=len(ds.requests) / span,
                                   prompt_tokens=Missing("not needed"),
                                   output_tokens=Missing("not needed"))
    slo = slo_attainment(ds, slo_ttft_s, slo_tpot_s)
    cap = capacity if capacity is not None else Missing("not estimated")
    evidence = compute_evidence(ds, workload=workload, slo=slo, capacity=cap,
                                slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s)
    return RuleContext(dataset=ds, workload=workload,
                       instances=summarize_instances(ds) if summaries else (),
                       slo=slo, capacity=cap, evidence=evidence,
                       options=RuleOptions(slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s))


def capacity(*, rec_p: int, rec_d: int, dep_p: int, dep_d: int, binding: str = "prefill",
             windows: tuple[RatioWindow, ...] = (), transfer_required: float | None = None,
             transfer_capacity: float | None = None) -> CapacityResult:
    return CapacityResult(
        theoretical_ratio=rec_p / rec_d, recommended_prefill=rec_p, recommended_decode=rec_d,
        deployed_prefill=dep_p, deployed_decode=dep_d, binding=binding,
        transfer_required_bytes_per_s=transfer_required if transfer_required is not None
        else Missing("not estimated"),
        transfer_capacity_bytes_per_s=transfer_capacity if transfer_capacity is not None
        else Missing("not estimated"),
        windows=windows, model_source="test profile")


# --------------------------------------------------------------------------------------------
# a whole cluster


@dataclass
class Cluster:
    """A P/D deployment over a window; every knob defaults to a healthy value.

    Levels (``Level``) are constants or functions of the window fraction 0..1. Per-instance
    dicts override one instance (names ``prefill-0``..., ``decode-0``...).
    """

    n_prefill: int = 2
    n_decode: int = 4
    duration_s: float = 1200.0
    scrape_s: float = 15.0
    rate_rps: float = 8.0
    rate_scale: Level = 1.0  # arrival intensity over time, as a multiple of rate_rps (<= 2)
    seed: int = 7
    engine: str = "vllm"
    prompt_mean: Level = 1500.0
    output_mean: Level = 200.0
    prefill_shares: list[float] | None = None
    decode_shares: list[float] | None = None
    hit_ratio: float = 0.5
    hit_by_decode: Mapping[str, float] = field(default_factory=dict)
    prefill_queue: Level = 0.3  # mean waiting per prefill instance
    prefill_s_per_token: float = 8e-5
    prefill_speed: Mapping[str, float] = field(default_factory=dict)  # time multipliers
    decode_kv: Level = 0.4
    decode_kv_by: Mapping[str, Level] = field(default_factory=dict)
    decode_running: float | None = None  # None: Little's law from traffic and TPOT
    decode_admission: Level = 0.0  # waiting for a decode slot (not remote KV)
    decode_prealloc: Level = 0.0  # SGLang: waiting for KV memory
    prefill_bootstrap: Level = 0.0  # SGLang: prefill waiting for decode
    decode_remote_wait: Level = 0.3  # waiting for remote KV
    retracted: Level = 0.0
    preempt_per_s: Mapping[str, float] = field(default_factory=dict)
    tpot_s: Level = 0.03
    tpot_factor: Mapping[str, float] = field(default_factory=dict)
    kv_bytes_per_token: float = 160e3
    transfer_bytes_per_s: float = 20e9  # achieved per transfer
    transfer_overhead_s: float = 0.005
    transfer_scale: Level = 1.0  # multiplies transfer time (congestion)
    network: str | None = "rdma"  # "rdma", "tcp" (no RDMA series), None
    link_bytes_per_s: float = 50e9
    retrans_per_1k: Mapping[str, float] = field(default_factory=dict)  # by node
    cnp_per_1k: Mapping[str, float] = field(default_factory=dict)
    rdma_port_active: bool = True
    kv_over_tcp: bool = False  # KV bytes over netdev even with RDMA present
    events: list[tuple[str, str, int]] = field(default_factory=list)  # (event, instance, n)
    deployed_prefill: Callable[[np.ndarray], np.ndarray] | None = None  # alive count over time

    # -- names -----------------------------------------------------------------------------
    @property
    def prefill(self) -> list[str]:
        return [f"prefill-{i}" for i in range(self.n_prefill)]

    @property
    def decode(self) -> list[str]:
        return [f"decode-{i}" for i in range(self.n_decode)]

    @staticmethod
    def node(instance: str) -> str:
        return f"node-{instance}"

    def instances(self) -> tuple[InstanceInfo, ...]:
        return tuple([InstanceInfo(n, "prefill", "test", self.node(n), self.engine)
                      for n in self.prefill]
                     + [InstanceInfo(n, "decode", "test", self.node(n), self.engine)
                        for n in self.decode])

    def with_(self, **changes: Any) -> Cluster:
        return replace(self, **changes)

    # -- generation ------------------------------------------------------------------------
    def _rng(self, salt: int) -> np.random.Generator:
        return np.random.default_rng(self.seed * 1000 + salt)

    def scrape_ts(self) -> np.ndarray:
        return T0 + np.arange(0.0, self.duration_s + 1e-9, self.scrape_s)

    def requests(self) -> pd.DataFrame:
        rng = self._rng(1)
        # Poisson arrivals at up to 2x the base rate, thinned to the intensity profile.
        n = rng.poisson(2 * self.rate_rps * self.duration_s)
        arrival = np.sort(T0 + rng.uniform(0, self.duration_s, n))
        x = (arrival - T0) / self.duration_s
        keep = rng.uniform(0, 2, n) < np.clip(_level(self.rate_scale, x), 0, 2)
        arrival, x = arrival[keep], x[keep]
        n = arrival.size
        pm = _level(self.prompt_mean, x)
        om = _level(self.output_mean, x)
        prompt = np.maximum(1, np.round(pm * rng.lognormal(-0.18, 0.6, n))).astype(np.int64)
        output = np.maximum(2, np.round(om * rng.lognormal(-0.18, 0.6, n))).astype(np.int64)
        p_idx = rng.choice(self.n_prefill, size=n, p=self.prefill_shares)
        if self.deployed_prefill is not None:  # route only to instances alive at arrival
            alive = np.clip(np.floor(self.deployed_prefill(x)), 1, self.n_prefill)
            p_idx = np.floor(rng.uniform(0, 1, n) * alive).astype(np.int64)
        d_idx = rng.choice(self.n_decode, size=n, p=self.decode_shares)
        p_names = np.array(self.prefill)[p_idx]
        d_names = np.array(self.decode)[d_idx]
        hit = np.array([self.hit_by_decode.get(d, self.hit_ratio) for d in self.decode])[d_idx]
        cached = np.floor(prompt * np.clip(hit + rng.normal(0, 0.05, n), 0, 1))
        uncached = np.maximum(prompt - cached, 1)
        speed = np.array([self.prefill_speed.get(p, 1.0) for p in self.prefill])[p_idx]
        prefill_s = self.prefill_s_per_token * uncached * speed * rng.uniform(0.9, 1.1, n)
        queue_level = _level(self.prefill_queue, x)
        queue_s = queue_level * self.prefill_s_per_token * np.mean(uncached) * \
            rng.exponential(1.0, n)
        kv_bytes = prompt * self.kv_bytes_per_token
        kv_s = (self.transfer_overhead_s + kv_bytes / self.transfer_bytes_per_s) * \
            _level(self.transfer_scale, x) * rng.uniform(0.9, 1.1, n)
        ttft = queue_s + prefill_s + kv_s
        tf = np.array([self.tpot_factor.get(d, 1.0) for d in self.decode])[d_idx]
        tpot = _level(self.tpot_s, x) * tf * rng.uniform(0.85, 1.15, n)
        e2e = ttft + tpot * (output - 1)
        return pd.DataFrame({
            "arrival_ts": arrival, "prompt_tokens": prompt, "output_tokens": output,
            "request_id": [f"r{i}" for i in range(n)], "cached_tokens": cached,
            "prefill_instance": p_names, "decode_instance": d_names, "queue_s": queue_s,
            "prefill_s": prefill_s, "kv_transfer_s": kv_s, "kv_bytes": kv_bytes,
            "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "status": "ok",
        })

    def metrics(self, req: pd.DataFrame | None = None) -> list[pd.DataFrame]:
        req = self.requests() if req is None else req
        ts = self.scrape_ts()
        x = (ts - T0) / self.duration_s
        rng = self._rng(2)
        out: list[pd.DataFrame] = []

        def noisy(level: np.ndarray, scale: float = 0.5) -> np.ndarray:
            return np.maximum(0.0, level + rng.normal(0, scale, len(level)))

        for p in self.prefill:
            mine = req[req["prefill_instance"] == p]
            out.append(gauge(p, S.REQUESTS_WAITING, ts, np.round(noisy(
                _level(self.prefill_queue, x)))))
            out.append(gauge(p, S.REQUESTS_RUNNING, ts, np.round(noisy(np.full(len(ts), 2.0)))))
            out.append(gauge(p, S.KV_USAGE_RATIO, ts, np.clip(noisy(np.full(len(ts), 0.2), 0.03),
                                                              0, 1)))
            if self.engine == "sglang":
                out.append(gauge(p, S.PREFILL_BOOTSTRAP_QUEUE, ts, np.round(noisy(
                    _level(self.prefill_bootstrap, x), 0.3))))
                out.append(gauge(p, S.PREFILL_INFLIGHT_QUEUE, ts, np.round(noisy(
                    np.full(len(ts), 1.0), 0.3))))
            at = mine["arrival_ts"].to_numpy()
            out.append(counter(p, S.PROMPT_TOKENS_TOTAL, ts, cumulative_at(
                at, mine["prompt_tokens"].to_numpy(), ts)))
            out.append(counter(p, S.PREFIX_QUERIES_TOTAL, ts, cumulative_at(
                at, mine["prompt_tokens"].to_numpy(), ts)))
            out.append(counter(p, S.PREFIX_HITS_TOTAL, ts, cumulative_at(
                at, mine["cached_tokens"].to_numpy(), ts)))
            out.append(counter(p, S.REQUESTS_FINISHED_TOTAL, ts, cumulative_at(at, None, ts)))
            out.append(histogram(p, S.TTFT_S, at, mine["ttft_s"].to_numpy(), ts))
            out.append(histogram(p, S.QUEUE_S, at, mine["queue_s"].to_numpy(), ts))
            out.append(histogram(p, S.PREFILL_S, at, mine["prefill_s"].to_numpy(), ts))
            out.append(histogram(p, S.KV_TRANSFER_S, at, mine["kv_transfer_s"].to_numpy(), ts))
            out.append(histogram(p, S.KV_TRANSFER_BYTES, at, mine["kv_bytes"].to_numpy(), ts,
                                 le=np.array([1e6, 1e7, 1e8, 1e9, 1e10, np.inf])))
            out.append(histogram(p, S.PROMPT_TOKENS, at, mine["prompt_tokens"].to_numpy(), ts,
                                 le=TOKENS_LE))
            out.append(histogram(p, S.OUTPUT_TOKENS, at, mine["output_tokens"].to_numpy(), ts,
                                 le=TOKENS_LE))
            tput = np.diff(cumulative_at(at, mine["prompt_tokens"].to_numpy(), ts),
                           prepend=0.0) / self.scrape_s
            out.append(gauge(p, S.PROMPT_THROUGHPUT_TPS, ts, tput))
            if self.kv_over_tcp or self.network == "tcp":
                out.append(counter(p, S.KV_TCP_BYTES_TOTAL, ts, cumulative_at(
                    at, mine["kv_bytes"].to_numpy(), ts)))
        for d in self.decode:
            mine = req[req["decode_instance"] == d]
            kv_level = self.decode_kv_by.get(d, self.decode_kv)
            out.append(gauge(d, S.KV_USAGE_RATIO, ts, np.clip(noisy(_level(kv_level, x), 0.03),
                                                              0, 1)))
            running = self.decode_running
            if running is None:  # Little's law: sequences in flight = rate x decode time
                running = len(mine) / self.duration_s * float(
                    (mine["tpot_s"] * mine["output_tokens"]).mean()) if len(mine) else 0.0
            out.append(gauge(d, S.REQUESTS_RUNNING, ts, np.round(noisy(
                np.full(len(ts), running), 1.0))))
            remote = np.round(noisy(_level(self.decode_remote_wait, x), 0.3))
            admission = np.round(noisy(_level(self.decode_admission, x), 0.3))
            if self.engine == "sglang":
                out.append(gauge(d, S.REQUESTS_WAITING, ts, admission))
                out.append(gauge(d, S.DECODE_TRANSFER_QUEUE, ts, remote))
                out.append(gauge(d, S.DECODE_PREALLOC_QUEUE, ts, np.round(noisy(
                    _level(self.decode_prealloc, x), 0.3))))
                out.append(gauge(d, S.REQUESTS_RETRACTED, ts, np.round(noisy(
                    _level(self.retracted, x), 0.1))))
            else:
                out.append(gauge(d, S.REQUESTS_WAITING, ts, admission + remote))
                out.append(gauge(d, S.REQUESTS_DEFERRED, ts, remote))
                out.append(gauge(d, S.KV_FETCH_WAITING, ts, remote))
            at = mine["arrival_ts"].to_numpy()
            out.append(counter(d, S.GENERATION_TOKENS_TOTAL, ts, cumulative_at(
                at, mine["output_tokens"].to_numpy(), ts)))
            out.append(counter(d, S.REQUESTS_FINISHED_TOTAL, ts, cumulative_at(at, None, ts)))
            out.append(counter(d, S.PREFIX_QUERIES_TOTAL, ts, cumulative_at(
                at, mine["prompt_tokens"].to_numpy(), ts)))
            out.append(counter(d, S.PREFIX_HITS_TOTAL, ts, cumulative_at(
                at, mine["cached_tokens"].to_numpy(), ts)))
            rate = self.preempt_per_s.get(d, 0.0)
            out.append(counter(d, S.PREEMPTIONS_TOTAL, ts, np.floor(rate * (ts - T0))))
            out.append(histogram(d, S.TPOT_S, at, mine["tpot_s"].to_numpy(), ts))
            out.append(histogram(d, S.TTFT_S, at, mine["ttft_s"].to_numpy(), ts))
            tput = np.diff(cumulative_at(at, mine["output_tokens"].to_numpy(), ts),
                           prepend=0.0) / self.scrape_s
            out.append(gauge(d, S.GENERATION_THROUGHPUT_TPS, ts, tput))
            hit = np.full(len(ts), self.hit_by_decode.get(d, self.hit_ratio))
            out.append(gauge(d, S.PREFIX_HIT_RATIO, ts, np.clip(noisy(hit, 0.02), 0, 1)))
        if self.deployed_prefill is not None:  # an instance reports only while it is alive
            kept = []
            for frame in out:
                inst = str(frame["instance"].iloc[0]) if len(frame) else ""
                if inst in self.prefill:
                    fx = (frame["ts"].to_numpy() - T0) / self.duration_s
                    frame = frame[self.prefill.index(inst) < np.floor(self.deployed_prefill(fx))]
                kept.append(frame)
            out = kept
        return out

    def network_frames(self, req: pd.DataFrame | None = None) -> list[pd.DataFrame]:
        if self.network is None:
            return []
        req = self.requests() if req is None else req
        ts = self.scrape_ts()
        rng = self._rng(3)
        out = []
        for inst in self.prefill + self.decode:
            node = self.node(inst)
            col = "prefill_instance" if inst.startswith("prefill") else "decode_instance"
            mine = req[req[col] == inst]
            at = mine["arrival_ts"].to_numpy()
            kv = cumulative_at(at, mine["kv_bytes"].to_numpy(), ts)
            background = 1e6 * (ts - T0)  # 1 MB/s of ordinary traffic
            if self.network == "tcp":
                out.append(net(node, S.NODE_TCP_TX_BYTES_TOTAL, ts, background + kv,
                               device="eth0", port=""))
                out.append(net(node, S.NODE_TCP_RX_BYTES_TOTAL, ts, background,
                               device="eth0", port=""))
                continue
            tcp_kv = kv if self.kv_over_tcp else 0.0
            out.append(net(node, S.NODE_TCP_TX_BYTES_TOTAL, ts, background + tcp_kv,
                           device="eth0", port=""))
            out.append(net(node, S.NODE_TCP_RX_BYTES_TOTAL, ts, background, device="eth0",
                           port=""))
            rdma = 0.0 * kv if self.kv_over_tcp else kv
            tx_sig = S.RDMA_TX_BYTES_TOTAL if col == "prefill_instance" else \
                S.RDMA_RX_BYTES_TOTAL
            rx_sig = S.RDMA_RX_BYTES_TOTAL if col == "prefill_instance" else \
                S.RDMA_TX_BYTES_TOTAL
            out.append(net(node, tx_sig, ts, rdma))
            out.append(net(node, rx_sig, ts, rdma * 0.01))
            packets = (rdma * 1.01) / 4096.0
            out.append(net(node, S.RDMA_TX_PACKETS_TOTAL, ts, packets))
            rate = self.retrans_per_1k.get(node, 0.0)
            noise = np.cumsum(rng.poisson(0.02, len(ts)))  # a lossless fabric: ~0
            out.append(net(node, S.RDMA_OUT_OF_SEQUENCE_TOTAL, ts,
                           np.floor(packets * rate / 1000.0) + noise))
            out.append(net(node, S.RDMA_LOCAL_ACK_TIMEOUTS_TOTAL, ts, np.zeros(len(ts))))
            cnp = self.cnp_per_1k.get(node, 0.01)
            out.append(net(node, S.RDMA_CNP_HANDLED_TOTAL, ts, np.floor(packets * cnp / 1000)))
            out.append(net(node, S.LINK_RATE_BYTES_PER_S, ts,
                           np.full(len(ts), self.link_bytes_per_s), kind=S.GAUGE))
            out.append(net(node, S.PORT_STATE, ts, np.full(
                len(ts), 4.0 if self.rdma_port_active else 1.0), kind=S.GAUGE))
        return out

    def event_frames(self) -> list[pd.DataFrame]:
        out = []
        for event, inst, count in self.events:
            ts = T0 + np.linspace(0.05, 0.95, count) * self.duration_s
            out.append(event_rows(ts, inst, event))
        return out

    def dataset(self, parts: Iterable[str] = ("requests", "metrics", "network", "events"),
                ) -> Dataset:
        """The cluster as the given input kinds: requests, metrics, logs, network, events.

        ``logs`` keeps only what engine log lines carry (periodic gauges) plus events.
        """
        parts = set(parts)
        req = self.requests()
        metrics: list[pd.DataFrame] = []
        if "metrics" in parts:
            metrics = self.metrics(req)
        elif "logs" in parts:
            metrics = [f[f["signal"].isin(LOG_GAUGES) & (f["kind"] == S.GAUGE)]
                       for f in self.metrics(req)]
        network = self.network_frames(req) if "network" in parts else []
        events = self.event_frames() if ("events" in parts or "logs" in parts) else []
        return make_dataset(req if "requests" in parts else None, metrics, network, events,
                            self.instances())

    def context(self, parts: Iterable[str] = ("requests", "metrics", "network", "events"), *,
                slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
                capacity: CapacityResult | None = None) -> RuleContext:
        return make_context(self.dataset(parts), slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s,
                            capacity=capacity)


ALL_PARTS = ("requests", "metrics", "network", "events")
INPUT_MIXES: Mapping[str, tuple[str, ...]] = {
    "all": ALL_PARTS,
    "requests": ("requests",),
    "metrics": ("metrics", "network"),
    "logs": ("logs",),
}


# Named scenarios shared by the rule tests (each rendered once per input mix and cached).
_BASE = Cluster(duration_s=600)
SCENARIOS: dict[str, Cluster] = {
    "healthy": _BASE,
    "healthy-sglang": _BASE.with_(engine="sglang"),
    "prefill": _BASE.with_(prefill_queue=ramp(0.3, 40, begin=0.3)),
    "decode": _BASE.with_(decode_kv=0.97, preempt_per_s={d: 0.4 for d in _BASE.decode},
                          tpot_s=ramp(0.03, 0.09, begin=0.2),
                          decode_admission=ramp(0, 10, begin=0.2)),
    "kv-full-only": _BASE.with_(decode_kv=0.95),
    "starve": _BASE.with_(engine="sglang", decode_kv=0.96, decode_prealloc=8,
                          prefill_bootstrap=ramp(0, 12, begin=0.2),
                          prefill_queue=ramp(0.3, 20, begin=0.3)),
    "starve-vllm": _BASE.with_(decode_kv=0.95, decode_admission=6,
                               prefill_queue=ramp(0.3, 20, begin=0.3)),
    "xfer-wait": _BASE.with_(transfer_scale=ramp(1, 40, begin=0.2),
                             decode_remote_wait=ramp(0.3, 12, begin=0.2)),
    "rdma": _BASE.with_(retrans_per_1k={"node-prefill-0": 2.0}, transfer_scale=3.0),
    "tcp": _BASE.with_(network="tcp", transfer_bytes_per_s=2e9),
    "skew": _BASE.with_(decode_shares=[0.41, 0.2, 0.2, 0.19], tpot_factor={"decode-0": 1.6}),
    "hit": _BASE.with_(hit_by_decode={"decode-2": 0.03}, hit_ratio=0.62,
                       prefill_queue=ramp(0.3, 30, begin=0.3)),
    "straggler": _BASE.with_(tpot_factor={"decode-1": 2.2}),
    "ratio": _BASE.with_(prompt_mean=step(800, 3000, at=0.5),
                         prefill_queue=step(0.3, 25, at=0.55)),
}
_CONTEXTS: dict[tuple[Any, ...], RuleContext] = {}


def scenario_context(name: str, mix: str = "all", *, slo_ttft_s: float | None = None,
                     slo_tpot_s: float | None = None,
                     capacity: CapacityResult | None = None) -> RuleContext:
    """The context of a named scenario as one input mix, built once per test session."""
    key = (name, mix, slo_ttft_s, slo_tpot_s, repr(capacity))
    if key not in _CONTEXTS:
        _CONTEXTS[key] = SCENARIOS[name].context(INPUT_MIXES[mix], slo_ttft_s=slo_ttft_s,
                                                 slo_tpot_s=slo_tpot_s, capacity=capacity)
    return _CONTEXTS[key]


def only(results: Iterable[object], code: str) -> list[Any]:
    """The Finding objects of one rule code among ``results``."""
    from pdprobe.rules.base import Finding

    return [r for r in results if isinstance(r, Finding) and r.code == code]
