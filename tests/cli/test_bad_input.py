"""End to end: bad input never gets a traceback (issue 2, docs/architecture.md "Conventions").

Every case runs the real CLI in a subprocess, named on the command line and inside a folder next
to one good request file, with ``--format json -o report.json`` and with the text report on
stdout. The promise checked:

- unusable input: exit code 3 (UNKNOWN), stderr is one line ``pdprobe: error: ...`` naming the
  file (and line/column/metric where there is one), no traceback, nothing on stdout, and neither
  the ``-o`` file nor a temporary file beside it;
- recoverable problems: exit code 0, 1 or 2, a valid JSON report whose ``warnings`` say what was
  skipped and how much, and the same warning in the text view.

Input policy (issues 14 and 16): every input that cannot be used -- unrecognisable (empty,
binary, unknown text), recognised but broken (truncated archive, no usable row), unreadable, or
not a regular file (FIFO, dangling link) -- is a warning naming it, in a folder and among files
named on the command line alike, as long as another input is usable: a pager-night capture
with one damaged file still gets a diagnosis, and the warning says what it lacks. Only when no
input is usable does the run end with exit 3 (a lone input: its own one-line error).
pdprobe's own reports inside a capture folder are left out with a note.

Defects in code this file does not own are kept as strict xfails with the defect in ``reason``.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

T0 = 1_750_000_000.0  # 2025-06-15T15:06:40Z
T0_ISO = "2025-06-15T15:06:40Z"
THREE_DAYS_S = 3 * 86400.0
# A normal run takes 1-7 s here (2 cores shared with other suites); a hang is anything longer.
RUN_TIMEOUT_S = 120.0
HANG_TIMEOUT_S = 10.0
GOOD_NAME = "good.jsonl"
JSON_ARGS = ("--format", "json")
# zstd compresses in blocks of at most 128 KiB; a file this long spans several.
ZSTD_MULTIBLOCK_ROWS = 12_000


# --------------------------------------------------------------------------------------------
# Running the CLI
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def run_many(*argvs: Sequence[str], timeout: float = RUN_TIMEOUT_S) -> list[Run]:
    """Run ``python -m pdprobe ARGV`` for each argv, concurrently (the machine has 2 cores)."""
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("PDPROBE_DEBUG", None)
    for key in [k for k in env if k.startswith("PDPROBE_") and k != "PDPROBE_SHARED"]:
        env.pop(key)  # a stray PDPROBE_OUTPUT or PDPROBE_FORMAT would change every case
    procs = [(tuple(argv), subprocess.Popen([sys.executable, "-m", "pdprobe", *argv],
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            stdin=subprocess.DEVNULL, text=True, env=env))
             for argv in argvs]
    runs: list[Run] = []
    hung: list[tuple[str, ...]] = []
    for argv, proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            hung.append(argv)
        runs.append(Run(argv, proc.returncode, out, err))
    if hung:
        pytest.fail(f"pdprobe hung for more than {timeout:g} s: {hung}")
    return runs


def diagnose_both_ways(args: Sequence[str], out: Path) -> tuple[Run, Run]:
    """``diagnose ARGS --format json -o OUT`` and ``diagnose ARGS`` (text on stdout)."""
    with_file, to_stdout = run_many(("diagnose", *args, *JSON_ARGS, "-o", str(out)),
                                    ("diagnose", *args))
    return with_file, to_stdout


def assert_unknown(run: Run, *must_name: str, out: Path | None = None) -> str:
    """Exit 3 with exactly one ``pdprobe: error:`` line naming ``must_name``; no output left."""
    where = f"argv={run.argv}\nstdout={run.stdout[-2000:]}\nstderr={run.stderr[-4000:]}"
    assert run.returncode == 3, where
    assert "Traceback" not in run.stderr, where
    lines = run.stderr.splitlines()
    assert len(lines) == 1, where
    line = lines[0]
    assert line.startswith("pdprobe: error: "), where
    assert "internal error" not in line, where
    for text in must_name:
        assert text in line, f"{text!r} not named in: {line}"
    assert run.stdout == "", where
    if out is not None:
        assert not out.exists(), where
        leftovers = [p.name for p in out.parent.iterdir()] if out.parent.is_dir() else []
        assert leftovers == [], f"files left beside the report: {leftovers}"
    return line


def assert_judged(run: Run, out: Path | None = None) -> dict[str, Any]:
    """Exit 0/1/2 without a traceback; with ``out``, the valid JSON report written there."""
    where = f"argv={run.argv}\nstdout={run.stdout[-2000:]}\nstderr={run.stderr[-4000:]}"
    assert run.returncode in (0, 1, 2), where
    assert "Traceback" not in run.stderr and "pdprobe: error" not in run.stderr, where
    if out is None:
        assert run.stdout.strip(), where
        return {}
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["schema_version"] == 1
    assert report["status"] in ("ok", "warning", "critical")
    assert [p.name for p in out.parent.iterdir()] == [out.name], "temp file left beside report"
    return report


def warning_with(report: dict[str, Any], *parts: str) -> str:
    """The one report warning that contains every regex in ``parts``."""
    hits = [w for w in report["warnings"] if all(re.search(p, w) for p in parts)]
    assert hits, f"no warning matching {parts} in {report['warnings']}"
    return hits[0]


def flat(text: str) -> str:
    """Text without whitespace: the text view folds long lines, inside long paths too."""
    return "".join(text.split())


# --------------------------------------------------------------------------------------------
# Inputs (generated; tiny so each run spends its time in start-up, not in reading)
# --------------------------------------------------------------------------------------------


def request_rows(n: int, t0: float = T0, seed: int = 3) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    arrival = t0 + np.cumsum(rng.exponential(0.5, n))
    prompt = rng.integers(100, 4000, n)
    output = rng.integers(10, 400, n)
    return [{"request_id": f"r{i}", "arrival_ts": round(float(a), 3), "prompt_tokens": int(p),
             "output_tokens": int(o)} for i, (a, p, o) in enumerate(zip(arrival, prompt, output,
                                                                        strict=True))]


def jsonl_text(rows: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def csv_text(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    lines = [",".join(columns)]
    lines += [",".join(str(r[c]) for c in columns) for r in rows]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ("request_id", "arrival_ts", "prompt_tokens", "output_tokens")


def write_good(folder: Path, t0: float = T0) -> Path:
    path = folder / GOOD_NAME
    path.write_text(jsonl_text(request_rows(120, t0)), encoding="utf-8")
    return path


def om_labels(instance: str, k: int, extra: str = "") -> str:
    """vLLM 0.33 labels plus Kubernetes SD ones; the first instance is the prefill pod."""
    pod = "vllm-prefill-0" if k == 0 else f"vllm-decode-{k - 1}"
    return (f'engine="0",instance="{instance}",job="vllm",model_name="llama-3-8b",'
            f'pod="{pod}"{extra}')


def om_series(instances: Sequence[str], t0: float = T0, scrapes: int = 8, step_s: float = 15.0,
              extra_labels: str = "") -> dict[str, list[str]]:
    """vLLM 0.33 families in OpenMetrics (``# TYPE``, timestamps in seconds), by family name."""
    ts = [t0 + i * step_s for i in range(scrapes)]
    fam: dict[str, list[str]] = {}

    def add(name: str, kind: str, sample: str, values: Callable[[int, int], float]) -> None:
        lines = fam.setdefault(name, [f"# TYPE {name} {kind}"])
        for k, inst in enumerate(instances):
            labels = om_labels(inst, k, extra_labels)
            lines += [f"{sample}{{{labels}}} {values(k, i):g} {t:.3f}" for i, t in enumerate(ts)]

    add("vllm:num_requests_running", "gauge", "vllm:num_requests_running",
        lambda k, i: 8 + k + i % 3)
    add("vllm:num_requests_waiting", "gauge", "vllm:num_requests_waiting", lambda k, i: i % 2)
    add("vllm:kv_cache_usage_perc", "gauge", "vllm:kv_cache_usage_perc",
        lambda k, i: 0.3 + 0.01 * i)
    add("vllm:generation_tokens", "counter", "vllm:generation_tokens_total",
        lambda k, i: 1200.0 * i * (k + 1))
    add("vllm:prompt_tokens", "counter", "vllm:prompt_tokens_total",
        lambda k, i: 9000.0 * i)
    return fam


def om_text(families: dict[str, list[str]], eof: bool = True) -> str:
    lines = [ln for body in families.values() for ln in body]
    return "\n".join(lines + (["# EOF"] if eof else [])) + "\n"


def vllm_stats_line(ts: float, i: int) -> str:
    stamp = datetime.fromtimestamp(ts, UTC).strftime("%m-%d %H:%M:%S")
    return (f"(APIServer pid=4242) INFO {stamp} [loggers.py:259] Engine 000: Avg prompt "
            f"throughput: {1500 + 10 * i:.1f} tokens/s, Avg generation throughput: "
            f"{800 + 5 * i:.1f} tokens/s, Running: {20 + i % 4} reqs, Waiting: {i % 3} reqs, "
            f"GPU KV cache usage: {40 + i % 10:.1f}%, Prefix cache hit rate: 12.0%")


def vllm_log_lines(n: int = 30, t0: float = T0, step_s: float = 10.0) -> list[str]:
    return [vllm_stats_line(t0 + i * step_s, i) for i in range(n)]


# --------------------------------------------------------------------------------------------
# One bad file: the table of issue 2's single-file cases
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BadFile:
    """One bad input file and what pdprobe must say about it."""

    id: str
    name: str
    content: Callable[[], bytes]
    says: tuple[str, ...] = ()  # regexes the error line / the warning must match


def _truncated_gzip() -> bytes:
    whole = gzip.compress(csv_text(request_rows(400), CSV_COLUMNS).encode())
    return whole[: len(whole) * 6 // 10]


def _truncated_zstd_small() -> bytes:
    import zstandard

    whole = zstandard.ZstdCompressor().compress(jsonl_text(request_rows(120)).encode())
    return whole[: len(whole) // 2]


def _truncated_zstd_multiblock() -> bytes:
    import zstandard

    data = csv_text(request_rows(ZSTD_MULTIBLOCK_ROWS), CSV_COLUMNS).encode()
    assert len(data) > 2 * 128 * 1024  # several zstd blocks: the first ones decode on their own
    whole = zstandard.ZstdCompressor(level=1).compress(data)
    return whole[: len(whole) * 6 // 10]


def _parquet_wrong_types() -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = request_rows(50)
    table = pa.table({
        "arrival_ts": pa.array([r["arrival_ts"] for r in rows], pa.float64()),
        # Written by a broken export: words where token counts belong.
        "prompt_tokens": pa.array(["many" if i % 2 else "few" for i in range(50)], pa.string()),
        "output_tokens": pa.array([r["output_tokens"] for r in rows], pa.int64()),
    })
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


BROKEN_JSONL_LINE = 17
CUT_CSV_ROWS = 300


def _csv_cut_last_row() -> bytes:
    """A copy cut short: the last row keeps two fields, and its text also starts line 5."""
    lines = ["arrival_ts,prompt_tokens,output_tokens"]
    lines += [f"{T0 + i * 0.5:.1f},{1000 + i},{50 + i % 7}" for i in range(CUT_CSV_ROWS)]
    lines.append(f"{T0 + 1.5:.1f},10")
    return ("\n".join(lines) + "\n").encode()


def _jsonl_broken_middle() -> bytes:
    lines = jsonl_text(request_rows(40)).splitlines()
    lines[BROKEN_JSONL_LINE - 1] = '{"request_id": "r16", "arrival_ts": 1750000008.5, "prompt_tok'
    return ("\n".join(lines) + "\n").encode()


def _om_nan_inf() -> bytes:
    fam = om_series(["10.0.0.1:8000", "10.0.0.8:8000"])
    kv = fam["vllm:kv_cache_usage_perc"]
    kv[3] = re.sub(r" \S+ (\S+)$", r" NaN \1", kv[3])
    kv[5] = re.sub(r" \S+ (\S+)$", r" +Inf \1", kv[5])
    return om_text(fam).encode()


OM_MALFORMED = ('vllm:num_requests_running{engine="0",instance="10.0.0.1:8000" 3 1750000000.000',
                "this line is not a metric sample",
                'vllm:num_requests_waiting{engine="0",instance="10.0.0.1:8000"} lots 1750000000.000')


def _om_malformed() -> tuple[bytes, int]:
    lines = om_text(om_series(["10.0.0.1:8000", "10.0.0.8:8000"])).splitlines()
    at = 12  # the first malformed line is line 13
    lines[at:at] = list(OM_MALFORMED)
    return ("\n".join(lines) + "\n").encode(), at + 1


OM_MALFORMED_BYTES, OM_FIRST_MALFORMED_LINE = _om_malformed()


def _om_out_of_order() -> bytes:
    fam = om_series(["10.0.0.1:8000", "10.0.0.8:8000"])
    body = fam["vllm:generation_tokens"]
    body[2], body[5] = body[5], body[2]  # one counter series: scrapes 2 and 5 swapped
    return om_text(fam).encode()


ENGINE_GARBAGE = ("hello from the on-call engineer",
                  "\x1b[31m%%%% ######## \x7f\x7f garbage ######## %%%%",
                  "(APIServer pid=4242) INFO 06-15 15:08:00 [loggers.py:259] Engine 000: Avg "
                  "prompt throughput: 1",
                  "Traceback-looking noise: File \"x.py\", line 1, in <module>")
ENGINE_GARBAGE_AT = (4, 9, 15, 22)  # 0-based positions in the final line list


def _engine_log_with_garbage() -> bytes:
    lines = vllm_log_lines(30)
    for pos, text in zip(ENGINE_GARBAGE_AT, ENGINE_GARBAGE, strict=True):
        lines.insert(pos, text)
    return ("\n".join(lines) + "\n").encode()


FATAL_FILES = (
    BadFile("empty", "empty.jsonl", lambda: b"", (r"empty",)),
    BadFile("truncated-gzip", "requests.csv.gz", _truncated_gzip, (r"truncated",)),
    BadFile("truncated-zstd", "requests.jsonl.zst", _truncated_zstd_small, (r"truncated",)),
    BadFile("truncated-zstd-multiblock", "requests.csv.zst", _truncated_zstd_multiblock,
            (r"truncated",)),
    BadFile("csv-missing-column", "requests.csv",
            lambda: csv_text(request_rows(30), ("request_id", "arrival_ts", "prompt_tokens"))
            .encode(), (r"output_tokens",)),
    BadFile("csv-header-only", "requests.csv",
            lambda: (",".join(CSV_COLUMNS) + "\n").encode(), (r"header|no data rows",)),
    BadFile("openmetrics-no-valid-line", "metrics.prom",
            lambda: b"# TYPE vllm:num_requests_running gauge\n"
                    b'vllm:num_requests_running{engine="0" 4 1750000000\n'
                    b"vllm:num_requests_running{engine=0} four\n",
            (r"\bline 2\b",)),
    BadFile("binary", "capture.dat", lambda: bytes(range(256)) * 16, (r"binary",)),
    BadFile("parquet-wrong-types", "requests.parquet", _parquet_wrong_types,
            (r"prompt_tokens",)),
)

RECOVERABLE_FILES = (
    BadFile("jsonl-broken-line", "requests.jsonl", _jsonl_broken_middle,
            (r"skipped 1 line", rf"\bline {BROKEN_JSONL_LINE}\b")),
    BadFile("csv-cut-last-row", "requests.csv", _csv_cut_last_row,
            (r"skipped 1 malformed row", rf"\bline {CUT_CSV_ROWS + 2}\b")),
    BadFile("metric-nan-inf", "metrics.om", _om_nan_inf,
            (r"\b2 NaN/Inf", r"vllm:kv_cache_usage_perc")),
    BadFile("openmetrics-malformed-lines", "metrics.om", lambda: OM_MALFORMED_BYTES,
            (rf"\b{len(OM_MALFORMED)} malformed line", rf"\bline {OM_FIRST_MALFORMED_LINE}\b")),
    BadFile("timestamps-out-of-order", "metrics.om", _om_out_of_order,
            (r"out of order", r"sorted")),
)

_DEFECTS: dict[str, str] = {}  # id -> defect, for cases kept as strict xfails


def _params(files: Sequence[BadFile], placements: Sequence[str] = ("named", "folder")
            ) -> list[Any]:
    out = []
    for bad in files:
        for placement in placements:
            marks = ([pytest.mark.xfail(strict=True, reason=_DEFECTS[bad.id])]
                     if bad.id in _DEFECTS else [])
            out.append(pytest.param(bad, placement, id=f"{bad.id}-{placement}", marks=marks))
    return out


def _place(tmp_path: Path, bad: BadFile, placement: str) -> tuple[Path, list[str], Path]:
    """Write the bad file (beside a good one for ``folder``); the paths to pass and -o target."""
    folder = tmp_path / "in"
    folder.mkdir()
    path = folder / bad.name
    path.write_bytes(bad.content())
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    if placement == "folder":
        write_good(folder)
        return path, [str(folder)], out_dir / "report.json"
    if placement == "named-with-good":
        return path, [str(path), str(write_good(folder))], out_dir / "report.json"
    return path, [str(path)], out_dir / "report.json"


@pytest.mark.parametrize(("bad", "placement"), _params(FATAL_FILES))
def test_unusable_file_exits_3_with_one_line(tmp_path: Path, bad: BadFile, placement: str) -> None:
    path, args, out = _place(tmp_path, bad, placement)
    with_file, to_stdout = diagnose_both_ways(args, out)
    if placement == "folder":
        report = assert_judged(with_file, out)
        assert report["workload"]["requests"] == 120  # the good file alone
        warning_with(report, re.escape(str(path)), r"skipped", *bad.says)
        assert_judged(to_stdout)
        assert flat(f"skipped {path}") in flat(to_stdout.stdout)
        return
    line = assert_unknown(with_file, str(path), out=out)
    for pattern in bad.says:
        assert re.search(pattern, line), f"{pattern!r} not in: {line}"
    assert assert_unknown(to_stdout, str(path)) == line


@pytest.mark.parametrize(("bad", "placement"), _params(FATAL_FILES, ("named-with-good",)))
def test_unusable_file_named_beside_a_good_one_is_a_warning(tmp_path: Path, bad: BadFile,
                                                            placement: str) -> None:
    """Issue 16: "An unreadable or unrecognised file among readable ones is a warning naming
    it (argument and folder mode alike)"."""
    path, args, out = _place(tmp_path, bad, placement)
    (run,) = run_many(("diagnose", *args, *JSON_ARGS, "-o", str(out)))
    report = assert_judged(run, out)
    assert report["workload"]["requests"] == 120
    warning_with(report, re.escape(str(path)), r"skipped", *bad.says)


@pytest.mark.parametrize(("bad", "placement"), _params(RECOVERABLE_FILES))
def test_recoverable_file_warns_with_count(tmp_path: Path, bad: BadFile, placement: str) -> None:
    path, args, out = _place(tmp_path, bad, placement)
    with_file, to_stdout = diagnose_both_ways(args, out)
    report = assert_judged(with_file, out)
    warning = warning_with(report, re.escape(str(path)), *bad.says)
    assert_judged(to_stdout)
    assert to_stdout.returncode == with_file.returncode
    assert flat(warning) in flat(to_stdout.stdout)
    source = next(s for s in report["input"]["sources"] if s["path"] == str(path))
    if bad.id in ("jsonl-broken-line", "openmetrics-malformed-lines"):
        assert source["skipped"] == (1 if bad.id == "jsonl-broken-line" else len(OM_MALFORMED))
    if placement == "folder":
        own = {"jsonl-broken-line": 39, "csv-cut-last-row": CUT_CSV_ROWS}.get(bad.id, 0)
        assert report["workload"]["requests"] == 120 + own


def test_out_of_order_counter_is_sorted_not_read_as_a_restart(tmp_path: Path) -> None:
    """Sorted before reset correction: the swap must not look like two counter restarts."""
    bad = next(b for b in RECOVERABLE_FILES if b.id == "timestamps-out-of-order")
    path, args, out = _place(tmp_path, bad, "named")
    (run,) = run_many(("diagnose", *args, *JSON_ARGS, "-o", str(out)))
    report = assert_judged(run, out)
    warning_with(report, re.escape(str(path)), r"out of order in 1 series")
    ordered = tmp_path / "ordered" / "metrics.om"
    ordered.parent.mkdir()
    ordered.write_text(om_text(om_series(["10.0.0.1:8000", "10.0.0.8:8000"])), encoding="utf-8")
    out2 = tmp_path / "ordered-out" / "report.json"
    out2.parent.mkdir()
    (run2,) = run_many(("diagnose", str(ordered), *JSON_ARGS, "-o", str(out2)))
    assert_judged(run2, out2)
    baseline = json.loads(out2.read_text(encoding="utf-8"))
    assert report["per_instance"] == baseline["per_instance"]


# --------------------------------------------------------------------------------------------
# Engine logs: garbage between stats lines, logs without a year
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("placement", ["named", "folder"])
def test_engine_log_garbage_is_counted_never_fatal(tmp_path: Path, placement: str) -> None:
    bad = BadFile("engine-log-garbage", "decode-0.log", _engine_log_with_garbage)
    path, args, out = _place(tmp_path, bad, placement)
    with_file, to_stdout = diagnose_both_ways(args, out)
    report = assert_judged(with_file, out)
    assert_judged(to_stdout)
    source = next(s for s in report["input"]["sources"] if s["path"] == str(path))
    assert source["kind"] == "engine-log" and source["format"] == "vllm-log"
    assert source["rows"] == 30  # every valid stats line used
    # The cut stats line looks like a stats line: counted as skipped, with its line number.
    cut_line = ENGINE_GARBAGE_AT[2] + 1
    assert source["skipped"] == 1
    warning_with(report, re.escape(str(path)), r"\b1 line", rf"\bline {cut_line}\b", r"skipped")
    # The other garbage lines are unrelated text: counted in a note.
    assert any(re.search(rf"\b{len(ENGINE_GARBAGE) - 1} unrelated line", n)
               for n in source["notes"]), source["notes"]


def _write_yearless_log(folder: Path) -> Path:
    path = folder / "decode-0.log"
    path.write_text("\n".join(vllm_log_lines(30)) + "\n", encoding="utf-8")
    mtime = datetime(2025, 7, 1, tzinfo=UTC).timestamp()
    os.utime(path, (mtime, mtime))
    return path


@pytest.mark.parametrize("placement", ["named", "folder"])
def test_vllm_log_without_year_notes_the_year_and_year_option_moves_window(
        tmp_path: Path, placement: str) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    path = _write_yearless_log(folder)
    args = [str(path)] if placement == "named" else [str(folder)]
    if placement == "folder":
        write_good(folder)
    out_default, out_year = tmp_path / "default" / "report.json", tmp_path / "year" / "report.json"
    out_default.parent.mkdir()
    out_year.parent.mkdir()
    default, with_year, text = run_many(
        ("diagnose", *args, *JSON_ARGS, "-o", str(out_default)),
        ("diagnose", *args, "--year", "2023", *JSON_ARGS, "-o", str(out_year)),
        ("diagnose", *args),
    )
    report = assert_judged(default, out_default)
    moved = assert_judged(with_year, out_year)
    notes = [n for s in report["input"]["sources"] if s["path"] == str(path) for n in s["notes"]]
    assert any("2025" in n and "--year" in n for n in notes), notes
    assert report["window"]["start"] == T0_ISO
    moved_notes = [n for s in moved["input"]["sources"] if s["path"] == str(path)
                   for n in s["notes"]]
    assert any("2023" in n and "--year" in n for n in moved_notes), moved_notes
    assert moved["window"]["start"] == T0_ISO.replace("2025", "2023")
    if placement == "folder":  # the request file stays in 2025: the inputs are now years apart
        assert moved["window"]["end"].startswith("2025-06-15T15:")
        warning_with(moved, re.escape(str(path)), r"h apart", r"--year")
    else:
        assert moved["window"]["end"] == "2023-06-15T15:11:30Z"  # 30 lines, 10 s apart
    assert_judged(text)
    assert "2025" in flat(text.stdout) and "--year" in flat(text.stdout)


# --------------------------------------------------------------------------------------------
# Several files: clocks, roles
# --------------------------------------------------------------------------------------------


def _two_files(tmp_path: Path, metrics: str, requests: str, placement: str
               ) -> tuple[Path, Path, list[str], Path]:
    folder = tmp_path / "in"
    folder.mkdir()
    req, om = folder / "requests.jsonl", folder / "metrics.om"
    req.write_text(requests, encoding="utf-8")
    om.write_text(metrics, encoding="utf-8")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = [str(req), str(om)] if placement == "named" else [str(folder)]
    return req, om, args, out_dir / "report.json"


@pytest.mark.parametrize("placement", ["named", "folder"])
def test_files_from_different_clocks_warn(tmp_path: Path, placement: str) -> None:
    metrics = om_text(om_series(["10.0.0.1:8000", "10.0.0.8:8000"], t0=T0 + THREE_DAYS_S))
    req, om, args, out = _two_files(tmp_path, metrics, jsonl_text(request_rows(120)), placement)
    with_file, to_stdout = diagnose_both_ways(args, out)
    report = assert_judged(with_file, out)
    warning = warning_with(report, re.escape(str(req)), re.escape(str(om)), r"\b7[12]\.\d h apart",
                           r"clock")
    assert report["workload"]["requests"] == 120
    assert_judged(to_stdout)
    assert flat(warning) in flat(to_stdout.stdout)


def _role_conflict_inputs() -> tuple[str, str]:
    rows = request_rows(60)
    for i, r in enumerate(rows):
        r["prefill_instance"] = "10.0.0.1:8000"
        r["decode_instance"] = "10.0.0.8:8000" if i % 2 else "10.0.0.9:8000"
    # The metrics file says 10.0.0.1 is a decode instance: same strength (a label) as the column.
    metrics = om_text(om_series(["10.0.0.1:8000"], t0=T0, extra_labels=',role="decode"'))
    return metrics, jsonl_text(rows)


@pytest.mark.parametrize("placement", ["named", "folder"])
def test_files_disagreeing_on_a_role_exit_3_naming_both(tmp_path: Path, placement: str) -> None:
    metrics, requests = _role_conflict_inputs()
    req, om, args, out = _two_files(tmp_path, metrics, requests, placement)
    with_file, to_stdout = diagnose_both_ways(args, out)
    line = assert_unknown(with_file, str(req), str(om), "10.0.0.1:8000", out=out)
    assert "--prefill-match" in line and "--decode-match" in line
    assert assert_unknown(to_stdout, str(req), str(om)) == line


@pytest.mark.parametrize("placement", ["named", "folder"])
def test_role_conflict_resolved_by_prefill_match(tmp_path: Path, placement: str) -> None:
    metrics, requests = _role_conflict_inputs()
    _req, _om, args, out = _two_files(tmp_path, metrics, requests, placement)
    match = ("--prefill-match", r"^10\.0\.0\.1:")
    with_file, to_stdout = diagnose_both_ways([*args, *match], out)
    report = assert_judged(with_file, out)
    # The overruled label is not forgotten: the report says the option won over it.
    warning_with(report, r"10\.0\.0\.1:8000", r"--prefill-match", r"overrides decode",
                 r"role='decode'")
    assert report["instances"]["prefill"] == 1
    assert report["instances"]["decode"] == 2
    assert_judged(to_stdout)
    assert to_stdout.returncode == with_file.returncode


# --------------------------------------------------------------------------------------------
# Folders
# --------------------------------------------------------------------------------------------


def test_folder_with_readme_and_unknown_text_skips_them(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    write_good(folder)
    (folder / "README.md").write_text("# Capture of cluster A\n\nTaken during the incident.\n",
                                      encoding="utf-8")
    notes = folder / "notes.txt"
    notes.write_text("decode-3 looked slow around 15:10\nrestarted router at 15:20\n",
                     encoding="utf-8")
    out = tmp_path / "out" / "report.json"
    out.parent.mkdir()
    with_file, to_stdout = diagnose_both_ways([str(folder)], out)
    report = assert_judged(with_file, out)
    assert report["workload"]["requests"] == 120
    warning = warning_with(report, re.escape(str(notes)), r"skipped")
    assert not any("README" in w for w in report["warnings"] if w != warning)
    assert [s["path"] for s in report["input"]["sources"]] == [str(folder / GOOD_NAME)]
    assert_judged(to_stdout)
    assert flat(f"skipped {notes}") in flat(to_stdout.stdout)


def test_folder_with_nothing_usable_exits_3(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "empty.jsonl").write_bytes(b"")
    (folder / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (folder / "notes.txt").write_text("nothing to see here\n", encoding="utf-8")
    (folder / "README.md").write_text("# empty capture\n", encoding="utf-8")
    out = tmp_path / "out" / "report.json"
    out.parent.mkdir()
    with_file, to_stdout = diagnose_both_ways([str(folder)], out)
    line = assert_unknown(with_file, str(folder), out=out)
    assert assert_unknown(to_stdout, str(folder)) == line


# --------------------------------------------------------------------------------------------
# Outputs and paths that are not regular files
# --------------------------------------------------------------------------------------------


def test_output_into_missing_folder_exits_3_and_writes_nothing(tmp_path: Path) -> None:
    good = write_good(tmp_path)
    out = tmp_path / "missing" / "report.json"
    (run,) = run_many(("diagnose", str(good), *JSON_ARGS, "-o", str(out)))
    assert_unknown(run, str(out))
    assert not out.parent.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [GOOD_NAME]


def test_output_that_is_a_folder_exits_3_with_a_clear_line(tmp_path: Path) -> None:
    good = write_good(tmp_path)
    target = tmp_path / "reports"
    target.mkdir()
    (run,) = run_many(("diagnose", str(good), *JSON_ARGS, "-o", str(target)))
    assert_unknown(run, str(target))
    assert list(target.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([GOOD_NAME, "reports"])


def test_profile_that_is_a_folder_exits_3_with_a_clear_line(tmp_path: Path) -> None:
    good = write_good(tmp_path)
    target = tmp_path / "profile.toml"
    target.mkdir()
    out = tmp_path / "out" / "report.json"
    out.parent.mkdir()
    (run,) = run_many(("diagnose", str(good), "--profile", str(target), *JSON_ARGS,
                       "-o", str(out)))
    assert_unknown(run, str(target), out=out)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_named_as_input_exits_3_without_hanging(tmp_path: Path) -> None:
    # Running as root makes permission bits moot; a FIFO is the unreadable file we can make.
    fifo = tmp_path / "requests.jsonl"
    os.mkfifo(fifo)
    out = tmp_path / "out" / "report.json"
    out.parent.mkdir()
    with_file, to_stdout = run_many(("diagnose", str(fifo), *JSON_ARGS, "-o", str(out)),
                                    ("diagnose", str(fifo)), timeout=HANG_TIMEOUT_S)
    line = assert_unknown(with_file, str(fifo), out=out)
    assert assert_unknown(to_stdout, str(fifo)) == line


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_inside_a_folder_is_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    write_good(folder)
    os.mkfifo(folder / "stream.jsonl")
    out = tmp_path / "out" / "report.json"
    out.parent.mkdir()
    (run,) = run_many(("diagnose", str(folder), *JSON_ARGS, "-o", str(out)),
                      timeout=HANG_TIMEOUT_S)
    report = assert_judged(run, out)
    assert report["workload"]["requests"] == 120
    warning_with(report, re.escape(str(folder / "stream.jsonl")), r"FIFO", r"skipped")


def test_folder_members_that_cannot_be_read_are_named(tmp_path: Path) -> None:
    """Dangling links, links to folders and non-UTF-8 names are warned about, never fatal."""
    folder = tmp_path / "in"
    folder.mkdir()
    write_good(folder)
    (folder / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    (tmp_path / "elsewhere").mkdir()
    (folder / "more").symlink_to(tmp_path / "elsewhere")
    odd = os.fsencode(folder) + b"/decode-\xff.jsonl"
    with open(odd, "w", encoding="utf-8") as fh:
        fh.write(jsonl_text(request_rows(30, seed=5)))
    out = tmp_path / "out" / "report.json"
    out.parent.mkdir()
    (run,) = run_many(("diagnose", str(folder), *JSON_ARGS, "-o", str(out)))
    report = assert_judged(run, out)
    assert report["workload"]["requests"] == 150  # the oddly named file is read too
    warning_with(report, re.escape(str(folder / "gone.jsonl")), r"dangling")
    warning_with(report, re.escape(str(folder / "more")), r"link to a folder")
    assert str(folder / "decode-\\xff.jsonl") in [s["path"] for s in report["input"]["sources"]]


def test_own_reports_in_a_capture_folder_are_left_out_with_a_note(tmp_path: Path) -> None:
    """A JSON report written into the capture folder broke the next diagnosis of it."""
    folder = tmp_path / "in"
    folder.mkdir()
    write_good(folder)
    formats = {"report.json": "json", "report.md": "markdown", "report.html": "html",
               "pdprobe.prom": "prometheus"}
    runs = run_many(*[("diagnose", str(folder / GOOD_NAME), "--format", fmt, "-o",
                       str(tmp_path / name)) for name, fmt in formats.items()])
    for run in runs:
        assert run.returncode in (0, 1, 2), run.stderr
    for name in formats:
        (tmp_path / name).rename(folder / name)
    out = tmp_path / "out" / "report.json"
    out.parent.mkdir()
    (run,) = run_many(("diagnose", str(folder), *JSON_ARGS, "-o", str(out)))
    report = assert_judged(run, out)
    assert report["workload"]["requests"] == 120
    assert [s["path"] for s in report["input"]["sources"]] == [str(folder / GOOD_NAME)]
    for name in formats:
        assert any(str(folder / name) in n and "pdprobe report" in n
                   for n in report["notes"]), report["notes"]
