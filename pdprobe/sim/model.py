"""The simulator's public interface: run a ``SimConfig``, summarise it, write a capture.

>>> summary = run_to_dir(SimConfig(prefill=3, decode=2, rate_rps=6, duration_s=600), Path("out"))

``run_simulation`` returns the in-memory ``SimResult`` (the capacity model's ``--verify`` uses
it with ``summarize``); ``run_to_dir`` also writes request records, OpenMetrics (engine and
node_exporter), engine logs and ``scenario.toml`` into a temporary folder and renames it into
place at the end, so a failed run leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from pdprobe.errors import UsageError
from pdprobe.sim.config import SimConfig, validate
from pdprobe.sim.engine import TICK_S, F, SimResult
from pdprobe.values import Maybe, Missing

__all__ = ["Percentiles", "SimConfig", "SimResult", "SimSummary", "run_simulation", "run_to_dir",
           "summarize"]

SUMMARY_QUANTILES: Final = (50.0, 90.0, 99.0)


@dataclass(frozen=True)
class Percentiles:
    """Three latency percentiles of a simulated run, for the summary."""
    p50: float
    p90: float
    p99: float

    def fmt(self, scale: float = 1.0, unit: str = "s", digits: int = 3) -> str:
        """``p50 1.234s  p90 ...`` with the values scaled (``1e3`` for ms) and ``digits`` decimals."""
        return (f"p50 {self.p50 * scale:.{digits}f}{unit}  p90 {self.p90 * scale:.{digits}f}{unit}"
                f"  p99 {self.p99 * scale:.{digits}f}{unit}")


@dataclass(frozen=True)
class SimSummary:
    """The headline numbers of one run (what ``pdprobe simulate`` prints at the end)."""

    label: str
    seed: int
    prefill: int
    decode: int
    profile: str
    requests: int
    completed: int
    failed: int  # KV transfer failures
    timed_out: int  # still in flight when the drain time ran out
    arrival_rate_rps: float
    simulated_s: float
    slo_ttft_s: float
    slo_tpot_s: float
    ttft_attainment: Maybe[float]
    tpot_attainment: Maybe[float]
    slo_attainment: Maybe[float]  # both objectives met
    ttft_s: Maybe[Percentiles]
    tpot_s: Maybe[Percentiles]
    kv_transfer_s: Maybe[Percentiles]
    prefill_utilisation: Maybe[float]  # busy share of prefill instance time
    decode_utilisation: Maybe[float]  # share of decode instance time with a non-empty batch
    decode_mean_batch: Maybe[float]
    preemptions: int
    wall_s: float
    output_dir: str | None = None
    files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def render(self) -> str:
        """A few lines for the terminal."""

        def pct(v: Maybe[float]) -> str:
            return f"{v * 100:.1f} %" if not isinstance(v, Missing) else str(v)

        def q(v: Maybe[Percentiles], scale: float = 1.0, unit: str = "s", digits: int = 3) -> str:
            return v.fmt(scale, unit, digits) if not isinstance(v, Missing) else str(v)

        lines = [
            f"simulated {self.prefill}P/{self.decode}D {self.profile}, seed {self.seed}"
            + (f" ({self.label})" if self.label else ""),
            f"  requests     {self.requests} at {self.arrival_rate_rps:.2f} req/s over "
            f"{self.simulated_s:.0f} s: {self.completed} ok, {self.failed} failed, "
            f"{self.timed_out} timed out",
            f"  SLO          TTFT <= {self.slo_ttft_s:g} s: {pct(self.ttft_attainment)}, "
            f"TPOT <= {self.slo_tpot_s * 1e3:g} ms: {pct(self.tpot_attainment)}, both: "
            f"{pct(self.slo_attainment)}",
            f"  TTFT         {q(self.ttft_s)}",
            f"  TPOT         {q(self.tpot_s, 1e3, 'ms', 1)}",
            f"  KV transfer  {q(self.kv_transfer_s, 1e3, 'ms', 1)}",
            f"  utilisation  prefill busy {pct(self.prefill_utilisation)}, decode busy "
            f"{pct(self.decode_utilisation)} (mean batch "
            f"{self.decode_mean_batch if isinstance(self.decode_mean_batch, Missing) else f'{self.decode_mean_batch:.1f}'})"
            f", preemptions {self.preemptions}",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        if self.output_dir:
            lines.append(f"  wrote {len(self.files)} files to {self.output_dir} "
                         f"(simulation took {self.wall_s:.1f} s)")
        return "\n".join(lines) + "\n"


def run_simulation(config: SimConfig) -> SimResult:
    """Validate and simulate ``config`` in memory (deterministic for ``config.seed``)."""
    from pdprobe.sim.engine import simulate

    validate(config)
    return simulate(config)


def summarize(result: SimResult, output_dir: Path | None = None,
              files: tuple[str, ...] = ()) -> SimSummary:
    """The run's headline numbers (requests, SLO attainment, utilisation, latencies) and the files
    written."""
    cfg = result.config
    r = result.requests
    n = r["arrival_s"].size
    ok = r["status"] == 0
    ttft = r["t_first"] - r["arrival_s"]
    out = r["output"]
    tpot = np.where(out > 1, (r["t_finish"] - r["t_first"]) / np.maximum(out - 1, 1), np.nan)
    ttft_ok = ok & (ttft <= cfg.slo_ttft_s)
    tpot_ok = ok & ((tpot <= cfg.slo_tpot_s) | (out <= 1))
    xfer = r["t_kv"] - r["t_pend"]
    last = result.inst[-1] if result.inst.shape[0] else np.zeros((0, len(F)))
    roles = np.array([s.role for s in result.layout.instances])
    alive_s = result.alive.sum(axis=0) * TICK_S

    def util(role: str) -> Maybe[float]:
        sel = roles == role
        total = float(alive_s[sel].sum())
        if total <= 0:
            return Missing(f"no {role} instance time")
        return float(min(1.0, last[sel, F["busy_s"]].sum() / total))

    dec = roles == "decode"
    batch_mean: Maybe[float] = Missing("no decode snapshots")
    if result.inst.shape[0]:
        running = result.inst[:, dec, F["running"]]
        alive = result.alive[:, dec]
        if alive.any():
            batch_mean = float(running[alive].mean())
    ts = result.tick_s
    return SimSummary(
        label=cfg.label,
        seed=cfg.seed,
        prefill=cfg.prefill,
        decode=cfg.decode,
        profile=cfg.profile.name,
        requests=n,
        completed=int(ok.sum()),
        failed=int((r["status"] == 1).sum()),
        timed_out=int((r["status"] == 2).sum()),
        arrival_rate_rps=n / cfg.duration_s,
        simulated_s=float(ts[-1]) if ts.size else 0.0,
        slo_ttft_s=cfg.slo_ttft_s,
        slo_tpot_s=cfg.slo_tpot_s,
        ttft_attainment=float(ttft_ok.mean()) if n else Missing("no requests"),
        tpot_attainment=float(tpot_ok.mean()) if n else Missing("no requests"),
        slo_attainment=float((ttft_ok & tpot_ok).mean()) if n else Missing("no requests"),
        ttft_s=_quantiles(ttft[ok], "no completed request"),
        tpot_s=_quantiles(tpot[ok], "no completed request with more than one output token"),
        kv_transfer_s=_quantiles(xfer[np.isfinite(xfer)], "no KV transfer finished"),
        prefill_utilisation=util("prefill"),
        decode_utilisation=util("decode"),
        decode_mean_batch=batch_mean,
        preemptions=int(r["preemptions"].sum()),
        wall_s=result.wall_s,
        output_dir=str(output_dir) if output_dir else None,
        files=files,
        notes=result.notes,
    )


def _quantiles(values: np.ndarray, why: str) -> Maybe[Percentiles]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return Missing(why)
    p = np.percentile(values, SUMMARY_QUANTILES)
    return Percentiles(float(p[0]), float(p[1]), float(p[2]))


def check_output_dir(out_dir: Path, overwrite: bool) -> None:
    """Refuse to clobber a non-empty folder unless asked (before any work is done)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"{out_dir}: exists and is not a folder", hint="choose another -o path")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise UsageError(f"{out_dir}: folder exists and is not empty",
                         hint="choose a new folder or pass --force to replace it")
    parent = out_dir.resolve().parent
    if not parent.is_dir():
        raise UsageError(f"{out_dir}: parent folder {parent} does not exist", hint="create it first")


def run_to_dir(config: SimConfig, out_dir: Path, *, overwrite: bool = True) -> SimSummary:
    """Simulate ``config`` and write a complete capture into ``out_dir`` (atomically)."""
    check_output_dir(out_dir, overwrite)
    result = run_simulation(config)
    return write_capture(result, out_dir)


def write_capture(result: SimResult, out_dir: Path) -> SimSummary:
    """Write ``result``'s three input kinds and ``scenario.toml``; rename into place at the end.

    ``result.config.delivery`` decides the names and file layouts (``pdprobe.sim.delivery``);
    a non-default delivery also writes ``truth.toml``.
    """
    from dataclasses import replace

    from pdprobe.sim.delivery import TRUTH_FILE, delivered_layout, instance_names, truth_toml
    from pdprobe.sim.writers.common import set_mtime
    from pdprobe.sim.writers.merged_log import write_logs
    from pdprobe.sim.writers.node import write_node_metrics
    from pdprobe.sim.writers.openmetrics import write_engine_metrics, write_per_target_metrics
    from pdprobe.sim.writers.requests import write_requests
    from pdprobe.sim.writers.sglang_log import sglang_log_streams
    from pdprobe.sim.writers.vllm_log import vllm_log_streams

    cfg = result.config
    delivery = cfg.delivery
    names = instance_names(cfg, result.layout)
    shown = replace(result, layout=delivered_layout(cfg, result.layout, names))
    parent = out_dir.resolve().parent
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; a capture is an ordinary folder
    files: list[Path]
    try:
        if cfg.benchmark_format:  # the records as a load generator's output, instead
            from pdprobe.sim.writers.benchmarks import write_benchmark

            files = [write_benchmark(result, tmp, cfg.benchmark_format, cfg.compress)]
        else:
            files = [write_requests(result, tmp, cfg.requests_format, cfg.compress,
                                    names=[n.requests for n in names])]
        if delivery.metrics == "per-target":
            files += write_per_target_metrics(
                shown, tmp, cfg.compress,
                stems={n.index: Path(n.metrics).name.removesuffix(".prom") for n in names})
        else:
            files.append(write_engine_metrics(shown, tmp, cfg.compress))
        files.append(write_node_metrics(result, tmp, cfg.compress))
        streams = sglang_log_streams(shown) if cfg.engine == "sglang" else vllm_log_streams(shown)
        files += write_logs(streams, tmp, cfg.compress, names, delivery, cfg.seed)
        scenario = tmp / "scenario.toml"
        header = f"# workload: {result.workload_source}\n" + "".join(
            f"# note: {n}\n" for n in result.notes)
        scenario.write_text(header + cfg.to_toml(), encoding="utf-8")
        files.append(scenario)
        if not delivery.is_default:
            truth = tmp / TRUTH_FILE
            truth.write_text(truth_toml(cfg, result.layout, names), encoding="utf-8")
            files.append(truth)
        end_ts = cfg.start_ts + (float(result.tick_s[-1]) if result.tick_s.size else 0.0)
        set_mtime(files, end_ts)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    rel = tuple(str(p.relative_to(tmp)) for p in files)
    return summarize(result, out_dir, rel)
