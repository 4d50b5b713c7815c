"""Generate an OpenMetrics file of a vLLM 0.33 P/D cluster for a real Prometheus (tests, bench).

The output is what ``promtool tsdb create-blocks-from openmetrics`` reads: families grouped,
timestamps in seconds, ``# EOF`` at the end. Every series is generated with numpy per family
(instances x steps), so the 512-instance benchmark cluster takes seconds per family.

What the data holds (all deterministic from ``seed``):
- prefill and decode vLLM instances with the 0.33 metric names and buckets (reference §1),
  labelled ``job=vllm-prefill|vllm-decode`` and ``pod=vllm-<role>-<k>``;
- a whole-instance restart (all counters and histograms drop to zero and count again);
- optionally a data-parallel instance (``engine="0"``/``"1"``) whose engine 1 restarts alone;
- a scrape gap (no samples of one instance for a while);
- node_exporter ``node_infiniband_*`` counters per host, one of them a 32-bit counter that wraps.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
XFER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
BYTES_BUCKETS = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))
U32 = float(2**32)


@dataclass(frozen=True)
class ClusterSpec:
    n_prefill: int = 2
    n_decode: int = 4
    duration_s: int = 1800
    scrape_s: int = 15
    end_ts: int = 1_796_000_000
    seed: int = 7
    restart: tuple[int, float] | None = (1, 0.4)  # (instance index, fraction of the window)
    dp_partial_reset: tuple[int, float] | None = None  # (decode index, fraction): engine 1 only
    gap: tuple[int, float, int] | None = (3, 0.6, 120)  # (instance index, fraction, seconds)
    infiniband: bool = True
    wrap_host: int | None = 0  # host whose out_of_sequence counter wraps at 2**32
    acme: bool = False  # two instances of an in-house stack with custom names (metrics map)
    # Write only instances [lo, hi) (names and roles stay those of the whole cluster), so a big
    # cluster can go to promtool in several files.
    index_range: tuple[int, int] | None = None
    namespace: str = "llm"
    model: str = "llama-3-70b"


@dataclass(frozen=True)
class Instance:
    index: int
    role: str
    name: str  # the Prometheus `instance` label
    host: str
    pod: str
    engines: tuple[str, ...]


@dataclass
class Generated:
    spec: ClusterSpec
    instances: list[Instance]
    ts: np.ndarray
    samples: int = 0
    families: list[str] = field(default_factory=list)

    @property
    def start_ts(self) -> float:
        return float(self.ts[0])

    @property
    def end_ts(self) -> float:
        return float(self.ts[-1])


def instances_of(spec: ClusterSpec) -> list[Instance]:
    out = []
    for i in range(spec.n_prefill + spec.n_decode):
        role = "prefill" if i < spec.n_prefill else "decode"
        k = i if role == "prefill" else i - spec.n_prefill
        host = f"10.0.{i // 200}.{i % 200 + 10}"
        engines = ("0",)
        if spec.dp_partial_reset is not None and role == "decode" and k == spec.dp_partial_reset[0]:
            engines = ("0", "1")
        out.append(Instance(i, role, f"{host}:8000", host, f"vllm-{role}-{k}", engines))
    return out


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"


class _Writer:
    def __init__(self, fh, ts: np.ndarray) -> None:
        self.fh = fh
        self.ts_str = [str(int(t)) for t in ts]
        self.samples = 0

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.fh.write(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")

    def series(self, name: str, labels: str, values: np.ndarray, present: np.ndarray) -> None:
        vals = values.tolist()
        lines = [f"{name}{labels} {v!r} {t}\n" for v, t, p in zip(vals, self.ts_str, present.tolist(),
                                                                      strict=True) if p]
        self.samples += len(lines)
        self.fh.writelines(lines)


def _bucket_probs(bounds: tuple[float, ...], median: np.ndarray, sigma: float) -> np.ndarray:
    """P(observation in bucket b) under a lognormal, per instance: [instances, buckets+1]."""
    from scipy.stats import norm

    edges = np.log(np.asarray(bounds, dtype=np.float64))
    z = (edges[None, :] - np.log(median)[:, None]) / sigma
    cdf = norm.cdf(z)
    cdf = np.concatenate([np.zeros((len(median), 1)), cdf, np.ones((len(median), 1))], axis=1)
    return np.diff(cdf, axis=1)


def generate(spec: ClusterSpec, path: Path) -> Generated:
    """Write the cluster's OpenMetrics file to ``path``."""
    rng = np.random.default_rng(spec.seed)
    n_steps = spec.duration_s // spec.scrape_s + 1
    ts = spec.end_ts - spec.duration_s + np.arange(n_steps) * spec.scrape_s
    insts = instances_of(spec)
    if spec.index_range is not None:
        lo, hi = spec.index_range
        insts = [i for i in insts if lo <= i.index < hi]
    # One row per (instance, engine) sub-series.
    rows = [(inst, eng) for inst in insts for eng in inst.engines]
    n_rows = len(rows)
    is_prefill = np.array([inst.role == "prefill" for inst, _ in rows])
    share = np.array([1.0 / len(inst.engines) for inst, _ in rows])
    present = np.ones((n_rows, n_steps), dtype=bool)
    if spec.gap is not None:
        gi, frac, secs = spec.gap
        k0 = int(frac * (n_steps - 1))
        k1 = min(n_steps, k0 + secs // spec.scrape_s)
        for r, (inst, _) in enumerate(rows):
            if inst.index == gi:
                present[r, k0:k1] = False
    # Restarts: cumulative values count again from zero after this step.
    restart_at = np.full(n_rows, -1)
    if spec.restart is not None:
        ri, frac = spec.restart
        for r, (inst, _) in enumerate(rows):
            if inst.index == ri:
                restart_at[r] = int(frac * (n_steps - 1))
    if spec.dp_partial_reset is not None:
        di, frac = spec.dp_partial_reset
        for r, (inst, eng) in enumerate(rows):
            if inst.role == "decode" and inst.index - spec.n_prefill == di and eng == "1":
                restart_at[r] = int(frac * (n_steps - 1))

    def cumulative(inc: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
        """Running sums along time (last axis; rows on the axis before it), plus what the
        counter held before the window, restarting from zero where the instance restarts."""
        cum = np.cumsum(inc.astype(np.float64), axis=-1)
        if start is not None:
            cum += start[..., None]
        for r in np.flatnonzero(restart_at >= 0):
            k = restart_at[r]
            if k > 0:
                cum[..., r, k:] -= cum[..., r, k - 1:k]
        return cum

    # Offered load per sub-series: requests finished per scrape interval.
    rps = np.where(is_prefill, 6.0, 3.0) * share * (1.0 + 0.2 * rng.standard_normal(n_rows)).clip(0.5)
    trend = 1.0 + 0.3 * np.sin(np.linspace(0, 2 * math.pi, n_steps))[None, :]
    reqs = rng.poisson(rps[:, None] * spec.scrape_s * trend)
    prompt_mean = 1800.0
    out_mean = np.where(is_prefill, 1.0, 220.0)
    prompt_tok = rng.poisson(reqs * prompt_mean)
    gen_tok = rng.poisson(reqs * out_mean[:, None])
    # A straggler decode instance (the last one) is 40 % slower per token.
    last = spec.n_prefill + spec.n_decode - 1
    slow = np.array([1.4 if (inst.role == "decode" and inst.index == last) else 1.0
                     for inst, _ in rows])

    out = _FamilySink(rows, spec)
    with path.open("w", encoding="utf-8") as fh:
        w = _Writer(fh, ts)

        def gauge(name: str, values: np.ndarray, help_text: str) -> None:
            w.family(name, "gauge", help_text)
            for r, labels in out.labels():
                w.series(name, labels, values[r], present[r])
            out.families.append(name)

        def counter(name: str, inc: np.ndarray, help_text: str) -> None:
            w.family(name[: -len("_total")], "counter", help_text)
            cum = cumulative(inc, rng.integers(0, 50, size=n_rows).astype(np.float64))
            for r, labels in out.labels():
                w.series(name, labels, cum[r], present[r])
            out.families.append(name)

        def histogram(name: str, bounds: tuple[float, ...], n_obs: np.ndarray, median: np.ndarray,
                      sigma: float, help_text: str, only: np.ndarray | None = None) -> None:
            w.family(name, "histogram", help_text)
            probs = _bucket_probs(bounds, median, sigma)
            counts = np.stack([rng.multinomial(n_obs[r], probs[r]) for r in range(n_rows)])
            # counts: [rows, steps, buckets+1]; a representative value per bucket for the sum.
            edges = np.asarray(bounds, dtype=np.float64)
            mids = np.concatenate([[edges[0] / 2], (edges[:-1] + edges[1:]) / 2, [edges[-1] * 1.5]])
            before = np.stack([rng.multinomial(20, probs[r]) for r in range(n_rows)])  # [rows, b]
            per_le = np.cumsum(counts, axis=2).transpose(2, 0, 1)  # [buckets+1, rows, steps]
            cum_b = cumulative(per_le, np.cumsum(before, axis=1).T.astype(np.float64))
            sums = cumulative((counts * mids[None, None, :]).sum(axis=2),
                              (before * mids[None, :]).sum(axis=1))
            total = cum_b[-1]
            for r, labels in out.labels():
                if only is not None and not only[r]:
                    continue
                for b, le in enumerate((*bounds, math.inf)):
                    le_s = "+Inf" if math.isinf(le) else repr(float(le))
                    w.series(f"{name}_bucket", labels[:-1] + f',le="{le_s}"}}', cum_b[b, r],
                             present[r])
                w.series(f"{name}_count", labels, total[r], present[r])
                w.series(f"{name}_sum", labels, sums[r], present[r])
            out.families.append(name)

        run = rng.poisson(np.where(is_prefill, 4, 48)[:, None] * share[:, None] * trend
                          ).astype(np.float64)
        gauge("vllm:num_requests_running", run, "Number of requests in model execution batches.")
        waiting = rng.poisson(np.where(is_prefill, 3.0, 1.0)[:, None] * trend).astype(np.float64)
        gauge("vllm:num_requests_waiting", waiting, "Number of requests waiting.")
        deferred = np.minimum(waiting, rng.poisson(0.5, size=waiting.shape)).astype(np.float64)
        w.family("vllm:num_requests_waiting_by_reason", "gauge", "Waiting requests by reason.")
        for r, labels in out.labels():
            for reason, vals in (("capacity", waiting[r] - deferred[r]), ("deferred", deferred[r])):
                w.series("vllm:num_requests_waiting_by_reason",
                         labels[:-1] + f',reason="{reason}"}}', vals, present[r])
        out.families.append("vllm:num_requests_waiting_by_reason")
        kv = np.clip(np.where(is_prefill, 0.15, 0.6)[:, None] * trend
                     + 0.05 * rng.standard_normal((n_rows, n_steps)), 0, 1)
        gauge("vllm:kv_cache_usage_perc", kv, "KV-cache usage. 1 means 100 percent usage.")
        fetch = rng.poisson(0.7, size=(n_rows, n_steps)).astype(np.float64)
        w.family("vllm:num_requests_kv_fetch_by_stage", "gauge", "KV fetch by stage.")
        for r, labels in out.labels():
            if is_prefill[r]:
                continue
            for stage in ("waiting_to_start", "in_progress", "completed_waiting"):
                w.series("vllm:num_requests_kv_fetch_by_stage",
                         labels[:-1] + f',stage="{stage}"}}', fetch[r], present[r])
        out.families.append("vllm:num_requests_kv_fetch_by_stage")

        counter("vllm:prompt_tokens_total", prompt_tok, "Number of prefill tokens processed.")
        counter("vllm:generation_tokens_total", gen_tok, "Number of generation tokens processed.")
        aborts = rng.binomial(reqs, 0.01)
        lengths = rng.binomial(reqs - aborts, 0.1)
        w.family("vllm:request_success", "counter", "Count of successfully processed requests.")
        for reason, inc in (("stop", reqs - aborts - lengths), ("length", lengths),
                            ("abort", aborts)):
            cum = cumulative(inc)
            for r, labels in out.labels():
                w.series("vllm:request_success_total", labels[:-1] + f',finished_reason="{reason}"}}',
                         cum[r], present[r])
        out.families.append("vllm:request_success_total")
        counter("vllm:num_preemptions_total", rng.poisson(np.where(is_prefill, 0.0, 0.05)[:, None],
                                                          size=(n_rows, n_steps)),
                "Cumulative number of preemption.")
        hits = rng.binomial(prompt_tok, 0.3)
        counter("vllm:prefix_cache_queries_total", prompt_tok, "Prefix cache queries (tokens).")
        counter("vllm:prefix_cache_hits_total", hits, "Prefix cache hits (tokens).")
        w.family("vllm:prompt_tokens_by_source", "counter", "Prompt tokens by source.")
        external = np.where(is_prefill[:, None], 0, prompt_tok)
        for source, inc in (("local_compute", np.where(is_prefill[:, None], prompt_tok - hits, 0)),
                            ("local_cache_hit", np.where(is_prefill[:, None], hits, 0)),
                            ("external_kv_transfer", external)):
            cum = cumulative(inc)
            for r, labels in out.labels():
                w.series("vllm:prompt_tokens_by_source_total",
                         labels[:-1] + f',source="{source}"}}', cum[r], present[r])
        out.families.append("vllm:prompt_tokens_by_source_total")
        counter("vllm:nixl_num_failed_transfers_total", rng.binomial(reqs, 0.002),
                "Failed NIXL transfers.")

        ttft_med = np.where(is_prefill, 0.35, 0.6)
        histogram("vllm:time_to_first_token_seconds", TTFT_BUCKETS, reqs, ttft_med, 0.6,
                  "Histogram of time to first token in seconds.")
        histogram("vllm:inter_token_latency_seconds", ITL_BUCKETS, gen_tok, 0.03 * slow, 0.35,
                  "Histogram of inter-token latency in seconds.", only=~is_prefill)
        histogram("vllm:request_time_per_output_token_seconds", ITL_BUCKETS, reqs, 0.032 * slow, 0.3,
                  "Histogram of time per output token per request.", only=~is_prefill)
        histogram("vllm:e2e_request_latency_seconds", LATENCY_BUCKETS, reqs,
                  np.where(is_prefill, 0.5, 7.0) * slow, 0.5, "Histogram of e2e latency.")
        histogram("vllm:request_queue_time_seconds", LATENCY_BUCKETS, reqs,
                  np.where(is_prefill, 0.4, 0.3), 0.8, "Histogram of time in WAITING.")
        histogram("vllm:request_prefill_time_seconds", LATENCY_BUCKETS, reqs,
                  np.full(n_rows, 0.35), 0.4, "Histogram of prefill time.")
        histogram("vllm:request_decode_time_seconds", LATENCY_BUCKETS, reqs,
                  np.where(is_prefill, 0.31, 6.5) * slow, 0.4, "Histogram of decode time.")
        histogram("vllm:request_prompt_tokens", TOKEN_BUCKETS, reqs, np.full(n_rows, 1500.0), 0.7,
                  "Number of prefill tokens processed.")
        histogram("vllm:request_generation_tokens", TOKEN_BUCKETS, reqs,
                  np.where(is_prefill, 1.0, 200.0), 0.6, "Number of generation tokens.")
        histogram("vllm:nixl_xfer_time_seconds", XFER_BUCKETS, reqs, np.full(n_rows, 0.03), 0.5,
                  "NIXL transfer duration.", only=~is_prefill)
        histogram("vllm:nixl_bytes_transferred", BYTES_BUCKETS, reqs, np.full(n_rows, 2.0e8), 0.5,
                  "NIXL bytes per transfer.", only=~is_prefill)

        if spec.infiniband:
            _infiniband(w, rng, spec, insts, ts, out)
        if spec.acme:
            _acme(w, rng, ts, out)
        fh.write("# EOF\n")
    return Generated(spec, insts, ts, samples=w.samples, families=out.families)


class _FamilySink:
    """Label sets of the engine sub-series, in row order."""

    def __init__(self, rows: list[tuple[Instance, str]], spec: ClusterSpec) -> None:
        self.rows = rows
        self.spec = spec
        self.families: list[str] = []
        self._base = [
            _labels({"instance": inst.name, "job": f"vllm-{inst.role}", "pod": inst.pod,
                     "namespace": spec.namespace, "model_name": spec.model, "engine": eng})
            for inst, eng in rows]

    def labels(self) -> Iterator[tuple[int, str]]:
        yield from enumerate(self._base)


def _infiniband(w: _Writer, rng: np.random.Generator, spec: ClusterSpec, insts: list[Instance],
                ts: np.ndarray, out: _FamilySink) -> None:
    hosts = sorted({i.host for i in insts}, key=lambda h: [int(p) for p in h.split(".")])
    n, steps = len(hosts), len(ts)
    labels = [_labels({"instance": f"{h}:9100", "job": "node", "device": "mlx5_0", "port": "1"})
              for h in hosts]
    allp = np.ones(steps, dtype=bool)

    def counter(name: str, inc: np.ndarray, start: np.ndarray | None = None,
                bits32: bool = False) -> None:
        w.family(name[: -len("_total")], "counter", f"node_exporter infiniband {name}")
        cum = np.cumsum(inc.astype(np.float64), axis=1)
        if start is not None:
            cum += start[:, None]
        if bits32:
            cum = np.mod(cum, U32)
        for r in range(n):
            w.series(name, labels[r], cum[r], allp)
        out.families.append(name)

    def gauge(name: str, value: float) -> None:
        w.family(name, "gauge", f"node_exporter infiniband {name}")
        for r in range(n):
            w.series(name, labels[r], np.full(steps, value), allp)
        out.families.append(name)

    gauge("node_infiniband_rate_bytes_per_second", 50e9)
    gauge("node_infiniband_state_id", 4.0)
    tx = rng.poisson(2e9 * spec.scrape_s, size=(n, steps))
    counter("node_infiniband_port_data_transmitted_bytes_total", tx)
    counter("node_infiniband_port_data_received_bytes_total", rng.poisson(2e9 * spec.scrape_s,
                                                                          size=(n, steps)))
    counter("node_infiniband_port_packets_transmitted_total", tx // 4096)
    oos_start = np.zeros(n)
    if spec.wrap_host is not None and spec.wrap_host < n:
        oos_start[spec.wrap_host] = U32 - 20_000  # wraps after a few hundred seconds
    counter("node_infiniband_out_of_sequence_packets_received_total",
            rng.poisson(150, size=(n, steps)), start=oos_start, bits32=True)
    counter("node_infiniband_local_ack_timeout_errors_total", rng.poisson(0.2, size=(n, steps)))
    counter("node_infiniband_rp_cnp_packets_handled_total", rng.poisson(30, size=(n, steps)))
    counter("node_infiniband_np_cnp_packets_sent_total", rng.poisson(25, size=(n, steps)))


ACME_INSTANCES = (("10.9.0.1:9000", "ctx", "prefill-pool"), ("10.9.0.2:9000", "gen", "decode-pool"))
ACME_TTFT_MS = (10.0, 50.0, 100.0, 500.0, 1000.0)


def _acme(w: _Writer, rng: np.random.Generator, ts: np.ndarray, out: _FamilySink) -> None:
    """An in-house stack: custom names, a `tier` role label, latencies in milliseconds."""
    steps = len(ts)
    allp = np.ones(steps, dtype=bool)
    labels = [_labels({"instance": inst, "job": "acme", "tier": tier, "acme_pool": pool})
              for inst, tier, pool in ACME_INSTANCES]
    w.family("acme_inflight", "gauge", "Requests in flight.")
    for lab in labels:
        w.series("acme_inflight", lab, rng.poisson(5, size=steps).astype(np.float64), allp)
    reqs = rng.poisson(20, size=(len(labels), steps))
    errors = rng.binomial(reqs, 0.05)
    w.family("acme_requests", "counter", "Requests by outcome.")
    for outcome, inc in (("ok", reqs - errors), ("error", errors)):
        cum = np.cumsum(inc, axis=1).astype(np.float64)
        for r, lab in enumerate(labels):
            w.series("acme_requests_total", lab[:-1] + f',outcome="{outcome}"}}', cum[r], allp)
    w.family("acme_ttft_ms", "histogram", "TTFT in milliseconds.")
    probs = np.array([0.1, 0.3, 0.3, 0.2, 0.08, 0.02])
    for r, lab in enumerate(labels):
        counts = np.cumsum(np.stack([rng.multinomial(n, probs) for n in reqs[r]]), axis=0)
        per_le = np.cumsum(counts, axis=1)
        for b, le in enumerate((*ACME_TTFT_MS, math.inf)):
            le_s = "+Inf" if math.isinf(le) else repr(le)
            w.series("acme_ttft_ms_bucket", lab[:-1] + f',le="{le_s}"}}',
                     per_le[:, b].astype(np.float64), allp)
        w.series("acme_ttft_ms_count", lab, per_le[:, -1].astype(np.float64), allp)
        w.series("acme_ttft_ms_sum", lab, (counts * np.array([5, 30, 75, 300, 750, 1500])).sum(
            axis=1).astype(np.float64), allp)
    out.families.extend(["acme_inflight", "acme_requests_total", "acme_ttft_ms"])
