"""The sizings a plan shares between its two wait models: every figure the plain one."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.capacity.alternatives import band
from pdprobe.analysis.capacity.mix import mix_from_requests
from pdprobe.analysis.capacity.recommend import LengthWork, own_sizing, recommend, size
from pdprobe.analysis.capacity.sizings import PLAN, Sizings
from pdprobe.analysis.capacity.windows import size_windows, window_frames

from ._data import dataset
from .test_recalibrate import DEPLOYED, MODEL, SLO, WINDOW_S, _checked_round_robin


def test_the_plans_shared_sizings_are_the_plain_ones() -> None:
    """A plan sizes every mix by the model's own waits, then (re-planned) by the calibrated
    ones, through one ``Sizings``: each figure of the second sizing is the one a sizing from
    scratch gives, whichever ran before it."""
    req, m, work, checked = _checked_round_robin()
    waits = checked.waits
    frames = window_frames(dataset(req), m, MODEL, SLO, WINDOW_S)
    shared = Sizings()
    for w in (None, waits, None, waits):
        assert band(m, MODEL, SLO, work=work, waits=w, sizings=shared) == \
            band(m, MODEL, SLO, work=work, waits=w)
        assert size_windows(frames, MODEL, SLO, w, shared) == size_windows(frames, MODEL, SLO, w)
        assert recommend(m, MODEL, SLO, work, w, sizings=shared) == \
            recommend(m, MODEL, SLO, work, w)
        assert recommend(m, MODEL, SLO, work, w, at_least=DEPLOYED + 4, sizings=shared) == \
            recommend(m, MODEL, SLO, work, w, at_least=DEPLOYED + 4)
    # the check's count with the waits is the one the plan's sizing keeps for them
    assert checked.calibrated_prefill == recommend(m, MODEL, SLO, work, waits,
                                                   sizings=shared).prefill


def test_sizings_size_each_mix_once_and_keep_the_whole_mix_with_its_waits() -> None:
    """The mix of a key is made and sized by the model's own waits once; the whole mix's
    sizing with calibrated waits is kept for those waits only (other waits, even equal
    ones, are sized again); a mix no count serves is not kept (asked again, it fails
    again)."""
    _, m, work, checked = _checked_round_robin()
    waits = checked.waits
    made = []

    def make() -> tuple[Any, LengthWork]:
        made.append(1)
        return m, work

    shared = Sizings()
    own = shared.sized(PLAN, make, MODEL, SLO)
    again = shared.sized(PLAN, make, MODEL, SLO)
    assert again[0] is own[0] and again[1] is own[1] and len(made) == 1
    assert own[0] == size(m, MODEL, SLO, work)
    kept = shared.sized(PLAN, make, MODEL, SLO, waits, keep=True)
    assert kept[0] == size(m, MODEL, SLO, work, waits) and len(made) == 1
    assert shared.sized(PLAN, make, MODEL, SLO, waits) is kept
    other = shared.sized(PLAN, make, MODEL, SLO, replace(waits))
    assert other is not kept and other[0] == kept[0]
    assert shared.sized("band", make, MODEL, SLO, waits) is not \
        shared.sized("band", make, MODEL, SLO, waits)  # not kept: only asked for with keep
    assert len(made) == 2  # one per key

    def make_none() -> tuple[Any, LengthWork]:  # as a mix no count serves
        made.append(1)
        raise ValueError("no count meets the objective")

    for _ in range(2):
        with pytest.raises(ValueError):
            shared.sized("none", make_none, MODEL, SLO)
    assert len(made) == 4


def test_searches_started_where_the_whole_mix_ended_find_the_plain_counts() -> None:
    """The band's cases start their pool search as far above the other floors as the whole
    mix's TTFT count was (a burst: far above them): only where the search starts moves,
    every count is the plain one (the band; the whole mix at any headroom, none, one far
    off)."""
    rng = np.random.default_rng(7)
    n = 4000
    ts = np.sort(np.concatenate([rng.uniform(0, 600, n - n // 4), rng.uniform(300, 330, n // 4)]))
    req = pd.DataFrame({"arrival_ts": ts, "prompt_tokens": rng.integers(500, 4000, n),
                        "output_tokens": 100})
    m = mix_from_requests(req, rate_rps=None, timescale_s=2.0, description="t", rescale=False)
    m = m.with_rate(m.rate_rps * 4)
    work = LengthWork.of(m, MODEL, SLO)
    shared = Sizings()
    whole = shared.own(PLAN, lambda: (m, work), MODEL, SLO)  # the plan sizes its mix first
    assert whole.headroom > 10  # the TTFT count far above the other floors: a guess is taken
    assert band(m, MODEL, SLO, work=work, sizings=shared) == band(m, MODEL, SLO, work=work)
    plain = own_sizing(m, MODEL, SLO, work)
    assert plain.headroom == whole.headroom
    for headroom in (None, 0, 1, plain.headroom - 1, plain.headroom, plain.headroom + 3, 50,
                     10_000):
        other = own_sizing(m, MODEL, SLO, work, headroom)
        assert other.sizing == plain.sizing and other.headroom == plain.headroom
