"""The registry: every evidence name declared once; an undeclared name raises, never reads NaN."""

from __future__ import annotations

import pandas as pd
import pytest

from pdprobe.analysis.evidence.columns import InstanceColumns
from pdprobe.analysis.evidence.model import column
from pdprobe.analysis.evidence.registry import (
    CHOICES,
    REGISTRY,
    UnknownEvidence,
    describe,
    source_column,
    spec,
)


def test_unknown_names_raise_everywhere() -> None:
    frame = pd.DataFrame({"g_kv_usage_p90": [0.5]}, index=["d0"])
    with pytest.raises(UnknownEvidence):
        column(frame, "g_kv_usage_p09")
    with pytest.raises(UnknownEvidence):
        spec("cluster", "prefill_queeu")
    with pytest.raises(UnknownEvidence):
        describe("instances.nope")
    with pytest.raises(UnknownEvidence):
        InstanceColumns(pd.Index(["d0"])).put("typo", pd.Series([1.0], index=["d0"]))


def test_declared_but_absent_reads_as_nan() -> None:
    frame = pd.DataFrame(index=["d0", "d1"])
    assert column(frame, "g_kv_usage_p90").isna().all()


def test_every_choice_declares_its_value_source_and_options() -> None:
    for c in CHOICES:
        assert spec("instances", c.name).produced_by == "precedence"
        assert spec("instances", c.source).unit == "label"
        assert source_column(c.name) == c.source
        assert len({o for o, _ in c.options}) == len(c.options)


def test_names_are_literals_with_unit_and_meaning() -> None:
    for table, specs in REGISTRY.items():
        for name, s in specs.items():
            assert s.name == name and s.table == table
            assert s.unit and s.meaning, name


def test_every_per_bin_frame_of_request_records_is_read_by_a_rule() -> None:
    """A per-bin frame of request records costs a gather and a partition of every (bin,
    instance) cell at 10M rows: only frames some rule declares it reads are computed."""
    from pdprobe.analysis.evidence.registry import REQUEST_BINS
    from pdprobe.rules.catalog import ALL_RULES

    read = {ref for rule in ALL_RULES for ref in rule.inputs.evidence}
    assert [s.name for s in REQUEST_BINS if f"bins.{s.name}" not in read] == []
