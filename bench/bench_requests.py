"""Benchmark: ``pdprobe diagnose`` of per-request files end to end vs. DuckDB on the same files.

Generates synthetic request records (Parquet, CSV, JSON Lines; 1M and 10M rows by default; the
cluster they come from is described in request_data.py) into bench/out/ (``--out DIR`` for
another folder, ``--generate-only`` to stop there), then for each file measures, each in a fresh process so CPU and peak RSS are per
cell (wall and CPU include interpreter start-up and imports):

- pdprobe end to end: ``pdprobe diagnose FILE --format json`` as a user runs it;
- DuckDB: the workload figures and per-decode-instance count, TTFT p99 and TPOT p50 from the
  same file (load into a temp table, then SQL);
- with ``--steps``: pdprobe's ``read_requests`` + ``fuse`` + ``summarize_workload`` + a pandas
  per-instance groupby timed apart, checked against DuckDB's numbers (relative 1e-6).

Usage (from the repository root)::

    /work/venv/bin/python bench/bench_requests.py                 # 1M and 10M rows, all formats
    /work/venv/bin/python bench/bench_requests.py --rows 1000000  # 1M only
    /work/venv/bin/python bench/bench_requests.py --formats parquet --repeat 3 --steps

Prints Markdown tables and writes bench/out/bench_requests_<rows>.json. DuckDB is a bench
extra (``pip install pdprobe[bench]``), so with it installed pdprobe reads JSON Lines files of
32 MiB or more with DuckDB too; ``--engine pyarrow`` measures pyarrow's reader instead
(``PDPROBE_REQUEST_ENGINE``, docs/inputs/requests.md), and the table says which reader ran. The 10M-row CSV and JSON Lines files take 2 and 4 GB.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from request_data import generate

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
FORMATS = ("parquet", "csv", "jsonl")


# --------------------------------------------------------------------------------------------
# Synthetic data (the cluster model lives in request_data.py)
# --------------------------------------------------------------------------------------------


def _plain(table: Any) -> Any:
    """Dictionary columns decoded to strings (CSV/JSON writers want plain types)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = [pc.cast(c, pa.string()) if pa.types.is_dictionary(c.type) else c
            for c in table.columns]
    return pa.table(cols, names=table.column_names)


def write_jsonl(table: Any, path: Path, chunk: int = 1_000_000) -> None:
    """JSON Lines built with Arrow string kernels: no Python loop over rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = _plain(table)
    with path.open("wb") as fh:
        for start in range(0, table.num_rows, chunk):
            part = table.slice(start, chunk)
            pieces = []
            for i, name in enumerate(part.column_names):
                col = part.column(name).combine_chunks()
                if pa.types.is_string(col.type):
                    text = pc.binary_join_element_wise('"', col, '"', "")
                else:
                    text = pc.cast(col, pa.string())
                prefix = ("{" if i == 0 else ", ") + f'"{name}": '
                pieces.append(pc.binary_join_element_wise(prefix, text, ""))
            line = pc.binary_join_element_wise(*pieces, "}\n", "")
            bufs = line.buffers()
            offsets = np.frombuffer(bufs[1], dtype=np.int32)[line.offset:line.offset + len(line) + 1]
            data = bufs[2]
            fh.write(memoryview(data)[offsets[0]:offsets[-1]])


def ensure_files(rows: list[int], formats: list[str], out: Path = OUT
                 ) -> dict[tuple[int, str], Path]:
    """The generated files of each size and format in ``out`` (made when missing)."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    paths: dict[tuple[int, str], Path] = {}
    for n in rows:
        label = _label(n)
        wanted = {fmt: out / f"requests_{label}.{fmt}" for fmt in formats}
        missing = [fmt for fmt, p in wanted.items() if not p.exists()]
        if missing:
            t0 = time.perf_counter()
            table = generate(n)
            for fmt in missing:
                path = wanted[fmt]
                tmp = path.with_suffix(path.suffix + ".tmp")
                if fmt == "parquet":
                    pq.write_table(table, tmp, compression="zstd")
                elif fmt == "csv":
                    pcsv.write_csv(_plain(table), tmp)
                else:
                    write_jsonl(table, tmp)
                tmp.replace(path)
            print(f"generated {label} rows ({', '.join(missing)}) in "
                  f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
            del table
        paths.update({(n, fmt): p for fmt, p in wanted.items()})
    return paths


def _label(n: int) -> str:
    return f"{n // 1_000_000}m" if n % 1_000_000 == 0 else str(n)


# --------------------------------------------------------------------------------------------
# Measured work (runs in a child process)
# --------------------------------------------------------------------------------------------


def _cpu() -> float:
    """User + system CPU seconds of this process (all threads): steadier than wall time on a
    shared machine."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_pdprobe(path: Path) -> dict[str, Any]:
    ti = time.perf_counter()
    # Library imports are timed apart: they cost the same whatever the file (the end-to-end run
    # pays them once) and would otherwise land in whichever step imports first.
    import pandas  # noqa: F401
    import pyarrow.csv
    import pyarrow.json
    import pyarrow.parquet  # noqa: F401
    import_s = time.perf_counter() - ti

    from pdprobe.analysis.workload import summarize_workload
    from pdprobe.collectors.base import ReadContext
    from pdprobe.collectors.fuse import fuse
    from pdprobe.collectors.requests_file import read_requests

    c0 = _cpu()
    t0 = time.perf_counter()
    part = read_requests(path, ReadContext())
    t1 = time.perf_counter()
    c1 = _cpu()
    dataset = fuse([part])
    t2 = time.perf_counter()
    summary = summarize_workload(dataset)
    t3 = time.perf_counter()
    req = dataset.requests
    grouped = req.groupby("decode_instance", observed=True, sort=True)
    per = grouped[["ttft_s", "tpot_s"]].quantile(np.array([0.5, 0.9, 0.99])).unstack()
    counts = grouped.size()
    t4 = time.perf_counter()
    c4 = _cpu()
    prompt = summary.prompt_tokens.quantiles  # type: ignore[union-attr]
    output = summary.output_tokens.quantiles  # type: ignore[union-attr]
    return {
        "read_s": t1 - t0, "fuse_s": t2 - t1, "summary_s": t3 - t2, "per_instance_s": t4 - t3,
        "total_s": t4 - t0, "import_s": import_s, "read_cpu_s": c1 - c0, "total_cpu_s": c4 - c0,
        "rows": summary.requests,  # type: ignore[union-attr]
        "numbers": {
            "arrival_rate_rps": summary.arrival_rate_rps,  # type: ignore[union-attr]
            "prompt": [prompt.mean, prompt.p50, prompt.p90, prompt.p99],
            "output": [output.mean, output.p50, output.p90, output.p99],
            "failed": summary.failed_requests,  # type: ignore[union-attr]
            "per_instance": {str(k): [int(c), float(t), float(p)] for k, c, t, p in zip(
                counts.index, counts.to_numpy().tolist(),
                per[("ttft_s", 0.99)].reindex(counts.index).to_numpy().tolist(),
                per[("tpot_s", 0.5)].reindex(counts.index).to_numpy().tolist(), strict=True)},
        },
    }


def run_duckdb(path: Path, fmt: str) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect()
    source = {"parquet": f"read_parquet('{path}')",
              "csv": f"read_csv('{path}', header = true)",
              "jsonl": f"read_json('{path}', format = 'newline_delimited')"}[fmt]
    c0 = _cpu()
    t0 = time.perf_counter()
    con.execute(f"CREATE TEMP TABLE r AS SELECT * FROM {source}")
    t1 = time.perf_counter()
    row = con.execute("""
        SELECT count(*), (max(arrival_ts) - min(arrival_ts)),
               avg(prompt_tokens), quantile_cont(prompt_tokens, [0.5, 0.9, 0.99]),
               avg(output_tokens), quantile_cont(output_tokens, [0.5, 0.9, 0.99]),
               count(*) FILTER (WHERE status <> 'ok')
        FROM r""").fetchone()
    t2 = time.perf_counter()
    per = con.execute("""
        SELECT decode_instance, count(*), quantile_cont(ttft_s, 0.99), quantile_cont(tpot_s, 0.5)
        FROM r GROUP BY decode_instance ORDER BY decode_instance""").fetchall()
    t3 = time.perf_counter()
    c3 = _cpu()
    assert row is not None
    n, span = int(row[0]), float(row[1])
    return {
        "read_s": t1 - t0, "summary_s": t2 - t1, "per_instance_s": t3 - t2, "total_s": t3 - t0,
        "total_cpu_s": c3 - c0, "rows": n,
        "numbers": {
            "arrival_rate_rps": n / span,
            "prompt": [float(row[2]), *map(float, row[3])],
            "output": [float(row[4]), *map(float, row[5])],
            "failed": int(row[6]),
            "per_instance": {str(k): [int(c), float(t), float(p)] for k, c, t, p in per},
        },
    }


def child_main(tool: str, path: Path, fmt: str) -> None:
    if tool == "e2e":
        print(json.dumps(run_end_to_end(path)))
        return
    result = run_pdprobe(path) if tool == "pdprobe" else run_duckdb(path, fmt)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _child(args: list[str]) -> dict[str, Any]:
    """One measured cell in a fresh process: its wall time and CPU time (user + system, all
    threads and descendants) from start-up to exit, as the parent sees them."""
    c0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    wall = time.perf_counter() - t0
    cpu = _children_cpu() - c0
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1], "wall_s": wall}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall  # includes interpreter start and imports
    result["cpu_s"] = cpu
    return result


def run_end_to_end(path: Path) -> dict[str, Any]:
    """``pdprobe diagnose PATH --format json`` as a user runs it (in a child of this child, so
    RUSAGE_CHILDREN is exactly its peak RSS)."""
    exe = Path(sys.executable).with_name("pdprobe")
    cmd = [str(exe) if exe.exists() else "pdprobe", "diagnose", str(path), "--format", "json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - t0
    parsed_ok = False
    with contextlib.suppress(ValueError):
        parsed_ok = "workload" in json.loads(proc.stdout)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"cmd": " ".join(["pdprobe", *cmd[1:]]), "exit_code": proc.returncode,
            "total_s": wall, "json_ok": parsed_ok,
            "total_cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024,
            "stderr": proc.stderr.decode(errors="replace").strip().splitlines()[-1:]}


def _agree(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """pdprobe and DuckDB computed the same numbers (relative 1e-6)."""
    na, nb = a["numbers"], b["numbers"]
    flat_a = [na["arrival_rate_rps"], *na["prompt"], *na["output"], na["failed"]]
    flat_b = [nb["arrival_rate_rps"], *nb["prompt"], *nb["output"], nb["failed"]]
    if not np.allclose(flat_a, flat_b, rtol=1e-6):
        return False
    if set(na["per_instance"]) != set(nb["per_instance"]):
        return False
    return all(np.allclose(na["per_instance"][k], nb["per_instance"][k], rtol=1e-6)
               for k in na["per_instance"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell; the best is kept")
    parser.add_argument("--no-duckdb", action="store_true")
    parser.add_argument("--engine", choices=("auto", "pyarrow", "duckdb"),
                        help="pdprobe's JSON Lines reader (sets PDPROBE_REQUEST_ENGINE for the "
                             "measured processes; default: as the environment says, else "
                             "auto: DuckDB for a file of 32 MiB or more when installed)")
    parser.add_argument("--steps", action="store_true",
                        help="also time pdprobe's read/fuse/summary steps apart (a third process "
                             "per cell) and check that they agree with DuckDB's numbers")
    parser.add_argument("--out", type=Path, default=OUT,
                        help="folder for the generated files and the JSON results (default: "
                             "bench/out; reused when present)")
    parser.add_argument("--generate-only", action="store_true",
                        help="write the files and stop (no measurement)")
    parser.add_argument("--child", nargs=3, metavar=("TOOL", "PATH", "FORMAT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child[0], Path(args.child[1]), args.child[2])
        return

    if args.engine:
        os.environ["PDPROBE_REQUEST_ENGINE"] = args.engine  # inherited by every child
    paths = ensure_files(args.rows, args.formats, args.out)
    if args.generate_only:
        return
    # An installed pdprobe has its bytecode compiled at install time; a checkout run with
    # PYTHONDONTWRITEBYTECODE would compile every module again in each timed process.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "pdprobe")], check=True)
    load_before = os.getloadavg()[0]
    results: list[dict[str, Any]] = []
    tools = ["e2e", *([] if args.no_duckdb else ["duckdb"]), *(["pdprobe"] if args.steps else [])]
    for (n, fmt), path in paths.items():
        row: dict[str, Any] = {"rows": n, "format": fmt, "bytes": path.stat().st_size,
                               "load_1min": os.getloadavg()[0]}
        for tool in tools:
            runs = [_child(["--child", tool, str(path), fmt]) for _ in range(args.repeat)]
            good = [r for r in runs if "error" not in r]
            row[tool] = min(good, key=lambda r: r["wall_s"]) if good else runs[-1]
            print(f"{_label(n)} {fmt} {tool}: {json.dumps(_brief(row[tool]))}", file=sys.stderr)
        if "duckdb" in row and "pdprobe" in row and "error" not in row["duckdb"] \
                and "error" not in row["pdprobe"]:
            row["same_numbers"] = _agree(row["pdprobe"], row["duckdb"])
        results.append(row)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(),
               "platform": platform.platform(),
               "load_1min": f"{load_before:.1f} at start, {os.getloadavg()[0]:.1f} at end",
               # the JSON Lines reader the pdprobe cells used (docs/inputs/requests.md)
               "engine": os.environ.get("PDPROBE_REQUEST_ENGINE", "").strip() or "auto"}
    name = "_".join(_label(n) for n in args.rows)
    (args.out / f"bench_requests_{name}.json").write_text(json.dumps(
        {"machine": machine, "results": results}, indent=2, default=str))
    print(markdown(results, machine))


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()
            if k != "numbers"}


def markdown(results: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    """The end-to-end table (and the step table when measured)."""
    lines = [f"Machine: {machine['cpus']} CPUs, Python {machine['python']}, {machine['platform']}; "
             f"load average {machine['load_1min']}; pdprobe's JSON Lines reader: "
             f"{machine.get('engine', 'auto')} (PDPROBE_REQUEST_ENGINE)",
             "",
             "| rows | format | size | load | pdprobe diagnose wall | CPU | peak RSS | exit "
             "| DuckDB wall | CPU | peak RSS | pdprobe / DuckDB wall | CPU |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: | ---: |"]

    def sec(x: dict[str, Any], key: str) -> str:
        return f"{x[key]:.1f} s" if key in x else ("error" if "error" in x else "–")

    def mb(x: dict[str, Any]) -> str:
        return f"{x['peak_rss_mb']:,.0f} MB" if "peak_rss_mb" in x else "–"

    def ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> str:
        return f"{a[key] / b[key]:.2f}x" if key in a and key in b and b[key] > 0 else "–"

    for r in results:
        e, d = r.get("e2e", {}), r.get("duckdb", {})
        lines.append(
            f"| {r['rows']:,} | {r['format']} | {r['bytes'] / 2**20:,.0f} MiB "
            f"| {r['load_1min']:.1f} | {sec(e, 'wall_s')} | {sec(e, 'cpu_s')} | {mb(e)} "
            f"| {e.get('exit_code', '–')} | {sec(d, 'wall_s')} | {sec(d, 'cpu_s')} | {mb(d)} "
            f"| {ratio(e, d, 'wall_s')} | {ratio(e, d, 'cpu_s')} |")
    if any("pdprobe" in r for r in results):
        lines += ["", "| rows | format | pdprobe read | fuse | workload | per-instance | steps "
                      "total | steps CPU | peak RSS | same numbers as DuckDB |",
                  "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in results:
            p = r.get("pdprobe", {})
            lines.append(
                f"| {r['rows']:,} | {r['format']} | {sec(p, 'read_s')} | {sec(p, 'fuse_s')} "
                f"| {sec(p, 'summary_s')} | {sec(p, 'per_instance_s')} | {sec(p, 'total_s')} "
                f"| {sec(p, 'total_cpu_s')} | {mb(p)} | {r.get('same_numbers', '–')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
