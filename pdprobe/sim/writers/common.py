"""Helpers shared by the writers: timestamps, label sets and vectorised OpenMetrics text.

OpenMetrics text is produced per metric family from a matrix of values (series x scrapes),
flattened and joined with pyarrow's string kernels, so no Python loop runs per sample. Samples
of a family stay together, each series' samples in increasing time, and a histogram's buckets,
``_count`` and ``_sum`` of one timestamp stay together: ``promtool tsdb create-blocks-from
openmetrics`` accepts the files.
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

import numpy as np

from pdprobe.sim.cluster import InstanceSpec

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa

    from pdprobe.sim.engine import SimResult

GZIP_LEVEL: Final = 6


def open_out(path: Path, compress: bool) -> IO[str]:
    """A text file for writing, gzip-compressed (``.gz`` appended) when asked."""
    if compress:
        # mtime=0 here; set_mtime stamps the simulated end time afterwards, so equal runs
        # give equal bytes and the year of vLLM log lines survives a git checkout
        raw = gzip.GzipFile(path.with_name(path.name + ".gz"), "wb", compresslevel=GZIP_LEVEL,
                            mtime=0)
        return io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
    return path.open("w", encoding="utf-8", newline="\n")


def out_name(path: Path, compress: bool) -> Path:
    """The output path, with ``.gz`` appended when compressing."""
    return path.with_name(path.name + ".gz") if compress else path


GZIP_MTIME_OFFSET: Final = 4  # RFC 1952: ID1 ID2 CM FLG, then MTIME (uint32 little-endian)


def set_mtime(paths: Iterable[Path], unix_ts: float) -> None:
    """Stamp files with the simulated end time: vLLM logs carry no year, so readers take it
    from the gzip header's MTIME (which survives git and copies) or the file's mtime."""
    stamp = int(unix_ts).to_bytes(4, "little")
    for p in paths:
        if not p.exists():
            continue
        if p.suffix == ".gz":
            with p.open("r+b") as fh:
                if fh.read(2) == b"\x1f\x8b":  # the header is outside the CRC: safe to patch
                    fh.seek(GZIP_MTIME_OFFSET)
                    fh.write(stamp)
        os.utime(p, (unix_ts, unix_ts))


def label_text(labels: Sequence[tuple[str, str]]) -> str:
    """``{a="1",b="2"}`` with names sorted, as Prometheus prints them."""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(dict(labels).items()))
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def engine_labels(result: SimResult, spec: InstanceSpec) -> list[tuple[str, str]]:
    """The labels a scrape of this engine instance carries (engine's own + target + style)."""
    cfg = result.config
    labels: dict[str, str] = {"instance": spec.name, "model_name": cfg.model_name}
    if cfg.engine == "sglang":
        labels.update(job="sglang", engine_type=spec.role, tp_rank="0", pp_rank="0",
                      moe_ep_rank="0")
    else:
        labels.update(job="vllm", engine="0")
    for k, v in spec.labels:
        labels.setdefault(k, v)
    return list(labels.items())


def scrape_offsets_s(names: Sequence[str], seed: int) -> npt.NDArray[np.float64]:
    """A fixed offset per scrape target inside the interval, as Prometheus spreads targets."""
    rng = np.random.default_rng([seed, 11])
    return np.round(rng.uniform(0.0, 2.0, len(names)), 3)


def fmt_numbers(values: npt.NDArray[np.float64]) -> pa.Array:
    """Numbers as OpenMetrics text (shortest round-trip form; ints without a fraction)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pc.cast(pa.array(values, type=pa.float64()), pa.string())
    if np.isfinite(values).all():
        return text
    # OpenMetrics spells the special values +Inf, -Inf and NaN
    for raw, spelled in (("-inf", "-Inf"), ("inf", "+Inf"), ("nan", "NaN")):
        text = pc.if_else(pc.equal(text, raw), pa.scalar(spelled), text)
    return text


def family_text(name: str, kind: str, help_text: str, prefixes: Sequence[str],
                values: npt.NDArray[np.float64], ts: npt.NDArray[np.float64],
                mask: npt.NDArray[np.bool_]) -> str:
    """One gauge/counter family: ``values[s, t]`` of series ``prefixes[s]`` at times ``ts[s, t]``.

    ``prefixes`` are full ``name{labels}`` strings; only cells where ``mask`` is true are written.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    head = f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"
    keep = mask.ravel()
    if not keep.any():
        return head
    series = np.repeat(np.arange(len(prefixes)), values.shape[1])[keep]
    pref = pa.array(list(prefixes), type=pa.string()).take(pa.array(series))
    lines = pc.binary_join_element_wise(pref, fmt_numbers(values.ravel()[keep]),
                                        fmt_numbers(ts.ravel()[keep]), " ")
    return head + _join_lines(lines)


def histogram_text(name: str, help_text: str, series_labels: Sequence[str],
                   bounds: Sequence[float], buckets: npt.NDArray[np.float64],
                   sums: npt.NDArray[np.float64], ts: npt.NDArray[np.float64],
                   mask: npt.NDArray[np.bool_], le_scale: float = 1.0) -> str:
    """One histogram family.

    ``buckets[s, t, b]`` are cumulative-in-time counts per bucket (not yet cumulative over
    ``le``; the last column is the +Inf overflow); ``sums[s, t]``; ``series_labels[s]`` is the
    label text without braces. ``le_scale`` converts base units to the exposed unit.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    head = f"# HELP {name} {help_text}\n# TYPE {name} histogram\n"
    n_series, n_ts, n_b = buckets.shape
    if n_series == 0 or not mask.any():
        return head
    cum = np.cumsum(buckets, axis=2)  # cumulative over le
    les = [_le(b * le_scale) for b in bounds] + ["+Inf"]
    # per (series, column) prefix: buckets..., _count, _sum
    prefixes: list[str] = []
    for lab in series_labels:
        parts = lab.split(",") if lab else []
        prefixes.extend(f'{name}_bucket{{{",".join(sorted([*parts, f"le={chr(34)}{le}{chr(34)}"]))}}}'
                        for le in les)
        prefixes.append(f"{name}_count{{{lab}}}")
        prefixes.append(f"{name}_sum{{{lab}}}")
    width = n_b + 2
    vals = np.concatenate([cum, cum[:, :, -1:], sums[:, :, None]], axis=2)  # [s, t, width]
    keep = np.repeat(mask[:, :, None], width, axis=2).ravel()
    col = (np.arange(n_series)[:, None, None] * width + np.arange(width)[None, None, :])
    col = np.broadcast_to(col, (n_series, n_ts, width)).ravel()[keep]
    times = np.repeat(ts[:, :, None], width, axis=2).ravel()[keep]
    pref = pa.array(prefixes, type=pa.string()).take(pa.array(col))
    lines = pc.binary_join_element_wise(pref, fmt_numbers(vals.ravel()[keep]), fmt_numbers(times), " ")
    return head + _join_lines(lines)


def _le(value: float) -> str:
    """Bucket bounds as prometheus_client prints them: floats (``0.5``, ``1.0``, ``2048.0``)."""
    text = repr(float(value))
    return text.replace("inf", "Inf")


def _join_lines(lines: pa.Array) -> str:
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(lines) == 0:
        return ""
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines), "\n")
    return str(joined[0].as_py()) + "\n"


def observations_matrix(obs_time: npt.NDArray[np.float64], obs_value: npt.NDArray[np.float64],
                        obs_series: npt.NDArray[np.int64], n_series: int,
                        scrape_t: npt.NDArray[np.float64], bounds: Sequence[float],
                        ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Histogram state at each scrape from individual observations, vectorised.

    Returns (``buckets[s, t, b]`` per-bucket counts observed up to ``scrape_t[t]``,
    ``sums[s, t]``). Observations after the last scrape are not counted.
    """
    n_t = scrape_t.size
    n_b = len(bounds) + 1
    buckets = np.zeros((n_series, n_t, n_b))
    sums = np.zeros((n_series, n_t))
    ok = np.isfinite(obs_value) & np.isfinite(obs_time) & (obs_series >= 0)
    if not ok.any():
        return buckets, sums
    t, v, s = obs_time[ok], obs_value[ok], obs_series[ok]
    # the first scrape at or after the observation sees it
    tick = np.searchsorted(scrape_t, t, side="left")
    inside = tick < n_t
    t, v, s, tick = t[inside], v[inside], s[inside], tick[inside]
    b = np.searchsorted(np.asarray(bounds, dtype=np.float64), v, side="left")
    np.add.at(buckets, (s, tick, b), 1.0)
    np.add.at(sums, (s, tick), v)
    return np.cumsum(buckets, axis=1), np.cumsum(sums, axis=1)
