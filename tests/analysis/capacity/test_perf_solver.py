"""The fits' solver: which coefficients it reports held at zero (``perf_solver``)."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis.capacity.perf_solver import nnls_relative

from ._outliers import alone_times


@pytest.mark.parametrize(("n_short", "factor", "held"), [(2, 0.2, ()), (6, 0.05, (2,))])
def test_held_at_zero_names_only_coefficients_the_fit_reports_as_zero(
        n_short: int, factor: float, held: tuple[int, ...]) -> None:
    x, _, t = alone_times(n_short, factor)
    unweighted = np.linalg.lstsq(x / t[:, None], np.ones(len(t)), rcond=None)[0]
    assert unweighted[2] < 0  # the first, unweighted pass makes the quadratic term negative
    fit = nnls_relative(x, t)
    assert fit.held_at_zero == held
    assert (fit.coef[2] == 0) == (2 in held)
    assert np.all(fit.coef[[0, 1]] > 0)
