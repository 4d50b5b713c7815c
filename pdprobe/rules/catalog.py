"""The rule catalog: every rule, looked up by code, cause or name, and its explanation text.

Codes are stable and grouped by area: 1xx prefill, 2xx decode, 3xx KV transfer, 4xx network
fabric, 5xx routing, 6xx stragglers, 7xx ratio/planning. A code is never reused for another
meaning; a retired rule keeps its code reserved.
"""

from __future__ import annotations

from typing import Final

from pdprobe.rules.base import CAUSES, Rule
from pdprobe.rules.pd101_prefill_queue_growth import PrefillQueueGrowth
from pdprobe.rules.pd201_decode_saturation import DecodeSaturation
from pdprobe.rules.pd202_decode_kv_starvation import DecodeKvStarvation
from pdprobe.rules.pd301_kv_transfer_bandwidth import KvTransferBandwidth
from pdprobe.rules.pd302_decode_waits_for_kv import DecodeWaitsForKv
from pdprobe.rules.pd401_rdma_retransmits import RdmaRetransmits
from pdprobe.rules.pd402_no_rdma import NoRdma
from pdprobe.rules.pd501_traffic_skew import TrafficSkew
from pdprobe.rules.pd502_low_prefix_hit import LowPrefixHitRouting
from pdprobe.rules.pd601_straggler import Straggler
from pdprobe.rules.pd701_ratio_lag import RatioLag

ALL_RULES: Final[tuple[type[Rule], ...]] = (
    PrefillQueueGrowth,
    DecodeSaturation,
    DecodeKvStarvation,
    KvTransferBandwidth,
    DecodeWaitsForKv,
    RdmaRetransmits,
    NoRdma,
    TrafficSkew,
    LowPrefixHitRouting,
    Straggler,
    RatioLag,
)


def _check_catalog() -> None:
    """Codes and names unique, causes from the contract: a broken catalog fails at import."""
    codes = [r.code for r in ALL_RULES]
    slugs = [r.name for r in ALL_RULES]
    if len(set(codes)) != len(codes) or len(set(slugs)) != len(slugs):
        raise RuntimeError("duplicate rule code or name in pdprobe.rules.catalog")
    for r in ALL_RULES:
        if r.cause not in CAUSES:
            raise RuntimeError(f"rule {r.code} has unknown cause {r.cause!r}")


_check_catalog()


def find_rules(code_or_cause: str) -> list[type[Rule]]:
    """Rules whose code (``PD101``, ``pd101``), cause (``prefill-bound``) or name matches."""
    key = code_or_cause.strip().lower()
    by_code = [r for r in ALL_RULES if r.code.lower() == key]
    if by_code:
        return by_code
    return [r for r in ALL_RULES if key in (r.cause, r.name)]


def render_explanation(rule: type[Rule]) -> str:
    """The text ``pdprobe explain`` prints: heading, the docstring, then what the rule needs."""
    text = rule.explanation()
    lines = text.splitlines()
    title = lines[0] if lines else rule.name
    body = "\n".join(lines[1:]).strip()
    head = f"{rule.code} {rule.name}: {title}"
    meta = f"cause: {rule.cause}    component: {rule.component}"
    needs = "\n".join(f"  - {r}" for r in rule.requires)
    return f"{head}\n{'=' * len(head)}\n{meta}\n\n{body}\n\nInputs it reads (any of):\n{needs}"
