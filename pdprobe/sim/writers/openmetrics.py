"""Engine metrics as OpenMetrics text with sample timestamps: vLLM 0.33 or SGLang 0.5.23 names.

Gauges and counters come from the engine's per-tick snapshots; histograms from the individual
observations (each request's TTFT, queue time, ... observed when the engine would observe it),
bucketed with the engines' real bounds; the inter-token-latency histogram from the decode steps.

What each side observes follows the engines in P/D mode: on a vLLM decode instance TTFT runs
from the decode request's arrival (the end of prefill) and includes the KV transfer; the prefill
instance serves a one-token request. SGLang's router sends a request to both servers at once, so
the decode server's TTFT and E2E cover the whole request.

This module writes the files; the scrape matrix and family builders are in ``metric_scrapes``,
each engine's families in ``vllm_metrics`` and ``sglang_metrics``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from pdprobe.sim.engine import SimResult
from pdprobe.sim.writers.common import open_out, out_name
from pdprobe.sim.writers.metric_scrapes import Scrapes as Scrapes
from pdprobe.sim.writers.metric_scrapes import scrapes
from pdprobe.sim.writers.sglang_metrics import sglang_families
from pdprobe.sim.writers.vllm_metrics import vllm_families


def write_engine_metrics(result: SimResult, out_dir: Path, compress: bool) -> Path:
    """``metrics.om``: every engine instance's families, ``# EOF`` at the end."""
    from pdprobe.sim.config import SCRAPE_INTERVAL_S

    sc = scrapes(result, SCRAPE_INTERVAL_S)
    parts = sglang_families(result, sc) if result.config.engine == "sglang" else vllm_families(result, sc)
    path = out_dir / "metrics.om"
    with open_out(path, compress) as fh:
        for part in parts:
            fh.write(part)
        fh.write("# EOF\n")
    return out_name(path, compress)


def write_per_target_metrics(result: SimResult, out_dir: Path, compress: bool,
                             stems: Mapping[int, str] | None = None) -> list[Path]:
    """``metrics/<host>_<port>.prom`` (or ``stems[instance index]``): each engine target's
    scrapes, concatenated.

    What a scrape of the engine's ``/metrics`` endpoint holds: no ``instance`` or ``job`` label
    (Prometheus attaches those from the target at scrape time), sample timestamps kept so the
    concatenated scrapes stay a time series. Each file is one instance's share of the dump.
    """
    from dataclasses import replace

    from pdprobe.sim.config import SCRAPE_INTERVAL_S

    sc = scrapes(result, SCRAPE_INTERVAL_S, drop=("instance", "job"))
    metrics_dir = out_dir / "metrics"
    metrics_dir.mkdir(exist_ok=True)
    paths = []
    for spec in result.layout.instances:
        only = np.zeros_like(sc.alive)
        only[spec.index] = sc.alive[spec.index]  # the families write only unmasked cells
        one = replace(sc, alive=only)
        parts = sglang_families(result, one) if result.config.engine == "sglang" else vllm_families(result, one)
        stem = (stems or {}).get(spec.index, spec.file_stem)
        path = metrics_dir / f"{stem}.prom"
        with open_out(path, compress) as fh:
            for part in parts:
                fh.write(part)
            fh.write("# EOF\n")
        paths.append(out_name(path, compress))
    return paths
