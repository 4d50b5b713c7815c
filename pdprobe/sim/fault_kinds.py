"""The faults the simulator can inject: their kinds, defaults and the ``--fault`` mini-language.

``KIND[:key=value,...]`` (see ``FAULT_KINDS``) parses into a frozen ``Fault`` (part of
``SimConfig``, re-exported from ``pdprobe.sim.config``); checking faults against the cluster
they are injected into stays in ``pdprobe.sim.config.validate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pdprobe.errors import UsageError


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
