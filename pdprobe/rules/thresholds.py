"""Thresholds more than one rule uses, each defined once with the reason for its value.

A threshold only one rule uses stays in that rule's module, next to the code it tunes.
"""

from __future__ import annotations

from typing import Final

# -- decode memory ----------------------------------------------------------------------------
# Decode KV usage (p90, median over decode instances) at or above this is memory pressure:
# SGLang's pre-allocation and vLLM's admission both stall before the pool is at 100 %. Then a
# prefill queue may be back-pressure from decode (PD101, PD202), measured KV-transfer times
# include waiting for decode memory (PD301, PD302), and an admission queue is decode's own.
DECODE_KV_PRESSURE: Final = 0.85
# A decode instance whose KV usage is at or above KV_NEAR_FULL (90 %) this share of the time is
# "full": a moment at 90 % is a busy batch, half the window is a pool that cannot take more.
KV_FULL_TIME_SHARE: Final = 0.5
# Mean retracted requests per decode instance (SGLang) from which decode is retracting: half a
# request on average means retractions happen in most scrapes, not once.
RETRACTING_MEAN: Final = 0.5
# Requests per instance waiting for decode memory or a decode slot (SGLang pre-allocation or
# bootstrap queue, vLLM admission wait): one on average means decode admits too slowly.
DECODE_BACKPRESSURE_QUEUE: Final = 1.0
# Growth of the decode admission queue (requests per instance) that counts as rising.
DECODE_ADMISSION_GROWTH: Final = 2.0
# Decode KV held by transfers: requests waiting for remote KV outnumber those waiting for a
# decode slot or memory by this factor (and at least one waits on average). Both vLLM and SGLang
# reserve decode KV before the transfer lands, so a slow hand-off fills decode memory too.
REMOTE_DOMINANCE: Final = 2.0

# -- prefill backlog ----------------------------------------------------------------------------
# The mean prefill queue must rise by at least this many requests per instance: one or two
# waiting requests come and go with batching; three more that stay mean arrivals outpace service.
PREFILL_QUEUE_GROWTH: Final = 3.0
# The median wait before prefill must rise by at least this (and at least double) to count.
PREFILL_WAIT_GROWTH_S: Final = 0.5

# -- trends and persistence -------------------------------------------------------------------
# Mann–Kendall: p below this and tau at least this make a trend (p 0.01 because a diagnosis runs
# a dozen such tests; tau 0.3 = clearly more rising pairs than falling, not a wobble).
TREND_ALPHA: Final = 0.01
TREND_MIN_TAU: Final = 0.3
# A rise that ends in a drain counts when the rising part spans this share of the series.
RISE_MIN_SHARE: Final = 0.3
# A rise must last at least this many bins and this share of the window to be "growing".
MIN_RISE_BINS: Final = 4
MIN_RISE_SHARE: Final = 0.1
# One instance at least this multiple of its peers' median speed (TPOT, prefill time per token)
# is a straggler (PD601; with a modified z-score guard against noisy peers); an under-used
# instance that slow is one the router rightly avoids, not routing skew (PD501). 1.5x drags
# the pool's tail well past the spread of healthy identical GPUs.
STRAGGLER_RATIO: Final = 1.5
# A per-instance difference is "persistent" when it holds in at least this share of the bins
# with data: most of the window, so one busy stretch is not enough.
PERSISTENT_BIN_SHARE: Final = 0.6

# -- objectives and confidence ------------------------------------------------------------------
# SLO attainment: below this share of requests within the objective the SLO counts as missed
# (the usual "p90 within target" goal), below the critical share users see an outage.
SLO_GOAL: Final = 0.9
SLO_CRITICAL: Final = 0.5
# Confidence never reaches certainty from telemetry alone, nor drops below "worth a look".
CONFIDENCE_MAX: Final = 0.95
CONFIDENCE_MIN: Final = 0.2
# A finding only a model or a one-off burst supports (nothing observed to grow or persist in the
# window) is at most this sure: below the 0.45 a single observed signal earns.
CONFIDENCE_UNOBSERVED: Final = 0.4
# A pattern seen but whose cost is not (routing skew or cold caches nobody pays for: info) is at
# most as sure as one observed signal alone (PD501, PD502).
CONFIDENCE_NO_IMPACT: Final = 0.45

# -- KV-transfer failures (PD303) and disaggregation in effect (PD801) --------------------------
# Share of requests whose KV hand-off failed, timed out, expired unpulled or was recomputed. A
# healthy P/D deployment stays far below 0.1 % (vLLM's and SGLang's connectors do not retry a
# failed request: each one is a user-visible error or a recompute on decode), so 1 % is a
# pattern, not a blip; at 5 % one request in twenty fails and users notice.
KV_FAILURE_SHARE_WARN: Final = 0.01
KV_FAILURE_SHARE_CRITICAL: Final = 0.05
# Without a denominator (a log of failure lines only) the count decides: any failed transfer is
# worth a warning (failures log at ERROR and are rare when healthy); this many is critical (the
# same bar as PD401's retry exhaustion).
KV_FAILURES_CRITICAL: Final = 10
# One NIC or peer "stands out" when it carries at least this share of the failures that name a
# NIC/peer, over at least this many events: 60 % on one of several is no longer chance (with
# four NICs an even spread puts 25 % on each).
FAILURE_CONCENTRATION: Final = 0.6
FAILURE_CONCENTRATION_MIN: Final = 3
# TTFT p90 of requests arriving in bins with failures at least this multiple of the others'
# counts as "failures drive the TTFT tail" (retries and timeouts wait seconds).
FAILURE_TTFT_RATIO: Final = 1.5
