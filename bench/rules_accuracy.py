"""Benchmark: how often the rules name the injected root cause on simulated incidents.

Every scenario of the simulator's matrix (``pdprobe.sim.scenarios``: the ten contract causes,
two healthy loads and three variants) is simulated and written to a folder, then diagnosed through the public
service on four input mixes cut from the same capture: request records only, metrics only
(engine + node_exporter), engine logs only, and everything. The matrix crosses engines (vLLM,
SGLang), naming styles (role label, host name, engine_type, pod, Dynamo) and workloads (the
synthetic chat mix and the public traces in ``../shared/traces``).

Per run it records the root-cause findings of warning or critical severity:

- top-1 hit: the first finding names the injected cause;
- any hit: some root finding (warning or worse) names it;
- false alarm: a root finding of warning or worse names another cause (for a healthy scenario,
  any warning or worse).

Usage (from the repository root)::

    /work/venv/bin/python bench/rules_accuracy.py              # the default design (~150 runs)
    /work/venv/bin/python bench/rules_accuracy.py --quick      # causes x mixes, vLLM only
    /work/venv/bin/python bench/rules_accuracy.py --full       # the whole cross product
    /work/venv/bin/python bench/rules_accuracy.py --write-docs # also update docs/rules.md

Prints Markdown tables and writes bench/out/rules_accuracy.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
CAUSES = ("prefill-bound", "decode-bound", "kv-transfer-bandwidth", "rdma-retransmits",
          "no-rdma", "routing-skew", "straggler", "ratio-lag", "kv-transfer-failures",
          "not-disaggregated")
HEALTHY = ("healthy-low", "healthy-high")
# Variants of the matrix and the cause each shows (None: healthy). routing-skew-kv-hits (a
# KV-aware router ignoring prefix hits evenly on every instance) is left out: every instance
# shows the same low hit rate, which no per-instance comparison can see.
VARIANTS = {"decode-bound-count": "decode-bound", "ratio-lag-late": "ratio-lag",
            "instance-churn": None}
ENGINES = ("vllm", "sglang")
NAMINGS = ("role-label", "name", "engine-type", "pod", "dynamo")
TRACES = ("AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv",
          "mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl")
MIXES = ("requests", "metrics", "logs", "all")
SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class Case:
    scenario: str
    engine: str = "vllm"
    naming: str = "role-label"
    trace: str = SYNTHETIC
    seed: int = 0

    @property
    def injected(self) -> str | None:
        if self.scenario in VARIANTS:
            return VARIANTS[self.scenario]
        return None if self.scenario in HEALTHY else self.scenario


@dataclass(frozen=True)
class Outcome:
    case: Case
    mix: str
    status: str
    findings: tuple[tuple[str, str, str, bool], ...]  # (code, cause, severity, is_root)
    error: str = ""
    seconds: float = 0.0

    @property
    def alarms(self) -> list[tuple[str, str, str, bool]]:
        return [f for f in self.findings if f[3] and f[2] in ("warning", "critical")]

    @property
    def top1(self) -> bool:
        if self.case.injected is None:
            return not self.alarms
        return bool(self.findings) and self.findings[0][1] == self.case.injected

    @property
    def any_hit(self) -> bool:
        if self.case.injected is None:
            return not self.alarms
        return any(f[1] == self.case.injected for f in self.alarms)

    @property
    def false_alarms(self) -> int:
        return sum(1 for f in self.alarms if f[1] != self.case.injected)


def design(kind: str) -> list[Case]:
    scenarios = (*CAUSES, *HEALTHY)
    if kind == "quick":
        return [Case(s) for s in (*scenarios, *VARIANTS)]
    if kind == "full":
        return [Case(s, e, n, t) for s in (*scenarios, *VARIANTS) for e in ENGINES
                for n in NAMINGS for t in (SYNTHETIC, *TRACES)]
    # engines on the synthetic mix, variants included
    cases = [Case(s, e) for s in (*scenarios, *VARIANTS) for e in ENGINES]
    cases += [Case(s, "vllm", n) for s in scenarios for n in NAMINGS[1:]]  # naming styles
    cases += [Case(s, "vllm", "role-label", t) for s in scenarios for t in TRACES]  # traces
    return cases


def mix_paths(capture: Path, mix: str) -> tuple[Path, ...]:
    """The files of one input mix inside a capture folder."""
    requests = sorted(p for p in capture.iterdir() if p.name.startswith("requests."))
    metrics = sorted(p for p in capture.iterdir() if p.name.startswith(("metrics.", "node_")))
    logs = (capture / "logs",) if (capture / "logs").is_dir() else ()
    return {"requests": tuple(requests), "metrics": tuple(metrics), "logs": logs,
            "all": (*requests, *metrics, *logs)}[mix]


def traces_dir() -> Path | None:
    for c in (ROOT.parent / "shared" / "traces", ROOT / ".." / "shared" / "traces"):
        if c.is_dir():
            return c.resolve()
    return None


def run_case(case: Case, mixes: tuple[str, ...]) -> list[Outcome]:
    """Simulate one case, diagnose each input mix, clean up."""
    from pdprobe.errors import PdprobeError
    from pdprobe.services.diagnose import DiagnoseRequest, diagnose
    from pdprobe.sim.scenarios import build_scenario, run_to_dir

    work = Path(tempfile.mkdtemp(prefix="pdprobe-acc-"))
    out: list[Outcome] = []
    try:
        trace = None
        if case.trace != SYNTHETIC:
            base = traces_dir()
            if base is None:
                raise FileNotFoundError("../shared/traces not found")
            trace = base / case.trace
        capture = work / "capture"
        run_to_dir(build_scenario(case.scenario, trace=trace, engine=case.engine,
                                  naming=case.naming, seed=case.seed), capture)
        for mix in mixes:
            started = time.perf_counter()
            paths = mix_paths(capture, mix)
            try:
                report = diagnose(DiagnoseRequest(paths=paths))
            except PdprobeError as exc:  # e.g. too little data in one input kind
                out.append(Outcome(case, mix, "unknown", (), error=exc.one_line(),
                                   seconds=time.perf_counter() - started))
                continue
            findings = tuple((f.code, f.cause, f.severity.value, f.is_root_cause)
                             for f in report.findings)
            out.append(Outcome(case, mix, report.status, findings,
                               seconds=time.perf_counter() - started))
    except Exception as exc:  # a crash is a result too: it shows in the table
        out += [Outcome(case, mix, "error", (), error=f"{type(exc).__name__}: {exc}")
                for mix in mixes if not any(o.mix == mix for o in out)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def run_all(cases: list[Case], mixes: tuple[str, ...], jobs: int) -> Iterator[Outcome]:
    if jobs <= 1:
        for i, case in enumerate(cases, 1):
            sys.stderr.write(f"[{i}/{len(cases)}] {case}\n")
            yield from run_case(case, mixes)
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_case, c, mixes) for c in cases]
        for i, fut in enumerate(futures, 1):
            sys.stderr.write(f"[{i}/{len(cases)}] {cases[i - 1]}\n")
            yield from fut.result()


def _rate(num: int, den: int) -> str:
    return f"{num}/{den} ({100 * num / den:.0f} %)" if den else "-"


def table(outcomes: Iterable[Outcome], key: str, title: str) -> str:
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        value = o.mix if key == "mix" else getattr(o.case, key)
        groups[str(value)].append(o)
    lines = [f"| {title} | runs | top-1 hit | any hit | runs with false alarms | errors |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name in sorted(groups, key=_order):
        g = groups[name]
        ok = [o for o in g if o.status not in ("error", "unknown")]
        lines.append(f"| {name} | {len(g)} | {_rate(sum(o.top1 for o in ok), len(g))} | "
                     f"{_rate(sum(o.any_hit for o in ok), len(g))} | "
                     f"{_rate(sum(o.false_alarms > 0 for o in ok), len(g))} | "
                     f"{len(g) - len(ok)} |")
    return "\n".join(lines)


def _order(name: str) -> tuple[int, str]:
    known = (*CAUSES, *HEALTHY, *VARIANTS, *MIXES, *ENGINES, *NAMINGS, SYNTHETIC, *TRACES)
    return (known.index(name) if name in known else len(known), name)


def cause_by_mix(outcomes: list[Outcome]) -> str:
    mixes = [m for m in MIXES if any(o.mix == m for o in outcomes)]
    lines = ["| scenario | " + " | ".join(f"top-1, {m}" for m in mixes) + " |",
             "| --- | " + " | ".join("---:" for _ in mixes) + " |"]
    for scenario in sorted({o.case.scenario for o in outcomes}, key=_order):
        cells = []
        for m in mixes:
            g = [o for o in outcomes if o.case.scenario == scenario and o.mix == m]
            cells.append(_rate(sum(o.top1 for o in g), len(g)))
        lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(outcomes: list[Outcome], kind: str, seconds: float) -> str:
    runs = len(outcomes)
    head = (f"Design `{kind}`: {len({o.case for o in outcomes})} simulated captures x "
            f"{len({o.mix for o in outcomes})} input mixes = {runs} diagnoses "
            f"({seconds / 60:.1f} min). A healthy scenario counts as a hit when it gets no "
            f"warning or critical finding. Generated by `bench/rules_accuracy.py`.")
    parts = [head, "", "By scenario (all input mixes):", "", table(outcomes, "scenario", "scenario"),
             "", "By input mix:", "", table(outcomes, "mix", "input mix"), "",
             "Top-1 by scenario and input mix:", "", cause_by_mix(outcomes)]
    for key, title in (("engine", "engine"), ("naming", "naming style"), ("trace", "workload")):
        if len({getattr(o.case, key) for o in outcomes}) > 1:
            parts += ["", f"By {title}:", "", table(outcomes, key, title)]
    errors = sorted({o.error for o in outcomes if o.error})
    if errors:
        parts += ["", "Errors:", ""] + [f"- {e}" for e in errors[:10]]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="causes x mixes, vLLM, synthetic")
    group.add_argument("--full", action="store_true", help="the whole cross product")
    parser.add_argument("--jobs", type=int, default=1, help="parallel captures")
    parser.add_argument("--write-docs", action="store_true",
                        help="write the tables into docs/rules.md's accuracy section")
    args = parser.parse_args(argv)
    kind = "quick" if args.quick else "full" if args.full else "default"
    cases = design(kind)
    if traces_dir() is None:
        cases = [c for c in cases if c.trace == SYNTHETIC]
    started = time.perf_counter()
    outcomes = list(run_all(cases, MIXES, args.jobs))
    seconds = time.perf_counter() - started
    text = report(outcomes, kind, seconds)
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "rules_accuracy.json").write_text(json.dumps(
        {"design": kind, "seconds": seconds,
         "outcomes": [dict(asdict(o), top1=o.top1, any_hit=o.any_hit,
                           false_alarms=o.false_alarms) for o in outcomes]},
        indent=1, default=str))
    if args.write_docs:
        from pdprobe.rules.docs import write

        write(accuracy=text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
