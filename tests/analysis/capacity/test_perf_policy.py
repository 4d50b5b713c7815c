"""Prefill fit notes agree with the coefficients reported (``perf_policy``)."""

from __future__ import annotations

import pytest

from pdprobe.analysis.capacity.perf_policy import fit_prefill
from pdprobe.profiles import DEFAULT_PROFILE, load_profile

from ._outliers import alone_times

HELD = "prefill: an unconstrained fit made the quadratic (attention) term negative; " \
       "it is held at zero"


@pytest.mark.parametrize(("n_short", "factor"), [(2, 0.2), (6, 0.05)])
def test_the_held_at_zero_note_appears_only_when_the_term_is_zero(
        n_short: int, factor: float) -> None:
    _, u, t = alone_times(n_short, factor)
    model, role = fit_prefill(u, t, load_profile(DEFAULT_PROFILE))
    assert role.method == "fit"
    held = model.c_s_per_token2 == 0
    assert held == (n_short == 6)  # both cases occur
    assert (HELD in role.notes) == held
