"""The instance table shows the evidence's figures: a finding and its table agree.

Each test is one disagreement that existed between ``analysis/instances.py`` (the report's
per-instance table) and the evidence the rules quote, on an input where it shows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pdprobe.analysis.base import InstanceSummary
from pdprobe.analysis.evidence.model import ClusterEvidence, column
from pdprobe.analysis.evidence.project import project_instances
from pdprobe.analysis.evidence.stats import significant_figures
from pdprobe.analysis.instances import summarize_instances
from pdprobe.values import Missing
from tests.rules.builders import only, scenario_context


def _table_and_evidence(paths: tuple[Path, ...]) -> tuple[dict[str, InstanceSummary],
                                                          ClusterEvidence]:
    """The projected instance table and the evidence, as ``services.diagnose.analyse`` has
    them."""
    from pdprobe.analysis.evidence.build import compute_evidence
    from pdprobe.analysis.slo import slo_attainment
    from pdprobe.analysis.workload import summarize_workload
    from pdprobe.services.diagnose import DiagnoseRequest, load_dataset

    ds, _ = load_dataset(DiagnoseRequest(paths=paths))
    evidence = compute_evidence(ds, workload=summarize_workload(ds),
                                slo=slo_attainment(ds, None, None, 0.9, defaults=True),
                                capacity=Missing("not needed"), slo_ttft_s=None, slo_tpot_s=None)
    table = project_instances(summarize_instances(ds), evidence)
    return {s.name: s for s in table}, evidence


def test_traffic_share_falls_back_like_the_evidence() -> None:
    """Finished-request counters only: PD501 quotes a share, the table used to show none."""
    from pdprobe.rules.pd501_traffic_skew import TrafficSkew

    ctx = scenario_context("skew", "metrics")
    [finding] = only(TrafficSkew().evaluate(ctx), "PD501")
    quoted = next(e for e in finding.evidence if e.what == "share of decode traffic to decode-0")
    raw = {s.name: s for s in summarize_instances(ctx.dataset)}
    assert isinstance(raw["decode-0"].traffic_share, Missing)  # the disagreement
    table = {s.name: s for s in project_instances(tuple(raw.values()), ctx.evidence)}
    share = table["decode-0"].traffic_share
    assert isinstance(share, float)
    assert quoted.value == significant_figures(100 * share)


def test_prefix_hit_rate_takes_the_counters_first_like_the_evidence() -> None:
    """The bundled sample has prefix-cache counters and cached_tokens in its records, which
    give different rates: the table preferred the records, the findings the counters."""
    from pdprobe.services.diagnose import bundled_sample

    table, evidence = _table_and_evidence((bundled_sample(),))
    hit = column(evidence.instances, "hit_ratio")
    sources = set(evidence.instances.loc[hit.notna(), "hit_ratio_source"])
    assert sources == {"prefix-cache counters"}
    raw = {s.name: s for s in summarize_instances(_dataset((bundled_sample(),)))}
    assert any(isinstance(raw[n].prefix_hit_ratio, float)
               and raw[n].prefix_hit_ratio != pytest.approx(hit[n], rel=1e-6)
               for n in hit.dropna().index)  # the disagreement
    for name, value in hit.dropna().items():
        assert table[str(name)].prefix_hit_ratio == pytest.approx(float(value), rel=1e-12)


def test_an_instance_without_evidence_keeps_its_own_figures() -> None:
    ctx = scenario_context("healthy", "requests")
    raw = summarize_instances(ctx.dataset)
    empty = ctx.evidence.instances.iloc[0:0]
    from dataclasses import replace

    assert project_instances(raw, replace(ctx.evidence, instances=empty)) == raw


def _dataset(paths: tuple[Path, ...]):  # type: ignore[no-untyped-def]
    from pdprobe.services.diagnose import DiagnoseRequest, load_dataset

    return load_dataset(DiagnoseRequest(paths=paths))[0]


def test_decode_tpot_from_logs_is_in_the_table_pd601_quotes() -> None:
    """Engine logs only: PD601 quotes a median TPOT from Little's law (running / generation
    tokens per second); the table used to show no TPOT for the instance."""
    from pdprobe.rules.pd601_straggler import Straggler

    ctx = scenario_context("straggler", "logs")
    [finding] = only(Straggler().evaluate(ctx), "PD601")
    quoted = next(e for e in finding.evidence if e.what == "median TPOT on decode-1")
    raw = {s.name: s for s in summarize_instances(ctx.dataset)}
    assert isinstance(raw["decode-1"].tpot_s, Missing)  # the disagreement
    table = {s.name: s for s in project_instances(tuple(raw.values()), ctx.evidence)}
    tpot = table["decode-1"].tpot_s
    assert not isinstance(tpot, Missing) and tpot.estimated
    assert quoted.value == significant_figures(tpot.p50)
    assert all(isinstance(table[n].tpot_s, Missing) for n in table if table[n].role != "decode")
