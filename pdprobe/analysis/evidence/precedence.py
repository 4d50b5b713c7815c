"""One column per quantity from the best source each instance has (the registry's ``CHOICES``).

The derived inputs of the choices (shares among a role's instances, hit ratios from counters,
Little's-law TPOT, achieved transfer bandwidth, prefill time per token) are computed here,
then every ``Choice`` takes, per instance, its first option with a value and records which.
This is the only source-precedence logic of the evidence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pdprobe.analysis.evidence.registry import CHOICES, Choice

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.evidence.columns import InstanceColumns


def choose(cols: InstanceColumns, c: Choice) -> None:
    """``c.name`` = the first option that has a value, per instance; ``c.source`` says which."""
    value = cols.get(c.options[0][0]) * np.nan
    source = np.full(len(cols.index), "", dtype=object)
    for col, label in c.options:
        cand = cols.get(col)
        take = value.isna() & cand.notna()
        value = value.where(~take, cand)
        source = np.where(take.to_numpy(), label, source)
    cols.set_series(c.name, value)
    cols.set_text(c.source, source)


def _role_shares(cols: InstanceColumns, roles: pd.Series, base: str, out: str) -> None:
    """``out`` = each instance's share of ``base`` among the instances of its role."""
    vals = cols.get(base)
    share = vals * np.nan
    for _role, idx in roles.groupby(roles).groups.items():
        # Shares among the instances that report the figure (an instance seen only in a
        # log, or under another name, has none and is left out rather than counted as 0).
        part = vals.loc[idx].dropna()
        total = part.sum()
        if len(part) >= 2 and np.isfinite(total) and total > 0:
            share.loc[part.index] = part / total
    cols.set_series(out, share)


def derive_and_choose(cols: InstanceColumns) -> None:
    """The derived per-instance figures, then every declared choice."""
    import pandas as pd

    roles = pd.Series(cols.text["role"], index=cols.index)
    is_prefill = (roles == "prefill").to_numpy()
    # Traffic: per-request records, then finished-request counters, then token counters.
    cols.set("c_role_tokens", np.where(is_prefill, cols.get("c_prompt_tokens"),
                                       cols.get("c_generation_tokens")))
    cols.set("g_role_tps", np.where(is_prefill, cols.get("g_prompt_tps_mean"),
                                    cols.get("g_gen_tps_mean")))
    _role_shares(cols, roles, "c_finished", "c_finished_share")
    _role_shares(cols, roles, "c_role_tokens", "c_role_tokens_share")
    _role_shares(cols, roles, "g_role_tps", "g_role_tps_share")
    # Prefix-cache hit rate from the token counters over the window.
    queries = cols.get("c_prefix_queries")
    cols.set_series("c_hit_ratio", cols.get("c_prefix_hits") / queries.where(queries > 0))
    # Little's law on a decode instance: running sequences / tokens per second = time per token.
    # (Not on prefill instances: their "running" requests are prefilling, not decoding.)
    gen = cols.get("g_gen_tps_mean")
    cols.set_series("g_tpot_est", (cols.get("g_running_mean") / gen.where(gen > 0)).where(
        ~is_prefill))
    for mean, total, count in (("h_tpot_mean", "h_tpot_sum", "h_tpot_count"),
                               ("h_itl_mean", "h_itl_sum", "h_itl_count")):
        n = cols.get(count)
        cols.set_series(mean, cols.get(total) / n.where(n > 0))
    time_sum = cols.get("h_xfer_s_sum")
    cols.set_series("h_xfer_achieved",
                    cols.get("h_xfer_bytes_sum") / time_sum.where(time_sum > 0))
    # Prefill time per token from histograms: sum of prefill time over the tokens computed
    # (or prompted) on the instance; a mean, so long prompts weigh in, but no bucket coarseness.
    computed = cols.get("h_computed_sum").where(cols.get("h_computed_sum") > 0)
    prompted = cols.get("h_prompt_len_sum").where(cols.get("h_prompt_len_sum") > 0)
    cols.set_series("h_prefill_per_token", cols.get("h_prefill_s_sum") / computed.fillna(prompted))
    for c in CHOICES:
        choose(cols, c)
    # Decode admission wait: vLLM's waiting gauge includes requests deferred for remote KV.
    deferred = cols.get("g_deferred_mean")
    cols.set_series("admission_wait_mean", (cols.get("g_waiting_mean")
                                            - deferred.fillna(0.0)).clip(lower=0.0))
    cols.set_series("remote_kv_wait_mean", _max_of(
        [cols.get("g_kv_fetch_mean"), cols.get("g_transfer_queue_mean"), deferred]))


def _max_of(series: list[pd.Series]) -> pd.Series:
    """Element-wise max ignoring NaN (NaN only where every input is NaN)."""
    import pandas as pd

    frame = pd.concat(series, axis=1)
    return frame.max(axis=1, skipna=True).where(frame.notna().any(axis=1))
