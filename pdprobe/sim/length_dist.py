"""Token-length distributions for prompts and outputs, and their command-line mini-language.

``fixed:N``, ``lognormal:median=M,sigma=S[,min=..,max=..]`` and
``bimodal:median=M1,sigma=S1,median2=M2,sigma2=S2,weight2=W[,min=..,max=..]`` parse into a
frozen ``LengthDist`` (part of ``SimConfig``, re-exported from ``pdprobe.sim.config``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Final

from pdprobe.errors import UsageError

LENGTH_KINDS: Final = ("fixed", "lognormal", "bimodal")


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
