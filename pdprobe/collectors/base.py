"""The collector interface: a reader turns one input into a ``Partial`` of the dataset.

Readers are plain functions ``read(path, ctx) -> Partial`` registered in ``READERS`` by the
input kind that ``sniff`` detects from content. The live Prometheus collector produces the same
``Partial`` pieces from queries, so everything after ``fuse`` is source-agnostic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from pdprobe.collectors.time_window import TimeWindow
    from pdprobe.dataset import Partial

ProgressFn = Callable[[str, float], None]  # (what, fraction 0..1)


@dataclass(frozen=True)
class ReadContext:
    """Options that readers need: facts a file may lack, and where to report progress."""

    year: int | None = None  # for vLLM log timestamps, which carry no year
    instance: str | None = None  # instance name for logs that do not name one
    # (start, end) Unix seconds covered by the other inputs of the same capture (request records,
    # metrics, logs with dated lines): a log whose lines carry no year takes the year that puts
    # it inside this span before falling back to the file's modification time.
    reference_span_s: tuple[float, float] | None = None
    reference_source: str = ""  # which inputs the span came from, for the note
    progress: ProgressFn | None = None
    # Work for the calling thread while a live collector waits on the network (run once, on
    # that thread, after the queries are sent): the diagnose service loads the analysis modules.
    while_waiting: Callable[[], None] | None = None
    # --since/--until for captured files (None: the whole capture); see time_window.py
    window: TimeWindow | None = None

    def report(self, what: str, fraction: float) -> None:
        """Report reading progress (``fraction`` 0-1 of ``what``) to the CLI's progress display,
        when one is attached."""
        if self.progress is not None:
            self.progress(what, fraction)


class Reader(Protocol):
    """A reader: one input file into a ``Partial`` (rows, warnings, notes), under a ``ReadContext``."""
    def __call__(self, path: Path, ctx: ReadContext) -> Partial: ...


# kind (from sniff) -> "module:function"; imported lazily so `pdprobe --help` stays light.
READERS: Final[dict[str, str]] = {
    "requests": "pdprobe.collectors.requests_file:read_requests",
    "openmetrics": "pdprobe.collectors.openmetrics:read_openmetrics",
    "engine-log": "pdprobe.collectors.engine_log:read_engine_log",
    "capture": "pdprobe.collectors.capture:read_capture",
    # load-generator outputs (vLLM, SGLang, AIPerf, guidellm, inference-perf); Sniffed.format
    # names the layout and the package dispatches on it
    "benchmark": "pdprobe.collectors.benchmarks:read_benchmark",
}


def reader_for(kind: str) -> Reader:
    """The reader registered for a sniffed kind, imported only when it is needed."""
    import importlib

    module_name, func = READERS[kind].split(":")
    reader: Reader = getattr(importlib.import_module(module_name), func)
    return reader
