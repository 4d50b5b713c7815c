"""``pdprobe simulate``: turn command-line choices into a ``SimConfig``, run it, write a capture."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pdprobe.errors import UsageError
from pdprobe.profiles import DEFAULT_PROFILE, load_profile
from pdprobe.sim.config import (
    DEFAULT_START_TS,
    SimConfig,
    parse_fault,
    parse_length_dist,
    validate,
)

if TYPE_CHECKING:
    from pdprobe.sim.model import SimSummary

DEFAULT_SYNTHETIC_RATE_RPS = 5.0  # a few requests/s: a small cluster's moderate load


@dataclass(frozen=True)
class SimulateRequest:
    """The command line, uninterpreted (None = not given)."""

    output_dir: Path
    scenario: Path | None = None  # a scenario.toml to re-run; other options override it
    trace: Path | None = None
    profile: str | None = None
    prefill: int | None = None
    decode: int | None = None
    rate_rps: float | None = None
    duration_s: float | None = None
    faults: tuple[str, ...] = ()
    engine: str | None = None
    naming: str | None = None
    seed: int | None = None
    router: str | None = None
    prompt: str | None = None
    output: str | None = None
    prefix_hit_rate: float | None = None
    kv_connector: str | None = None
    requests_format: str | None = None
    compress: bool = False
    start: str | None = None
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    preemption: bool | None = None
    force: bool = False


def build_config(req: SimulateRequest) -> SimConfig:
    """The run's configuration; raises ``UsageError`` with one line for any bad choice."""
    base = SimConfig.from_toml(req.scenario) if req.scenario else SimConfig(
        profile=load_profile(DEFAULT_PROFILE), rate_rps=None)
    changes: dict[str, object] = {}
    if req.profile is not None:
        changes["profile"] = load_profile(req.profile)
    if req.trace is not None:
        if not req.trace.exists():
            raise UsageError(f"{req.trace}: no such trace file", hint="check the path")
        changes["trace"] = str(req.trace)
    for name in ("prefill", "decode", "rate_rps", "duration_s", "engine", "naming", "seed",
                 "router", "prefix_hit_rate", "kv_connector", "requests_format", "slo_ttft_s",
                 "slo_tpot_s", "preemption"):
        value = getattr(req, name)
        if value is not None:
            changes[name] = value
    if req.prompt is not None:
        changes["prompt"] = parse_length_dist(req.prompt, "--prompt")
    if req.output is not None:
        changes["output"] = parse_length_dist(req.output, "--output-len")
    if req.faults:
        changes["faults"] = tuple(parse_fault(f) for f in req.faults)
    if req.compress:
        changes["compress"] = True
    if req.start is not None:
        changes["start_ts"] = parse_start(req.start)
    config = replace(base, **changes)  # type: ignore[arg-type]
    if config.trace is None and config.rate_rps is None:
        config = replace(config, rate_rps=DEFAULT_SYNTHETIC_RATE_RPS)
    if req.scenario is None and req.start is None:
        config = replace(config, start_ts=DEFAULT_START_TS)
    validate(config)
    return config


def parse_start(text: str) -> float:
    """``--start``: Unix seconds or an ISO 8601 time (UTC when it names no zone)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise UsageError(f"--start {text!r} is neither Unix seconds nor an ISO 8601 time",
                         hint="e.g. --start 2025-06-02T10:00:00Z") from exc
    if parsed.tzinfo is None:
        from datetime import UTC

        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def prepare(req: SimulateRequest) -> SimConfig:
    """The validated configuration, after checking the output folder (nothing run yet)."""
    from pdprobe.sim.model import check_output_dir

    config = build_config(req)
    check_output_dir(req.output_dir, req.force)
    return config


def run(config: SimConfig, output_dir: Path) -> SimSummary:
    """Simulate and write the capture into ``output_dir`` (atomically)."""
    from pdprobe.sim.model import run_simulation, write_capture

    return write_capture(run_simulation(config), output_dir)


def simulate(req: SimulateRequest) -> SimSummary:
    """Run the simulation and write the capture; returns its ``SimSummary``."""
    return run(prepare(req), req.output_dir)
