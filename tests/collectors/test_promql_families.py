"""The live path reads the newest name of a rename chain, from the catalog's one table of renames.

``metric_catalog.SUPERSEDED_BY`` is the table the file reader drops deprecated names with
(``openmetrics_series.drop_superseded``); ``promql_families.RENAMES`` ranks the same names for the
live collector, so an instance exposing both names is counted once on either path.
"""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.metric_spec import HIST_SUFFIXES
from pdprobe.collectors.prometheus_decode import SeriesSet
from pdprobe.collectors.prometheus_rows import batch_groups, select_and_flatten
from pdprobe.collectors.promql_families import RENAMES


def _exposed(name: str) -> list[str]:
    """The series names a server shows for a catalog name (a histogram's three)."""
    specs = mc.lookup(name)
    if specs and specs[0].kind == "histogram":
        return [name + suffix for suffix, _ in HIST_SUFFIXES]
    return [name]


@pytest.mark.parametrize(("old", "new"), sorted(mc.SUPERSEDED_BY.items()))
def test_every_catalog_rename_ranks_the_old_name_below_its_successor(old: str, new: str) -> None:
    assert RENAMES[mc.normalise_name(old)] == mc.normalise_name(new)
    fams = {f.exposed: f for f in pp.families_from_names([*_exposed(old), *_exposed(new)],
                                                         pp.SpecIndex.build())}
    assert set(fams) == {old, new}
    assert fams[old].chain == fams[new].chain == mc.normalise_name(new)
    assert fams[old].rank > fams[new].rank == 0


def test_spiderpool_spellings_stay_ranked_after_the_total_name() -> None:
    fams = {f.exposed: f for f in pp.families_from_names(
        ["rdma_np_cnp_sent", "rdma_np_cnp_sent_total"], pp.SpecIndex.build())}
    assert fams["rdma_np_cnp_sent"].chain == "rdma_np_cnp_sent_total"
    assert fams["rdma_np_cnp_sent"].rank > fams["rdma_np_cnp_sent_total"].rank


def test_an_instance_exposing_both_frontend_names_is_counted_once() -> None:
    # Dynamo renamed the frontend's inflight gauge; during the deprecation both are exposed with
    # the same value. Read together they were added (2 x the running requests).
    old, new = "dynamo_frontend_inflight_requests", "dynamo_frontend_active_requests"
    fams = pp.families_from_names([old, new], pp.SpecIndex.build())
    window = pp.choose_window(30.0, 1750000030.0, 15.0)
    (batch,) = [b for b in pp.plan_batches(fams, window) if b.scope == "instance"]
    labels = [{"__name__": n, "instance": "10.0.0.1:8000"} for n in (new, old)]
    sset = SeriesSet(labels, np.tile(window.start_ts + np.arange(3) * 15.0, 2),
                     np.array([4.0, 5.0, 6.0, 4.0, 5.0, 6.0]), np.array([0, 3, 6]),
                     window.start_ts, 15.0)
    groups = batch_groups(batch, sset)
    assert groups is not None
    metrics, _, _ = select_and_flatten([groups])
    assert metrics["value"].tolist() == [4.0, 5.0, 6.0]
