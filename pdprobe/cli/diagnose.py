"""``pdprobe diagnose``: offline files, a live Prometheus, or the bundled sample."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from pdprobe.cli.common import (
    DecodeMatchOpt,
    FailOn,
    FailOnOpt,
    FormatOpt,
    OutputFormat,
    OutputOpt,
    PrefillMatchOpt,
    QuietOpt,
    SloTpotOpt,
    SloTtftOpt,
    StderrProgress,
    TextfileOpt,
    VerboseOpt,
    check_output,
    env,
    exit_code_for,
    info,
    is_stdout,
    render_options,
    textfile_on_error,
    textfile_targets,
    write_output,
    write_report,
)
from pdprobe.cli.live_options import live_options, parse_duration
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.collectors.time_window import TimeWindow

YearOpt = Annotated[int | None, typer.Option(
    "--year", envvar=env("year"), min=1970, max=2100,
    help="Year for vLLM log timestamps, which carry none (default: the file's mtime year).")]
InstanceOpt = Annotated[str | None, typer.Option(
    "--instance", envvar=env("instance"),
    help="Instance name for engine logs that do not name one (default: from the file name).")]
AliasOpt = Annotated[list[str] | None, typer.Option(
    "--alias", envvar=env("alias"),
    help="NAME=INSTANCE: another source's name for an instance (repeatable), e.g. "
         "--alias h100-node-3=10.0.0.5:8000, when pdprobe cannot match names itself.")]
AliasesFileOpt = Annotated[Path | None, typer.Option(
    "--aliases", envvar=env("aliases"),
    help='TOML file of name matches: [aliases] "name" = "instance" lines, or '
         '[instances."INSTANCE"] names = [...]; see docs/inputs/identity.md.')]
ExcludeOpt = Annotated[list[str] | None, typer.Option(
    "--exclude", envvar=env("diagnose-exclude"),
    help="GLOB: leave out folder members whose path under the folder given or whose name "
         "matches (repeatable; fnmatch: *, ?, [abc]), e.g. --exclude '*.log.1' --exclude "
         "'old/*'. A file named on the command line is always read.")]
ProfileOpt = Annotated[str | None, typer.Option(
    "--profile", envvar=env("profile"),
    help="Model x GPU profile (built-in name or TOML file) for the capacity model's fallback; "
         "see 'pdprobe ratio --list-profiles'.")]
VerifyOpt = Annotated[bool, typer.Option(
    "--verify", envvar=env("verify"),
    help="Confirm the recommended P/D by simulating it on the observed workload.")]
SloTargetOpt = Annotated[float, typer.Option(
    "--slo-target", envvar=env("slo-target"), min=0.0, max=1.0,
    help="Share of requests that must meet both objectives; below it the SLO is missed, "
         "which is never OK.")]
MinInstancesOpt = Annotated[int, typer.Option(
    "--min-instances", envvar=env("min-instances"), min=1,
    help="Recommend at least N instances per pool, whatever the model needs.")]
HeadroomOpt = Annotated[int, typer.Option(
    "--headroom", envvar=env("headroom"), min=0,
    help="Recommend N instances per pool beyond what meets the objective (1 = N+1, to "
         "survive losing one); the verdict keeps 'needed' and 'could save' apart.")]
# Shorter capacity windows hold too few requests for a per-window estimate.
MIN_WINDOW_S = 30.0
WindowOpt = Annotated[str, typer.Option(
    "--window", envvar=env("window"),
    help="Window of the capacity estimate over time: 90s, 5m, 6m30s, 1h or plain seconds "
         "(at least 30s).")]


@live_options
def diagnose_command(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="Captured files or folders (request records, OpenMetrics dumps, engine logs, "
             "pdprobe capture files). None and no --prometheus: the bundled sample.")] = None,
    fmt: FormatOpt = OutputFormat.text,
    output: OutputOpt = None,
    textfile: TextfileOpt = None,
    slo_ttft: SloTtftOpt = None,
    slo_tpot: SloTpotOpt = None,
    slo_target: SloTargetOpt = 0.9,
    fail_on: FailOnOpt = FailOn.warning,
    prefill_match: PrefillMatchOpt = None,
    decode_match: DecodeMatchOpt = None,
    year: YearOpt = None,
    instance: InstanceOpt = None,
    alias: AliasOpt = None,
    aliases: AliasesFileOpt = None,
    exclude: ExcludeOpt = None,
    profile: ProfileOpt = None,
    verify: VerifyOpt = False,
    window: WindowOpt = "5m",
    min_instances: MinInstancesOpt = 1,
    headroom: HeadroomOpt = 0,
    verbose: VerboseOpt = False,
    quiet: QuietOpt = False,
    target: PrometheusTarget | None = None,
    file_window: TimeWindow | None = None,
) -> int:
    """Diagnose a disaggregated cluster from captured files, a live Prometheus, or the sample."""
    from pdprobe.collectors.base import ReadContext
    from pdprobe.collectors.identity import parse_aliases
    from pdprobe.collectors.roles import RoleOptions
    from pdprobe.errors import UsageError
    from pdprobe.report.base import renderer_for
    from pdprobe.services.diagnose import DiagnoseRequest, diagnose

    inputs = [*(paths or ()), *(target.files if target else ()), *([aliases] if aliases else [])]
    with textfile_on_error(textfile_targets(fmt.value, output, textfile), inputs):
        if target is not None and paths:
            raise UsageError("give either files or --prometheus, not both",
                             hint="run two diagnoses, or `pdprobe collect` first and pass the file")
        if target is not None and exclude:
            raise UsageError("--exclude leaves out files in folders; there are none with "
                             "--prometheus", hint="drop --exclude")
        if not is_stdout(output):
            assert output is not None
            if not (output.parent if str(output.parent) else Path(".")).is_dir():
                # say so before a possibly long diagnosis, not after it
                raise UsageError(f"{output}: folder {output.parent} does not exist",
                                 hint="create it first")
            check_output(output, inputs)
        if textfile is not None:
            check_output(textfile, inputs, option="--textfile")
        window_s = parse_duration(window, "--window")
        if window_s < MIN_WINDOW_S:
            raise UsageError(f"--window {window!r} is shorter than {MIN_WINDOW_S:g}s",
                             hint="a capacity window needs enough requests: use e.g. 5m")
        alias_map = parse_aliases(alias or (), aliases)
        if not paths and target is None:
            info("no input given: diagnosing the bundled sample scenario (pdprobe/sample_logs)")
        progress = StderrProgress()
        started = time.monotonic()
        try:
            report = diagnose(DiagnoseRequest(
                paths=tuple(paths or ()),
                prometheus=target,
                read=ReadContext(year=year, instance=instance, progress=progress,
                                 window=file_window),
                roles=RoleOptions(prefill_match=prefill_match, decode_match=decode_match),
                aliases=alias_map,
                exclude=tuple(exclude or ()),
                slo_ttft_s=slo_ttft,
                slo_tpot_s=slo_tpot,
                slo_target=slo_target,
                profile=profile,
                verify=verify,
                window_s=window_s,
                min_instances=min_instances,
                headroom=headroom,
            ))
        finally:
            progress.close()
        write_report(report, fmt.value, output, inputs, verbose=verbose, quiet=quiet)
        if not is_stdout(output):
            info(f"wrote {fmt.value} report to {output} in {time.monotonic() - started:.1f} s")
        if textfile is not None:
            write_output(renderer_for("prometheus")(report, render_options(textfile)), textfile,
                         inputs=inputs)
    if report.status == "unknown":  # exit 3 always says why, in one line on stderr
        info(f"could not judge: {report.status_reason or 'too little data to judge any rule'}")
    return exit_code_for(report, fail_on)


def register(app: typer.Typer) -> None:
    """Add ``pdprobe diagnose`` to the application."""
    app.command("diagnose")(diagnose_command)
