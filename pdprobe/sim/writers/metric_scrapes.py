"""The scrape matrix and the family builders shared by the vLLM and SGLang metric writers.

``Scrapes`` selects the engine snapshots a Prometheus scrape would see; the builders turn its
columns (gauges, counters) and the simulated requests' observations (histograms) into
OpenMetrics family text. ``vllm_metrics`` and ``sglang_metrics`` list each engine's families.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pdprobe.sim.engine import F, SimResult
from pdprobe.sim.writers.common import (
    engine_labels,
    family_text,
    histogram_text,
    label_text,
    observations_matrix,
    scrape_offsets_s,
)

if TYPE_CHECKING:
    import numpy.typing as npt

Matrix = "npt.NDArray[np.float64]"


@dataclass(frozen=True)
class Scrapes:
    """Which snapshots are scraped, when, and which instance series exist at each."""

    idx: npt.NDArray[np.int64]  # snapshot indices at multiples of the scrape interval
    t_s: npt.NDArray[np.float64]  # simulated time of each scrape
    ts: npt.NDArray[np.float64]  # [instance, scrape] Unix timestamps (with target offsets)
    alive: npt.NDArray[np.bool_]  # [instance, scrape]
    X: npt.NDArray[np.float64]  # [instance, scrape, field]
    roles: npt.NDArray[np.str_]  # per instance
    labels: list[str]  # label text (without braces) per instance


def scrapes(result: SimResult, interval_s: float, drop: tuple[str, ...] = ()) -> Scrapes:
    """The scraped snapshots; ``drop`` names labels left out (those Prometheus adds itself)."""
    cfg = result.config
    idx = np.flatnonzero(np.isclose(np.mod(result.tick_s, interval_s), 0.0))
    t_s = result.tick_s[idx]
    specs = result.layout.instances
    offsets = scrape_offsets_s([s.name for s in specs], cfg.seed)
    ts = cfg.start_ts + t_s[None, :] + offsets[:, None]
    alive = result.alive[idx].T.copy()
    X = np.transpose(result.inst[idx], (1, 0, 2))
    labels = [label_text([(k, v) for k, v in engine_labels(result, s) if k not in drop])[1:-1]
              for s in specs]
    return Scrapes(idx, t_s, ts, alive, X, np.array([s.role for s in specs]), labels)




# --- building blocks ------------------------------------------------------------------------

Series = Sequence[tuple[tuple[tuple[str, str], ...], "Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]"]]


def scalar_family(sc: Scrapes, name: str, kind: str, help_text: str, roles: tuple[str, ...],
                   series: Series) -> str:
    """A gauge/counter family: for each instance of ``roles``, one series per variant."""
    chosen = np.flatnonzero(np.isin(sc.roles, roles))
    prefixes: list[str] = []
    values = []
    masks = []
    times = []
    for i in chosen:
        for extra, fn in series:
            lab = sc.labels[i]
            if extra:
                lab = ",".join(sorted(lab.split(",") + [f'{k}="{v}"' for k, v in extra]))
            prefixes.append(f"{name}{{{lab}}}")
            values.append(fn(sc.X[i]))
            masks.append(sc.alive[i])
            times.append(sc.ts[i])
    if not prefixes:
        return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"
    return family_text(name, kind, help_text, prefixes, np.vstack(values), np.vstack(times),
                       np.vstack(masks))


def f(field: str) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]:
    """A metric's value from one scrape column (``F[field]``) of the scrape matrix."""
    col = F[field]
    return lambda X: X[:, col]


def zero(X: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """A metric that is always zero (a family the engine exports but the simulation does not drive)."""
    return np.zeros(X.shape[0])


def ratio(num: str, den: str) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]:
    """A metric that is the ratio of two scrape columns (zero where the denominator is)."""
    a, b = F[num], F[den]
    return lambda X: np.divide(X[:, a], X[:, b], out=np.zeros(X.shape[0]), where=X[:, b] > 0)


def obs_histogram(result: SimResult, sc: Scrapes, name: str, help_text: str,
                   roles: tuple[str, ...], bounds: Sequence[float],
                   obs: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]],
                   extra: str = "") -> str:
    """A histogram family filled from observations ``(time_s, value, instance)``."""
    chosen = np.flatnonzero(np.isin(sc.roles, roles))
    series_of = np.full(len(sc.roles), -1, dtype=np.int64)
    series_of[chosen] = np.arange(chosen.size)
    t, v, inst = obs
    s = np.where(inst >= 0, series_of[np.clip(inst, 0, None)], -1)
    buckets, sums = observations_matrix(t, v, s, chosen.size, sc.t_s, bounds)
    labels = [sc.labels[i] + ("," + extra if extra else "") for i in chosen]
    labels = [",".join(sorted(lab.split(","))) for lab in labels]
    return histogram_text(name, help_text, labels, bounds, buckets, sums, sc.ts[chosen],
                          sc.alive[chosen])


def itl_histogram(result: SimResult, sc: Scrapes, name: str, help_text: str,
                   roles: tuple[str, ...]) -> str:
    chosen = np.flatnonzero(np.isin(sc.roles, roles))
    buckets = np.transpose(result.itl_buckets[sc.idx], (1, 0, 2))[chosen]
    sums = result.itl_sum[sc.idx].T[chosen]
    return histogram_text(name, help_text, [sc.labels[i] for i in chosen], result.itl_bounds,
                          buckets, sums, sc.ts[chosen], sc.alive[chosen])


def request_columns(result: SimResult) -> dict[str, npt.NDArray]:
    return result.requests


def prefill_obs(r: dict[str, npt.NDArray], value: npt.NDArray[np.float64],
                 ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Observed by the prefill instance when its leg ends."""
    done = np.isfinite(r["t_pend"])
    return (np.where(done, r["t_pend"], np.nan), np.where(done, value, np.nan), r["p_inst"])


def decode_obs(r: dict[str, npt.NDArray], at: npt.NDArray[np.float64],
                value: npt.NDArray[np.float64],
                ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Observed by the decode instance at ``at`` for requests that finished there."""
    ok = (r["status"] == 0) & np.isfinite(r["t_finish"])
    return (np.where(ok, at, np.nan), np.where(ok, value, np.nan), r["d_inst"])


def tpot(r: dict[str, npt.NDArray]) -> npt.NDArray[np.float64]:
    out = r["output"].astype(np.float64)
    return np.where(out > 1, (r["t_finish"] - r["t_first"]) / np.maximum(out - 1, 1), np.nan)


def xfer_obs(r: dict[str, npt.NDArray], value: npt.NDArray[np.float64], side: str,
              ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """A successful KV transfer, observed when the KV arrived, on ``side``'s instance."""
    done = np.isfinite(r["t_kv"])
    inst = r["p_inst"] if side == "prefill" else r["d_inst"]
    return np.where(done, r["t_kv"], np.nan), np.where(done, value, np.nan), inst


# --- vLLM 0.33 -------------------------------------------------------------------------------

P, D, PD = ("prefill",), ("decode",), ("prefill", "decode")
