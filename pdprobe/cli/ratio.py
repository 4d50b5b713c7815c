"""``pdprobe ratio``: capacity planning without a running cluster."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from pdprobe.cli.common import (
    OutputOpt,
    SloTpotOpt,
    SloTtftOpt,
    env,
    info,
    shared_format_default,
    write_output,
)


class PlanFormat(StrEnum):
    """``pdprobe ratio --format``: text, JSON or Markdown."""
    text = "text"
    json = "json"
    markdown = "markdown"


def ratio_command(
    fmt: Annotated[PlanFormat, typer.Option(
        "--format", "-f", envvar=env("ratio-format"),
        default_factory=shared_format_default(PlanFormat, PlanFormat.text),
        show_default="text, or PDPROBE_FORMAT when it is one of these",
        help="Output format: text, json or markdown.")],  # first: no default value
    trace: Annotated[Path | None, typer.Option(
        "--trace", envvar=env("trace"),
        help="Request trace to plan for (JSONL/CSV/Parquet request records, Azure or Mooncake "
             "trace). Timings in it (prefill_s, tpot_s, ...) calibrate the model.")] = None,
    prompt_mean: Annotated[float | None, typer.Option(
        "--prompt-mean", envvar=env("prompt-mean"), help="Mean prompt length (tokens), "
        "instead of --trace.")] = None,
    prompt_p90: Annotated[float | None, typer.Option(
        "--prompt-p90", envvar=env("prompt-p90"),
        help="90th-percentile prompt length; without it prompts are taken as fixed.")] = None,
    output_mean: Annotated[float | None, typer.Option(
        "--output-mean", envvar=env("output-mean"), help="Mean output length (tokens).")] = None,
    output_p90: Annotated[float | None, typer.Option(
        "--output-p90", envvar=env("output-p90"),
        help="90th-percentile output length; without it outputs are taken as fixed.")] = None,
    rate: Annotated[float | None, typer.Option(
        "--rate", envvar=env("rate"),
        help="Arrival rate (requests/s). With --trace it replays the trace at this rate.")] = None,
    hit_rate: Annotated[float | None, typer.Option(
        "--hit-rate", envvar=env("hit-rate"),
        help="Prefix-cache hit rate (share of prompt tokens not recomputed), 0..1.")] = None,
    arrival_cv2: Annotated[float | None, typer.Option(
        "--arrival-cv2", envvar=env("arrival-cv2"),
        help="Squared CV of inter-arrival times (1 = Poisson, the default without a trace).")
    ] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", envvar=env("profile"),
        help="Model x GPU profile (built-in name or TOML file); see --list-profiles.")] = None,
    slo_ttft: SloTtftOpt = None,
    slo_tpot: SloTpotOpt = None,
    output: OutputOpt = None,
    verify: Annotated[bool, typer.Option(
        "--verify", envvar=env("verify"),
        help="Confirm the recommendation by simulating it on the workload.")] = False,
    list_profiles: Annotated[bool, typer.Option(
        "--list-profiles", help="List the built-in profiles and exit.")] = False,
) -> int:
    """Theoretical and recommended P/D for a workload, a model x GPU profile and SLOs."""
    from pdprobe.report.ratio_plan import render_plan, render_profiles
    from pdprobe.services.ratio import RatioRequest, plan_ratio
    from pdprobe.services.ratio import list_profiles as builtin_profiles

    if list_profiles:
        write_output(render_profiles(builtin_profiles(), fmt.value), output, inputs=[trace] if trace else ())
        return 0
    plan = plan_ratio(RatioRequest(
        trace=trace, prompt_mean=prompt_mean, prompt_p90=prompt_p90, output_mean=output_mean,
        output_p90=output_p90, rate_rps=rate, hit_rate=hit_rate, arrival_cv2=arrival_cv2,
        profile=profile, slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot, verify=verify))
    write_output(render_plan(plan, fmt.value), output, inputs=[trace] if trace else ())
    if output is not None:
        info(f"wrote {fmt.value} plan to {output}")
    return 0


def register(app: typer.Typer) -> None:
    """Add ``pdprobe ratio`` to the application."""
    app.command("ratio")(ratio_command)
