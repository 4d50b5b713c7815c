"""Backtest the capacity model against the simulator's optimum P/D on the public traces.

For every (trace, profile, load) case:

1. the objectives: TPOT 0.1 s; TTFT 2 s, or twice the p90 bare TTFT (prefill + KV transfer,
   no queueing) where that is longer, so that an instance count meeting it exists;
2. a capture: the trace replayed by ``pdprobe.sim`` on the cluster a mean-based planner
   (Dynamo style) would deploy, turned into request records with timings;
3. the model's answers: ``estimate_capacity`` on that capture (fitted from its timings, the
   ``diagnose`` path), the profile-only plan from the trace (the ``ratio --trace`` path), and
   the mean-based counts;
4. the optimum: the smallest prefill count meeting the TTFT objective (p90) with ample decode,
   then the smallest decode count meeting both objectives at that prefill count, found by
   bisection on simulator runs;
5. the model's predicted TTFT attainment at its own counts against the simulated one.

Usage::

    python bench/backtest_ratio.py                # all traces, 2 profiles, loads 1x and 4x
    python bench/backtest_ratio.py --quick        # Azure conv + Mooncake conv, one profile
    python bench/backtest_ratio.py --json out.json --markdown table.md
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pdprobe.analysis.base import CapacityResult
from pdprobe.analysis.capacity import build_model, estimate_capacity, plan_capacity
from pdprobe.analysis.capacity.estimate import CapacityOptions
from pdprobe.analysis.capacity.mix import mix_from_requests
from pdprobe.analysis.capacity.rates import bare_ttft_s
from pdprobe.analysis.capacity.recommend import Slo
from pdprobe.collectors.files import read_paths
from pdprobe.dataset import (
    EVENT_COLUMNS,
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    REQUEST_COLUMNS,
    Dataset,
    InstanceInfo,
    conform,
    empty_frame,
)
from pdprobe.profiles import Profile, load_profile
from pdprobe.services.verify import SimOutcome, outcome_from_result
from pdprobe.sim.config import SimConfig
from pdprobe.sim.engine import simulate
from pdprobe.values import Missing

TRACES_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
TRACES = ("AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv",
          "mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl")
PROFILES = ("llama3-70b-h100-tp4", "qwen3-235b-h20-tp8")
LOADS = (1.0, 4.0)
ATTAINMENT = 0.9
TPOT_SLO_S = 0.1
MAX_COUNT = 256


@dataclass
class CaseResult:
    trace: str
    profile: str
    load: float
    rate_rps: float
    slo_ttft_s: float
    optimum_prefill: int
    optimum_decode: int
    optima: list[tuple[int, int]]  # every fewest-instances configuration
    model_prefill: int
    model_decode: int
    profile_only_prefill: int
    profile_only_decode: int
    mean_based_prefill: int
    mean_based_decode: int
    predicted_ttft_attainment: float
    simulated_ttft_attainment: float
    simulated_tpot_attainment: float
    model_source: str
    runs: int
    wall_s: float

    def within_one(self, p: int, d: int) -> bool:
        """Within one instance of an optimum on both roles."""
        return any(abs(p - op) <= 1 and abs(d - od) <= 1 for op, od in self.optima)

    def excess(self, p: int, d: int) -> int:
        """Instances above the optimal total (negative: too few)."""
        return p + d - (self.optimum_prefill + self.optimum_decode)


def capture_dataset(result: object) -> Dataset:
    """The simulated run as request records with timings (what a pdprobe capture holds)."""
    r = result.requests  # type: ignore[attr-defined]
    layout = result.layout  # type: ignore[attr-defined]
    names = np.array([i.name for i in layout.instances] + ["?"], dtype=object)
    arrival = r["arrival_s"]
    gen = r["generated"].astype(float)
    status = np.where(r["status"] == 0, "ok", np.where(r["status"] == 2, "timeout", "error"))
    frame = pd.DataFrame({
        "arrival_ts": 1.75e9 + arrival,
        "prompt_tokens": r["prompt"], "output_tokens": r["output"],
        "cached_tokens": r["cached_p"].astype(float),
        "prefill_instance": names[r["p_inst"]], "decode_instance": names[r["d_inst"]],
        "queue_s": r["t_pstart"] - arrival, "prefill_s": r["t_pend"] - r["t_pstart"],
        "kv_transfer_s": r["t_kv"] - r["t_pend"], "kv_bytes": r["kv_bytes"],
        "ttft_s": r["t_first"] - arrival,
        "tpot_s": np.divide(r["t_finish"] - r["t_first"], gen - 1, out=np.full(len(gen), np.nan),
                            where=gen > 1),
        "e2e_s": r["t_finish"] - arrival, "status": status,
    })
    instances = tuple(InstanceInfo(i.name, i.role, "simulator layout", node=i.host)
                      for i in layout.instances)
    return Dataset(requests=conform(frame, REQUEST_COLUMNS), metrics=empty_frame(METRIC_COLUMNS),
                   network=empty_frame(NETWORK_COLUMNS), events=empty_frame(EVENT_COLUMNS),
                   instances=instances, sources=(), request_columns=frozenset(frame.columns))


class Searcher:
    """Simulator runs of one case, cached by (prefill, decode)."""

    def __init__(self, trace: Path, profile: Profile, rate: float, span_s: float, slo: Slo) -> None:
        self.trace, self.profile, self.rate, self.span, self.slo = trace, profile, rate, span_s, slo
        self.cache: dict[tuple[int, int], SimOutcome] = {}
        self.results: dict[tuple[int, int], object] = {}

    def run(self, p: int, d: int, keep: bool = False) -> SimOutcome:
        if (p, d) not in self.cache:
            config = SimConfig(profile=self.profile, prefill=p, decode=d,
                               duration_s=self.span + 1.0, rate_rps=self.rate,
                               trace=str(self.trace), slo_ttft_s=self.slo.ttft_s,
                               slo_tpot_s=self.slo.tpot_s, seed=0, drain_s=600.0)
            result = simulate(config)
            self.cache[(p, d)] = outcome_from_result(result, self.slo)
            if keep:
                self.results[(p, d)] = result
        return self.cache[(p, d)]

    def smallest(self, ok: Callable[[int], bool], lo: int, hi_start: int) -> int:
        """Smallest n >= lo with ok(n), assuming ok is monotone (doubling then bisection)."""
        hi = max(hi_start, lo)
        while not ok(hi):
            lo = hi + 1
            hi = min(hi * 2, MAX_COUNT)
            if lo > MAX_COUNT:
                raise RuntimeError("no count up to MAX_COUNT meets the objectives")
        while lo < hi:
            mid = (lo + hi) // 2
            if ok(mid):
                hi = mid
            else:
                lo = mid + 1
        return hi

    def meets(self, p: int, d: int) -> bool:
        return self.run(p, d).both_attainment >= ATTAINMENT

    def optimum(self, hint_p: int, hint_d: int) -> list[tuple[int, int]]:
        """Every (prefill, decode) with the fewest instances in total that meets both SLOs.

        ``P(D)``, the fewest prefill instances that work with ``D`` decode instances, does not
        grow with ``D``; so ``D`` is scanned up from the fewest that can work at all until
        ``P(D)`` reaches its floor (the fewest prefill with ample decode).
        """
        ample_d = max(2 * hint_d, hint_d + 4)
        p_floor = self.smallest(lambda n: self.meets(n, ample_d), 1, max(hint_p, 1))
        ample_p = max(2 * p_floor, p_floor + 4)
        d = self.smallest(lambda n: self.meets(ample_p, n), 1, max(hint_d, 1))
        best: list[tuple[int, int]] = []
        best_total = MAX_COUNT * 2
        p_prev = None
        while True:
            hi = p_prev if p_prev is not None else ample_p

            def works(n: int, d: int = d) -> bool:
                return self.meets(n, d)

            p = self.smallest(works, p_floor, hi)
            total = p + d
            if total < best_total:
                best, best_total = [(p, d)], total
            elif total == best_total:
                best.append((p, d))
            if p <= p_floor or d >= MAX_COUNT:
                return best
            p_prev, d = p, d + 1

def run_case(trace_name: str, profile_name: str, load: float) -> CaseResult:
    started = time.perf_counter()
    trace = TRACES_DIR / trace_name
    profile = load_profile(profile_name)
    ds = read_paths([trace])
    base_mix = mix_from_requests(ds.requests, rate_rps=None, timescale_s=2.0, description=trace_name)
    rate = base_mix.rate_rps * load
    assert base_mix.arrival_ts is not None
    span = float(base_mix.arrival_ts[-1] - base_mix.arrival_ts[0]) / load
    built = build_model(None, base_mix, profile)
    bare_p90 = float(np.quantile(bare_ttft_s(base_mix, built.inputs), 0.9))
    slo = Slo(ttft_s=max(2.0, math.ceil(4 * bare_p90) / 2), tpot_s=TPOT_SLO_S)
    # the ratio --trace path: profile only, lengths from the trace
    mix = mix_from_requests(ds.requests, rate_rps=rate, timescale_s=slo.ttft_s,
                            description=trace_name)
    plan = plan_capacity(mix, built, slo)
    assert isinstance(plan.recommended_prefill, int) and isinstance(plan.recommended_decode, int)
    mb_p, mb_d = plan.mean_based_prefill, plan.mean_based_decode
    assert isinstance(mb_p, int) and isinstance(mb_d, int)
    search = Searcher(trace, profile, rate, span, slo)
    search.run(mb_p, mb_d, keep=True)
    capture = capture_dataset(search.results[(mb_p, mb_d)])
    model = estimate_capacity(capture, Missing("not needed"),
                              CapacityOptions(slo_ttft_s=slo.ttft_s, slo_tpot_s=slo.tpot_s,
                                              profile=profile_name, window_s=0.0))
    assert isinstance(model, CapacityResult)
    mp, md = model.recommended_prefill, model.recommended_decode
    assert isinstance(mp, int) and isinstance(md, int)
    at_model = search.run(mp, md)
    optima = search.optimum(mp, md)
    opt_p, opt_d = min(optima, key=lambda o: abs(o[0] - mp) + abs(o[1] - md))
    predicted = model.ttft_attainment_estimate
    return CaseResult(
        trace=trace_name, profile=profile_name, load=load, rate_rps=rate, slo_ttft_s=slo.ttft_s,
        optimum_prefill=opt_p, optimum_decode=opt_d, optima=optima,
        model_prefill=mp, model_decode=md,
        profile_only_prefill=plan.recommended_prefill,
        profile_only_decode=plan.recommended_decode,
        mean_based_prefill=mb_p, mean_based_decode=mb_d,
        predicted_ttft_attainment=float(predicted) if not isinstance(predicted, Missing) else math.nan,
        simulated_ttft_attainment=at_model.ttft_attainment,
        simulated_tpot_attainment=at_model.tpot_attainment,
        model_source=model.model_source, runs=len(search.cache),
        wall_s=time.perf_counter() - started,
    )


def _within(rows: list[CaseResult], p: str, d: str) -> int:
    return sum(r.within_one(getattr(r, p), getattr(r, d)) for r in rows)


def _excess(rows: list[CaseResult], p: str, d: str) -> str:
    ex = [r.excess(getattr(r, p), getattr(r, d)) for r in rows]
    under = sum(e < 0 for e in ex)
    return f"mean {np.mean(ex):+.2f} instances, {under} under-provisioned"


def markdown(rows: list[CaseResult]) -> str:
    """The results table and the summary lines (docs/model.md carries them)."""
    short = {"AzureLLMInferenceTrace_code.csv": "Azure code", "AzureLLMInferenceTrace_conv.csv":
             "Azure conv", "mooncake_conversation_trace.jsonl": "Mooncake conv",
             "mooncake_synthetic_trace.jsonl": "Mooncake synth"}
    lines = ["| trace | profile | load | req/s | TTFT SLO | optimum P/D | model P/D | "
             "profile-only P/D | mean-based P/D | TTFT att. predicted / simulated |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(
            f"| {short.get(r.trace, r.trace)} | {r.profile} | {r.load:g}× | {r.rate_rps:.1f} | "
            f"{r.slo_ttft_s:g} s | {' or '.join(f'{p}/{d}' for p, d in r.optima)} | "
            f"{r.model_prefill}/{r.model_decode} | {r.profile_only_prefill}/{r.profile_only_decode}"
            f" | {r.mean_based_prefill}/{r.mean_based_decode} | "
            f"{r.predicted_ttft_attainment:.1%} / {r.simulated_ttft_attainment:.1%} |")
    n = len(rows)
    err = [abs(r.predicted_ttft_attainment - r.simulated_ttft_attainment) for r in rows
           if math.isfinite(r.predicted_ttft_attainment)]
    lines += ["", f"- model (fitted on the capture) within ±1 instance of an optimum on both "
                  f"roles: {_within(rows, 'model_prefill', 'model_decode')}/{n} "
                  f"(total vs optimum: {_excess(rows, 'model_prefill', 'model_decode')})",
              f"- profile-only plan (`ratio --trace`) within ±1: "
              f"{_within(rows, 'profile_only_prefill', 'profile_only_decode')}/{n} "
              f"({_excess(rows, 'profile_only_prefill', 'profile_only_decode')})",
              f"- mean-based planner within ±1: "
              f"{_within(rows, 'mean_based_prefill', 'mean_based_decode')}/{n} "
              f"({_excess(rows, 'mean_based_prefill', 'mean_based_decode')})",
              f"- TTFT SLO attainment predicted at the model's counts vs simulated: mean absolute "
              f"error {np.mean(err) * 100:.1f} points, max {np.max(err) * 100:.1f} points"
              if err else "- no attainment predictions"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two traces, one profile, load 1x")
    parser.add_argument("--traces", nargs="*", default=None)
    parser.add_argument("--profiles", nargs="*", default=None)
    parser.add_argument("--loads", nargs="*", type=float, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the rows as JSON")
    parser.add_argument("--markdown", type=Path, default=None, help="write the table")
    args = parser.parse_args(argv)
    traces = args.traces or (TRACES[1:3] if args.quick else TRACES)
    profiles = args.profiles or (PROFILES[:1] if args.quick else PROFILES)
    loads = args.loads or ((1.0,) if args.quick else LOADS)
    rows = []
    for trace in traces:
        for profile in profiles:
            for load in loads:
                row = run_case(trace, profile, load)
                rows.append(row)
                print(f"{trace} {profile} {load:g}x: optimum {row.optimum_prefill}/"
                      f"{row.optimum_decode}, model {row.model_prefill}/{row.model_decode}, "
                      f"profile-only {row.profile_only_prefill}/{row.profile_only_decode}, "
                      f"mean-based {row.mean_based_prefill}/{row.mean_based_decode} "
                      f"({row.runs} runs, {row.wall_s:.0f} s)", file=sys.stderr, flush=True)
    table = markdown(rows)
    print(table)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    if args.markdown:
        args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
