"""KV capacity per decode instance measured from what the engines report (issue 16).

A profile's ``kv_capacity_tokens`` is a guess about the deployment (GPU memory, weights,
``gpu_memory_utilization``, KV dtype). The engines say how full their cache is: the usage
ratio (vLLM ``vllm:kv_cache_usage_perc``, SGLang ``sglang:token_usage``, both ``kv_usage_ratio``
here) against the tokens they hold gives the capacity.

- **Tokens held reported** (SGLang ``sglang:num_used_tokens``, ``kv_used_tokens``): per sample,
  ``used / ratio``; the median per instance, over samples with a ratio of at least
  ``MIN_USAGE_RATIO``.
- **Tokens held from the records** (vLLM exports no token gauge): per decode instance, the
  time-average of the context its requests held (a request holds ``prompt + generated`` from
  its first token for ``tpot_s × (output − 1)`` seconds: ``(I + O/2)·D`` token-seconds, its
  part inside the metric samples' span) over the mean usage ratio of that span.

The pool's capacity is the median over its instances; the capacity model prefers it to the
profile's and says which was used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S

if TYPE_CHECKING:
    from pdprobe.dataset import Dataset

# Usage ratios below this (5 %) are too small a fraction to divide by: a few blocks of rounding
# become a large error in the capacity.
MIN_USAGE_RATIO: Final = 0.05
# An instance needs this many usable samples (or a span of records this long, in samples).
MIN_SAMPLES: Final = 5


@dataclass(frozen=True)
class MeasuredKv:
    """KV capacity per decode instance (tokens), how it was measured, on how many."""

    tokens: float
    source: str
    instances: int


def measured_kv_capacity(dataset: Dataset) -> MeasuredKv | str:
    """The decode instances' KV capacity from usage ratio and tokens held, or why not."""
    from pdprobe.analysis.tables import signal_rows

    decode = {i.name for i in dataset.instances_of("decode")}
    metrics = dataset.metrics
    if not decode or metrics.empty:
        return "no decode-instance metrics"
    ratio = signal_rows(metrics, S.KV_USAGE_RATIO)
    ratio = ratio[ratio["instance"].isin(decode).to_numpy(dtype=bool, na_value=False)]
    if ratio.empty:
        return "no KV usage ratio on decode instances"
    used = signal_rows(metrics, S.KV_USED_TOKENS)
    used = used[used["instance"].isin(decode).to_numpy(dtype=bool, na_value=False)]
    if not used.empty:
        out = _from_used_tokens(ratio, used)
        if out is not None:
            return out
    return _from_records(dataset, ratio)


def _from_used_tokens(ratio: object, used: object) -> MeasuredKv | None:
    import pandas as pd

    assert isinstance(ratio, pd.DataFrame) and isinstance(used, pd.DataFrame)
    joined = ratio[["instance", "ts", "value"]].merge(
        used[["instance", "ts", "value"]], on=["instance", "ts"], suffixes=("_ratio", "_used"))
    ok = (joined["value_ratio"] >= MIN_USAGE_RATIO) & (joined["value_used"] > 0)
    joined = joined[ok.to_numpy(dtype=bool, na_value=False)]
    if joined.empty:
        return None
    joined = joined.assign(cap=joined["value_used"] / joined["value_ratio"])
    per = joined.groupby("instance", observed=True)["cap"].agg(["median", "size"])
    per = per[per["size"] >= MIN_SAMPLES]
    if per.empty:
        return None
    return MeasuredKv(float(per["median"].median()),
                      "tokens held / KV usage ratio reported by the engine "
                      "(num_used_tokens / token_usage)", len(per))


def _from_records(dataset: Dataset, ratio: object) -> MeasuredKv | str:
    import pandas as pd

    assert isinstance(ratio, pd.DataFrame)
    req = dataset.requests
    need = ("decode_instance", "ttft_s", "tpot_s")
    if not len(req) or not all(dataset.has_request_column(c) for c in need):
        return "no tokens-held gauge and no request records with decode_instance, ttft_s, tpot_s"
    span = ratio.groupby("instance", observed=True)["ts"].agg(["min", "max", "size"])
    mean_ratio = ratio.groupby("instance", observed=True)["value"].mean()
    span = span[(span["size"] >= MIN_SAMPLES) & (span["max"] > span["min"])]
    span = span.join(mean_ratio.rename("ratio"))
    span = span[span["ratio"] >= MIN_USAGE_RATIO]
    if span.empty:
        return f"KV usage on decode instances stays under {MIN_USAGE_RATIO:.0%}"
    inst = req["decode_instance"].astype("string")
    arrival = req["arrival_ts"].to_numpy(dtype="float64", na_value=np.nan)
    prompt = req["prompt_tokens"].to_numpy(dtype="float64", na_value=np.nan)
    out = req["output_tokens"].to_numpy(dtype="float64", na_value=np.nan)
    start = arrival + req["ttft_s"].to_numpy(dtype="float64", na_value=np.nan)
    end = start + req["tpot_s"].to_numpy(dtype="float64", na_value=np.nan) \
        * np.maximum(out - 1.0, 0.0)
    lo = span["min"].reindex(inst).to_numpy(dtype="float64", na_value=np.nan)
    hi = span["max"].reindex(inst).to_numpy(dtype="float64", na_value=np.nan)
    inside = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None)
    held = np.nan_to_num((prompt + out / 2.0) * inside, nan=0.0)  # token-seconds in the span
    frame = pd.DataFrame({"instance": inst, "held": held})
    total = frame.groupby("instance", observed=True)["held"].sum()
    span = span.join(total.rename("held"), how="inner")
    span = span[span["held"] > 0]
    if span.empty:
        return "no decode-instance request in the span of its KV usage samples"
    cap = span["held"] / (span["max"] - span["min"]) / span["ratio"]
    return MeasuredKv(float(cap.median()),
                      "context held by each decode instance's requests (records) / its mean "
                      "KV usage ratio", len(cap))
