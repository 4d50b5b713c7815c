"""Cached tokens per request under an ideal shared prefix cache, from trace prefix blocks
(Mooncake's ``hash_ids``): an upper bound on what prefix caching can save."""

from __future__ import annotations

from typing import Final

import numpy as np

# Mooncake traces list 512-token prefix blocks per request (``hash_ids``).
HASH_BLOCK_TOKENS: Final = 512


def ideal_prefix_hits(offsets: np.ndarray, block_ids: np.ndarray,
                      prompt_tokens: np.ndarray) -> np.ndarray:
    """Cached tokens per request under one unbounded, shared prefix cache (an upper bound).

    ``block_ids[offsets[i]:offsets[i+1]]`` are request ``i``'s prefix blocks, requests in
    arrival order. A block hits when an earlier request held it; a prefix hits up to its first
    miss. Per-instance caches with finite memory and non-affine routing reach less.
    """
    off = np.asarray(offsets, dtype=np.int64)
    flat = np.asarray(block_ids, dtype=np.int64)
    lengths = np.diff(off)
    n = len(lengths)
    if flat.size == 0:
        return np.zeros(n)
    owner = np.repeat(np.arange(n), lengths)
    pos = np.arange(flat.size) - np.repeat(off[:-1], lengths)
    _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    hit = owner[first][inverse] < owner
    miss_pos = np.where(hit, np.iinfo(np.int64).max, pos)
    first_miss = np.zeros(n, dtype=np.int64)
    nonempty = lengths > 0
    first_miss[nonempty] = np.minimum.reduceat(miss_pos, off[:-1][nonempty])
    leading = np.minimum(first_miss, lengths)
    prompt = np.asarray(prompt_tokens, dtype=np.float64)
    return np.clip(leading * float(HASH_BLOCK_TOKENS), 0.0, np.maximum(prompt - 1.0, 0.0))
