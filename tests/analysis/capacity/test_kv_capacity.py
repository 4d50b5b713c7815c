"""KV capacity per decode instance measured from the engines' usage ratio and tokens held.

Semantics checked against the producers: vLLM's ``vllm:kv_cache_usage_perc`` is the fraction
of KV blocks in use, 0-1 (vllm/v1/metrics/loggers.py, ``kv_cache_usage``); SGLang exports
``sglang:token_usage`` (used / total tokens, 0-1) next to ``sglang:num_used_tokens``
(sglang/srt/metrics/collector.py). Capacity = tokens held / usage ratio.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe import signals as S
from pdprobe.analysis.capacity.kv_capacity import MeasuredKv, measured_kv_capacity
from pdprobe.dataset import InstanceInfo

from ._data import dataset

DECODE = (InstanceInfo("d0", "decode", "test"), InstanceInfo("d1", "decode", "test"),
          InstanceInfo("p0", "prefill", "test"))


def _gauges(signal: str, values: dict[str, np.ndarray], ts: np.ndarray) -> pd.DataFrame:
    return pd.concat([pd.DataFrame({"ts": ts, "instance": name, "signal": signal,
                                    "kind": "gauge", "le": np.nan, "value": v})
                      for name, v in values.items()])


def test_sglang_tokens_held_over_token_usage() -> None:
    """d0 holds 200k tokens at 40 % usage (500k capacity), d1 300k at 50 % (600k); samples
    under 5 % usage are left out; the pool's capacity is the median of the two."""
    ts = np.arange(20) * 15.0
    ratio = {"d0": np.r_[np.full(18, 0.4), 0.01, 0.01], "d1": np.full(20, 0.5)}
    used = {"d0": np.r_[np.full(18, 200e3), 5e3, 5e3], "d1": np.full(20, 300e3)}
    metrics = pd.concat([_gauges(S.KV_USAGE_RATIO, ratio, ts),
                         _gauges(S.KV_USED_TOKENS, used, ts)])
    out = measured_kv_capacity(dataset(metrics=metrics, instances=DECODE))
    assert isinstance(out, MeasuredKv) and out.instances == 2
    assert out.tokens == pytest.approx(550e3)
    assert "num_used_tokens" in out.source


def test_vllm_context_of_the_records_over_the_usage_ratio() -> None:
    """No tokens gauge (vLLM): 10 requests of 1,000-token prompts and 201 output tokens decode
    one after another on d0 for 20 s each, holding 1,100 tokens on average; usage 0.22 while
    they run: 5,000 tokens of capacity."""
    ts = np.arange(0, 200.0, 5.0)
    metrics = _gauges(S.KV_USAGE_RATIO, {"d0": np.full(len(ts), 0.22)}, ts)
    start = np.arange(10) * 20.0
    req = {"arrival_ts": start - 1.0, "ttft_s": 1.0, "tpot_s": 0.1, "prompt_tokens": 1000,
           "output_tokens": 201, "decode_instance": "d0"}
    out = measured_kv_capacity(dataset(req, metrics=metrics, instances=DECODE))
    assert isinstance(out, MeasuredKv) and out.instances == 1
    # the requests run back to back over the samples' whole span (0-195 s)
    assert out.tokens == pytest.approx(1100 / 0.22, rel=0.01)


def test_no_usage_ratio_says_why() -> None:
    assert measured_kv_capacity(dataset(instances=DECODE)) == "no decode-instance metrics"
    ts = np.arange(20) * 15.0
    low = _gauges(S.KV_USAGE_RATIO, {"d0": np.full(20, 0.01)}, ts)
    out = measured_kv_capacity(dataset({"arrival_ts": [0.0], "prompt_tokens": [1],
                                        "output_tokens": [1], "decode_instance": ["d0"],
                                        "ttft_s": [1.0], "tpot_s": [0.1]},
                                       metrics=low, instances=DECODE))
    assert isinstance(out, str) and "under 5%" in out
