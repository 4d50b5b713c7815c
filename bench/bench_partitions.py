"""Benchmark: one hour out of a 12-hour Hive-partitioned dataset vs. that hour alone.

Writes bench/out/partitions/: a dataset of ``--hours`` x ``--rows-per-hour`` request records
in Spark's layout (``requests/date=2026-11-30/hour=HH/part-00000.snappy.parquet``, row groups
of ``--row-group`` rows, a ``_SUCCESS`` marker) and the chosen hour again as one plain file.
Then, each in a fresh process (so peak RSS is per run), ``pdprobe diagnose --format json``:

- ``dataset, one hour``: ``requests/ --since HOUR --until HOUR+1h`` (the window pushed down);
- ``that hour alone``: ``hour.parquet`` (the same rows as a single file);
- ``dataset, whole`` (``--whole``): every partition, for scale.

``--format csv`` or ``jsonl`` writes the part files (and the single hour) as CSV or JSON
Lines instead (``collectors/requests_dataset_text.py``; pruned by partition only).

Prints wall, CPU and peak RSS per run and the files and row groups the dataset run read (from
the report's source notes), as a Markdown table; writes bench/out/bench_partitions_FMT.json.

Usage (from the repository root)::

    .venv/bin/python bench/bench_partitions.py                       # 12 x 500k rows
    .venv/bin/python bench/bench_partitions.py --rows-per-hour 100000 --repeat 3 --whole
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "partitions"
T0 = 1796040000  # 2026-11-30T12:00:00Z: the dataset starts here, one partition per UTC hour
SEED = 20261130
# Request shape of every hour (lognormal medians and sigmas; no prefix cache)
PROMPT_MEDIAN, PROMPT_SIGMA = 1500.0, 0.9
OUTPUT_MEDIAN, OUTPUT_SIGMA = 200.0, 0.7


def _lengths(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    prompt = np.clip(np.rint(rng.lognormal(np.log(PROMPT_MEDIAN), PROMPT_SIGMA, n)), 1,
                     131072).astype(np.int64)
    output = np.clip(np.rint(rng.lognormal(np.log(OUTPUT_MEDIAN), OUTPUT_SIGMA, n)), 1,
                     8192).astype(np.int64)
    return prompt, output


def pools(rows_per_hour: int) -> tuple[int, int]:
    """(prefill, decode) instances sized to the hourly load (the same for every hour, from one
    reference sample of the length mix): bench_requests' operating point."""
    from request_data import pool_sizes

    prompt, output = _lengths(np.random.default_rng(SEED - 1), 200_000)
    return pool_sizes(rows_per_hour / 3600.0, prompt, output)


def hour_table(h: int, n: int) -> Any:
    """``n`` request records arriving within hour ``h`` of the dataset (all canonical
    columns; instance and status columns dictionary-encoded as a lake writer keeps them),
    timed by bench_requests' cluster model (request_data.py: FIFO prefill queues, decode by
    Little's law) on pools sized to the load; no straggler, an even decode router."""
    import pyarrow as pa
    from request_data import cluster_timings

    rng = np.random.default_rng(SEED + h)
    since_hour = np.sort(rng.uniform(0, 3600, n))
    prompt, output = _lengths(rng, n)
    n_prefill, n_decode = pools(n)
    cols = cluster_timings(rng, since_hour, (since_hour // 60).astype(np.int64), prompt,
                           output, 0.0, n_prefill, np.ones(n_decode), np.ones(n_decode))
    names_p = pa.array([f"vllm-prefill-{i}" for i in range(n_prefill)])
    names_d = pa.array([f"vllm-decode-{i}" for i in range(n_decode)])
    status = pa.array(["ok", "error"])
    return pa.table({
        "request_id": pa.array(np.char.add(f"h{h}-", np.arange(n).astype(str))),
        "arrival_ts": T0 + 3600.0 * h + since_hour, "prompt_tokens": prompt,
        "output_tokens": output,
        "prefill_instance": pa.DictionaryArray.from_arrays(cols.pop("prefill_idx"), names_p),
        "decode_instance": pa.DictionaryArray.from_arrays(cols.pop("decode_idx"), names_d),
        **cols,
        "status": pa.DictionaryArray.from_arrays(
            (rng.random(n) < 0.005).astype(np.int32), status),
    })


def hour_name(h: int) -> tuple[str, str]:
    """(date, hour) partition values of dataset hour ``h`` (UTC)."""
    stamp = time.gmtime(T0 + 3600 * h)
    return time.strftime("%Y-%m-%d", stamp), time.strftime("%H", stamp)


def ensure_dataset(hours: int, rows: int, row_group: int, pick: int, fmt: str = "parquet"
                   ) -> tuple[Path, Path]:
    """The dataset folder and the single-file copy of hour ``pick`` (made once per shape):
    Parquet part files, or CSV / JSON Lines ones (Spark's ``.csv(path)`` / ``.json(path)``
    layout, uncompressed)."""
    shape = OUT / (f"{hours}x{rows}_rg{row_group}" if fmt == "parquet"
                   else f"{hours}x{rows}_{fmt}")
    suffix = {"parquet": "snappy.parquet", "csv": "csv", "jsonl": "jsonl"}[fmt]
    root, single = shape / "requests", shape / f"hour-{pick}.{fmt}"
    if (shape / "done").exists():
        return root, single
    shutil.rmtree(shape, ignore_errors=True)
    for h in range(hours):
        date, hour = hour_name(h)
        folder = root / f"date={date}" / f"hour={hour}"
        folder.mkdir(parents=True)
        table = hour_table(h, rows)
        write(table, folder / f"part-00000.{suffix}", fmt, row_group)
        if h == pick:
            write(table, single, fmt, row_group)
    (root / "_SUCCESS").write_bytes(b"")
    (shape / "done").write_text("")
    return root, single


def write(table: Any, path: Path, fmt: str, row_group: int) -> None:
    """One part file in ``fmt`` (text formats as bench_requests.py writes them)."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq
    from bench_requests import _plain, write_jsonl

    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=row_group, compression="snappy")
    elif fmt == "csv":
        pcsv.write_csv(_plain(table), path)
    else:
        write_jsonl(table, path)


def child(args: list[str]) -> None:
    """Run ``pdprobe ARGS`` as this process's only child and print its cost as JSON."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pdprobe", *args], capture_output=True,
                          cwd=ROOT, check=False)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    report: dict[str, Any] = {}
    with contextlib.suppress(ValueError):
        report = json.loads(proc.stdout)
    sources = report.get("input", {}).get("sources", [])
    print(json.dumps({
        "exit_code": proc.returncode, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "requests": report.get("workload", {}).get("requests"),
        "source_notes": [n for s in sources for n in s.get("notes", [])
                         if "pushed down" in n or "dataset of" in n],
        "stderr": proc.stderr.decode(errors="replace").strip().splitlines()[-1:],
    }))


def measure(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                          text=True, cwd=ROOT, check=False)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=int, default=12)
    ap.add_argument("--rows-per-hour", type=int, default=500_000)
    ap.add_argument("--row-group", type=int, default=125_000,
                    help="rows per Parquet row group (Spark writes ~128 MB row groups)")
    ap.add_argument("--hour", type=int, default=6, help="which hour of the dataset to diagnose")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--whole", action="store_true", help="also diagnose the whole dataset")
    ap.add_argument("--format", choices=("parquet", "csv", "jsonl"), default="parquet",
                    help="the part files' format (text datasets are pruned by partition only)")
    opts = ap.parse_args()
    os.environ.pop("PDPROBE_SINCE", None)
    os.environ.pop("PDPROBE_UNTIL", None)
    started = time.perf_counter()
    root, single = ensure_dataset(opts.hours, opts.rows_per_hour, opts.row_group, opts.hour,
                                  opts.format)
    print(f"dataset ready in {time.perf_counter() - started:.1f} s: {root}", file=sys.stderr)
    since = T0 + 3600 * opts.hour
    window = ["--since", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)),
              "--until", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since + 3600))]
    cases = [("dataset, one hour", ["diagnose", str(root), *window, "--format", "json"]),
             ("that hour alone", ["diagnose", str(single), "--format", "json"])]
    if opts.whole:
        cases.append(("dataset, whole", ["diagnose", str(root), "--format", "json"]))
    load_before = os.getloadavg()[0]
    results = []
    for _ in range(opts.repeat):
        for name, args in cases:
            r = measure(args)
            r["case"] = name
            results.append(r)
            print(f"{name}: {r.get('wall_s', float('nan')):.2f} s", file=sys.stderr)
    meta = {"hours": opts.hours, "rows_per_hour": opts.rows_per_hour, "format": opts.format,
            "row_group": opts.row_group, "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_1min": f"{load_before:.1f} at start, {os.getloadavg()[0]:.1f} at end"}
    (OUT / f"bench_partitions_{opts.format}.json").write_text(json.dumps({"meta": meta, "runs": results},
                                                          indent=1))
    print(markdown(results, meta))


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    rows = ["| run | requests | wall | CPU | peak RSS | read |",
            "| --- | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['case']} | – | – | – | – | error: {r['error']} |")
            continue
        notes = r["source_notes"]
        read = ("; ".join(n for n in notes if "pushed down" in n)
                or ("every file" if notes else "one file"))
        rows.append(f"| {r['case']} | {r['requests'] or 0:,} | {r['wall_s']:.2f} s | "
                    f"{r['cpu_s']:.2f} s | {r['peak_rss_mb']:,.0f} MB | {read} |")
    rows.append("")
    layout = (f"row groups of {meta['row_group']:,}" if meta["format"] == "parquet"
              else f"{meta['format']} part files")
    rows.append(f"{meta['hours']} h x {meta['rows_per_hour']:,} rows, {layout}; "
                f"{meta['cpus']} CPUs, load {meta['load_1min']}")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
