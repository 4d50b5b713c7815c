"""Backtest the verdict against the simulator: one instance short names the short side, adequate is OK.

For every public trace (``../shared/traces``) x load:

1. objectives: TPOT 0.1 s; TTFT 2 s, or twice the p90 TTFT of the same trace slice on an ample
   cluster (prefill + KV transfer, no queueing) where that is longer, so that a count meeting it
   exists;
2. the adequate counts: the fewest prefill instances meeting both objectives (>= 90 % of
   requests) with ample decode, then the fewest decode instances at that prefill count, by
   bisection on simulator runs (``pdprobe.sim``, the scenario matrix's profile and layout);
3. three captures written as ``pdprobe diagnose DIR`` reads them (request records, vLLM metrics,
   node metrics, engine logs): adequate, one prefill short, one decode short;
4. the diagnosis of each with the objectives given: the short cases that miss the SLO must name
   the short side (prefill-bound / decode-bound) as the top cause; the adequate case must have no
   warning or critical finding; the capacity model's predicted TTFT attainment at the deployed
   counts is compared with the observed one.

Usage::

    python bench/backtest_verdict.py --jobs 2             # 4 traces x 3 loads
    python bench/backtest_verdict.py --quick              # one load
    python bench/backtest_verdict.py --json out.json --markdown table.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRACES_DIR = ROOT.parent / "shared" / "traces"
TRACES = ("AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv",
          "mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl")
SHORT = {"AzureLLMInferenceTrace_code.csv": "Azure code",
         "AzureLLMInferenceTrace_conv.csv": "Azure conv",
         "mooncake_conversation_trace.jsonl": "Mooncake conv",
         "mooncake_synthetic_trace.jsonl": "Mooncake synth"}
# Offered load in prefill instances' worth of work (the arrival rate is this many times what one
# prefill instance sustains on the trace's lengths): small, medium and larger clusters.
LOADS = (2.5, 5.0, 9.0)
ATTAINMENT = 0.9
TPOT_SLO_S = 0.1
DURATION_S = 240.0
AMPLE = 24  # instances per side that queue nothing at these loads
MAX_COUNT = 64
CAUSE_OF = {"prefill": "prefill-bound", "decode": "decode-bound"}


@dataclass
class Run:
    kind: str  # "adequate", "prefill short", "decode short"
    prefill: int
    decode: int
    sim_attainment: float
    status: str = ""
    top: str = ""
    top_severity: str = ""
    warnings: int = 0  # warning or critical findings
    findings: list[tuple[str, str, str]] = field(default_factory=list)
    predicted_ttft_attainment: float = math.nan  # recalibrated where the model recalibrated
    raw_predicted_ttft_attainment: float = math.nan  # the model before recalibration
    observed_ttft_attainment: float = math.nan
    recalibrated: bool = False
    wait_scale: float = math.nan
    error: str = ""

    @property
    def misses(self) -> bool:
        return self.sim_attainment < ATTAINMENT


@dataclass
class Case:
    trace: str
    load: float
    rate_rps: float
    slo_ttft_s: float
    runs: list[Run]
    sims: int
    wall_s: float


def _base(trace: Path, load: float):  # type: ignore[no-untyped-def]
    from pdprobe.profiles import BUILTIN_PROFILES
    from pdprobe.sim.config import SimConfig
    from pdprobe.sim.scenarios import (
        SCENARIO_DRAIN_S,
        SCENARIO_OUTPUT,
        SCENARIO_PROFILE,
        SCENARIO_PROMPT,
        _capacity,
    )

    profile = BUILTIN_PROFILES[SCENARIO_PROFILE]
    base = SimConfig(profile=profile, prompt=SCENARIO_PROMPT, output=SCENARIO_OUTPUT,
                     duration_s=DURATION_S, drain_s=SCENARIO_DRAIN_S, trace=str(trace),
                     rate_rps=1.0, label=f"backtest {trace.name} x{load:g}")
    cap = _capacity(base, trace, 0)
    return replace(base, rate_rps=round(load * cap.prefill_rps, 3))


def _attainment(cfg, slo_ttft: float) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(both-objective attainment, TTFT p90) of one simulator run."""
    from pdprobe.analysis.capacity.recommend import Slo
    from pdprobe.services.verify import outcome_from_result
    from pdprobe.sim.engine import simulate

    out = outcome_from_result(simulate(cfg), Slo(ttft_s=slo_ttft, tpot_s=TPOT_SLO_S))
    return float(out.both_attainment), float(getattr(out, "ttft_p90_s", math.nan))


def _smallest(ok, lo: int, hi: int) -> int:  # type: ignore[no-untyped-def]
    while not ok(hi):
        lo, hi = hi + 1, min(hi * 2, MAX_COUNT)
        if lo > MAX_COUNT:
            raise RuntimeError("no count up to MAX_COUNT meets the objectives")
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def _diagnose(cfg, slo_ttft: float, run: Run) -> None:  # type: ignore[no-untyped-def]
    from pdprobe.services.diagnose import DiagnoseRequest, diagnose
    from pdprobe.sim.scenarios import run_to_dir
    from pdprobe.values import Missing

    work = Path(tempfile.mkdtemp(prefix="pdprobe-verdict-"))
    try:
        run_to_dir(cfg, work / "c")
        report = diagnose(DiagnoseRequest(paths=(work / "c",), slo_ttft_s=slo_ttft,
                                          slo_tpot_s=TPOT_SLO_S))
        run.status = report.status
        run.findings = [(f.code, f.cause, f.severity.value) for f in report.findings]
        if report.findings:
            run.top, run.top_severity = report.findings[0].cause, report.findings[0].severity.value
        run.warnings = sum(f.severity.value in ("warning", "critical") for f in report.findings)
        cap = report.capacity
        if not isinstance(cap, Missing):
            for name, attr in (("raw_predicted_ttft_attainment",
                                "deployed_ttft_attainment_estimate"),
                               ("observed_ttft_attainment", "observed_ttft_attainment"),
                               ("wait_scale", "wait_scale")):
                v = getattr(cap, attr)
                if not isinstance(v, Missing):
                    setattr(run, name, float(v))
            run.recalibrated = bool(cap.recalibrated)
            cal = cap.calibrated_ttft_attainment_estimate
            run.predicted_ttft_attainment = float(cal) if cap.recalibrated and not isinstance(
                cal, Missing) else run.raw_predicted_ttft_attainment
    except Exception as exc:  # a crash is a result too
        run.error = f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_case(trace_name: str, load: float) -> Case:
    started = time.perf_counter()
    base = _base(TRACES_DIR / trace_name, load)
    cache: dict[tuple[int, int], float] = {}
    # Objectives reachable on this slice: twice the ample cluster's TTFT p90 where over 2 s.
    _, bare_p90 = _attainment(replace(base, prefill=AMPLE, decode=AMPLE), 1e9)
    slo_ttft = max(2.0, math.ceil(4 * bare_p90) / 2) if math.isfinite(bare_p90) else 2.0

    def meets(p: int, d: int) -> bool:
        if (p, d) not in cache:
            cache[(p, d)] = _attainment(replace(base, prefill=p, decode=d, slo_ttft_s=slo_ttft,
                                                slo_tpot_s=TPOT_SLO_S), slo_ttft)[0]
        return cache[(p, d)] >= ATTAINMENT

    p = _smallest(lambda n: meets(n, AMPLE), 1, max(1, math.ceil(load)))
    d = _smallest(lambda n: meets(p, n), 1, 1)
    runs = [Run("adequate", p, d, cache[(p, d)])]
    for kind, (pp, dd) in (("prefill short", (p - 1, d)), ("decode short", (p, d - 1))):
        if pp >= 1 and dd >= 1:
            meets(pp, dd)
            runs.append(Run(kind, pp, dd, cache[(pp, dd)]))
    for run in runs:
        _diagnose(replace(base, prefill=run.prefill, decode=run.decode, slo_ttft_s=slo_ttft,
                          slo_tpot_s=TPOT_SLO_S), slo_ttft, run)
    return Case(trace_name, load, float(base.rate_rps or 0.0), slo_ttft, runs, len(cache) + 1,
                time.perf_counter() - started)


def markdown(cases: list[Case], wall_s: float, jobs: int) -> str:
    lines = ["| trace | load | TTFT SLO | adequate | sim att. | verdict | 1 P short: att. → top "
             "cause | 1 D short: att. → top cause | predicted (raw → recalibrated) / observed TTFT "
             "att. (adequate) |",
             "| --- | ---: | ---: | --- | ---: | --- | --- | --- | --- |"]
    for c in cases:
        by = {r.kind: r for r in c.runs}
        a = by["adequate"]

        def cell(r: Run | None) -> str:
            if r is None:
                return "n/a (1 instance)"
            miss = "misses" if r.misses else "meets"
            return f"{r.sim_attainment:.0%} ({miss}) → {r.top or 'none'}/{r.top_severity or '-'}"

        lines.append(f"| {SHORT.get(c.trace, c.trace)} | {c.load:g} | {c.slo_ttft_s:g} s | "
                     f"{a.prefill}P:{a.decode}D | {a.sim_attainment:.0%} | {a.status}"
                     f"{' (' + ', '.join(f'{x[1]}/{x[2]}' for x in a.findings if x[2] != 'info') + ')' if a.warnings else ''} | "
                     f"{cell(by.get('prefill short'))} | {cell(by.get('decode short'))} | "
                     f"{_pct(a.raw_predicted_ttft_attainment)} → "
                     f"{_pct(a.predicted_ttft_attainment)} / {_pct(a.observed_ttft_attainment)} |")
    short = [r for c in cases for r in c.runs if r.kind != "adequate" and r.misses]
    named = [r for r in short if r.top == CAUSE_OF[r.kind.split()[0]]]
    adequate = [r for c in cases for r in c.runs if r.kind == "adequate"]
    clean = [r for r in adequate if r.warnings == 0]
    gaps = [abs(r.predicted_ttft_attainment - r.observed_ttft_attainment)
            for c in cases for r in c.runs
            if math.isfinite(r.predicted_ttft_attainment)
            and math.isfinite(r.observed_ttft_attainment)]
    raw_gaps = [abs(r.raw_predicted_ttft_attainment - r.observed_ttft_attainment)
                for c in cases for r in c.runs
                if math.isfinite(r.raw_predicted_ttft_attainment)
                and math.isfinite(r.observed_ttft_attainment)]
    recal = sum(r.recalibrated for c in cases for r in c.runs)
    errors = [f"{c.trace} x{c.load:g} {r.kind}: {r.error}" for c in cases for r in c.runs
              if r.error]
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = math.nan
    lines += ["", f"- one instance short and missing the SLO, short side named as top cause: "
                  f"{_rate(len(named), len(short))} (target >= 90 %)",
              f"- adequate counts with no warning or critical finding: "
              f"{_rate(len(clean), len(adequate))} (target 100 %)",
              f"- predicted vs observed TTFT attainment at the deployed counts: mean absolute "
              f"gap {np.mean(gaps) * 100:.1f} points over {len(gaps)} runs (target <= 5), "
              f"{recal} of them recalibrated against the window; before recalibration "
              f"{np.mean(raw_gaps) * 100:.1f} points"
              if gaps else "- predicted vs observed TTFT attainment: no run had both",
              f"- {len(cases)} cases, {sum(c.sims for c in cases)} simulator runs, "
              f"{sum(len(c.runs) for c in cases)} diagnoses in {wall_s / 60:.1f} min with "
              f"--jobs {jobs}; machine load average {load:.1f} at the end "
              f"(2 cores shared); generated by `bench/backtest_verdict.py`"]
    lines += [f"- error: {e}" for e in errors[:10]]
    return "\n".join(lines)


def _pct(v: float) -> str:
    return f"{v:.0%}" if math.isfinite(v) else "n/a"


def _rate(num: int, den: int) -> str:
    return f"{num}/{den} ({100 * num / den:.0f} %)" if den else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one load per trace")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    if not TRACES_DIR.is_dir():
        print(f"{TRACES_DIR} not found", file=sys.stderr)
        return 1
    loads = LOADS[1:2] if args.quick else LOADS
    todo = [(t, ld) for t in TRACES for ld in loads]
    started = time.perf_counter()
    cases: list[Case] = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_case, t, ld) for t, ld in todo]
        for (t, ld), fut in zip(todo, futures, strict=True):
            try:
                cases.append(fut.result())
            except Exception as exc:  # e.g. no count meets the objectives
                print(f"{t} x{ld:g}: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            sys.stderr.write(f"done {t} x{ld:g} ({cases[-1].wall_s:.0f} s)\n")
    text = markdown(cases, time.perf_counter() - started, args.jobs)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in cases], indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
