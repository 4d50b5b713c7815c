"""A scenario matrix: small captures that show one root cause each (docs/contract.md), plus healthy ones.

``build_scenario(cause, trace=..., engine=..., naming=..., seed=...)`` returns a ``SimConfig``;
``run_to_dir(config, out_dir)`` writes the capture. Every scenario is sized from its workload:
the mean prefill time and decode throughput of the profile on that workload (synthetic, or the
given trace) set the arrival rate and instance counts that put each role at the intended
utilisation, so a trace with 12k-token prompts gets the same symptoms as the default mix. They
are small (a few simulated minutes, a handful of instances): one takes about a second.

=====================  =========================================================================
cause                  what the capture shows
=====================  =========================================================================
healthy-low            ~30 % busy prefill, light decode batches; every SLO met
healthy-high           ~65 % busy prefill, larger decode batches; SLOs still met
prefill-bound          prefill offered ~125 % of its capacity: queues and TTFT grow, decode idle
decode-bound           decode KV memory too small for the load: KV usage near full, requests
                       wait for admission, preemptions, TPOT/TTFT up while prefill idles
kv-transfer-bandwidth  NICs at a few % of their normal rate: transfers queue on the links,
                       port bytes near the line rate, decode waits for KV
rdma-retransmits       5 % packet loss: retransmission/timeout counters grow, slow jittery
                       transfers, Mooncake slice failures, a few failed requests
no-rdma                KV over TCP: no InfiniBand series, slow transfers, "Found 0 HCAs."
routing-skew           70 % of requests go to one decode instance of three
straggler              one decode instance steps 2.5x slower than its peers
ratio-lag              prompts triple (outputs halve) 40 % into the run; P/D never adjusted
kv-transfer-failures   8 % of KV transfers fail, most through NIC mlx5_1 of the first prefill
                       instance: request errors, failure counters and lines, RNIC inactive
not-disaggregated      the router bypasses prefill: decode computes every prompt itself, no
                       KV crosses, prefill idles
=====================  =========================================================================

Variants: ``routing-skew-kv-hits`` (a KV-aware router that ignores prefix hits on a prefix-heavy
workload), ``decode-bound-count`` (too few decode instances), ``ratio-lag-late`` (the P/D counts
follow the shift late), ``instance-churn`` (decode instances leave and join mid-run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

import numpy as np

from pdprobe.errors import UsageError
from pdprobe.profiles import BUILTIN_PROFILES, Profile
from pdprobe.sim.config import LengthDist, SimConfig, parse_fault
from pdprobe.sim.model import SimSummary, run_to_dir

__all__ = ["CAUSES", "SCENARIOS", "build_scenario", "run_to_dir", "workload_capacity"]

SCENARIO_PROFILE: Final = "llama3-70b-h100-tp4"
SCENARIO_DURATION_S: Final = 240.0
SCENARIO_DRAIN_S: Final = 120.0
# The default synthetic mix: chat-like prompts (median 1.5k tokens) and answers (median 150).
SCENARIO_PROMPT: Final = LengthDist("lognormal", median=1500.0, sigma=0.7, max_tokens=16384)
SCENARIO_OUTPUT: Final = LengthDist("lognormal", median=150.0, sigma=0.6, max_tokens=2048)
# Decode runs comfortably at this share of its KV capacity or max batch, whichever binds first.
DECODE_COMFORT_SHARE: Final = 0.35
CAUSES: Final = ("prefill-bound", "decode-bound", "kv-transfer-bandwidth", "rdma-retransmits",
                 "no-rdma", "routing-skew", "straggler", "ratio-lag", "kv-transfer-failures",
                 "not-disaggregated")
SCENARIOS: Final = ("healthy-low", "healthy-high", *CAUSES, "routing-skew-kv-hits",
                    "decode-bound-count", "ratio-lag-late", "instance-churn")
PROBE_REQUESTS: Final = 4000  # synthetic lengths sampled to size the scenario
OVERLOAD: Final = 1.1  # offered load over capacity in the "-bound" scenarios: queues grow steadily
LINK_LOAD: Final = 0.9  # KV-link utilisation of the bandwidth scenario: long but stable queues
TCP_LOAD: Final = 0.65  # TCP utilisation of the no-rdma scenario


@dataclass(frozen=True)
class Capacity:
    """What one instance of each role sustains on a workload (requests/s)."""

    prefill_rps: float
    decode_rps: float
    mean_prompt: float
    mean_output: float
    native_rate_rps: float | None  # the trace's own mean rate, if any


def workload_capacity(profile: Profile, prompt: np.ndarray, output: np.ndarray,
                      native_rate_rps: float | None = None) -> Capacity:
    """Per-instance throughput of ``profile`` on these lengths.

    Prefill: one request per pass (no batching gains), chunked at the token budget. Decode: the
    steady batch that fits ``DECODE_COMFORT_SHARE`` of the KV capacity (or of max batch), whose
    throughput by Little's law is ``B / (mean output * step time)``.
    """
    lengths = prompt.astype(np.float64)
    chunks = np.ceil(lengths / profile.prefill_max_batch_tokens)
    t_prefill = (profile.prefill_a_s * chunks + profile.prefill_b_s_per_token * lengths
                 + profile.prefill_c_s_per_token2 * lengths * lengths)
    mean_out = float(output.mean())
    ctx = float(prompt.mean()) + mean_out / 2
    batch = max(1.0, min(profile.decode_max_batch * DECODE_COMFORT_SHARE * 2,
                         profile.kv_capacity_tokens * DECODE_COMFORT_SHARE / ctx))
    step = profile.decode_step_s(batch, batch * ctx)
    return Capacity(prefill_rps=1.0 / float(t_prefill.mean()),
                    decode_rps=batch / (mean_out * step),
                    mean_prompt=float(prompt.mean()), mean_output=mean_out,
                    native_rate_rps=native_rate_rps)


def build_scenario(cause: str, *, trace: Path | None = None, engine: str = "vllm",
                   naming: str = "role-label", seed: int = 0) -> SimConfig:
    """A small configuration whose capture shows ``cause`` (see the module table)."""
    if cause not in SCENARIOS:
        raise UsageError(f"unknown scenario {cause!r}", hint=f"use one of {', '.join(SCENARIOS)}")
    profile = BUILTIN_PROFILES[SCENARIO_PROFILE]
    base = SimConfig(profile=profile, prompt=SCENARIO_PROMPT, output=SCENARIO_OUTPUT,
                     duration_s=SCENARIO_DURATION_S, drain_s=SCENARIO_DRAIN_S, engine=engine,
                     naming=naming, seed=seed, label=f"scenario {cause}",
                     trace=str(trace) if trace else None, rate_rps=1.0)
    cap = _capacity(base, trace, seed)

    def sized(rho_prefill: float, prefill: int, rho_decode: float | None = None,
              decode: int | None = None, **changes: object) -> SimConfig:
        """Arrival rate for ``rho_prefill`` of ``prefill`` instances; decode count for
        ``rho_decode`` (or ``decode`` instances)."""
        rate = rho_prefill * prefill * cap.prefill_rps
        if decode is None:
            decode = max(1, math.ceil(rate / (cap.decode_rps * (rho_decode or 0.5))))
        return replace(base, prefill=prefill, decode=decode, rate_rps=round(rate, 3), **changes)  # type: ignore[arg-type]

    faults = {
        "rdma-retransmits": "rdma-retransmits:rate=0.05",
        "no-rdma": "no-rdma",
        "routing-skew": "routing-skew:share=0.7,targets=1",
        "straggler": "straggler:role=decode,index=1,factor=2.5",
        "kv-transfer-failures": "kv-transfer-failures:rate=0.08,nic=mlx5_1",
        "not-disaggregated": "not-disaggregated:share=1",
        "ratio-lag": f"length-shift:at_s={SCENARIO_DURATION_S * 0.4:g},prompt_scale=3,output_scale=0.5",
    }
    if cause == "healthy-low":
        return sized(0.3, 2, 0.3)
    if cause == "healthy-high":
        return sized(0.65, 3, 0.55)
    if cause == "prefill-bound":
        return sized(1.25, 2, 0.4)
    if cause == "decode-bound":
        # decode memory for ~90 % of the batch the load needs: KV full, admission waits,
        # preemptions, while prefill has room
        cfg = sized(0.45, 3, decode=1)
        fraction = _small_kv_fraction(profile, cap, cfg)
        return replace(cfg, faults=(parse_fault(f"small-kv:fraction={fraction:.4f}"),))
    if cause == "decode-bound-count":
        # one decode instance offered ~110 % of what its KV memory and max batch allow
        rate = OVERLOAD * _decode_max_rps(profile, cap)
        prefill = max(2, math.ceil(rate / (0.5 * cap.prefill_rps)))
        return replace(base, prefill=prefill, decode=1, rate_rps=round(rate, 3))
    if cause == "kv-transfer-bandwidth":
        cfg = sized(0.5, 3, decode=2)
        fraction = _thin_fraction(profile, cap, cfg)
        return replace(cfg, faults=(parse_fault(f"thin-link:fraction={fraction:.5f}"),))
    if cause in ("rdma-retransmits", "kv-transfer-failures"):
        return replace(sized(0.5, 3, 0.45), faults=(parse_fault(faults[cause]),))
    if cause == "no-rdma":
        # TCP carries the KV at ~65 % of its bandwidth: slow transfers, but a stable queue
        rate = TCP_LOAD * _tcp_node_bytes_per_s(profile, 2) / (cap.mean_prompt * profile.kv_bytes_per_token)
        prefill = max(2, math.ceil(rate / (0.45 * cap.prefill_rps)))
        return replace(base, prefill=prefill, decode=2, rate_rps=round(rate, 3),
                       faults=(parse_fault(faults[cause]),))
    if cause == "not-disaggregated":
        # the prefill load of a healthy deployment, but decode does it: decode sized for ~50 %
        # of its own work, which the local prefill pushes well past
        return replace(sized(0.45, 2, 0.35), faults=(parse_fault(faults[cause]),))
    if cause == "routing-skew":
        return replace(sized(0.55, 4, decode=3), faults=(parse_fault(faults[cause]),))
    if cause == "routing-skew-kv-hits":
        cfg = sized(0.5, 3, decode=3, router="kv-aware", prefix_hit_rate=0.8,
                    prefix_groups=500, prefix_cache_tokens=100_000)
        return replace(cfg, faults=(parse_fault("ignore-kv-hits"),))
    if cause == "straggler":
        return replace(sized(0.45, 3, decode=3), faults=(parse_fault(faults[cause]),))
    if cause in ("ratio-lag", "ratio-lag-late"):
        cfg = replace(sized(0.35, 3, 0.45), duration_s=SCENARIO_DURATION_S * 1.5)
        at = cfg.duration_s * 0.4
        shift = parse_fault(f"length-shift:at_s={at:g},prompt_scale=3,output_scale=0.5")
        if cause == "ratio-lag":
            return replace(cfg, faults=(shift,))
        late = parse_fault(f"scale:at_s={cfg.duration_s * 0.8:g},prefill={cfg.prefill * 3},"
                           f"decode={max(1, cfg.decode - 1) if cfg.decode > 1 else -1}")
        return replace(cfg, faults=(shift, late))
    if cause == "instance-churn":
        cfg = sized(0.4, 2, decode=3)
        return replace(cfg, faults=(
            parse_fault(f"scale:at_s={SCENARIO_DURATION_S * 0.3:g},decode=2"),
            parse_fault(f"scale:at_s={SCENARIO_DURATION_S * 0.6:g},decode=3"),
        ))
    raise AssertionError(cause)


def run_scenario(cause: str, out_dir: Path, *, trace: Path | None = None, engine: str = "vllm",
                 naming: str = "role-label", seed: int = 0) -> SimSummary:
    """Build and write one scenario capture."""
    return run_to_dir(build_scenario(cause, trace=trace, engine=engine, naming=naming, seed=seed),
                      out_dir)


def _capacity(base: SimConfig, trace: Path | None, seed: int) -> Capacity:
    from pdprobe.sim.workload import read_trace, sample_lengths

    if trace is None:
        rng = np.random.default_rng([seed, 99])
        return workload_capacity(base.profile, sample_lengths(base.prompt, PROBE_REQUESTS, rng),
                                 sample_lengths(base.output, PROBE_REQUESTS, rng))
    frame, _ = read_trace(trace)
    t = frame["arrival_ts"].to_numpy(dtype="float64")
    span = float(t.max() - t.min())
    prompt = np.minimum(frame["prompt_tokens"].to_numpy(dtype="int64"), base.profile.max_model_len)
    return workload_capacity(base.profile, prompt, frame["output_tokens"].to_numpy(dtype="int64"),
                             len(t) / span if span > 0 else None)


def _decode_max_rps(profile: Profile, cap: Capacity) -> float:
    """What one decode instance sustains at the batch its KV memory and max batch allow."""
    ctx = cap.mean_prompt + cap.mean_output / 2
    batch = min(profile.decode_max_batch, profile.kv_capacity_tokens / (cap.mean_prompt + cap.mean_output))
    return batch / (cap.mean_output * profile.decode_step_s(batch, batch * ctx))


def _small_kv_fraction(profile: Profile, cap: Capacity, cfg: SimConfig) -> float:
    """KV capacity holding ~1/OVERLOAD of the decode batch the load needs (Little's law)."""
    rate_per_decode = (cfg.rate_rps or 1.0) / cfg.decode
    ctx = cap.mean_prompt + cap.mean_output / 2
    batch = 8.0
    for _ in range(20):  # batch = rate * output * step(batch): a fixed point
        batch = rate_per_decode * cap.mean_output * profile.decode_step_s(batch, batch * ctx)
    tokens = max(batch, 4.0) * (cap.mean_prompt + cap.mean_output) / OVERLOAD
    return float(min(0.9, max(tokens, 4 * cap.mean_prompt) / profile.kv_capacity_tokens))


def _tcp_node_bytes_per_s(profile: Profile, instances: int) -> float:
    per_node = max(1, 8 // profile.gpus_per_instance)
    return min(per_node, instances) * profile.tcp_bytes_per_s


def _thin_fraction(profile: Profile, cap: Capacity, cfg: SimConfig) -> float:
    """NIC speed at which the KV the load produces fills ~90 % of the narrowest node link."""
    rate = cfg.rate_rps or 1.0
    need_bytes_per_s = rate * cap.mean_prompt * profile.kv_bytes_per_token
    per_node = max(1, 8 // profile.gpus_per_instance)
    # all KV converges on the decode nodes; the first holds min(per_node, decode) instances
    decode_link = math.ceil(cfg.decode / per_node) * min(per_node, cfg.decode) * profile.link_bytes_per_s
    return float(min(1.0, need_bytes_per_s / (LINK_LOAD * decode_link)))
