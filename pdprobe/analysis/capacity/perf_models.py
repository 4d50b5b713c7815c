"""The per-role performance models: prefill forward time and decode step time.

Prefill (DistServe's form): one forward over uncached chunks ``l_i`` takes
``a + b·Σl + c·Σl²``; a request of ``u`` uncached tokens needs ``ceil(u / T)`` forwards
(``T`` = token budget per forward). Decode: a step over ``B`` sequences holding ``K`` context
tokens takes ``a + b·K + c·B``. ``perf_policy`` fits them; the profile gives their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pdprobe.profiles import Profile


@dataclass(frozen=True)
class PrefillModel:
    """Prefill forward time ``a + b·Σl + c·Σl²`` with a token budget per forward."""

    a_s: float
    b_s_per_token: float
    c_s_per_token2: float
    max_batch_tokens: int
    source: str = "profile"

    def forwards(self, uncached: np.ndarray) -> np.ndarray:
        return np.maximum(np.ceil(np.asarray(uncached, dtype=np.float64) / self.max_batch_tokens), 1.0)

    def alone_s(self, uncached: np.ndarray, cached: np.ndarray | float = 0.0) -> np.ndarray:
        """Prefill time of each request run on its own (chunked at the token budget)."""
        u = np.asarray(uncached, dtype=np.float64)
        return self.forwards(u) * self.a_s + self.b_s_per_token * u \
            + self.c_s_per_token2 * attention_tokens2(u, cached)

    def batched_s(self, uncached: np.ndarray, cached: np.ndarray | float = 0.0) -> np.ndarray:
        """Each request's share of busy time when forwards are packed to the token budget.

        Attention (the quadratic term) is per sequence, so batching amortises only the fixed
        cost per forward; chunking keeps the quadratic total (chunk ``k`` attends its prefix).
        """
        u = np.asarray(uncached, dtype=np.float64)
        return self.a_s * u / self.max_batch_tokens + self.b_s_per_token * u \
            + self.c_s_per_token2 * attention_tokens2(u, cached)

    def alone_and_batched_s(self, uncached: np.ndarray, cached: np.ndarray | float = 0.0
                            ) -> tuple[np.ndarray, np.ndarray]:
        """``(alone_s, batched_s)`` in one go, sharing the per-token and attention terms."""
        u = np.asarray(uncached, dtype=np.float64)
        linear = self.b_s_per_token * u
        attn = self.c_s_per_token2 * attention_tokens2(u, cached)
        alone = self.forwards(u) * self.a_s
        alone += linear
        alone += attn
        batched = self.a_s * u / self.max_batch_tokens
        batched += linear
        batched += attn
        return alone, batched


def attention_tokens2(uncached: np.ndarray, cached: np.ndarray | float = 0.0) -> np.ndarray:
    """``(C + u)² − C²``: the computed tokens attend to the cached prefix too."""
    u = np.asarray(uncached, dtype=np.float64)
    return u * (u + 2.0 * np.asarray(cached, dtype=np.float64))


@dataclass(frozen=True)
class DecodeModel:
    """Decode step time ``a + b·K + c·B`` and the memory and batch limits."""

    a_s: float
    b_s_per_ctx_token: float
    c_s_per_seq: float
    max_batch: int
    kv_capacity_tokens: int
    source: str = "profile"

    def step_s(self, batch: np.ndarray | float, ctx_tokens: np.ndarray | float) -> np.ndarray:
        return self.a_s + self.b_s_per_ctx_token * np.asarray(ctx_tokens, dtype=np.float64) \
            + self.c_s_per_seq * np.asarray(batch, dtype=np.float64)


def prefill_from_profile(p: Profile) -> PrefillModel:
    return PrefillModel(p.prefill_a_s, p.prefill_b_s_per_token, p.prefill_c_s_per_token2,
                        p.prefill_max_batch_tokens, f"profile {p.name}")


def decode_from_profile(p: Profile) -> DecodeModel:
    return DecodeModel(p.decode_a_s, p.decode_b_s_per_ctx_token, p.decode_c_s_per_seq,
                       p.decode_max_batch, p.kv_capacity_tokens, f"profile {p.name}")

