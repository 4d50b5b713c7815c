"""Benchmark: ``pdprobe simulate`` at the issue's target size, and where the time goes.

Target (issue 3): 30 simulated minutes at 30 req/s with 12 instances in under 30 s and under
1 GiB. Each case runs in a fresh subprocess so peak RSS is per case; the simulation (event
loop) and the writers (request records, OpenMetrics, node_exporter, logs) are timed apart.

Usage (from the repository root)::

    /work/venv/bin/python bench/bench_sim.py            # the target case and a few variants
    /work/venv/bin/python bench/bench_sim.py --quick    # the target case only

Prints a Markdown table and writes bench/out/bench_sim.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
TARGET_S = 30.0
TARGET_RSS_MB = 1024.0

CASES: dict[str, dict[str, Any]] = {
    # the target: 12 instances (8 prefill + 4 decode of Llama-70B on H100), 30 req/s
    "target-vllm": {"prefill": 8, "decode": 4, "rate_rps": 30.0, "duration_s": 1800.0},
    "target-sglang": {"prefill": 8, "decode": 4, "rate_rps": 30.0, "duration_s": 1800.0,
                      "engine": "sglang"},
    "target-rdma-loss": {"prefill": 8, "decode": 4, "rate_rps": 30.0, "duration_s": 1800.0,
                         "faults": ["rdma-retransmits:rate=0.05"]},
    "mooncake-trace": {"prefill": 8, "decode": 4, "rate_rps": 10.0, "duration_s": 1800.0,
                       "trace": "mooncake_conversation_trace.jsonl",
                       "profile": "deepseek-v3-h200-tp8", "router": "kv-aware"},
}


def run_case(spec: dict[str, Any]) -> dict[str, Any]:
    """One case in this process: simulate, then write, timing each."""
    from pdprobe.profiles import load_profile
    from pdprobe.sim.config import SimConfig, parse_fault
    from pdprobe.sim.model import run_simulation, write_capture

    spec = dict(spec)
    faults = tuple(parse_fault(f) for f in spec.pop("faults", ()))
    profile = load_profile(spec.pop("profile", "llama3-70b-h100-tp4"))
    trace = spec.pop("trace", None)
    if trace:
        spec["trace"] = str(ROOT.parent / "shared" / "traces" / trace)
    config = SimConfig(profile=profile, faults=faults, **spec)
    started = time.perf_counter()
    result = run_simulation(config)
    sim_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "capture"
        started = time.perf_counter()
        summary = write_capture(result, out)
        write_s = time.perf_counter() - started
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"requests": summary.requests, "sim_s": sim_s, "write_s": write_s,
            "total_s": sim_s + write_s, "peak_rss_mb": rss_mb, "output_mb": size / 2**20,
            "files": len(summary.files)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the target case")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case, print JSON
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(CASES[args.case])))
        return
    names = ["target-vllm"] if args.quick else list(CASES)
    rows = []
    for name in names:
        done = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True,
                              text=True, check=True, cwd=ROOT)
        row = {"case": name, **json.loads(done.stdout.strip().splitlines()[-1])}
        rows.append(row)
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print("| case | requests | simulate s | write s | total s | peak RSS MB | output MB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['case']} | {r['requests']} | {r['sim_s']:.1f} | {r['write_s']:.1f} | "
              f"{r['total_s']:.1f} | {r['peak_rss_mb']:.0f} | {r['output_mb']:.0f} |")
    target = rows[0]
    verdict = target["total_s"] < TARGET_S and target["peak_rss_mb"] < TARGET_RSS_MB
    print(f"target (< {TARGET_S:.0f} s, < {TARGET_RSS_MB:.0f} MB): {'met' if verdict else 'MISSED'}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench_sim.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
