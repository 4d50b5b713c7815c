"""The simulator's inputs: a frozen description of workload, cluster, faults and outputs.

Everything a run depends on lives in ``SimConfig`` (plus the seed), so ``scenario.toml`` written
next to the outputs reproduces the run exactly: ``SimConfig.from_toml(path)``.

The command-line mini-languages live beside it and are re-exported here: length distributions
in ``pdprobe.sim.length_dist``, faults in ``pdprobe.sim.fault_kinds``.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from pdprobe.errors import UsageError
from pdprobe.profiles import BUILTIN_PROFILES, DEFAULT_PROFILE, ModelShape, Profile, load_profile
from pdprobe.sim.delivery import Delivery, delivery_from_mapping, to_toml_lines, validate_delivery
from pdprobe.sim.fault_kinds import FAULT_ALIASES as FAULT_ALIASES
from pdprobe.sim.fault_kinds import FAULT_KINDS, Fault, parse_fault
from pdprobe.sim.fault_kinds import FaultKind as FaultKind
from pdprobe.sim.length_dist import LENGTH_KINDS as LENGTH_KINDS
from pdprobe.sim.length_dist import LengthDist, validate_length_dist
from pdprobe.sim.length_dist import parse_length_dist as parse_length_dist

ENGINES: Final = ("vllm", "sglang")
NAMING_STYLES: Final = ("role-label", "name", "engine-type", "pod", "dynamo")
ROUTERS: Final = ("least-tokens", "round-robin", "kv-aware")
KV_CONNECTORS: Final = ("mooncake", "nixl")
REQUEST_FORMATS: Final = ("jsonl", "parquet")
# Load-generator layouts the request records can be written in instead (sim/writers/benchmarks.py)
BENCHMARK_FORMATS: Final = ("vllm-bench", "sglang-bench", "aiperf", "guidellm", "inference-perf")

# 2025-06-02T10:00:00Z, a Monday morning: a fixed, documented default so outputs are identical
# across machines and runs; vLLM log timestamps carry no year, and the files' mtimes are set
# to the simulated end so readers that take the year from the mtime get it right.
DEFAULT_START_TS: Final = 1748858400.0
SCRAPE_INTERVAL_S: Final = 15.0  # Prometheus' most common scrape interval
LOG_INTERVAL_S: Final = 10.0  # vLLM VLLM_LOG_STATS_INTERVAL default (0.33 envs.py)
HASH_BLOCK_TOKENS: Final = 512  # Mooncake trace hash_ids cover 512-token prefix blocks
DEFAULT_DRAIN_S: Final = 300.0  # how long in-flight requests may finish after the last arrival
MAX_DURATION_S: Final = 7 * 24 * 3600.0  # a week: beyond it the outputs get unreasonably large


# --- the whole configuration -------------------------------------------------------------------

@dataclass(frozen=True)
class SimConfig:
    """Everything one simulation run depends on (see docs/simulator.md for each field)."""

    profile: Profile = field(default_factory=lambda: BUILTIN_PROFILES[DEFAULT_PROFILE])
    prefill: int = 2
    decode: int = 2
    duration_s: float = 600.0
    rate_rps: float | None = 5.0  # synthetic: Poisson rate; trace: rescales its mean rate
    trace: str | None = None
    prompt: LengthDist = LengthDist("lognormal", median=1000.0, sigma=0.8, max_tokens=32768)
    output: LengthDist = LengthDist("lognormal", median=150.0, sigma=0.7, max_tokens=4096)
    prefix_hit_rate: float = 0.0  # synthetic prefix sharing (no hash_ids in the input)
    prefix_groups: int = 64  # distinct shared prefixes (system prompts, sessions)
    prefix_cache_tokens: int = 0  # per-instance prefix cache; 0 = the profile's KV capacity
    router: str = "least-tokens"
    gpus_per_node: int = 8
    preemption: bool = True
    kv_connector: str = "mooncake"
    engine: str = "vllm"
    naming: str = "role-label"
    seed: int = 0
    start_ts: float = DEFAULT_START_TS
    drain_s: float = DEFAULT_DRAIN_S
    slo_ttft_s: float = 2.0
    slo_tpot_s: float = 0.1
    requests_format: str = "jsonl"
    benchmark_format: str | None = None  # write the records as this load generator's output
    compress: bool = False  # gzip the request, metric and log files
    faults: tuple[Fault, ...] = ()
    label: str = ""  # free text (scenario builders name the cause here)
    delivery: Delivery = field(default_factory=Delivery)  # names and file layouts (delivery.py)

    # --- derived views ---
    def faults_of(self, kind: str) -> tuple[Fault, ...]:
        """Every configured fault of one kind (a kind may be given more than once)."""
        return tuple(f for f in self.faults if f.kind == kind)

    def fault(self, kind: str) -> Fault | None:
        """The first configured fault of one kind, or None when it is not injected."""
        found = self.faults_of(kind)
        return found[0] if found else None

    @property
    def transport(self) -> str:
        """The KV-transfer transport: ``tcp`` under the no-rdma fault, else ``rdma``."""
        return "tcp" if self.fault("no-rdma") else "rdma"

    @property
    def instances_per_node(self) -> int:
        """Engine instances one node holds: its GPUs over the profile's GPUs per instance (at least
        one)."""
        return max(1, self.gpus_per_node // max(1, self.profile.gpus_per_instance))

    @property
    def model_name(self) -> str:
        """The served model's name, as the engines report it in metrics and logs."""
        return self.profile.model.name

    # --- persistence ---
    def to_toml(self) -> str:
        """``scenario.toml``: every parameter (profile included) and the seed."""
        lines = ["# pdprobe simulate scenario: every parameter of the run, including the seed.",
                 "# Re-run with: pdprobe simulate --scenario scenario.toml -o DIR", ""]
        top: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("profile", "prompt", "output", "faults", "delivery"):
                continue
            value = getattr(self, f.name)
            if value is not None:
                top[f.name] = value
        lines += [f"{k} = {_toml_value(v)}" for k, v in top.items()]
        for name in ("prompt", "output"):
            lines += ["", f"[{name}]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in asdict(getattr(self, name)).items()]
        prof = asdict(self.profile)
        model = prof.pop("model")
        lines += ["", "[profile]"] + [f"{k} = {_toml_value(v)}" for k, v in prof.items()]
        lines += ["", "[profile.model]"] + [f"{k} = {_toml_value(v)}" for k, v in model.items()]
        for fault in self.faults:
            lines += ["", "[[faults]]", f"kind = {_toml_value(fault.kind)}"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in fault.params]
        if not self.delivery.is_default:  # absent by default: older scenario files stay valid
            lines += to_toml_lines(self.delivery)
        return "\n".join(lines) + "\n"

    @classmethod
    def from_toml(cls, path: Path) -> SimConfig:
        """Read a ``scenario.toml`` written by ``to_toml``; a missing or malformed file is a
        ``UsageError`` naming it."""
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise UsageError(f"{path}: scenario file not found", hint="check the path") from exc
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"{path}: not valid TOML ({exc})", hint="fix the syntax") from exc
        return config_from_mapping(data, str(path))


def config_from_mapping(data: Mapping[str, Any], where: str) -> SimConfig:
    """A ``SimConfig`` from a parsed ``scenario.toml`` (unknown keys are errors)."""
    data = dict(data)
    values: dict[str, Any] = {}
    prof = data.pop("profile", None)
    if isinstance(prof, str):
        values["profile"] = load_profile(prof)
    elif isinstance(prof, Mapping):
        prof = dict(prof)
        model = ModelShape(**prof.pop("model"))
        try:
            values["profile"] = Profile(model=model, **prof)
        except TypeError as exc:
            raise UsageError(f"{where}: [profile] is incomplete ({exc})",
                             hint="copy it from a scenario.toml written by pdprobe") from exc
    for name in ("prompt", "output"):
        if name in data:
            try:
                values[name] = LengthDist(**data.pop(name))
            except TypeError as exc:
                raise UsageError(f"{where}: [{name}] has unknown keys ({exc})",
                                 hint="allowed: " + ", ".join(f.name for f in fields(LengthDist))) from exc
    faults = []
    for raw in data.pop("faults", []):
        raw = dict(raw)
        kind = raw.pop("kind", "")
        text = kind + (":" + ",".join(f"{k}={v}" for k, v in raw.items()) if raw else "")
        faults.append(parse_fault(text))
    values["faults"] = tuple(faults)
    if "delivery" in data:
        values["delivery"] = delivery_from_mapping(data.pop("delivery"), where)
    allowed = {f.name for f in fields(SimConfig)}
    unknown = set(data) - allowed
    if unknown:
        raise UsageError(f"{where}: unknown scenario keys {sorted(unknown)}",
                         hint=f"allowed: {', '.join(sorted(allowed))}")
    values.update(data)
    if "trace" in data and "rate_rps" not in data:
        values["rate_rps"] = None  # TOML has no null: an absent rate replays the trace's own
    config = SimConfig(**values)
    validate(config)
    return config


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


# --- validation --------------------------------------------------------------------------------

def validate(config: SimConfig) -> None:
    """Raise ``UsageError`` (one line) for an impossible cluster or contradictory faults."""
    c = config
    if c.decode < 1:
        raise UsageError(f"impossible cluster: {c.decode} decode instances",
                         hint="a disaggregated cluster needs at least one decode instance")
    if c.prefill < 1:
        raise UsageError(f"impossible cluster: {c.prefill} prefill instances",
                         hint="a disaggregated cluster needs at least one prefill instance")
    if not 0 < c.duration_s <= MAX_DURATION_S:
        raise UsageError(f"--duration must be within 0..{MAX_DURATION_S:.0f} s (got {c.duration_s:g})",
                         hint="give the simulated time in seconds, e.g. 1800")
    if c.rate_rps is not None and not c.rate_rps > 0:
        raise UsageError(f"--rate must be positive (got {c.rate_rps:g})", hint="give requests/s")
    if c.trace is None and c.rate_rps is None:
        raise UsageError("a synthetic workload needs --rate", hint="give requests/s, or --trace FILE")
    for name, choices in (("engine", ENGINES), ("naming", NAMING_STYLES), ("router", ROUTERS),
                          ("kv_connector", KV_CONNECTORS), ("requests_format", REQUEST_FORMATS)):
        if getattr(c, name) not in choices:
            raise UsageError(f"unknown {name.replace('_', '-')} {getattr(c, name)!r}",
                             hint=f"use one of {', '.join(choices)}")
    if c.benchmark_format is not None and c.benchmark_format not in BENCHMARK_FORMATS:
        raise UsageError(f"unknown benchmark-format {c.benchmark_format!r}",
                         hint=f"use one of {', '.join(BENCHMARK_FORMATS)}")
    validate_delivery(c.delivery)
    validate_length_dist(c.prompt, "--prompt")
    validate_length_dist(c.output, "--output")
    if not 0 <= c.prefix_hit_rate < 1:
        raise UsageError(f"--prefix-hit-rate must be within 0..1 (got {c.prefix_hit_rate:g})",
                         hint="it is the share of prompt tokens in shared prefixes")
    if c.prefix_groups < 1:
        raise UsageError("--prefix-groups must be at least 1", hint="e.g. 64")
    if c.gpus_per_node < c.profile.gpus_per_instance:
        raise UsageError(f"gpus_per_node {c.gpus_per_node} is smaller than one instance "
                         f"({c.profile.gpus_per_instance} GPUs)", hint="use at least that many")
    if c.slo_ttft_s <= 0 or c.slo_tpot_s <= 0:
        raise UsageError("SLOs must be positive", hint="give seconds, e.g. --slo-ttft 2")
    if c.drain_s < 0:
        raise UsageError("drain_s must not be negative", hint="e.g. 300")
    _validate_faults(c)


def _validate_faults(c: SimConfig) -> None:
    seen: dict[str, Fault] = {}
    for fault in c.faults:
        spec = FAULT_KINDS[fault.kind]
        if fault.kind in seen and not spec.repeatable:
            raise UsageError(f"contradictory faults: {fault.kind} given twice "
                             f"({seen[fault.kind].describe()} and {fault.describe()})",
                             hint="give each fault once")
        seen[fault.kind] = fault
        _validate_fault(c, fault)
    if "no-rdma" in seen and "rdma-retransmits" in seen:
        raise UsageError("contradictory faults: rdma-retransmits needs RDMA but no-rdma removes it",
                         hint="choose one of the two")
    if "ignore-kv-hits" in seen and c.router != "kv-aware":
        raise UsageError(f"contradictory faults: ignore-kv-hits needs --router kv-aware "
                         f"(the {c.router} router never uses KV hits)",
                         hint="add --router kv-aware or drop the fault")
    stragglers = [(f.get("role"), int(f.get("index"))) for f in c.faults_of("straggler")]
    if len(set(stragglers)) != len(stragglers):
        raise UsageError("contradictory faults: the same straggler instance is given twice",
                         hint="give each straggler once")
    scale_times = [float(f.get("at_s")) for f in c.faults_of("scale")]
    if len(set(scale_times)) != len(scale_times):
        raise UsageError("contradictory faults: two scale events at the same time",
                         hint="merge them into one scale:at_s=..,prefill=..,decode=..")
    skew = c.fault("routing-skew")
    if skew is not None:
        min_decode = min([c.decode] + [int(f.get("decode")) for f in c.faults_of("scale")
                                       if int(f.get("decode")) >= 0])
        if int(skew.get("targets")) >= min_decode:
            raise UsageError(f"contradictory faults: routing-skew targets {int(skew.get('targets'))} "
                             f"of {min_decode} decode instances (skew needs some left out)",
                             hint="use fewer targets or more decode instances")


def _validate_fault(c: SimConfig, fault: Fault) -> None:
    def fraction(key: str, lo_open: bool = True) -> None:
        v = float(fault.get(key))
        ok = (0 < v <= 1) if lo_open else (0 <= v < 1)
        if not ok:
            raise UsageError(f"--fault {fault.describe()}: {key} must be within "
                             f"{'(0, 1]' if lo_open else '[0, 1)'} (got {v:g})",
                             hint="it is a share")

    k = fault.kind
    if k in ("small-kv", "thin-link"):
        fraction("fraction")
        if k == "small-kv" and c.profile.kv_capacity_tokens * float(fault.get("fraction")) < 1024:
            raise UsageError(f"--fault {fault.describe()}: leaves under 1024 KV tokens per decode "
                             f"instance", hint="use a larger fraction")
    elif k == "contended-link":
        fraction("share", lo_open=False)
    elif k == "rdma-retransmits":
        fraction("rate")
        if float(fault.get("ack_timeout_s")) <= 0:
            raise UsageError(f"--fault {fault.describe()}: ack_timeout_s must be positive",
                             hint="e.g. 0.134 (4.096 us * 2^15)")
    elif k == "routing-skew":
        fraction("share")
        if int(fault.get("targets")) < 1:
            raise UsageError(f"--fault {fault.describe()}: targets must be at least 1",
                             hint="it is how many decode instances get the skewed share")
    elif k == "straggler":
        role = fault.get("role")
        if role not in ("prefill", "decode"):
            raise UsageError(f"--fault {fault.describe()}: role must be prefill or decode",
                             hint="e.g. straggler:role=decode,index=0,factor=2")
        count = c.prefill if role == "prefill" else c.decode
        index = int(fault.get("index"))
        if not 0 <= index < count:
            raise UsageError(f"contradictory faults: straggler {role} index {index} but the "
                             f"cluster has {count} {role} instances", hint=f"use 0..{count - 1}")
        if float(fault.get("factor")) <= 1:
            raise UsageError(f"--fault {fault.describe()}: factor must exceed 1",
                             hint="it multiplies the instance's step time, e.g. 2")
    elif k in ("length-shift", "scale"):
        at = float(fault.get("at_s"))
        if not 0 < at < c.duration_s:
            raise UsageError(f"--fault {fault.describe()}: at_s must fall inside the run "
                             f"(0..{c.duration_s:g} s)", hint="give at_s=SECONDS from the start")
        if k == "length-shift":
            for key in ("prompt_scale", "output_scale"):
                if float(fault.get(key)) <= 0:
                    raise UsageError(f"--fault {fault.describe()}: {key} must be positive",
                                     hint="it multiplies the lengths")
        else:
            p, d = int(fault.get("prefill")), int(fault.get("decode"))
            if p == -1 and d == -1:
                raise UsageError(f"--fault {fault.describe()}: scale changes nothing",
                                 hint="give prefill=N and/or decode=M")
            if d == 0 or p == 0 or p < -1 or d < -1:
                raise UsageError(f"impossible cluster: --fault {fault.describe()} leaves "
                                 f"{p if p in (0,) or p < -1 else d} instances of a role",
                                 hint="keep at least one prefill and one decode instance")
