"""The evidence's per-bin frames (``ClusterEvidence.bins``), some computed when first read.

Some per-bin, per-instance frames are read by one rule only, and only for an instance already
found off its peers: the per-bin medians (``req_prefill_per_token``, ``req_tpot``) by PD601's
persistence check of a straggler, the prefix-hit ratios (``req_hit``) by PD502's of a low-hit
instance. Most diagnoses read none of them, and each is a pass over every request row (at 10M
rows the prefill time per token of every (bin, instance) cell ~0.13 CPU-s, the hit sums
~0.05), so ``request_figures`` may hand over a frame as the function that computes it
(``defer``), run the first time the frame is read. The frame read is the one computed at
once: the same cells, the same figures, merged with the other role column's frame of the
same name in the same order (``merge``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING

from pdprobe.analysis.evidence.registry import spec

if TYPE_CHECKING:
    import pandas as pd

class FrameBins(MutableMapping[str, "pd.DataFrame"]):
    """Per-bin frames by name (bins x instances), each the merge of its parts in the order
    they came (``merge``: earlier values win); a part may be deferred (``defer``), computed
    and merged the first time the frame is read."""

    def __init__(self) -> None:
        self._parts: dict[str, list[pd.DataFrame | Callable[[], pd.DataFrame]]] = {}

    def merge(self, name: str, frame: pd.DataFrame) -> None:
        """Add ``frame`` to the frame ``name`` (earlier values win: ``merged``)."""
        spec("bins", name)
        self._parts.setdefault(name, []).append(frame)

    def defer(self, name: str, compute: Callable[[], pd.DataFrame]) -> None:
        """Add the frame ``compute()`` gives to the frame ``name``, computed when first read."""
        spec("bins", name)
        self._parts.setdefault(name, []).append(compute)

    def pending(self, name: str) -> bool:
        """Whether a part of the frame ``name`` is not computed yet (it is when read)."""
        return any(callable(part) for part in self._parts.get(name, ()))

    def __getitem__(self, name: str) -> pd.DataFrame:
        import pandas as pd

        parts = self._parts[name]
        out: pd.DataFrame | None = None
        for part in parts:
            frame = part() if callable(part) else part
            out = frame if out is None else merged(out, frame)
        assert isinstance(out, pd.DataFrame)
        self._parts[name] = [out]  # computed once
        return out

    def __setitem__(self, name: str, frame: pd.DataFrame) -> None:
        self._parts[name] = [frame]

    def __delitem__(self, name: str) -> None:
        del self._parts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)


def merged(prev: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` added to ``prev`` (earlier values win): ``prev.combine_first(frame)``."""
    import pandas as pd

    if prev.index.equals(frame.index) and not prev.columns.isin(frame.columns).any() \
            and (prev.dtypes == "float64").all() and (frame.dtypes == "float64").all():
        # two role columns' frames name different instances: what ``combine_first`` gives
        # (the earlier frame's columns, then the other's) without its step per column (~45 ms
        # for 160 instances)
        return pd.concat([prev, frame], axis=1)
    return prev.combine_first(frame)
