"""Shared mutable state of one run: the event queue, per-request fields, the prefix caches.

Per-request fields are plain Python lists indexed by request id (fast scalar access in the
event loop); the engine turns them into numpy arrays once the run ends.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Final

NAN: Final = float("nan")

# event kinds (ints compare fast in the heap tuples)
EV_ARRIVAL: Final = 0
EV_PREFILL_DONE: Final = 1
EV_XFER_BEGIN: Final = 2
EV_XFER_DONE: Final = 3
EV_KV_READY: Final = 4
EV_DECODE_WAKE: Final = 5
EV_TICK: Final = 6
EV_SCALE: Final = 7

ST_OK: Final = 0
ST_ERROR: Final = 1
ST_TIMEOUT: Final = 2
STATUS_NAMES: Final = ("ok", "error", "timeout")


class EventQueue:
    """A heap of ``(time, seq, kind, a, b)``; ``seq`` keeps equal times in insertion order."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0

    def push(self, t: float, kind: int, a: int = 0, b: int = 0) -> None:
        """Schedule an event of ``kind`` at time ``t`` (ties run in insertion order)."""
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, a, b))

    def pop(self) -> tuple[float, int, int, int, int]:
        """The next event: ``(t, seq, kind, a, b)``."""
        return heapq.heappop(self._heap)

    def __len__(self) -> int:
        return len(self._heap)


class Requests:
    """Per-request lifecycle fields (times are simulated seconds from the start)."""

    def __init__(self, arrival: list[float], prompt: list[int], output: list[int]) -> None:
        n = len(arrival)
        self.n = n
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.p_inst = [-1] * n
        self.d_inst = [-1] * n
        self.cached_p = [0] * n  # prompt tokens served from the prefill instance's prefix cache
        self.cached_d = [0] * n  # prompt tokens the decode instance already held (not sent)
        self.t_pstart = [NAN] * n  # first prefill chunk scheduled
        self.t_pend = [NAN] * n  # prefill done (KV ready on P)
        self.t_admit = [NAN] * n  # decode KV memory allocated
        self.t_xfer = [NAN] * n  # bytes start moving
        self.t_kv = [NAN] * n  # KV usable on D
        self.t_join = [NAN] * n  # first decode step scheduled
        self.t_first = [NAN] * n  # first output token
        self.t_finish = [NAN] * n
        self.kv_bytes = [0.0] * n
        self.status = [ST_OK] * n
        self.generated = [0] * n  # output tokens produced (== output for ok requests)
        self.preemptions = [0] * n
        self.timeouts = [0] * n  # RDMA ack timeouts during its transfer
        self.done = 0  # requests finished or failed


class PrefixCache:
    """An LRU cache of prefix-block ids (one per instance), sized in blocks."""

    __slots__ = ("_blocks", "capacity")

    def __init__(self, capacity_blocks: int) -> None:
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.capacity = max(1, capacity_blocks)

    def overlap(self, ids: list[int]) -> int:
        """How many leading blocks of ``ids`` are cached (touching them as recently used)."""
        n = 0
        blocks = self._blocks
        for b in ids:
            if b in blocks:
                blocks.move_to_end(b)
                n += 1
            else:
                break
        return n

    def peek(self, ids: list[int]) -> int:
        """Like ``overlap`` without touching (for routing decisions)."""
        n = 0
        for b in ids:
            if b in self._blocks:
                n += 1
            else:
                break
        return n

    def insert(self, ids: list[int]) -> None:
        """Add blocks to the cache as most recently used, evicting the least recently used beyond
        capacity."""
        blocks = self._blocks
        for b in ids:
            if b in blocks:
                blocks.move_to_end(b)
            else:
                blocks[b] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
