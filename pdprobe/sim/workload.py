"""The requests a run replays: a trace (rescaled and looped to the duration) or a synthetic mix.

Arrays, not objects: arrival times (s from the start), prompt and output lengths, and the
prefix-block ids of each prompt in CSR form (``block_ids[block_off[i]:block_off[i + 1]]``).

Prefix blocks: Mooncake traces carry ``hash_ids`` (512-token blocks). For other inputs the
``prefix_hit_rate`` h makes the first ``floor(h * prompt / 512)`` blocks of each prompt a shared
prefix, drawn from ``prefix_groups`` chains with Zipf(1) popularity (system prompts, sessions);
the rest are unique. How many of those hit depends on routing and cache capacity, as in a real
cluster, so h is an upper bound on the achieved hit rate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.errors import InputError, UsageError
from pdprobe.sim.config import HASH_BLOCK_TOKENS, LengthDist, SimConfig

if TYPE_CHECKING:
    import numpy.typing as npt

GROUP_STRIDE: Final = 1 << 24  # synthetic shared block id = group * stride + position
NEGATIVE_ROWS: Final = re.compile(r"\b[1-9]\d* negative")


@dataclass(frozen=True)
class Workload:
    """The requests of one run, sorted by arrival."""

    arrival_s: npt.NDArray[np.float64]
    prompt: npt.NDArray[np.int64]
    output: npt.NDArray[np.int64]
    block_ids: npt.NDArray[np.int64] | None  # CSR prefix blocks; None = no prefix sharing
    block_off: npt.NDArray[np.int64] | None
    source: str
    notes: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        """Requests in the workload."""
        return int(self.arrival_s.size)


def build_workload(config: SimConfig, rng: np.random.Generator) -> Workload:
    """The workload of ``config``: its trace or its synthetic mix, with a length shift applied."""
    wl = _from_trace(config, rng) if config.trace else _synthetic(config, rng)
    if wl.n == 0:
        raise UsageError(f"the workload has no requests within {config.duration_s:g} s",
                         hint="raise --rate or --duration")
    return wl


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """``n`` lengths from ``dist`` (integers, clipped to its min/max)."""
    if dist.kind == "fixed":
        values = np.full(n, dist.median)
    else:
        values = np.exp(rng.normal(np.log(dist.median), dist.sigma, n))
        if dist.kind == "bimodal" and dist.weight2 > 0:
            second = rng.random(n) < dist.weight2
            values[second] = np.exp(rng.normal(np.log(dist.median2), dist.sigma2, int(second.sum())))
    return np.clip(np.rint(values), dist.min_tokens, dist.max_tokens).astype(np.int64)


def poisson_arrivals(rate_rps: float, duration_s: float,
                     rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """Arrival times of a Poisson process over ``[0, duration_s)``."""
    expected = rate_rps * duration_s
    chunks = []
    t = 0.0
    while t < duration_s:
        gaps = rng.exponential(1.0 / rate_rps, int(expected * 1.1) + 64)
        times = t + np.cumsum(gaps)
        chunks.append(times)
        t = float(times[-1])
    arrivals = np.concatenate(chunks)
    return arrivals[arrivals < duration_s]


def _synthetic(config: SimConfig, rng: np.random.Generator) -> Workload:
    assert config.rate_rps is not None
    arrivals = poisson_arrivals(config.rate_rps, config.duration_s, rng)
    n = arrivals.size
    prompt = sample_lengths(config.prompt, n, rng)
    output = sample_lengths(config.output, n, rng)
    prompt, output, notes = _apply_shift(config, arrivals, prompt, output)
    ids, off = _synthetic_blocks(prompt, config.prefix_hit_rate, config.prefix_groups, rng)
    source = f"synthetic Poisson {config.rate_rps:g} req/s, prompt {config.prompt.describe()}, " \
             f"output {config.output.describe()}"
    return Workload(arrivals, prompt, output, ids, off, source, notes)


def _apply_shift(config: SimConfig, arrivals: npt.NDArray[np.float64],
                 prompt: npt.NDArray[np.int64], output: npt.NDArray[np.int64],
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], tuple[str, ...]]:
    shift = config.fault("length-shift")
    if shift is None:
        return prompt, output, ()
    after = arrivals >= float(shift.get("at_s"))
    ps, os_ = float(shift.get("prompt_scale")), float(shift.get("output_scale"))
    prompt = prompt.copy()
    output = output.copy()
    max_prompt = max(config.prompt.max_tokens, int(config.prompt.max_tokens * ps))
    prompt[after] = np.clip(np.rint(prompt[after] * ps), 1, min(max_prompt, config.profile.max_model_len))
    output[after] = np.clip(np.rint(output[after] * os_), 1, None)
    note = (f"length mix shifted at {float(shift.get('at_s')):g} s: prompts x{ps:g}, "
            f"outputs x{os_:g} ({int(after.sum())} requests)")
    return prompt, output, (note,)


def _synthetic_blocks(prompt: npt.NDArray[np.int64], hit_rate: float, groups: int,
                      rng: np.random.Generator,
                      ) -> tuple[npt.NDArray[np.int64] | None, npt.NDArray[np.int64] | None]:
    if hit_rate <= 0:
        return None, None
    n = prompt.size
    total = -(-prompt // HASH_BLOCK_TOKENS)  # ceil
    shared = np.minimum(np.floor(hit_rate * prompt / HASH_BLOCK_TOKENS).astype(np.int64), total)
    weights = 1.0 / np.arange(1, groups + 1)
    group = rng.choice(groups, size=n, p=weights / weights.sum())
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(total, out=off[1:])
    # position of each block inside its request, built without a per-request loop
    pos = np.arange(int(off[-1]), dtype=np.int64) - np.repeat(off[:-1], total)
    is_shared = pos < np.repeat(shared, total)
    ids = np.where(is_shared, np.repeat(group, total) * GROUP_STRIDE + pos,
                   -(np.arange(int(off[-1]), dtype=np.int64) + 1))
    return ids.astype(np.int64), off


def _from_trace(config: SimConfig, rng: np.random.Generator) -> Workload:
    assert config.trace is not None
    path = Path(config.trace)
    frame, blocks = read_trace(path)
    t = frame["arrival_ts"].to_numpy(dtype="float64")
    prompt = frame["prompt_tokens"].to_numpy(dtype="int64")
    output = frame["output_tokens"].to_numpy(dtype="int64")
    order = np.argsort(t, kind="stable")
    t, prompt, output = t[order], prompt[order], output[order]
    if blocks is not None and not np.array_equal(order, np.arange(order.size)):
        flat, row_off = _csr(blocks)
        blocks = [flat[row_off[i]:row_off[i + 1]] for i in order]
    t = t - t[0]
    span = float(t[-1])
    native_rate = t.size / span if span > 0 else float("inf")
    notes: list[str] = []
    if config.rate_rps is not None and np.isfinite(native_rate):
        t = t * (native_rate / config.rate_rps)
        span = float(t[-1])
        notes.append(f"trace arrivals rescaled from {native_rate:.3g} to {config.rate_rps:g} req/s")
    period = span + (span / max(1, t.size - 1))  # one mean gap between loops
    loops = int(np.ceil(config.duration_s / period)) if period > 0 else 1
    if loops > 1:
        notes.append(f"trace looped {loops} times to fill {config.duration_s:g} s")
    reps = np.arange(loops)
    t_all = (t[None, :] + reps[:, None] * period).ravel()
    keep = t_all < config.duration_s
    prompt_all = np.tile(prompt, loops)[keep]
    output_all = np.tile(output, loops)[keep]
    rep_of = np.repeat(reps, t.size)[keep]
    idx_of = np.tile(np.arange(t.size), loops)[keep]
    t_all = t_all[keep]
    prompt_all = np.minimum(prompt_all, config.profile.max_model_len)
    prompt_all, output_all, shift_notes = _apply_shift(config, t_all, prompt_all, output_all)
    notes.extend(shift_notes)
    ids: npt.NDArray[np.int64] | None
    off: npt.NDArray[np.int64] | None
    if blocks is not None:
        ids, off = _trace_blocks(blocks, idx_of, rep_of, prompt_all)
    else:
        ids, off = _synthetic_blocks(prompt_all, config.prefix_hit_rate, config.prefix_groups, rng)
    source = f"trace {path.name} ({t.size} rows{', with hash_ids' if blocks is not None else ''})"
    return Workload(t_all, prompt_all, output_all, ids, off, source, tuple(notes))


def _trace_blocks(blocks: Any, idx_of: npt.NDArray[np.int64], rep_of: npt.NDArray[np.int64],
                  prompt: npt.NDArray[np.int64],
                  ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """CSR block ids per replayed request; each loop of the trace gets fresh ids."""
    flat, src_off = _csr(blocks)
    lengths = np.diff(src_off)
    stride = int(flat.max()) + 1 if flat.size else 1
    # a shifted prompt may need more or fewer blocks than the trace row had
    need = -(-prompt // HASH_BLOCK_TOKENS)
    have = lengths[idx_of]
    take = np.minimum(need, have)
    off = np.zeros(prompt.size + 1, dtype=np.int64)
    np.cumsum(need, out=off[1:])
    pos = np.arange(int(off[-1]), dtype=np.int64) - np.repeat(off[:-1], need)
    row = np.repeat(np.arange(prompt.size), need)
    from_trace = pos < take[row]
    src = src_off[idx_of[row]] + np.minimum(pos, np.maximum(have[row] - 1, 0))
    traced = flat[np.clip(src, 0, max(flat.size - 1, 0))] + rep_of[row] * stride if flat.size \
        else np.zeros(pos.size, dtype=np.int64)
    ids = np.where(from_trace, traced, -(np.arange(pos.size, dtype=np.int64) + 1))
    return ids.astype(np.int64), off


def _csr(blocks: Any) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Flat ids and row offsets of per-row id lists (a pyarrow ListArray or Python lists)."""
    if hasattr(blocks, "offsets"):  # pyarrow ListArray: already CSR
        offsets = np.asarray(blocks.offsets.to_numpy(), dtype=np.int64)
        flat = np.asarray(blocks.values.to_numpy(zero_copy_only=False), dtype=np.int64)
        return flat[offsets[0]:offsets[-1]], offsets - offsets[0]
    lengths = np.fromiter((len(b) for b in blocks), dtype=np.int64, count=len(blocks))
    flat = np.fromiter((int(x) for b in blocks for x in b), dtype=np.int64, count=int(lengths.sum()))
    offsets = np.zeros(len(blocks) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return flat, offsets


def read_trace(path: Path) -> tuple[Any, Any]:
    """Rows (``arrival_ts``, ``prompt_tokens``, ``output_tokens``) and Mooncake ``hash_ids``."""
    try:
        from pdprobe.collectors.base import ReadContext
        from pdprobe.collectors.requests_file import load_hash_ids, read_requests
    except ImportError as exc:  # the request reader ships with the offline-diagnosis work
        raise UsageError("trace replay needs pdprobe.collectors.requests_file, which this build "
                         "lacks", hint="use a synthetic mix (--rate with --prompt/--output)") from exc
    if not path.exists():
        raise UsageError(f"{path}: no such trace file", hint="check the path")
    partial = read_requests(path, ReadContext())
    for warning in partial.warnings:
        # the reader drops rows with negative lengths (a diagnosis can go on without them);
        # a replay would silently change the workload, so it stops here
        if NEGATIVE_ROWS.search(warning):
            raise InputError(warning.rstrip("."), hint="fix or drop the rows with negative lengths")
    frame = partial.requests
    if frame is None or len(frame) == 0:
        raise InputError(f"{path}: the trace has no request rows",
                         hint="give a trace with arrival time, prompt and output lengths")
    for column in ("arrival_ts", "prompt_tokens", "output_tokens"):
        if column not in frame.columns or frame[column].isna().all():
            raise InputError(f"{path}: the trace has no {column} values",
                             hint="pdprobe reads Azure, Mooncake and canonical request layouts")
    frame = frame.dropna(subset=["arrival_ts", "prompt_tokens", "output_tokens"])
    if len(frame) == 0:
        raise InputError(f"{path}: no trace row has arrival time, prompt and output lengths",
                         hint="fill the missing values")
    negative = (frame["prompt_tokens"] < 0) | (frame["output_tokens"] < 0)
    if bool(negative.any()):
        first = int(np.flatnonzero(negative.to_numpy())[0])
        raise InputError(f"{path}: row {first + 1} has a negative token length",
                         hint="fix or drop rows with negative prompt/output lengths")
    frame = frame.assign(prompt_tokens=frame["prompt_tokens"].clip(lower=1),
                         output_tokens=frame["output_tokens"].clip(lower=1))
    blocks = load_hash_ids(path)
    read_rows = len(partial.requests) if partial.requests is not None else 0
    if blocks is not None and (len(blocks) != read_rows or len(frame) != len(blocks)):
        blocks = None  # rows were dropped: the alignment is gone, fall back to the hit-rate model
    return frame, blocks
