"""Per-window recommended counts against the same window's theoretical ratio (issue 16).

A window showing theoretical P/D 2.6 and recommending 1P:1D must say why: a pool at its
floor of one instance, or a pool sized above its load by the latency objective. Anything else
is ``unexplained``: a sizing bug these tests look for on real traces and a load step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.capacity.mix import mix_from_requests
from pdprobe.analysis.capacity.ratio_fit import counts_agree, ratio_fit
from pdprobe.analysis.capacity.recommend import Slo
from pdprobe.analysis.capacity.windows import ratio_windows
from pdprobe.dataset import InstanceInfo
from pdprobe.services.diagnose import DiagnoseRequest, diagnose
from pdprobe.values import Missing

from ._data import dataset, simple_model


def test_counts_within_one_instance_agree() -> None:
    assert counts_agree(2.6, 3, 1) and counts_agree(2.6, 5, 2) and counts_agree(0.5, 1, 2)
    assert not counts_agree(2.6, 1, 1) and not counts_agree(28.9, 4, 1)
    assert not counts_agree(1.0, 8, 2)


def test_the_reason_names_the_pool_and_its_load() -> None:
    assert ratio_fit(2.6, 3, 1, 2.6, 1.0) == "consistent"
    assert ratio_fit(2.64, 1, 1, 0.74, 0.28) == (
        "decode at its floor of one instance for 0.28 instance of load; "
        "prefill at its floor of one instance for 0.74 instance of load")
    assert ratio_fit(28.9, 4, 1, 0.47, 0.02).endswith(
        "prefill sized by the objective: 4 for 0.47 instances of load (12% busy)")
    # counts below what the load needs, neither at a floor: a sizing bug, said as such
    assert ratio_fit(6.0, 2, 1, 6.0, 1.0) == "unexplained"


def test_every_window_of_a_load_step_is_explained() -> None:
    rng = np.random.default_rng(3)
    ts = np.concatenate([np.sort(rng.uniform(0, 600, 300)), np.sort(rng.uniform(600, 1200, 4800))])
    frame = pd.DataFrame({
        "arrival_ts": 1.7e9 + ts, "prompt_tokens": 4000, "output_tokens": 100,
        "prefill_instance": "p0", "decode_instance": "d0", "e2e_s": 5.0, "status": "ok",
    })
    ds = dataset(frame, instances=(InstanceInfo("p0", "prefill", "t"),
                                   InstanceInfo("d0", "decode", "t")))
    mix = mix_from_requests(ds.requests, rate_rps=None, timescale_s=2.0, description="t")
    windows = ratio_windows(ds, mix, simple_model(pb=1e-4, da=0.01, db=1e-8), Slo.of(2.0, 0.1),
                            300.0)
    fits = [w.ratio_fit for w in windows]
    assert fits and all(isinstance(f, str) and f != "unexplained" for f in fits), fits
    for w in windows:  # the loads' ratio is the theoretical ratio
        assert w.prefill_load_instances / w.decode_load_instances == pytest.approx(
            w.theoretical_ratio)


@pytest.mark.parametrize("name", ["AzureLLMInferenceTrace_conv.csv",
                                  "mooncake_synthetic_trace.jsonl"])
def test_public_trace_windows_are_consistent_or_explained(traces_dir: Path, name: str) -> None:
    report = diagnose(DiagnoseRequest(paths=(traces_dir / name,)))
    cap = report.capacity
    assert not isinstance(cap, Missing)
    sized = [w for w in cap.windows if not isinstance(w.ratio_fit, Missing)]
    assert sized
    for w in sized:
        assert w.ratio_fit != "unexplained", w
        if w.ratio_fit != "consistent":
            assert "floor" in w.ratio_fit or "objective" in w.ratio_fit
