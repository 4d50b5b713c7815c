"""Benchmark: the capacity model (``estimate_capacity``) on large per-request captures.

Uses the synthetic request records of ``bench_requests.py`` (same generator and seed, written
once as zstd Parquet into bench/out/ and reused), and the bundled sample scenario. For each
input, in a fresh subprocess per run: the file is read and fused and the workload summarised
(timed apart), then ``estimate_capacity`` runs once, as ``pdprobe diagnose`` calls it. Reported:
wall time, CPU time (user + system, all threads) and the system part of it (page faults of
fresh memory), peak RSS of the process (it includes the loaded dataset), and the answer (recommended P/D, ratio, TTFT p90) so
that runs can be compared.

Usage (from the repository root)::

    /work/venv/bin/python bench/bench_capacity.py                    # 100k and 1M rows, sample
    /work/venv/bin/python bench/bench_capacity.py --rows 1000000 --repeat 5
    /work/venv/bin/python bench/bench_capacity.py --e2e              # + pdprobe diagnose 1M

Prints a Markdown table and writes bench/out/bench_capacity.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
SAMPLE = "sample"


def _peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the
    forking parent (the driver, big after generating the files) across exec."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu() -> tuple[float, float]:
    """(user + system, system) CPU seconds of this process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_stime


def run_child(source: str) -> dict[str, Any]:
    """Load one input, then time ``estimate_capacity`` on it (in this fresh process)."""
    t0 = time.perf_counter()
    from pdprobe.analysis.capacity import estimate_capacity
    from pdprobe.analysis.workload import summarize_workload
    from pdprobe.services.diagnose import DiagnoseRequest, load_dataset
    from pdprobe.services.verify import capacity_options
    from pdprobe.values import Missing

    request = DiagnoseRequest(paths=() if source == SAMPLE else (Path(source),))
    dataset, _ = load_dataset(request)
    workload = summarize_workload(dataset)
    load_s = time.perf_counter() - t0
    c0, s0 = _cpu()
    t1 = time.perf_counter()
    result = estimate_capacity(dataset, workload, capacity_options(request))
    wall = time.perf_counter() - t1
    c1, s1 = _cpu()
    out: dict[str, Any] = {
        "rows": len(dataset.requests), "load_s": load_s, "capacity_s": wall,
        "capacity_cpu_s": c1 - c0, "capacity_sys_s": s1 - s0,
        "peak_rss_mb": _peak_rss_mb(),
    }
    if isinstance(result, Missing):
        out["answer"] = f"missing: {result.reason}"
    else:
        def num(v: object) -> float | None:
            return round(float(v), 6) if isinstance(v, (int, float)) else None

        out["answer"] = {"prefill": result.recommended_prefill,
                         "decode": result.recommended_decode,
                         "theoretical_ratio": num(result.theoretical_ratio),
                         "ttft_p90_s": num(result.ttft_estimate_p90_s),
                         "windows": len(result.windows), "band": len(result.band)}
    return out


def _child(source: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--child", source], capture_output=True,
                          text=True, cwd=ROOT, check=False)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run_end_to_end(path: Path) -> dict[str, Any]:
    """``pdprobe diagnose PATH --format json`` as a user runs it (wall and CPU of the child)."""
    exe = Path(sys.executable).with_name("pdprobe")
    cmd = [str(exe) if exe.exists() else "pdprobe", "diagnose", str(path), "--format", "json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"cmd": " ".join(["pdprobe", *cmd[1:]]), "exit_code": proc.returncode,
            "total_s": wall, "cpu_s": cpu}


def ensure_inputs(rows: list[int]) -> list[tuple[str, str]]:
    """(label, source) per input: generated Parquet files (reused when present), the sample."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_requests import ensure_files

    paths = ensure_files(rows, ["parquet"])
    return [(f"{n:,} rows", str(paths[(n, "parquet")])) for n in rows]


def markdown(results: list[dict[str, Any]], e2e: dict[str, Any] | None,
             machine: dict[str, Any]) -> str:
    lines = [f"Machine: {machine['cpus']} CPUs, Python {machine['python']}, "
             f"{machine['platform']}; load average {machine['load_before']} before, "
             f"{machine['load_after']} after",
             "",
             "| input | requests | runs | `estimate_capacity` wall (best) | CPU (best) "
             "| of which system | first run wall / CPU | peak RSS | answer |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['label']} | – | – | error: {r['error']} | | | | | |")
            continue
        a = r["answer"]
        answer = a if isinstance(a, str) else (
            f"{a['prefill']}P/{a['decode']}D, ratio {a['theoretical_ratio']}, "
            f"TTFT p90 {a['ttft_p90_s']} s")
        lines.append(
            f"| {r['label']} | {r['rows']:,} | {r['runs']} | {r['capacity_s']:.2f} s "
            f"| {r['capacity_cpu_s']:.2f} s | {r['capacity_sys_s']:.2f} s "
            f"| {r['first_s']:.2f} s / {r['first_cpu_s']:.2f} s | {r['peak_rss_mb']:,.0f} MB "
            f"| {answer} |")
    if e2e is not None:
        lines += ["", f"End to end `{e2e['cmd']}`: exit code {e2e['exit_code']}, "
                      f"{e2e['total_s']:.2f} s wall, {e2e['cpu_s']:.2f} s CPU"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=3,
                        help="fresh processes per input; the best is reported")
    parser.add_argument("--no-sample", action="store_true", help="skip the bundled sample")
    parser.add_argument("--e2e", action="store_true",
                        help="also run pdprobe diagnose on the largest file")
    parser.add_argument("--child", metavar="SOURCE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child)))
        return

    inputs = ensure_inputs(args.rows)
    if not args.no_sample:
        inputs.append(("bundled sample", SAMPLE))
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(),
               "platform": platform.platform(terse=True),
               "load_before": round(os.getloadavg()[0], 1)}
    results = []
    for label, source in inputs:
        runs = []
        for i in range(args.repeat):
            print(f"{label}: run {i + 1}/{args.repeat}", file=sys.stderr)
            runs.append(_child(source))
        ok = [r for r in runs if "error" not in r]
        if not ok:
            results.append({"label": label, "error": runs[0]["error"]})
            continue
        best = min(ok, key=lambda r: r["capacity_s"])
        answers = {json.dumps(r["answer"], sort_keys=True) for r in ok}
        results.append({"label": label, "runs": len(ok), **best,
                        "capacity_cpu_s": min(r["capacity_cpu_s"] for r in ok),
                        "first_s": ok[0]["capacity_s"], "first_cpu_s": ok[0]["capacity_cpu_s"],
                        "same_answer_every_run": len(answers) == 1})
    e2e = None
    if args.e2e:
        print("end to end", file=sys.stderr)
        e2e = run_end_to_end(Path(inputs[len(args.rows) - 1][1]))
    machine["load_after"] = round(os.getloadavg()[0], 1)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench_capacity.json").write_text(json.dumps(
        {"machine": machine, "results": results, "end_to_end": e2e}, indent=2) + "\n")
    print(markdown(results, e2e, machine))


if __name__ == "__main__":
    main()
