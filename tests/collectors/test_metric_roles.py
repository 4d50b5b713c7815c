"""The role-facts stage both metric paths share (pdprobe/collectors/metric_roles.py).

The label values are those the readers' fixtures carry from real producers (SGLang's
``engine_type``, Dynamo's ``dynamo_component``, KV-connector roles; see docs/inputs/metrics.md
"Roles" and tests/collectors/test_catalog_families.py); here only the shared decisions are
checked. The file reader feeds triples label by label, the live collector answer by answer.
"""

from __future__ import annotations

import pandas as pd

from pdprobe import signals as S
from pdprobe.collectors.metric_roles import (
    DYNAMO_GENERIC_COMPONENT_STRENGTH,
    UNIFIED_NOTE,
    LabelRoles,
    engine_rank,
    evidence_hints,
)
from pdprobe.dataset import ROLE_FROM_EVIDENCE, ROLE_FROM_LABEL


def test_each_distinct_triple_counts_once_and_unified_names_no_role() -> None:
    reader = LabelRoles("f.prom")
    hints = [reader.add("a:1", "engine_type", "prefill"),
             reader.add("a:1", "engine_type", "prefill"),
             reader.add("b:1", "engine_type", "unified"),
             reader.add("c:1", "role", "kv_consumer")]
    assert [(h.instance, h.role, h.strength) for h in hints if h is not None] == [
        ("a:1", "prefill", ROLE_FROM_LABEL), ("c:1", "decode", ROLE_FROM_LABEL)]
    assert reader.notes() == [UNIFIED_NOTE]


def test_generic_dynamo_component_is_decode_only_beside_a_prefill_one() -> None:
    alone = LabelRoles("x")
    assert alone.add("w:1", "dynamo_component", "backend") is None
    assert alone.generic_hints() == []
    pair = LabelRoles("x")
    assert pair.add("p:1", "dynamo_component", "prefill") is not None
    assert pair.add("w:1", "dynamo_component", "backend") is None
    (hint,) = pair.generic_hints()
    assert (hint.instance, hint.role, hint.strength) == (
        "w:1", "decode", DYNAMO_GENERIC_COMPONENT_STRENGTH)


def test_a_metrics_map_value_decides_before_the_conventions() -> None:
    reader = LabelRoles("live", role_of_value=lambda v: "decode" if v == "gen-pool" else None)
    hint = reader.add("d:1", "tier", "gen-pool")
    assert hint is not None and (hint.role, hint.strength) == ("decode", ROLE_FROM_LABEL)


def test_engine_precedence_puts_the_engine_before_its_wrapper() -> None:
    assert engine_rank("vllm") < engine_rank("dynamo") < engine_rank("nixl")
    assert engine_rank("some-map-engine") > engine_rank("lmcache")


def test_behaviour_that_points_both_ways_gives_no_hint_and_a_warning() -> None:
    rows = [(0.0, "p:1", S.PREFILL_BOOTSTRAP_QUEUE, 3.0), (0.0, "x:1", S.PREFILL_BOOTSTRAP_QUEUE, 1.0),
            (0.0, "x:1", S.DECODE_PREALLOC_QUEUE, 2.0), (0.0, "d:1", S.KV_FETCH_WAITING, 0.0)]
    metrics = pd.DataFrame(rows, columns=["ts", "instance", "signal", "value"])
    warnings: list[str] = []
    hints = evidence_hints(metrics, "src", warnings)
    assert {(h.instance, h.role, h.strength) for h in hints} == {
        ("p:1", "prefill", ROLE_FROM_EVIDENCE), ("d:1", "decode", ROLE_FROM_EVIDENCE)}
    assert len(warnings) == 1 and "'x:1'" in warnings[0] and "both prefill and decode" in warnings[0]
