"""Benchmark: the OpenMetrics / Prometheus-text reader on cluster-sized dumps.

Generates, into bench/out/ (git-ignored), what a real vLLM 0.33 P/D cluster leaves behind, and
measures ``pdprobe.collectors.openmetrics.read_openmetrics`` and ``pdprobe diagnose FILE
--format json`` on it. Each measurement runs in a fresh subprocess (so peak RSS is per run);
the table shows the median of ``--repeat`` runs (default 3).

The cluster (deterministic from ``SEED``): 4 prefill and 8 decode vLLM 0.33 instances on their
own nodes, half the decode instances with two data-parallel engines (``engine="0"``/``"1"``);
every metric of reference §1.1-1.3 that a P/D deployment with the NIXL connector exposes, with
the real 0.33 histogram bounds, ``engine``/``model_name`` labels plus the ``instance``/``job``
labels Prometheus adds, and the ``<name>_created`` series prometheus_client emits; one decode
instance restarts mid-window (its counters fall to zero). Each node also runs node_exporter:
``node_infiniband_*`` port and hardware counters for two mlx5 devices. Prometheus' own ``up`` and
``scrape_duration_seconds`` series are there too (the reader ignores and counts them). Scrapes
every 15 s, each target at its own offset with a few ms of jitter, as a TSDB stores them.

Files (SIZE is the target in MB, default 50 and 250):

- ``om_<SIZE>mb.om``: ``promtool tsdb dump-openmetrics`` layout: series after series (sorted by
  label set), ``name{labels} value seconds.mmm``, values printed like Go's ``%g``, ``# EOF``;
- ``om_<SIZE>mb.om.gz``: the same, gzip level 6;
- ``scrapes_<SIZE>mb.prom``: concatenated ``/metrics`` scrapes of one decode instance (two DP
  engines) without timestamps, as ``while true; do curl -s host:8000/metrics; sleep 15; done``
  leaves them: ``# HELP``/``# TYPE`` in every scrape, no ``instance`` label.

Usage (from the repository root)::

    /work/venv/bin/python bench/bench_openmetrics.py                  # 50 and 250 MB, 3 runs
    /work/venv/bin/python bench/bench_openmetrics.py --sizes 50 --repeat 1
    /work/venv/bin/python bench/bench_openmetrics.py --no-e2e         # reader only

Prints a Markdown table and writes bench/out/bench_openmetrics.json.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
SEED = 20250615
START_TS = 1_750_000_000.0
SCRAPE_S = 15.0
MODEL = "llama-3-70b"
N_PREFILL = 4
N_DECODE = 8
DP_DECODE = frozenset({1, 3, 5, 7})  # decode instances running two DP engines
RESTART = (2, 0.55)  # (decode index, fraction of the window): the instance restarts
IB_DEVICES = ("mlx5_0", "mlx5_1")
VARIANTS = ("om", "om.gz", "scrapes")

# vLLM 0.33 histogram bounds (reference §1.2, §1.3); request_tokens for max_model_len 8192.
TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
       20.0, 40.0, 80.0)
LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
           240.0, 480.0, 960.0, 1920.0, 7680.0)
TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
ITERATION = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
XFER = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
XFER_BYTES = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))


# --------------------------------------------------------------------------------------------
# Value formatting as Prometheus writes it
# --------------------------------------------------------------------------------------------


def go_g(value: float) -> str:
    """``strconv.FormatFloat(v, 'g', -1, 64)``: shortest digits, exponent form from 1e6 on."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    exp = int(np.floor(np.log10(abs(value))))
    if exp < -4 or exp >= 6:
        return np.format_float_scientific(value, unique=True, trim="-", exp_digits=2)
    return np.format_float_positional(value, unique=True, trim="-")


def format_values(values: np.ndarray) -> list[str]:
    """Go ``%g`` strings; integers below 1e6 (bucket counts, young counters) print as such."""
    out = np.empty(len(values), dtype=object)
    small = (values == np.round(values)) & (np.abs(values) < 1e6)
    out[small] = values[small].astype(np.int64).astype(str)
    for i in np.flatnonzero(~small).tolist():
        out[i] = go_g(float(values[i]))
    return list(out.tolist())


def le_label(bound: float) -> str:
    """A bucket bound as prometheus_client's ``floatToGoString`` prints it (0.5, 1.0, 2.56e+09)."""
    text = repr(float(bound))
    dot = text.find(".")
    if bound > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


# --------------------------------------------------------------------------------------------
# The cluster
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Engine:
    """One vLLM engine core: the unit its metrics are labelled by."""

    role: str
    index: int  # instance index within its role
    engine: str
    host: str

    @property
    def instance(self) -> str:
        return f"{self.host}:8000"

    @property
    def job(self) -> str:
        return f"vllm-{self.role}"


def engines() -> list[Engine]:
    out = [Engine("prefill", i, "0", f"10.0.1.{i + 1}") for i in range(N_PREFILL)]
    for i in range(N_DECODE):
        out += [Engine("decode", i, e, f"10.0.2.{i + 1}")
                for e in (("0", "1") if i in DP_DECODE else ("0",))]
    return out


def hosts() -> list[str]:
    return sorted({e.host for e in engines()})


@dataclass
class Series:
    """One series: its exposition key and its values per scrape."""

    name: str
    labels: dict[str, str]
    values: np.ndarray
    target: str  # which scrape target (timestamps are per target)

    def key(self, extra: dict[str, str] | None = None) -> str:
        labels = {**self.labels, **(extra or {})}
        body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return f"{self.name}{{{body}}}"


class Cluster:
    """Every series of the cluster over ``n`` scrapes (numpy per family, no per-sample loop)."""

    def __init__(self, n: int, seed: int = SEED) -> None:
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.series: list[Series] = []
        self.types: dict[str, str] = {}  # family -> prometheus type, for # TYPE lines
        self.truth: dict[str, float] = {}  # numbers the reader must reproduce
        swell = 1.0 + 0.3 * np.sin(np.linspace(0.0, 3.0 * np.pi, n))  # load varies over time
        restart_at = int(RESTART[1] * n)
        for eng in engines():
            self._engine(eng, swell, restart_at)
        for host in hosts():
            self._node(host, swell)

    # -- helpers -------------------------------------------------------------------------------

    def _add(self, family: str, kind: str, name: str, labels: dict[str, str], values: np.ndarray,
             target: str) -> None:
        self.types.setdefault(family, kind)
        self.series.append(Series(name, labels, values, target))

    def _cumulative(self, inc: np.ndarray, reset_at: int | None) -> np.ndarray:
        total = np.cumsum(inc, axis=0)
        if reset_at is not None and 0 < reset_at < len(total):
            total[reset_at:] -= total[reset_at - 1]  # the process restarted: counting from 0
        return total

    # -- vLLM ----------------------------------------------------------------------------------

    def _engine(self, eng: Engine, swell: np.ndarray, restart_at: int) -> None:
        rng, n = self.rng, self.n
        reset = restart_at if (eng.role == "decode" and eng.index == RESTART[0]) else None
        base = {"engine": eng.engine, "instance": eng.instance, "job": eng.job,
                "model_name": MODEL}
        target = eng.instance
        rate = (4.0 if eng.role == "prefill" else 2.0) * swell  # requests/s per engine
        req = rng.poisson(rate * SCRAPE_S).astype(float)
        prompt_mean, output_mean = 1500.0, 250.0
        prompt = req * prompt_mean * rng.uniform(0.8, 1.2, n)
        generated = req * (1.0 if eng.role == "prefill" else output_mean)
        created = START_TS - 3600.0 * (1 + eng.index)  # when the process registered its metrics
        created_after = np.where(np.arange(n) >= (reset or n), START_TS + (reset or 0) * SCRAPE_S,
                                 created)

        def gauge(name: str, values: np.ndarray, extra: dict[str, str] | None = None) -> None:
            self._add(name, "gauge", name, {**base, **(extra or {})}, values, target)

        def counter(name: str, inc: np.ndarray, extra: dict[str, str] | None = None) -> None:
            labels = {**base, **(extra or {})}
            total = self._cumulative(inc, reset)
            self._add(name, "counter", name + "_total", labels, total, target)
            self._add(name, "counter", name + "_created", labels, created_after, target)
            if name == "vllm:generation_tokens":
                key = f"generation_increase:{eng.instance}"
                # The increase over the window, restarts included (what promql increase() says).
                self.truth[key] = self.truth.get(key, 0.0) + float(inc[1:].sum())

        def histogram(name: str, bounds: tuple[float, ...], n_obs: np.ndarray, median: float,
                      sigma: float) -> None:
            from scipy.special import ndtr

            med = median * rng.lognormal(0.0, 0.05, n) * swell ** 0.5  # slower under load
            z = (np.log(np.asarray(bounds))[None, :] - np.log(med)[:, None]) / sigma
            inc = np.floor(n_obs[:, None] * ndtr(z))  # monotonic in bound and (cumsum) in time
            buckets = self._cumulative(inc, reset)
            count = self._cumulative(n_obs, reset)
            total = self._cumulative(n_obs * med * np.exp(sigma ** 2 / 2), reset)
            self.types.setdefault(name, "histogram")
            for j, bound in enumerate(bounds):
                self.series.append(Series(name + "_bucket", {**base, "le": le_label(bound)},
                                          buckets[:, j], target))
            # prometheus_client's order: buckets, count, sum, created.
            self.series.append(Series(name + "_bucket", {**base, "le": "+Inf"}, count, target))
            self.series.append(Series(name + "_count", base, count, target))
            self.series.append(Series(name + "_sum", base, total, target))
            self.series.append(Series(name + "_created", base, created_after, target))

        prefill = eng.role == "prefill"
        running = rng.poisson((6.0 if prefill else 48.0) * swell).astype(float)
        waiting = rng.poisson((2.0 if prefill else 3.0) * swell ** 3).astype(float)
        deferred = np.minimum(waiting, rng.poisson(1.0, n))
        gauge("vllm:num_requests_running", running)
        gauge("vllm:num_requests_waiting", waiting)
        gauge("vllm:num_requests_waiting_by_reason", waiting - deferred, {"reason": "capacity"})
        gauge("vllm:num_requests_waiting_by_reason", deferred, {"reason": "deferred"})
        kv_usage = np.clip((0.15 if eng.role == "prefill" else 0.6) * swell
                           + rng.normal(0, 0.03, n), 0.0, 1.0).round(4)
        gauge("vllm:kv_cache_usage_perc", kv_usage)
        if eng.role == "decode":  # registered only on KV consumers
            for stage in ("waiting_to_start", "in_progress", "completed_waiting"):
                gauge("vllm:num_requests_kv_fetch_by_stage", rng.poisson(1.0, n).astype(float),
                      {"stage": stage})

        hits = np.floor(prompt * 0.3)
        counter("vllm:prompt_tokens", prompt if eng.role == "prefill" else np.floor(prompt * 0.02))
        counter("vllm:generation_tokens", generated)
        counter("vllm:prefix_cache_queries", prompt)
        counter("vllm:prefix_cache_hits", hits)
        external = prompt if eng.role == "decode" else np.zeros(n)
        counter("vllm:external_prefix_cache_queries", external)
        counter("vllm:external_prefix_cache_hits", np.floor(external * 0.99))
        counter("vllm:num_preemptions", rng.poisson(0.05 if eng.role == "prefill" else 0.4, n)
                .astype(float))
        for reason, share in (("stop", 0.9), ("length", 0.09), ("abort", 0.01), ("error", 0.0),
                              ("repetition", 0.0)):
            counter("vllm:request_success", np.floor(req * share), {"finished_reason": reason})
        local = prompt - hits if eng.role == "prefill" else np.floor(prompt * 0.02)
        for source, inc in (("local_compute", local), ("local_cache_hit", hits),
                            ("external_kv_transfer", np.floor(external * 0.98))):
            counter("vllm:prompt_tokens_by_source", inc, {"source": source})
        counter("vllm:prompt_tokens_cached", hits)
        counter("vllm:nixl_num_failed_transfers", rng.poisson(0.01, n).astype(float))

        decode_side = eng.role == "decode"
        histogram("vllm:time_to_first_token_seconds", TTFT, req, 0.6 if decode_side else 0.35, 0.7)
        histogram("vllm:inter_token_latency_seconds", ITL, generated, 0.03, 0.4)
        histogram("vllm:request_time_per_output_token_seconds", ITL, req, 0.03, 0.3)
        histogram("vllm:e2e_request_latency_seconds", LATENCY, req,
                  8.0 if decode_side else 0.4, 0.6)
        histogram("vllm:request_queue_time_seconds", LATENCY, req, 0.05, 1.0)
        histogram("vllm:request_prefill_time_seconds", LATENCY, req, 0.25, 0.5)
        histogram("vllm:request_decode_time_seconds", LATENCY, req,
                  7.5 if decode_side else 0.001, 0.6)
        histogram("vllm:request_prompt_tokens", TOKENS, req, prompt_mean, 0.8)
        histogram("vllm:request_generation_tokens", TOKENS, req,
                  output_mean if decode_side else 1.0, 0.7 if decode_side else 0.01)
        histogram("vllm:iteration_tokens_total", ITERATION, req * 8, 256.0, 1.0)
        histogram("vllm:nixl_xfer_time_seconds", XFER, req, 0.02, 0.6)
        histogram("vllm:nixl_bytes_transferred", XFER_BYTES, req, 1500 * 327_680.0, 0.8)

    # -- node_exporter -------------------------------------------------------------------------

    def _node(self, host: str, swell: np.ndarray) -> None:
        rng, n = self.rng, self.n
        target = f"{host}:9100"
        prefill_node = host.startswith("10.0.1.")
        for device in IB_DEVICES:
            labels = {"device": device, "instance": target, "job": "node", "port": "1"}

            def counter(name: str, inc: np.ndarray, labels: dict[str, str] = labels) -> None:
                full = f"node_infiniband_{name}"
                start = float(rng.integers(1 << 30, 1 << 40))
                self._add(full, "counter", full, labels, start + np.cumsum(inc), target)

            def gauge(name: str, value: float, labels: dict[str, str] = labels) -> None:
                full = f"node_infiniband_{name}"
                self._add(full, "gauge", full, labels, np.full(n, value), target)

            kv_bytes = np.floor(2.0e9 * swell * SCRAPE_S * rng.uniform(0.9, 1.1, n))
            tx, rx = (kv_bytes, kv_bytes * 0.01) if prefill_node else (kv_bytes * 0.01, kv_bytes)
            counter("port_data_transmitted_bytes_total", tx)
            counter("port_data_received_bytes_total", rx)
            counter("port_packets_transmitted_total", np.floor(tx / 4096))
            counter("port_packets_received_total", np.floor(rx / 4096))
            counter("port_transmit_wait_total", rng.poisson(50.0, n).astype(float))
            counter("out_of_sequence_packets_received_total", rng.poisson(0.2, n).astype(float))
            counter("packet_sequence_errors_total", rng.poisson(0.05, n).astype(float))
            counter("local_ack_timeout_errors_total", rng.poisson(0.01, n).astype(float))
            counter("duplicate_requests_packets_total", rng.poisson(0.05, n).astype(float))
            counter("implied_nak_seq_errors_total", rng.poisson(0.02, n).astype(float))
            counter("rp_cnp_packets_handled_total", rng.poisson(3.0, n).astype(float))
            counter("np_ecn_marked_roce_packets_received_total", rng.poisson(5.0, n).astype(float))
            counter("np_cnp_packets_sent_total", rng.poisson(3.0, n).astype(float))
            gauge("rate_bytes_per_second", 5e10)  # 400 Gb/s
            gauge("state_id", 4.0)
            gauge("physical_state_id", 5.0)
        # What Prometheus itself records per target.
        for tgt, job in ((target, "node"), (f"{host}:8000", "vllm-prefill" if prefill_node
                                            else "vllm-decode")):
            labels = {"instance": tgt, "job": job}
            self._add("up", "gauge", "up", labels, np.ones(n), tgt)
            self._add("scrape_duration_seconds", "gauge", "scrape_duration_seconds", labels,
                      np.round(rng.gamma(4.0, 0.004, n), 6), tgt)

    # -- timestamps ----------------------------------------------------------------------------

    def timestamps(self) -> dict[str, list[str]]:
        """Per target: ``seconds.mmm`` strings; a fixed offset per target plus ms jitter."""
        rng = np.random.default_rng(SEED + 1)
        out = {}
        for target in sorted({s.target for s in self.series}):
            offset = float(rng.integers(0, 15_000)) / 1000.0
            jitter = rng.integers(0, 8, self.n) / 1000.0
            ts = START_TS + offset + np.arange(self.n) * SCRAPE_S + jitter
            out[target] = [f"{t:.3f}" for t in ts.tolist()]
        return out


# --------------------------------------------------------------------------------------------
# Writers
# --------------------------------------------------------------------------------------------


def bytes_per_scrape(cluster_1: Cluster) -> float:
    """Size of one scrape of every series in the dump layout."""
    return float(sum(len(s.key()) + len(" 12345 1750000000.000\n") for s in cluster_1.series))


def write_dump(cluster: Cluster, fh: IO[str]) -> int:
    """``promtool tsdb dump-openmetrics`` layout; returns the number of samples."""
    stamps = cluster.timestamps()
    samples = 0
    # Prometheus orders series by label set, __name__ first, values compared as strings.
    for series in sorted(cluster.series, key=lambda s: (s.name, sorted(s.labels.items()))):
        key = series.key()
        values = format_values(series.values)
        ts = stamps[series.target]
        fh.write("".join([f"{key} {v} {t}\n" for v, t in zip(values, ts, strict=True)]))
        samples += len(values)
    fh.write("# EOF\n")
    return samples


HELP = "vLLM metric"  # prometheus_client prints each family's documentation; its length matters


def write_scrapes(cluster: Cluster, fh: IO[str], instance: str) -> int:
    """Concatenated ``/metrics`` scrapes of one instance: no timestamps, no ``instance`` label."""
    mine = [s for s in cluster.series if s.labels.get("instance") == instance
            and s.name.startswith("vllm:")]
    by_family: dict[str, list[tuple[str, list[str]]]] = {}
    for s in mine:
        family = next(f for f in (s.name, s.name.removesuffix("_total"),
                                  s.name.removesuffix("_created"),
                                  s.name.rsplit("_", 1)[0]) if f in cluster.types)
        labels = {k: v for k, v in s.labels.items() if k not in ("instance", "job")}
        key = Series(s.name, labels, s.values, s.target).key()
        by_family.setdefault(family, []).append((key, format_values(s.values)))
    samples = 0
    for i in range(cluster.n):
        parts = []
        for family, rows in by_family.items():
            kind = cluster.types[family]
            exposed = family + "_total" if kind == "counter" else family
            parts.append(f"# HELP {exposed} {HELP}\n# TYPE {exposed} {kind}\n")
            parts.extend(f"{key} {values[i]}\n" for key, values in rows)
            samples += len(rows)
        fh.write("".join(parts))
    return samples


def _scrapes_for(target_bytes: float) -> int:
    probe = Cluster(1)
    return max(2, round(target_bytes / bytes_per_scrape(probe)))


def ensure_files(sizes: list[int]) -> dict[tuple[int, str], dict[str, Any]]:
    """Generate missing files; their paths, sizes and sample counts (cached in a .meta.json)."""
    OUT.mkdir(parents=True, exist_ok=True)
    files: dict[tuple[int, str], dict[str, Any]] = {}
    for size in sizes:
        paths = {"om": OUT / f"om_{size}mb.om", "om.gz": OUT / f"om_{size}mb.om.gz",
                 "scrapes": OUT / f"scrapes_{size}mb.prom"}
        meta_path = OUT / f"om_{size}mb.meta.json"
        meta: dict[str, Any] = (json.loads(meta_path.read_text())
                                if meta_path.exists() and all(p.exists() for p in paths.values())
                                else {})
        if not meta:
            t0 = time.perf_counter()
            n = _scrapes_for(size * 1e6)
            cluster = Cluster(n)
            with _atomic(paths["om"]) as fh:
                dump_samples = write_dump(cluster, fh)
            with paths["om"].open("rb") as src, _atomic(paths["om.gz"], binary=True) as raw, \
                    gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
                while chunk := src.read(8 << 20):
                    gz.write(chunk)
            # The single-instance scrapes file gets as many scrapes as make the same size.
            decode = next(e for e in engines() if e.role == "decode" and e.index in DP_DECODE)
            probe = io.StringIO()
            write_scrapes(Cluster(2), probe, decode.instance)
            per_scrape = len(probe.getvalue()) / 2
            scrape_cluster = Cluster(max(2, round(size * 1e6 / per_scrape)))
            with _atomic(paths["scrapes"]) as fh:
                scrape_samples = write_scrapes(scrape_cluster, fh, decode.instance)
            meta = {
                "scrapes": n, "window_s": (n - 1) * SCRAPE_S, "series": len(cluster.series),
                "samples": {"om": dump_samples, "om.gz": dump_samples,
                            "scrapes": scrape_samples},
                "scrapes_file_scrapes": scrape_cluster.n,
                "truth": cluster.truth, "engines": len(engines()), "hosts": len(hosts()),
            }
            meta_path.write_text(json.dumps(meta, indent=2))
            print(f"generated {size} MB files ({n} scrapes, {dump_samples:,} samples) in "
                  f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
        for variant, path in paths.items():
            files[(size, variant)] = {"path": path, "bytes": path.stat().st_size,
                                      "text_bytes": (paths["om"] if variant == "om.gz" else path)
                                      .stat().st_size,
                                      "samples": meta["samples"][variant], "meta": meta}
    return files


class _atomic:
    """Write to ``path.tmp`` and rename on success, so an interrupted run leaves no half file."""

    def __init__(self, path: Path, binary: bool = False) -> None:
        self.path, self.tmp, self.binary = path, path.with_name(path.name + ".tmp"), binary

    def __enter__(self) -> Any:
        self.fh = self.tmp.open("wb" if self.binary else "w", encoding=None if self.binary
                                else "utf-8")
        return self.fh

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.fh.close()
        if exc_type is None:
            self.tmp.replace(self.path)
        else:
            self.tmp.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# Measured work (each in a fresh child process)
# --------------------------------------------------------------------------------------------


def _peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the
    forking parent (the driver, big after generating the files) across exec."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child_read(path: Path) -> dict[str, Any]:
    """``read_openmetrics`` once, after the imports (timed apart: they cost the same per run)."""
    t_import = time.perf_counter()
    import pandas  # noqa: F401
    import pyarrow.compute  # noqa: F401

    from pdprobe import signals
    from pdprobe.collectors.base import ReadContext
    from pdprobe.collectors.openmetrics import read_openmetrics
    import_s = time.perf_counter() - t_import
    rss_before_mb = _peak_rss_mb()

    c0, t0 = _cpu_self(), time.perf_counter()
    part = read_openmetrics(path, ReadContext())
    wall, cpu = time.perf_counter() - t0, _cpu_self() - c0
    metrics = part.metrics
    network = part.network
    increase = {}
    if metrics is not None:
        gen = metrics[metrics["signal"] == signals.GENERATION_TOKENS_TOTAL]
        for inst, grp in gen.groupby("instance"):
            increase[str(inst)] = float(grp["value"].iloc[-1] - grp["value"].iloc[0])
    return {
        "wall_s": wall, "cpu_s": cpu, "import_s": import_s,
        "peak_rss_mb": _peak_rss_mb(),
        "rss_after_imports_mb": rss_before_mb,
        "metric_rows": 0 if metrics is None else len(metrics),
        "network_rows": 0 if network is None else len(network),
        "instances": sorted(set(metrics["instance"])) if metrics is not None else [],
        "roles": sorted({(h.instance, h.role) for h in part.role_hints}),
        "skipped": part.source.skipped, "warnings": list(part.warnings),
        "notes": list(part.source.notes), "generation_increase": increase,
    }


def child_e2e(path: Path) -> dict[str, Any]:
    """``pdprobe diagnose PATH --format json`` as a user runs it, in a child of this small child
    so RUSAGE_CHILDREN holds exactly its CPU time and peak RSS."""
    exe = Path(sys.executable).with_name("pdprobe")
    cmd = [str(exe) if exe.exists() else "pdprobe", "diagnose", str(path), "--format", "json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    status = None
    with contextlib.suppress(ValueError, KeyError):
        status = json.loads(proc.stdout)["status"]
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024, "exit_code": proc.returncode,
            "status": status,
            "stderr": proc.stderr.decode(errors="replace").strip().splitlines()[-1:]}


def _child(kind: str, path: Path) -> dict[str, Any]:
    load = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, __file__, "--child", kind, str(path)],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1], "load_1m": load}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["load_1m"] = load
    return result


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median wall time, plus the median of each timing across runs."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[-1]
    ordered = sorted(good, key=lambda r: r["wall_s"])
    out = dict(ordered[len(ordered) // 2])
    for key in ("wall_s", "cpu_s", "peak_rss_mb"):
        out[key] = statistics.median(r[key] for r in good)
    out["runs"] = len(good)
    out["wall_s_all"] = [round(r["wall_s"], 2) for r in good]
    out["load_1m_all"] = [round(r["load_1m"], 1) for r in good]
    return out


def check(result: dict[str, Any], meta: dict[str, Any], variant: str) -> str:
    """Did the reader get the cluster right? ('ok' or what is off)."""
    if "error" in result:
        return "error"
    problems = []
    if variant == "scrapes":
        if len(result["instances"]) != 1:
            problems.append(f"{len(result['instances'])} instances")
        found = [re.search(r"read as (\d+) concatenated scrape", n) for n in result["notes"]]
        scrapes = next((int(m.group(1)) for m in found if m), None)
        if scrapes != meta["scrapes_file_scrapes"]:
            problems.append(f"{scrapes} scrapes found, {meta['scrapes_file_scrapes']} written")
        return "; ".join(problems) or "ok"
    if len(result["instances"]) != meta["engines"] - len(DP_DECODE):
        problems.append(f"{len(result['instances'])} instances")
    prefill = {inst for inst, role in result["roles"] if role == "prefill"}
    decode = {inst for inst, role in result["roles"] if role == "decode"}
    if len(prefill) != N_PREFILL or len(decode) != N_DECODE or prefill & decode:
        problems.append(f"roles: {len(prefill)} prefill, {len(decode)} decode hinted")
    for key, expected in meta["truth"].items():
        inst = key.split(":", 1)[1]
        got = result["generation_increase"].get(inst)
        if got is None or abs(got - expected) > 1e-9 * max(1.0, expected):
            problems.append(f"{inst} generation increase {got} != {expected}")
    return "; ".join(problems) or "ok"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 250], help="MB per file")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell; the median is kept")
    parser.add_argument("--no-e2e", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, path = args.child[0], Path(args.child[1])
        print(json.dumps(child_read(path) if kind == "read" else child_e2e(path), default=str))
        return

    files = ensure_files(args.sizes)
    load_start = os.getloadavg()
    rows: list[dict[str, Any]] = []
    for (size, variant), info in files.items():
        if variant not in args.variants:
            continue
        row: dict[str, Any] = {"size_mb": size, "variant": variant, "bytes": info["bytes"],
                               "text_bytes": info["text_bytes"], "samples": info["samples"]}
        row["read"] = _median([_child("read", info["path"]) for _ in range(args.repeat)])
        row["check"] = check(row["read"], info["meta"], variant)
        if not args.no_e2e:
            row["e2e"] = _median([_child("e2e", info["path"]) for _ in range(args.repeat)])
        rows.append(row)
        print(f"{size} MB {variant}: {json.dumps(_brief(row))}", file=sys.stderr)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(),
               "platform": platform.platform(),
               "load_1_5_15_at_start": [round(x, 2) for x in load_start],
               "load_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()]}
    (OUT / "bench_openmetrics.json").write_text(json.dumps(
        {"machine": machine, "rows": rows}, indent=2, default=str))
    print(markdown(rows, machine))


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    def pick(r: dict[str, Any]) -> dict[str, Any]:
        return {k: r[k] for k in ("wall_s_all", "cpu_s", "peak_rss_mb", "load_1m_all", "error",
                                  "exit_code") if k in r}
    return {"check": row.get("check"), "read": pick(row["read"]),
            "e2e": pick(row["e2e"]) if "e2e" in row else None}


def markdown(rows: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    lines = [f"Machine: {machine['cpus']} CPUs, Python {machine['python']}, "
             f"{machine['platform']}; load average (1/5/15 min) "
             f"{machine['load_1_5_15_at_start']} at start, {machine['load_1_5_15_at_end']} at end",
             "",
             "| file | size | samples | read wall | read CPU | read peak RSS | text MB/s (wall) "
             "| diagnose wall | diagnose CPU | diagnose peak RSS | exit | reader check |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        rd, e2e = r["read"], r.get("e2e", {})

        def s(x: dict[str, Any], key: str) -> str:
            return f"{x[key]:.1f} s" if key in x else ("error" if "error" in x else "–")

        def mb(x: dict[str, Any]) -> str:
            return f"{x['peak_rss_mb']:,.0f} MB" if "peak_rss_mb" in x else "–"

        rate = f"{r['text_bytes'] / 1e6 / rd['wall_s']:.0f}" if "wall_s" in rd else "–"
        size = f"{r['bytes'] / 1e6:,.0f} MB" + (f" ({r['text_bytes'] / 1e6:,.0f} MB text)"
                                                 if r["variant"] == "om.gz" else "")
        name = {"om": f"om_{r['size_mb']}mb.om", "om.gz": f"om_{r['size_mb']}mb.om.gz",
                "scrapes": f"scrapes_{r['size_mb']}mb.prom"}[r["variant"]]
        lines.append(f"| `{name}` | {size} | {r['samples']:,} | "
                     f"{s(rd, 'wall_s')} | {s(rd, 'cpu_s')} | {mb(rd)} | {rate} | "
                     f"{s(e2e, 'wall_s')} | {s(e2e, 'cpu_s')} | {mb(e2e)} | "
                     f"{e2e.get('exit_code', '–')} | {r['check']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
