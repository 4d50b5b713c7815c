"""Run every rule and rank the findings: root causes first, their consequences folded in.

Several rules often fire on one incident: RDMA retransmissions slow the KV transfer, which
raises TTFT, which looks like a prefill shortage. The engine

1. merges findings of the same cause into one (one cause, one finding, however many rules or
   metrics show it; the others are kept as "also indicated by" evidence);
2. applies the explanation graph ``EXPLAINS``: a finding whose cause is the known upstream of
   another's (with overlapping instances where that matters) becomes its root; the other is
   kept with ``is_root_cause=False``, says whose consequence it is, and its code is listed in
   the root's ``consequences``. The upstream finding must be a warning or worse and not much
   less sure than the one it explains (``EXPLAIN_MARGIN``). A root takes the worst severity of its consequences, since
   that is the impact it causes;
3. orders the result deterministically: roots by severity, confidence, cause precedence and
   code, each followed by its consequences.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Final, Literal

from pdprobe.rules.base import CAUSES, Evidence, Finding, Inconclusive, RuleContext, Severity

if TYPE_CHECKING:
    from pdprobe.rules.base import Cause, RuleResult

Condition = Literal["any", "overlap", "subset"]

# An upstream finding explains a downstream one only if it is at most this much less sure.
EXPLAIN_MARGIN: Final = 0.25
# A finding made by the SLO-miss rule alone (PD801) names no instance: an upstream cause whose
# edge needs overlapping instances explains it whatever instances it names.
SLO_ONLY: Final = frozenset({"PD801"})


@dataclass(frozen=True)
class Edge:
    """``src`` explains ``dst`` when the condition on their instances holds.

    ``via`` restricts the edge to a ``src`` finding that one of these rule codes contributed
    to (e.g. only decode *starvation*, PD202, explains prefill queueing; plain decode
    saturation does not).
    """

    src: Cause
    dst: Cause
    condition: Condition
    via: frozenset[str] = frozenset()


# Upstream causes first: an edge always points down this order, so the graph has no cycles.
PRECEDENCE: Final[tuple[Cause, ...]] = (
    "no-rdma", "rdma-retransmits", "kv-transfer-failures", "not-disaggregated", "ratio-lag",
    "routing-skew", "straggler", "decode-bound", "kv-transfer-bandwidth", "prefill-bound",
)

EXPLAINS: Final[tuple[Edge, ...]] = (
    # Without RDMA the transfer is slow; slow transfer raises TTFT and blocks prefill senders.
    Edge("no-rdma", "kv-transfer-bandwidth", "any"),
    Edge("no-rdma", "rdma-retransmits", "any"),
    Edge("no-rdma", "prefill-bound", "any"),
    Edge("no-rdma", "straggler", "overlap"),
    # Loss recovery looks like a bandwidth problem and slows the instances on the bad nodes.
    Edge("rdma-retransmits", "kv-transfer-bandwidth", "any"),
    Edge("rdma-retransmits", "prefill-bound", "overlap"),
    Edge("rdma-retransmits", "straggler", "overlap"),
    # Loss that exhausts the retries fails transfers; failed transfers waited out their retries
    # and timeouts (TTFT up, prefill holding KV) and a decode that recomputes failed loads does
    # the prefill work itself (disaggregation not in effect for those requests).
    Edge("rdma-retransmits", "kv-transfer-failures", "any"),
    Edge("kv-transfer-failures", "not-disaggregated", "any"),
    Edge("kv-transfer-failures", "kv-transfer-bandwidth", "any"),
    Edge("kv-transfer-failures", "prefill-bound", "any"),
    Edge("kv-transfer-failures", "straggler", "overlap"),
    # Decode instances that prefill themselves are slow and saturated; prefill idles.
    Edge("not-disaggregated", "decode-bound", "any"),
    Edge("not-disaggregated", "straggler", "overlap"),
    Edge("not-disaggregated", "kv-transfer-bandwidth", "any"),
    # A transfer bottleneck that raises TTFT is not also "prefill-bound".
    Edge("kv-transfer-bandwidth", "prefill-bound", "any"),
    # The planner keeping the old ratio is why a pool became short after the mix shift.
    Edge("ratio-lag", "prefill-bound", "any"),
    Edge("ratio-lag", "decode-bound", "any"),
    # An overloaded instance looks slow and saturated; cold caches multiply prefill work.
    Edge("routing-skew", "straggler", "overlap"),
    Edge("routing-skew", "decode-bound", "overlap"),
    Edge("routing-skew", "prefill-bound", "any", frozenset({"PD502"})),
    Edge("routing-skew", "prefill-bound", "overlap"),
    # One slow instance can drag a whole pool's percentiles.
    Edge("straggler", "decode-bound", "subset"),
    Edge("straggler", "prefill-bound", "subset"),
    # Decode KV starvation back-pressures prefill (sglang #6351), and KV waiting for decode
    # memory shows up as slow transfers.
    Edge("decode-bound", "prefill-bound", "any", frozenset({"PD202"})),
    Edge("decode-bound", "kv-transfer-bandwidth", "any", frozenset({"PD202"})),
)


def _check_graph() -> None:
    order = {c: i for i, c in enumerate(PRECEDENCE)}
    if set(order) != set(CAUSES):
        raise RuntimeError("PRECEDENCE must list every cause exactly once")
    for e in EXPLAINS:
        if order[e.src] >= order[e.dst]:
            raise RuntimeError(f"edge {e.src} -> {e.dst} points up the precedence order")


_check_graph()


def run_rules(ctx: RuleContext) -> tuple[tuple[Finding, ...], tuple[Inconclusive, ...]]:
    """Every rule of the catalog over ``ctx``: ranked findings, and what could not be judged."""
    judged = judge_rules(ctx)
    return judged.findings, judged.inconclusive


@dataclass(frozen=True)
class Judgement:
    """What the catalog's rules made of one context: the ranked findings, the rules not
    judged, and per rule (catalog order) its own results and whether it read the quoted
    capacity (``RuleContext.quoted``)."""

    findings: tuple[Finding, ...]
    inconclusive: tuple[Inconclusive, ...]
    ctx: RuleContext
    results: tuple[tuple[RuleResult, bool], ...]


def judge_rules(ctx: RuleContext, earlier: Judgement | None = None) -> Judgement:
    """Every rule of the catalog over ``ctx``, ranked.

    ``earlier``: the judgement of a context differing from ``ctx`` in ``quoted_capacity``
    only (the service quotes the checked capacity after judging the model as built). A rule
    that did not read ``ctx.quoted`` there read nothing that differs, so its results are
    taken as they were, not computed again: at 10M rows the costly rules (peer comparisons
    over the instance table) quote no capacity, and the second pass is the few that do."""
    from pdprobe.rules.catalog import ALL_RULES

    reuse = earlier is not None and len(earlier.results) == len(ALL_RULES) and \
        _only_quote_differs(earlier.ctx, ctx)
    results: list[tuple[RuleResult, bool]] = []
    for i, rule_cls in enumerate(ALL_RULES):
        if reuse and earlier is not None and not earlier.results[i][1]:
            results.append(earlier.results[i])
            continue
        watched = _Watched(**{f.name: getattr(ctx, f.name) for f in fields(ctx)})
        try:
            out = rule_cls().evaluate(watched)
        except Exception as exc:  # one broken rule must not hide every other finding
            if os.environ.get("PDPROBE_DEBUG"):
                raise
            out = [Inconclusive(
                code=rule_cls.code, cause=rule_cls.cause,
                needs=f"internal error in the rule ({type(exc).__name__}: {exc}); please "
                      f"report it with PDPROBE_DEBUG=1 output")]
        results.append((out, watched.read_quoted[0]))
    raw = [item for out, _ in results for item in out if isinstance(item, Finding)]
    inconclusive = [item for out, _ in results for item in out
                    if isinstance(item, Inconclusive)]
    return Judgement(findings=rank(raw), ctx=ctx, results=tuple(results),
                     inconclusive=tuple(sorted(inconclusive, key=lambda i: i.code)))


def _only_quote_differs(a: RuleContext, b: RuleContext) -> bool:
    """Whether two contexts hold the very same inputs but for the quoted capacity."""
    return all(getattr(a, f.name) is getattr(b, f.name) for f in fields(a)
               if f.name != "quoted_capacity")


@dataclass(frozen=True)
class _Watched(RuleContext):
    """A rule's view of the context, noting whether it read the quoted capacity: any read of
    the ``quoted_capacity`` field, through ``quoted`` or not, marks it."""

    read_quoted: list[bool] = field(default_factory=lambda: [False])

    def __getattribute__(self, name: str) -> Any:
        if name == "quoted_capacity":
            object.__getattribute__(self, "read_quoted")[0] = True
        return object.__getattribute__(self, name)


def _strength(f: Finding) -> tuple[int, float, int, str]:
    """Sort key, strongest first."""
    return (-f.severity.rank, -f.confidence, PRECEDENCE.index(f.cause), f.code)


def merge_same_cause(findings: Iterable[Finding]) -> list[tuple[Finding, frozenset[str]]]:
    """One finding per cause, with the set of rule codes that contributed to it."""
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.cause, []).append(f)
    out = []
    for cause in PRECEDENCE:
        group = sorted(groups.get(cause, []), key=_strength)
        if not group:
            continue
        primary = group[0]
        codes = frozenset(g.code for g in group)
        if len(group) == 1:
            out.append((primary, codes))
            continue
        evidence = list(primary.evidence)
        seen = {(e.what, e.instances) for e in evidence}
        steps = list(primary.next_steps)
        for other in group[1:]:
            evidence.append(Evidence(what="also indicated by", value=f"{other.code}: "
                                     f"{other.summary}", source=f"rule {other.code}"))
            for e in other.evidence:
                if (e.what, e.instances) not in seen:
                    seen.add((e.what, e.instances))
                    evidence.append(e)
            steps += [s for s in other.next_steps if s not in steps]
        instances = sorted({i for g in group for i in g.instances})
        # Independent rules agreeing make the cause surer, but never certain.
        confidence = min(0.95, max(g.confidence for g in group) + 0.05 * (len(group) - 1))
        out.append((replace(primary, evidence=tuple(evidence), next_steps=tuple(steps),
                            instances=tuple(instances), confidence=round(confidence, 2),
                            severity=max((g.severity for g in group), key=lambda s: s.rank)),
                    codes))
    return out


def _applies(edge: Edge, src: Finding, src_codes: frozenset[str], dst: Finding,
             dst_codes: frozenset[str] = frozenset()) -> bool:
    if edge.src != src.cause or edge.dst != dst.cause:
        return False
    if edge.via and not (edge.via & src_codes):
        return False
    if src.severity.rank < Severity.WARNING.rank:
        return False  # an info finding is not strong enough to explain anything away
    if src.confidence < dst.confidence - EXPLAIN_MARGIN:
        return False  # a weakly supported upstream must not demote a well-supported finding
    a, b = set(src.instances), set(dst.instances)
    if edge.condition == "any" or dst_codes == SLO_ONLY:
        # an SLO miss names no instance: a more specific upstream cause explains it
        return True
    if edge.condition == "overlap":
        return not a or not b or bool(a & b)
    return bool(b) and b <= a


def rank(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    merged = merge_same_cause(findings)
    by_cause = {f.cause: (f, codes) for f, codes in merged}
    parent: dict[str, str] = {}
    for dst, dst_codes in merged:
        for cause in PRECEDENCE:
            if cause == dst.cause or cause not in by_cause:
                continue
            src, src_codes = by_cause[cause]
            if any(_applies(e, src, src_codes, dst, dst_codes) for e in EXPLAINS):
                parent[dst.cause] = cause  # the most upstream explainer wins
                break

    def root_of(cause: str) -> str:
        while cause in parent:
            cause = parent[cause]
        return cause

    children: dict[str, list[Finding]] = {}
    for f, _ in merged:
        if f.cause in parent:
            children.setdefault(root_of(f.cause), []).append(f)
    roots = []
    for f, _ in merged:
        if f.cause in parent:
            continue
        kids = sorted(children.get(f.cause, []), key=_strength)
        if kids:
            severity = max([f.severity, *(k.severity for k in kids)], key=lambda s: s.rank)
            f = replace(f, severity=severity, consequences=tuple(k.code for k in kids))
        roots.append((f, kids))
    roots.sort(key=lambda pair: _strength(pair[0]))
    out: list[Finding] = []
    for root, kids in roots:
        out.append(root)
        for k in kids:
            out.append(replace(k, is_root_cause=False,
                               summary=f"{k.summary} (a consequence of {root.code}, "
                                       f"{root.cause})"))
    return tuple(out)
