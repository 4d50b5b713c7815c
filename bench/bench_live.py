"""Benchmark the live collector against a local Prometheus holding a big P/D cluster.

Builds (once, cached in --workdir) a TSDB of 1 hour of 512 vLLM 0.33 instances (128 prefill,
384 decode) scraped every 15 s plus node_infiniband counters for their hosts, starts Prometheus
on 127.0.0.1, then times ``collect_partial`` (queries, points, seconds) and the end-to-end
``pdprobe diagnose --prometheus`` command. Building the TSDB takes several minutes; the data is
written in groups of instances so promtool never holds more than one group in memory.

    /work/venv/bin/python bench/bench_live.py [--workdir DIR] [--instances 512] [--runs 3]
        [--checkout DIR ...] [--header 'Name: value']

With ``--checkout`` (repeatable) the end-to-end runs alternate between this checkout and the
others given, against the same server, and print each one's user and system CPU separately: on
a shared machine that is the only fair before/after (wall times move with the neighbours).

Prints a Markdown table (progress on stderr) and leaves a JSON copy in bench/out/. Wall times
depend on the machine's load (recorded); the CPU seconds of pdprobe and of Prometheus much less.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.live.omgen import ClusterSpec, generate  # noqa: E402
from tests.live.prom_server import PromServer, binaries, create_blocks  # noqa: E402

GROUP = 32  # instances per OpenMetrics file handed to promtool
OUT = REPO / "bench" / "out"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def build(workdir: Path, n_prefill: int, n_decode: int, duration_s: int) -> dict[str, object]:
    marker = workdir / "cluster.json"
    wanted = {"n_prefill": n_prefill, "n_decode": n_decode, "duration_s": duration_s}
    if marker.exists():
        meta = json.loads(marker.read_text())
        if {k: meta.get(k) for k in wanted} == wanted:
            log(f"reusing TSDB in {workdir} ({meta['samples']:,} samples)")
            return meta
    tools = binaries()
    if tools is None:
        sys.exit("promtool/prometheus not installed")
    promtool, _ = tools
    tsdb = workdir / "tsdb"
    if tsdb.exists():
        subprocess.run(["rm", "-rf", str(tsdb)], check=True)
    workdir.mkdir(parents=True, exist_ok=True)
    end = (int(time.time()) // 15) * 15 - 3 * 3600
    n = n_prefill + n_decode
    samples = 0
    t0 = time.monotonic()
    for lo in range(0, n, GROUP):
        spec = ClusterSpec(n_prefill=n_prefill, n_decode=n_decode, duration_s=duration_s,
                           end_ts=end, seed=lo, restart=None, gap=None,
                           index_range=(lo, min(n, lo + GROUP)))
        om = workdir / "part.om"
        gen = generate(spec, om)
        create_blocks(om, tsdb, promtool)
        om.unlink()
        samples += gen.samples
        log(f"  instances {lo}-{min(n, lo + GROUP) - 1}: {gen.samples:,} samples "
            f"({time.monotonic() - t0:.0f} s)")
    meta = {**wanted, "end_ts": end, "samples": samples, "build_s": round(time.monotonic() - t0)}
    marker.write_text(json.dumps(meta))
    return meta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=OUT / "live")
    parser.add_argument("--instances", type=int, default=512)
    parser.add_argument("--duration", type=int, default=3600, help="seconds of data")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--checkout", type=Path, action="append", default=[],
                        help="another pdprobe checkout to alternate the end-to-end runs with")
    parser.add_argument("--header", action="append", default=[],
                        help="passed to diagnose as -H (e.g. 'Accept-Encoding: identity')")
    args = parser.parse_args()
    n_prefill = args.instances // 4
    meta = build(args.workdir, n_prefill, args.instances - n_prefill, args.duration)
    tools = binaries()
    assert tools is not None
    # An installed pdprobe has its bytecode compiled at install time; a checkout run with
    # PYTHONDONTWRITEBYTECODE (as here) would compile ~90 modules again in every timed run.
    checkouts = [REPO, *(c.resolve() for c in args.checkout)]
    for checkout in checkouts:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkout / "pdprobe")],
                       check=True)
    server = PromServer.start(args.workdir / "tsdb", args.workdir / "server", tools[1])
    try:
        # promtool wrote one block per group: let Prometheus merge the overlapping blocks first
        # (it compacts them in the background a minute after start), or the runs would time it.
        wait_compacted(args.workdir / "tsdb")
        results = run(server.url, server.proc.pid, meta, args.runs, checkouts, args.header)
    finally:
        server.stop()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench_live.json").write_text(json.dumps(results, indent=2))


def wait_compacted(tsdb: Path, timeout_s: float = 900.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        blocks = [p for p in tsdb.iterdir() if p.is_dir() and (p / "meta.json").exists()]
        spans = {json.loads((p / "meta.json").read_text())["minTime"] for p in blocks}
        if len(blocks) == len(spans):  # no two blocks cover the same range
            return
        log(f"waiting for Prometheus to compact {len(blocks)} overlapping blocks")
        time.sleep(15)


def run(url: str, prom_pid: int, meta: dict[str, object], runs: int,
        checkouts: list[Path], headers: list[str]) -> dict[str, object]:
    end, duration = float(meta["end_ts"]), float(meta["duration_s"])  # type: ignore[arg-type]
    print(f"{meta['n_prefill']} prefill + {meta['n_decode']} decode instances, "
          f"{duration / 3600:g} h at 15 s, {meta['samples']:,} samples in the TSDB")
    # The end-to-end runs come first: a child's peak RSS counts the parent's memory at fork
    # time, and the in-process collections below would make it the parent's ~1 GB.
    cmd = [sys.executable, "-m", "pdprobe", "diagnose", "--prometheus", url, "--since",
           f"{duration:.0f}s", "--until", f"{end:.0f}", "--timeout", "120", "--format", "json",
           *(arg for h in headers for arg in ("-H", h))]
    log("warm-up run (Prometheus' caches), not timed")
    run_diagnose(cmd, checkouts[0], prom_pid, 0, show=False)
    print()
    print("| `diagnose --prometheus` run | checkout | exit | status | wall (s) | pdprobe CPU (s) "
          "| user (s) | sys (s) | Prometheus CPU (s) | peak RSS (MB) | load avg |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    e2e = []
    for i in range(runs):
        for checkout in checkouts:
            e2e.append(run_diagnose(cmd, checkout, prom_pid, i + 1))
    rows = collect_runs(url, prom_pid, end, duration, runs)
    for checkout in checkouts:
        walls = sorted(r["wall_s"] for r in e2e if r["checkout"] == str(checkout))
        cpus = sorted(r["cpu_s"] for r in e2e if r["checkout"] == str(checkout))
        prom = sorted(r["prometheus_cpu_s"] for r in e2e if r["checkout"] == str(checkout))
        print()
        print(f"`pdprobe diagnose --prometheus` end to end ({checkout}): median "
              f"{walls[len(walls) // 2]:.2f} s, best {walls[0]:.2f} s, worst {walls[-1]:.2f} s "
              f"over {runs} runs; pdprobe CPU median {cpus[len(cpus) // 2]:.2f} s, Prometheus "
              f"CPU median {prom[len(prom) // 2]:.2f} s")
    return {"cluster": meta, "collect": rows, "diagnose": e2e}


def collect_runs(url: str, prom_pid: int, end: float, duration: float,
                 runs: int) -> list[dict[str, object]]:
    """``collect_partial`` of this checkout in this process: queries, points, CPU."""
    from pdprobe.collectors.prometheus import collect_partial
    from pdprobe.collectors.prometheus_target import PrometheusTarget

    target = PrometheusTarget(url=url, since_s=duration, until_ts=end, timeout_s=120.0)
    print()
    print("| run | collect wall (s) | pdprobe CPU (s) | Prometheus CPU (s) | queries | "
          "range queries | points | metric rows | network rows | load avg |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows: list[dict[str, object]] = []
    for i in range(runs):
        load = os.getloadavg()[0]
        cpu0, pcpu0, t0 = time.process_time(), proc_cpu_s(prom_pid), time.monotonic()
        result = collect_partial(target)
        took = time.monotonic() - t0
        cpu, pcpu = time.process_time() - cpu0, proc_cpu_s(prom_pid) - pcpu0
        qs = result.meta.queries
        ranges = [q for q in qs if q.endpoint == "/api/v1/query_range"]
        net, met = result.partial.network, result.partial.metrics
        row = {"run": i + 1, "wall_s": round(took, 2), "cpu_s": round(cpu, 2),
               "prometheus_cpu_s": round(pcpu, 2), "queries": len(qs),
               "range_queries": len(ranges), "points": sum(q.points for q in qs),
               "metric_rows": 0 if met is None else len(met),
               "network_rows": 0 if net is None else len(net), "load": round(load, 1)}
        rows.append(row)
        print(f"| {i + 1} | {took:.2f} | {cpu:.2f} | {pcpu:.2f} | {len(qs)} | {len(ranges)} | "
              f"{row['points']:,} | {row['metric_rows']:,} | {row['network_rows']:,} | "
              f"{load:.1f} |", flush=True)
    return rows


def run_diagnose(cmd: list[str], checkout: Path, prom_pid: int, run_no: int, *,
                 show: bool = True) -> dict[str, object]:
    """One end-to-end diagnosis of ``checkout``: its own CPU and peak RSS (``os.wait4``)."""
    import tempfile

    load = os.getloadavg()[0]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pcpu0, t0 = proc_cpu_s(prom_pid), time.monotonic()
        # cwd too: `python -m` puts the working directory first on sys.path.
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=checkout,
                                env={**os.environ, "PYTHONPATH": str(checkout)})
        _, wstatus, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(wstatus)
        took = time.monotonic() - t0
        pcpu = proc_cpu_s(prom_pid) - pcpu0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    status = json.loads(stdout)["status"] if stdout.strip() else stderr.strip()[:80]
    user, system = usage.ru_utime, usage.ru_stime
    row = {"run": run_no, "checkout": str(checkout), "exit": proc.returncode, "status": status,
           "wall_s": round(took, 2), "cpu_s": round(user + system, 2), "user_s": round(user, 2),
           "sys_s": round(system, 2), "prometheus_cpu_s": round(pcpu, 2),
           "peak_rss_mb": round(usage.ru_maxrss / 1024), "load": round(load, 1)}
    if show:
        print(f"| {run_no} | {checkout.name} | {proc.returncode} | {status} | {took:.2f} | "
              f"{row['cpu_s']:.2f} | {user:.2f} | {system:.2f} | {pcpu:.2f} | "
              f"{row['peak_rss_mb']} | {load:.1f} |", flush=True)
    return row


if __name__ == "__main__":
    main()
