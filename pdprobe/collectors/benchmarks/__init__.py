"""Load-generator outputs read as per-request records (docs/inputs/benchmarks.md).

``io.sniff`` recognises each layout from the head of the file (``detect.py``) and reports kind
``benchmark`` with the layout as its format; ``read_benchmark`` (registered in
``collectors.base.READERS``) hands the file to that layout's reader (``detect.BENCHMARK_READERS``,
beside the detection, so a new layout is its reader module plus ``detect.py``). One module per writer:

- ``vllm_bench``: ``vllm bench serve --save-result --save-detailed`` JSON;
- ``sglang_bench``: ``python -m sglang.bench_serving --output-details`` JSONL;
- ``aiperf``: AIPerf ``profile_export.jsonl``;
- ``guidellm``: guidellm ``benchmarks.json``;
- ``inference_perf``: inference-perf ``per_request_lifecycle_metrics.json``.

``base.py`` is the interface they share (``Runs`` -> ``to_partial``). This module stays light:
it is imported while sniffing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pdprobe.collectors.base import ReadContext
    from pdprobe.dataset import Partial

def read_benchmark(path: Path, ctx: ReadContext) -> Partial:
    """Read a benchmark output whose layout ``io.sniff`` detected."""
    import importlib

    from pdprobe.collectors.benchmarks.detect import BENCHMARK_READERS
    from pdprobe.collectors.io import sniff
    from pdprobe.errors import InputError

    sniffed = sniff(path)
    target = BENCHMARK_READERS.get(sniffed.format)
    if sniffed.kind != "benchmark" or target is None:
        raise InputError(f"{path}: not a benchmark output pdprobe reads ({sniffed.why})",
                         hint="see docs/inputs/benchmarks.md for the five layouts")
    module_name, func = target.split(":")
    reader = getattr(importlib.import_module(module_name), func)
    partial: Partial = reader(path, ctx)
    return partial
