"""The simulator's inputs: a frozen description of workload, cluster, faults and outputs.

Everything a run depends on lives in ``SimConfig`` (plus the seed), so ``scenario.toml`` written
next to the outputs reproduces the run exactly: ``SimConfig.from_toml(path)``.

Command-line mini-languages parsed here:

- length distributions: ``fixed:N``, ``lognormal:median=M,sigma=S[,min=..,max=..]``,
  ``bimodal:median=M1,sigma=S1,median2=M2,sigma2=S2,weight2=W[,min=..,max=..]``;
- faults: ``KIND[:key=value,...]`` (see ``FAULT_KINDS``).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final

from pdprobe.errors import UsageError
from pdprobe.profiles import BUILTIN_PROFILES, DEFAULT_PROFILE, ModelShape, Profile, load_profile
from pdprobe.sim.delivery import Delivery, delivery_from_mapping, to_toml_lines, validate_delivery

ENGINES: Final = ("vllm", "sglang")
NAMING_STYLES: Final = ("role-label", "name", "engine-type", "pod", "dynamo")
ROUTERS: Final = ("least-tokens", "round-robin", "kv-aware")
KV_CONNECTORS: Final = ("mooncake", "nixl")
REQUEST_FORMATS: Final = ("jsonl", "parquet")
# Load-generator layouts the request records can be written in instead (sim/writers/benchmarks.py)
BENCHMARK_FORMATS: Final = ("vllm-bench", "sglang-bench", "aiperf", "guidellm", "inference-perf")
LENGTH_KINDS: Final = ("fixed", "lognormal", "bimodal")

# 2025-06-02T10:00:00Z, a Monday morning: a fixed, documented default so outputs are identical
# across machines and runs; vLLM log timestamps carry no year, and the files' mtimes are set
# to the simulated end so readers that take the year from the mtime get it right.
DEFAULT_START_TS: Final = 1748858400.0
SCRAPE_INTERVAL_S: Final = 15.0  # Prometheus' most common scrape interval
LOG_INTERVAL_S: Final = 10.0  # vLLM VLLM_LOG_STATS_INTERVAL default (0.33 envs.py)
HASH_BLOCK_TOKENS: Final = 512  # Mooncake trace hash_ids cover 512-token prefix blocks
DEFAULT_DRAIN_S: Final = 300.0  # how long in-flight requests may finish after the last arrival
MAX_DURATION_S: Final = 7 * 24 * 3600.0  # a week: beyond it the outputs get unreasonably large


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution (prompt or output), clipped to ``[min_tokens, max_tokens]``."""

    kind: str = "lognormal"
    median: float = 1000.0  # fixed: the value
    sigma: float = 0.8  # of log(length)
    median2: float = 0.0  # bimodal: second mode
    sigma2: float = 0.5
    weight2: float = 0.0  # bimodal: share of the second mode
    min_tokens: int = 1
    max_tokens: int = 131072

    def scaled(self, factor: float) -> LengthDist:
        """The same shape with both modes' medians multiplied by ``factor``."""
        return replace(self, median=self.median * factor, median2=self.median2 * factor)

    def mean_estimate(self) -> float:
        """Mean before clipping (for calibration messages and the scenario builders)."""
        if self.kind == "fixed":
            return self.median
        m1 = self.median * math.exp(self.sigma**2 / 2)
        if self.kind == "lognormal":
            return m1
        m2 = self.median2 * math.exp(self.sigma2**2 / 2)
        return (1 - self.weight2) * m1 + self.weight2 * m2

    def describe(self) -> str:
        """The distribution in the ``--prompt``/``--output`` syntax it was parsed from
        (``lognormal:median=2000,sigma=0.6``)."""
        if self.kind == "fixed":
            return f"fixed:{int(self.median)}"
        base = f"{self.kind}:median={self.median:g},sigma={self.sigma:g}"
        if self.kind == "bimodal":
            base += f",median2={self.median2:g},sigma2={self.sigma2:g},weight2={self.weight2:g}"
        return base + f",min={self.min_tokens},max={self.max_tokens}"


def parse_length_dist(text: str, what: str) -> LengthDist:
    """``fixed:200`` / ``lognormal:median=1500,sigma=0.9`` / ``bimodal:...`` (see module doc)."""
    kind, _, rest = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in LENGTH_KINDS:
        raise UsageError(f"{what} {text!r}: unknown distribution {kind!r}",
                         hint=f"use one of {', '.join(LENGTH_KINDS)}, e.g. lognormal:median=1000,sigma=0.8")
    if kind == "fixed":
        try:
            value = int(float(rest))
        except ValueError as exc:
            raise UsageError(f"{what} {text!r}: fixed needs a token count",
                             hint="write e.g. fixed:512") from exc
        dist = LengthDist(kind="fixed", median=value, sigma=0.0, min_tokens=1,
                          max_tokens=max(value, 1))
    else:
        params = _parse_params(rest, what, text)
        aliases = {"min": "min_tokens", "max": "max_tokens"}
        allowed = {"median", "sigma", "min", "max"}
        if kind == "bimodal":
            allowed |= {"median2", "sigma2", "weight2"}
        unknown = set(params) - allowed
        if unknown:
            raise UsageError(f"{what} {text!r}: unknown keys {sorted(unknown)}",
                             hint=f"allowed: {', '.join(sorted(allowed))}")
        values: dict[str, Any] = {"kind": kind}
        for key, raw in params.items():
            name = aliases.get(key, key)
            values[name] = int(raw) if name in ("min_tokens", "max_tokens") else raw
        if kind == "bimodal" and not {"median2", "weight2"} <= set(params):
            raise UsageError(f"{what} {text!r}: bimodal needs median2 and weight2",
                             hint="e.g. bimodal:median=800,sigma=0.6,median2=8000,sigma2=0.4,weight2=0.2")
        dist = LengthDist(**values)
    validate_length_dist(dist, what)
    return dist


def validate_length_dist(dist: LengthDist, what: str) -> None:
    """Reject a length distribution the sampler cannot draw from (unknown kind, lengths under one
    token, bad spread), naming the option ``what``."""
    if dist.kind not in LENGTH_KINDS:
        raise UsageError(f"{what}: unknown distribution {dist.kind!r}",
                         hint=f"use one of {', '.join(LENGTH_KINDS)}")
    if dist.median < 1 or (dist.kind == "bimodal" and dist.median2 < 1):
        raise UsageError(f"{what}: lengths must be at least 1 token (got median {dist.median:g})",
                         hint="give a positive median")
    if dist.sigma < 0 or dist.sigma2 < 0:
        raise UsageError(f"{what}: sigma must not be negative", hint="use e.g. sigma=0.8")
    if not 0 <= dist.weight2 <= 1:
        raise UsageError(f"{what}: weight2 must be within 0..1 (got {dist.weight2:g})",
                         hint="it is the share of the second mode")
    if not 1 <= dist.min_tokens <= dist.max_tokens:
        raise UsageError(f"{what}: need 1 <= min <= max (got {dist.min_tokens}..{dist.max_tokens})",
                         hint="fix min/max")


def _parse_params(rest: str, what: str, text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, raw = part.partition("=")
        if not sep:
            raise UsageError(f"{what} {text!r}: expected key=value, got {part!r}",
                             hint="separate parameters with commas, e.g. median=1000,sigma=0.8")
        try:
            out[key.strip().lower()] = float(raw)
        except ValueError as exc:
            raise UsageError(f"{what} {text!r}: {key.strip()} must be a number (got {raw!r})",
                             hint="use plain numbers") from exc
    return out


# --- faults ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FaultKind:
    """A fault the simulator can inject, with its parameters and their defaults."""

    name: str
    summary: str
    defaults: Mapping[str, float | str]
    repeatable: bool = False


FAULT_KINDS: Final[dict[str, FaultKind]] = {
    k.name: k
    for k in (
        FaultKind("small-kv", "decode KV-cache capacity multiplied by `fraction`",
                  {"fraction": 0.25}),
        FaultKind("thin-link", "KV-transfer link bandwidth multiplied by `fraction` on every node",
                  {"fraction": 0.1}),
        FaultKind("contended-link",
                  "background traffic takes `share` of every link (ECN/CNP counters grow)",
                  {"share": 0.6}),
        FaultKind("rdma-retransmits",
                  "a share `rate` of RDMA packets is lost and retransmitted: slower, jittery "
                  "transfers, ack timeouts of `ack_timeout_s`, hw retransmission counters, "
                  "Mooncake slice failures",
                  {"rate": 0.1, "ack_timeout_s": 0.134}),
        FaultKind("kv-transfer-failures",
                  "a share `rate` of KV transfers fails (request error, connector failure "
                  "counters and lines); with `nic` (mlx5_N) the failures gather on that NIC of "
                  "the first prefill instance, which Mooncake marks inactive",
                  {"rate": 0.1, "nic": ""}),
        FaultKind("not-disaggregated",
                  "a share `share` of requests skips prefill: the decode instance computes the "
                  "prompt itself and no KV crosses (prefill idles, transfer counters flat)",
                  {"share": 1.0}),
        FaultKind("no-rdma", "KV travels over TCP: no InfiniBand/RoCE counters, TCP bandwidth",
                  {}),
        FaultKind("routing-skew",
                  "the router sends `share` of requests to the first `targets` decode instances",
                  {"share": 0.6, "targets": 1}),
        FaultKind("ignore-kv-hits",
                  "the router ignores prefix-cache hits (KV-aware routing degrades to "
                  "least-tokens): per-instance prefix hit rates drop",
                  {}),
        FaultKind("straggler", "instance `index` of `role` runs `factor` times slower",
                  {"role": "decode", "index": 0, "factor": 2.0}, repeatable=True),
        FaultKind("length-shift",
                  "from `at_s` on, prompt lengths scale by `prompt_scale` and outputs by "
                  "`output_scale`", {"at_s": -1.0, "prompt_scale": 3.0, "output_scale": 0.5}),
        FaultKind("scale",
                  "at `at_s` the prefill/decode counts become `prefill`/`decode` (-1 = unchanged):"
                  " instances join, or drain and leave",
                  {"at_s": -1.0, "prefill": -1, "decode": -1}, repeatable=True),
    )
}
FAULT_ALIASES: Final = {"tcp": "no-rdma", "retransmits": "rdma-retransmits", "skew": "routing-skew"}


@dataclass(frozen=True)
class Fault:
    """One injected fault: its kind and parameters (defaults filled in)."""

    kind: str
    params: tuple[tuple[str, float | str], ...] = ()

    def get(self, key: str) -> Any:
        """A fault parameter: the value given, else the fault kind's default."""
        for k, v in self.params:
            if k == key:
                return v
        return FAULT_KINDS[self.kind].defaults[key]

    def describe(self) -> str:
        """The fault in the ``--fault`` syntax (``kind:key=value,...``), for scenario files and
        summaries."""
        if not self.params:
            return self.kind
        return self.kind + ":" + ",".join(f"{k}={v}" for k, v in self.params)


def parse_fault(text: str) -> Fault:
    """``straggler:role=decode,index=1,factor=2`` → ``Fault``; unknown kinds/keys are errors."""
    kind, _, rest = text.strip().partition(":")
    kind = FAULT_ALIASES.get(kind.strip().lower(), kind.strip().lower())
    if kind not in FAULT_KINDS:
        raise UsageError(f"--fault {text!r}: unknown fault kind {kind!r}",
                         hint=f"use one of {', '.join(FAULT_KINDS)}")
    spec = FAULT_KINDS[kind]
    params: dict[str, float | str] = dict(spec.defaults)
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, raw = part.partition("=")
        key = key.strip().lower().replace("-", "_")
        if key == "at":
            key = "at_s"
        if not sep or key not in spec.defaults:
            raise UsageError(f"--fault {text!r}: unknown parameter {part!r}",
                             hint=f"{kind} takes {', '.join(spec.defaults) or 'no parameters'}")
        default = spec.defaults[key]
        if isinstance(default, str):
            params[key] = raw.strip().lower()
        else:
            try:
                params[key] = float(raw)
            except ValueError as exc:
                raise UsageError(f"--fault {text!r}: {key} must be a number (got {raw!r})",
                                 hint="use plain numbers") from exc
    return Fault(kind, tuple(params.items()))


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
