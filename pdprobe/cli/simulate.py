"""``pdprobe simulate``: what-if runs and synthetic captures of a P/D-disaggregated cluster."""

from __future__ import annotations

import sys
from enum import Enum, StrEnum
from pathlib import Path
from typing import Annotated

import typer

from pdprobe.cli.common import env, info


class EngineChoice(StrEnum):
    """``--engine``: whose metric names, labels and log lines the capture is written in."""
    vllm = "vllm"
    sglang = "sglang"


class NamingChoice(StrEnum):
    """``--naming``: how the capture tells roles apart (a role label, the instance name, the engine
    type or the pod name)."""
    role_label = "role-label"
    name = "name"
    engine_type = "engine-type"
    pod = "pod"
    dynamo = "dynamo"


class RouterChoice(StrEnum):
    """``--router``: the simulated router's policy."""
    least_tokens = "least-tokens"
    round_robin = "round-robin"
    kv_aware = "kv-aware"


class ConnectorChoice(StrEnum):
    """``--kv-connector``: the KV-transfer library whose metrics and log lines are written."""
    mooncake = "mooncake"
    nixl = "nixl"


class RequestsFormat(StrEnum):
    """``--requests-format``: the request records' file format."""
    jsonl = "jsonl"
    parquet = "parquet"


class BenchmarkFormat(StrEnum):
    """``--benchmark-format``: write the requests as this load generator's output as well."""
    vllm_bench = "vllm-bench"
    sglang_bench = "sglang-bench"
    aiperf = "aiperf"
    guidellm = "guidellm"
    inference_perf = "inference-perf"


def _value(choice: Enum | None) -> str | None:
    return None if choice is None else str(choice.value)


def simulate_command(
    output_dir: Annotated[Path, typer.Option(
        "--output", "-o", envvar=env("simulate-output"),
        help="Folder to write the capture into (request records, OpenMetrics, logs, "
             "scenario.toml). Must be new or empty unless --force.")],
    trace: Annotated[Path | None, typer.Option(
        "--trace", envvar=env("trace"),
        help="Request trace to replay (any request format pdprobe reads; Mooncake hash_ids "
             "drive the prefix caches). Without it: a synthetic mix (--prompt/--output-len).")
    ] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", envvar=env("profile"),
        help="Model x GPU profile: a built-in name (see 'pdprobe ratio --list-profiles') or a "
             "TOML file.")] = None,
    prefill: Annotated[int | None, typer.Option(
        "--prefill", envvar=env("prefill"), help="Prefill instances (default 2).")] = None,
    decode: Annotated[int | None, typer.Option(
        "--decode", envvar=env("decode"), help="Decode instances (default 2).")] = None,
    rate: Annotated[float | None, typer.Option(
        "--rate", envvar=env("rate"),
        help="Arrival rate in requests/s: rescales the trace, or the synthetic Poisson rate "
             "(default 5).")] = None,
    duration: Annotated[float | None, typer.Option(
        "--duration", envvar=env("duration"),
        help="Simulated seconds of arrivals (default 600); in-flight requests then finish.")
    ] = None,
    fault: Annotated[list[str] | None, typer.Option(
        "--fault", envvar=env("fault"),
        help="Inject a fault, KIND[:key=value,...]; repeat for several. Kinds: small-kv, "
             "thin-link, contended-link, rdma-retransmits, no-rdma, routing-skew, "
             "ignore-kv-hits, straggler, length-shift, scale (see docs/simulator.md).")] = None,
    engine: Annotated[EngineChoice | None, typer.Option(
        "--engine", envvar=env("engine"),
        help="Metric names and log formats: vLLM 0.33 (default) or SGLang 0.5.23.")] = None,
    naming: Annotated[NamingChoice | None, typer.Option(
        "--naming", envvar=env("naming"),
        help="How roles show in the capture: a role label (default), the host name, "
             "engine_type, pod names or Dynamo's worker_type.")] = None,
    seed: Annotated[int | None, typer.Option(
        "--seed", envvar=env("seed"), help="Random seed (default 0); same seed, same capture.")
    ] = None,
    router: Annotated[RouterChoice | None, typer.Option(
        "--router", envvar=env("router"), help="Routing policy (default least-tokens).")] = None,
    prompt: Annotated[str | None, typer.Option(
        "--prompt", envvar=env("prompt"),
        help="Synthetic prompt lengths: fixed:N, lognormal:median=M,sigma=S or "
             "bimodal:median=..,sigma=..,median2=..,sigma2=..,weight2=..")] = None,
    output_len: Annotated[str | None, typer.Option(
        "--output-len", envvar=env("output-len"),
        help="Synthetic output lengths, same syntax as --prompt.")] = None,
    prefix_hit_rate: Annotated[float | None, typer.Option(
        "--prefix-hit-rate", envvar=env("prefix-hit-rate"),
        help="Share of prompt tokens in shared prefixes when the input has no hash_ids (0..1).")
    ] = None,
    kv_connector: Annotated[ConnectorChoice | None, typer.Option(
        "--kv-connector", envvar=env("kv-connector"),
        help="vLLM KV connector whose metrics and log lines to write (default mooncake).")
    ] = None,
    requests_format: Annotated[RequestsFormat | None, typer.Option(
        "--requests-format", envvar=env("requests-format"),
        help="Request records as JSON Lines (default) or Parquet.")] = None,
    benchmark_format: Annotated[BenchmarkFormat | None, typer.Option(
        "--benchmark-format", envvar=env("benchmark-format"),
        help="Write the request records as a load generator's output instead of "
             "requests.jsonl: vllm-bench, sglang-bench, aiperf, guidellm or inference-perf "
             "(docs/inputs/benchmarks.md).")] = None,
    gzip_files: Annotated[bool, typer.Option(
        "--gzip", envvar=env("gzip"), help="Compress records, metrics and logs (gzip).")] = False,
    start: Annotated[str | None, typer.Option(
        "--start", envvar=env("start"),
        help="Wall-clock start of the simulated capture: ISO 8601 or Unix seconds "
             "(default 2025-06-02T10:00:00Z).")] = None,
    slo_ttft: Annotated[float | None, typer.Option(
        "--slo-ttft", envvar=env("slo-ttft"), min=0.0,
        help="TTFT objective for the summary (default 2 s).")] = None,
    slo_tpot: Annotated[float | None, typer.Option(
        "--slo-tpot", envvar=env("slo-tpot"), min=0.0,
        help="TPOT objective for the summary (default 0.1 s).")] = None,
    no_preemption: Annotated[bool, typer.Option(
        "--no-preemption", envvar=env("no-preemption"),
        help="Decode admission reserves prompt + output so sequences are never preempted.")
    ] = False,
    scenario: Annotated[Path | None, typer.Option(
        "--scenario", envvar=env("scenario"),
        help="Re-run a scenario.toml written by an earlier run; other options override it.")
    ] = None,
    force: Annotated[bool, typer.Option(
        "--force", envvar=env("force"), help="Replace the output folder if it is not empty.")
    ] = False,
    delivery: Annotated[str | None, typer.Option(
        "--delivery", envvar=env("delivery"),
        help="How the capture names instances and lays out files: a preset (k8s, compose, "
             "bare-metal, files-per-pod, loki, stern, kubectl-timestamps, fluent-bit, vector) "
             "and/or KEY=VALUE,... with keys platform, requests, metrics, logs, host_aliases "
             "(see docs/simulator.md). Default: host:port everywhere, one log per instance.")
    ] = None,
) -> int:
    """Simulate a P/D-disaggregated cluster and write a capture 'pdprobe diagnose' can read."""
    from pdprobe.services.simulate import SimulateRequest, prepare, run

    config = prepare(SimulateRequest(
        output_dir=output_dir, scenario=scenario, trace=trace, profile=profile, prefill=prefill,
        decode=decode, rate_rps=rate, duration_s=duration, faults=tuple(fault or ()),
        engine=_value(engine), naming=_value(naming), seed=seed, router=_value(router),
        prompt=prompt, output=output_len, prefix_hit_rate=prefix_hit_rate,
        kv_connector=_value(kv_connector), requests_format=_value(requests_format),
        compress=gzip_files, start=start, slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot,
        preemption=False if no_preemption else None, force=force,
    ))
    if benchmark_format is not None:
        from dataclasses import replace

        config = replace(config, benchmark_format=_value(benchmark_format))
    if delivery:
        from dataclasses import replace

        from pdprobe.sim.config import validate
        from pdprobe.sim.delivery import parse_delivery

        config = replace(config, delivery=parse_delivery(delivery, config.delivery))
        validate(config)
    workload = f"trace {config.trace}" if config.trace else "a synthetic mix"
    info(f"simulating {config.prefill}P/{config.decode}D {config.profile.name} on {workload} "
         f"for {config.duration_s:g} s ...")
    summary = run(config, output_dir)
    sys.stdout.write(summary.render())
    sys.stdout.flush()
    return 0


def register(app: typer.Typer) -> None:
    """Add ``pdprobe simulate`` to the application."""
    app.command("simulate")(simulate_command)
