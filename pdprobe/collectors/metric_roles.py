"""Role facts from labelled metric series: one stage for the file reader and the live collector.

Both ``openmetrics.read_openmetrics`` (a scrape or dump file) and ``prometheus.collect_partial``
(the Prometheus HTTP API) see the same labelled series and must reach the same roles, engines and
behavioural evidence; they differ only in how they hand the labels over (a distinct-series table
offline, the answers of ``group by`` queries live). What a label value, a Dynamo component, a
pair of engines or a queue gauge says about an instance is decided here, once:

- ``LabelRoles``: role hints from role-label values (``role``, ``engine_type``, ...,
  ``metric_catalog.ROLE_LABELS``), Dynamo's generic components, SGLang's ``unified`` note;
- ``evidence_hints``: roles from behaviour (PD queues, KV received over transfer, one output
  token per request);
- ``engine_rank``: which engine's families win for one instance (``engines.ENGINE_PRIORITY``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Final

from pdprobe import signals as S
from pdprobe.collectors.engines import ENGINE_PREFERENCE as ENGINE_PREFERENCE
from pdprobe.collectors.engines import ENGINE_PRIORITY as ENGINE_PRIORITY
from pdprobe.collectors.roles import role_from_label_value
from pdprobe.dataset import ROLE_FROM_EVIDENCE, ROLE_FROM_LABEL, RoleHint
from pdprobe.signals import Role

if TYPE_CHECKING:
    import pandas as pd

# Priority of an engine the table does not list (a metrics map's own engine name).
UNLISTED_ENGINE_PRIORITY: Final = 9
# A metrics-map role selector is the user's own statement about their labels: it beats the
# built-in label conventions but not --prefill-match/--decode-match.
ROLE_FROM_MAP: Final = ROLE_FROM_LABEL + 5
# Dynamo names worker components freely; `backend`/`worker` is the decode worker's component
# only in a disaggregated deployment, whose prefill workers register `prefill` (reference §3.3).
# An aggregated worker is `backend` too, so the generic name is read as decode only when the
# same input also carries a prefill component; then it is weaker than a name pattern but
# stronger than behaviour.
DYNAMO_GENERIC_COMPONENT_STRENGTH: Final = ROLE_FROM_EVIDENCE + 5
DYNAMO_GENERIC_COMPONENTS: Final = ("backend", "worker")
_COMPONENT_LABELS: Final = ("dynamo_component", "component")
# Behavioural evidence "one output token per request => prefill" needs enough requests to be
# more than noise, and a prefill-only instance emits exactly one token per request; 1.5 leaves
# room for a few requests finishing on a colocated fallback path.
EVIDENCE_MIN_REQUESTS: Final = 20
PREFILL_MAX_TOKENS_PER_REQUEST: Final = 1.5
# SGLang's engine_type values that name no role.
_ROLELESS_ENGINE_TYPES: Final = ("unified", "dynamic")
UNIFIED_NOTE: Final = ('SGLang engine_type="unified" names no role (<=0.5.3 printed it even in '
                       "PD mode); roles come from names or behaviour")
_EVIDENCE_SIGNALS: Final = (S.PREFILL_BOOTSTRAP_QUEUE, S.PREFILL_INFLIGHT_QUEUE,
                             S.DECODE_PREALLOC_QUEUE, S.DECODE_TRANSFER_QUEUE, S.KV_FETCH_WAITING,
                             S.KV_RECEIVED_TOKENS_TOTAL, S.GENERATION_TOKENS_TOTAL,
                             S.REQUESTS_FINISHED_TOTAL)


def engine_rank(engine: str) -> int:
    """``ENGINE_PRIORITY`` of ``engine`` (unlisted engines last)."""
    return ENGINE_PRIORITY.get(engine, UNLISTED_ENGINE_PRIORITY)


def label_role(label: str, value: str) -> tuple[Role, int] | None:
    """The role a role label's value names, with its strength; None when it names none.

    A Dynamo component of only ``backend``/``worker`` names none by itself
    (``generic_component_hints`` decides it with the other components of the input).
    """
    v = value.strip().lower()
    if label in _COMPONENT_LABELS:
        if "prefill" in v:
            return "prefill", ROLE_FROM_LABEL
        if "decode" in v:
            return "decode", ROLE_FROM_LABEL
        return None
    role = role_from_label_value(value)
    return (role, ROLE_FROM_LABEL) if role else None


def generic_component_hints(pairs: Sequence[tuple[str, str, str]],
                            source: str) -> list[RoleHint]:
    """Decode hints for Dynamo workers whose component is only ``backend``/``worker``.

    ``pairs`` are the (instance, label, value) role labels seen in one input. A generic
    component is a decode worker only beside a ``prefill`` component (a disaggregated graph); on
    its own it is an aggregated worker, which is no decode instance: no hint.
    """
    comps = [(i, lab, v) for i, lab, v in pairs if lab in _COMPONENT_LABELS]
    if not any("prefill" in v.lower() for _, _, v in comps):
        return []
    return [RoleHint(i, "decode", f"label {lab}={v!r} beside a prefill component",
                     DYNAMO_GENERIC_COMPONENT_STRENGTH, source)
            for i, lab, v in comps
            if "prefill" not in v.lower() and "decode" not in v.lower()
            and any(g in v.lower() for g in DYNAMO_GENERIC_COMPONENTS)]


class LabelRoles:
    """Role hints from the (instance, role label, value) triples of one input, fed in order.

    Each distinct triple counts once. ``role_of_value`` (a metrics map's value mapping) decides
    before the built-in conventions. SGLang's ``engine_type="unified"``/``"dynamic"`` name no
    role (``notes()`` says so for ``unified``); Dynamo's generic components are decided at the
    end (``generic_hints()``), with every component of the input in view. Callers feed triples
    in their own order (the file reader label by label, the live collector answer by answer),
    which decides which of two agreeing hints names the source.
    """

    def __init__(self, source: str,
                 role_of_value: Callable[[str], Role | None] | None = None) -> None:
        self.source = source
        self.role_of_value = role_of_value
        self._labelled: list[tuple[str, str, str]] = []
        self._seen: set[tuple[str, str, str]] = set()
        self._unified = False

    def add(self, inst: str, label: str, value: str) -> RoleHint | None:
        """The hint of one triple; None when it names no role or was seen before."""
        if (inst, label, value) in self._seen:
            return None
        self._seen.add((inst, label, value))
        if label == "engine_type" and value.lower() in _ROLELESS_ENGINE_TYPES:
            self._unified = self._unified or value.lower() == "unified"
            return None
        self._labelled.append((inst, label, value))
        mapped = self.role_of_value(value) if self.role_of_value is not None else None
        if mapped is not None:
            return RoleHint(inst, mapped, f"label {label}={value!r}", ROLE_FROM_LABEL,
                            self.source)
        decided = label_role(label, value)
        if decided is None:
            return None
        return RoleHint(inst, decided[0], f"label {label}={value!r}", decided[1], self.source)

    def generic_hints(self) -> list[RoleHint]:
        """Decode hints of Dynamo's generic components (after every triple was added)."""
        return generic_component_hints(self._labelled, self.source)

    def notes(self) -> list[str]:
        return [UNIFIED_NOTE] if self._unified else []


def evidence_hints(metrics: pd.DataFrame, source: str,
                   warnings: list[str]) -> list[RoleHint]:
    """Roles from behaviour: PD queues, KV received over transfer, one token per request.

    ``metrics`` is the long metric table (``dataset.METRIC_COLUMNS``, cumulative rows already
    corrected). An instance whose behaviour points both ways gets no hint and a warning.
    """
    if metrics.empty:
        return []
    found: dict[str, list[tuple[Role, str]]] = {}
    metrics = metrics[metrics["signal"].isin(_EVIDENCE_SIGNALS)]
    if metrics.empty:
        return []

    def add(instances: Iterable[str], role: Role, how: str) -> None:
        for inst in instances:
            found.setdefault(str(inst), []).append((role, how))

    by = metrics.groupby(["instance", "signal"], sort=True)["value"]
    peak = by.max()
    last = by.last()

    def above_zero(signals: Sequence[str]) -> list[str]:
        sel = peak[peak.index.get_level_values("signal").isin(signals)]
        return sorted(set(sel[sel > 0].index.get_level_values("instance")))

    add(above_zero([S.PREFILL_BOOTSTRAP_QUEUE, S.PREFILL_INFLIGHT_QUEUE]), "prefill",
        "SGLang PD prefill queues (bootstrap/inflight) are in use")
    add(above_zero([S.DECODE_PREALLOC_QUEUE, S.DECODE_TRANSFER_QUEUE]), "decode",
        "SGLang PD decode queues (prealloc/transfer) are in use")
    kv_fetch = peak[peak.index.get_level_values("signal") == S.KV_FETCH_WAITING]
    add(sorted(set(kv_fetch.index.get_level_values("instance"))), "decode",
        "vllm:num_requests_kv_fetch_by_stage is exposed (KV consumers only)")
    add(above_zero([S.KV_RECEIVED_TOKENS_TOTAL]), "decode",
        'prompt tokens arrive by KV transfer (prompt_tokens_by_source{source="external_kv_transfer"})')
    gen = last.xs(S.GENERATION_TOKENS_TOTAL, level="signal") if (
        S.GENERATION_TOKENS_TOTAL in last.index.get_level_values("signal")) else None
    fin = last.xs(S.REQUESTS_FINISHED_TOTAL, level="signal") if (
        S.REQUESTS_FINISHED_TOTAL in last.index.get_level_values("signal")) else None
    if gen is not None and fin is not None:
        both = gen.to_frame("gen").join(fin.to_frame("fin"), how="inner")
        one = both[(both["fin"] >= EVIDENCE_MIN_REQUESTS)
                   & (both["gen"] <= PREFILL_MAX_TOKENS_PER_REQUEST * both["fin"])]
        add(one.index.tolist(), "prefill", "about one generated token per finished request")

    hints: list[RoleHint] = []
    for inst, items in sorted(found.items()):
        roles = {r for r, _ in items}
        if len(roles) > 1:
            warnings.append(f"{source}: instance {inst!r}: behaviour points to both prefill and "
                            f"decode "
                            f"({'; '.join(h for _, h in items)}); not used for its role")
            continue
        hints.append(RoleHint(inst, items[0][0], items[0][1], ROLE_FROM_EVIDENCE, source))
    return hints
