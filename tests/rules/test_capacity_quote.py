"""rules/capacity_quote.py: the shortage and the recommended step of one pool."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pdprobe.analysis.base import CapacityResult
from pdprobe.analysis.capacity.check import with_headroom
from pdprobe.rules.capacity_quote import beyond_needed, pool_short_by
from pdprobe.values import Missing
from tests.rules.builders import capacity


def _cap(**kw: object) -> CapacityResult:
    return replace(capacity(rec_p=4, rec_d=3, dep_p=2, dep_d=3), **kw)  # type: ignore[arg-type]


def test_short_by_is_needed_minus_deployed_not_the_headroom() -> None:
    cap = with_headroom(_cap(), headroom=1)  # needed 4P:3D, recommended 5P:4D
    assert (cap.recommended_prefill, cap.recommended_decode) == (5, 4)
    assert pool_short_by(cap, "prefill") == 2  # 4 needed - 2 deployed
    assert pool_short_by(cap, "decode") is None  # 3 needed, 3 deployed: the +1 is no shortage
    assert beyond_needed(cap, "prefill") == "4 meet the objective, plus 1 of --headroom"
    assert beyond_needed(cap, "decode") == "3 meet the objective, plus 1 of --headroom"


def test_min_instances_and_both() -> None:
    raised = with_headroom(_cap(), min_instances=6)
    assert beyond_needed(raised, "prefill") == "4 meet the objective, raised to --min-instances 6"
    both = with_headroom(_cap(), headroom=1, min_instances=6)
    assert beyond_needed(both, "decode") == \
        "3 meet the objective, plus 1 of --headroom, raised to --min-instances 6"
    assert beyond_needed(with_headroom(_cap(), min_instances=2), "prefill") == ""


def test_without_the_service_the_recommended_count_is_the_need() -> None:
    cap = _cap()  # needed_* Missing: the model's own counts
    assert pool_short_by(cap, "prefill") == 2
    assert beyond_needed(cap, "prefill") == ""


@pytest.mark.parametrize("cap", [None, _cap(recommended_prefill=Missing("no fit")),
                                 _cap(deployed_prefill=Missing("no roles"))])
def test_unknown_counts_quote_nothing(cap: CapacityResult | None) -> None:
    assert pool_short_by(cap, "prefill") is None
    assert beyond_needed(cap, "prefill") == ""
