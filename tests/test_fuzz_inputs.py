"""Fuzz: mutated captures never crash pdprobe (issue 14, "Done when").

Each input kind pdprobe reads -- request records as JSON Lines, CSV and Parquet (rows of the
bundled sample capture, ``pdprobe/sample_logs/requests.jsonl.gz``), OpenMetrics (vLLM 0.33
``/metrics`` of ``tests/fixtures/metrics/vllm_033_pd.prom``), vLLM and SGLang logs
(``tests/fixtures/logs/``) -- is mutated with a seeded RNG: truncation, byte flips, non-finite,
negative and huge numbers, invalid UTF-8 / UTF-16 / BOMs, CRLF and bare-CR line ends,
timestamps moved to 1970 or written in ms/ns, deep JSON nesting, gzip cut short. Each mutant
is diagnosed through the CLI's entry point (``pdprobe.cli.app.run``, in process; a few through
``python -m pdprobe``) alone and beside a good file, and must:

- exit 0-3 (3 only with one ``pdprobe: error:`` line), print no traceback and no
  "internal error";
- when a report is written, hold no negative rate, length, duration or count;
- leave nothing behind: the report (or nothing) in the output folder, the inputs untouched.

The seed is fixed (``FUZZ_SEED``); ``PDPROBE_FUZZ_SEED`` overrides it to explore locally.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pdprobe.cli.app import run

FUZZ_SEED = int(os.environ.get("PDPROBE_FUZZ_SEED", "20251214"))
REPO = Path(__file__).resolve().parents[1]
SAMPLE_REQUESTS = REPO / "pdprobe" / "sample_logs" / "requests.jsonl.gz"
FIXTURES = REPO / "tests" / "fixtures"
ROWS = 80  # request rows per base file: enough for every analysis, fast to diagnose
# Exit codes of the contract: 0 ok, 1 warning, 2 critical, 3 unknown.
EXIT_CODES = (0, 1, 2, 3)
# Report keys whose numbers can never be negative (rates, lengths, durations, counts, bytes).
NON_NEGATIVE_KEY = re.compile(r"(^|_)(rate|rps|per_s|s|tokens|bytes|requests|count|mean|p50|"
                              r"p90|p99|max|recommended_prefill|recommended_decode|"
                              r"deployed_prefill|deployed_decode)$")
# ... except statistics that are signed by nature (differences, gaps, correlations).
SIGNED_KEY = re.compile(r"(corr|skew|change|delta|diff|drift|shift|slope|error|excess|gap|"
                        r"offset|bias|margin|residual)")


# --------------------------------------------------------------------------------------------
# Base inputs
# --------------------------------------------------------------------------------------------


def _sample_rows() -> list[dict[str, Any]]:
    with gzip.open(SAMPLE_REQUESTS, "rt", encoding="utf-8") as fh:
        return [json.loads(next(fh)) for _ in range(ROWS)]


def _csv(rows: list[dict[str, Any]]) -> bytes:
    cols = list(rows[0])
    lines = [",".join(cols)] + [",".join("" if r[c] is None else str(r[c]) for c in cols)
                                for r in rows]
    return ("\n".join(lines) + "\n").encode()


def _parquet(rows: list[dict[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


@dataclass(frozen=True)
class Base:
    kind: str
    name: str
    data: bytes


def _bases() -> list[Base]:
    rows = _sample_rows()
    return [
        Base("jsonl", "requests.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode()),
        Base("csv", "requests.csv", _csv(rows)),
        Base("openmetrics", "metrics.prom", (FIXTURES / "metrics" / "vllm_033_pd.prom")
             .read_bytes()),
        Base("vllm-log", "decode-0.log", (FIXTURES / "logs" / "vllm_0.33_decode.log")
             .read_bytes()),
        Base("sglang-log", "prefill-0.log", (FIXTURES / "logs" / "sglang_0.5.3_pd_prefill.log")
             .read_bytes()),
    ]


# --------------------------------------------------------------------------------------------
# Mutations: bytes -> bytes, each drawing from the RNG it is given
# --------------------------------------------------------------------------------------------

NUMBER = re.compile(rb"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
EVIL_NUMBERS = (b"NaN", b"nan", b"Infinity", b"+Inf", b"-Inf", b"inf", b"1e308", b"-1e308",
                b"1e300", b"-5", b"-820", b"1e19", b"99999999999999999999", b"0", b"abc",
                b"1e-320", b"")
Mutation = Callable[[bytes, np.random.Generator], bytes]


def truncate(data: bytes, rng: np.random.Generator) -> bytes:
    return data[: int(rng.integers(0, max(len(data), 1)))]


def flip_bytes(data: bytes, rng: np.random.Generator) -> bytes:
    buf = bytearray(data)
    for pos in rng.integers(0, max(len(buf), 1), size=int(rng.integers(1, 40))):
        if buf:
            buf[int(pos)] = int(rng.integers(0, 256))
    return bytes(buf)


def evil_numbers(data: bytes, rng: np.random.Generator) -> bytes:
    """Replace a third of the numbers with non-finite, negative, huge or non-numbers."""
    def sub(m: re.Match[bytes]) -> bytes:
        if rng.random() < 0.33:
            return EVIL_NUMBERS[int(rng.integers(0, len(EVIL_NUMBERS)))]
        return m.group(0)
    return NUMBER.sub(sub, data)


def scale_numbers(data: bytes, rng: np.random.Generator) -> bytes:
    """Numbers (timestamps among them) times 1000 or 1e9 in some lines, 1970 in others."""
    factor = [1e3, 1e9, 1e-9, 0.0][int(rng.integers(0, 4))]
    lines = data.split(b"\n")
    for i in rng.integers(0, len(lines), size=max(1, len(lines) // 3)):
        lines[int(i)] = NUMBER.sub(lambda m: f"{float(m.group(0)) * factor:.17g}".encode(),
                                   lines[int(i)])
    return b"\n".join(lines)


def one_instant(data: bytes, rng: np.random.Generator) -> bytes:
    """Every big number (timestamps) the same: a 0 s window."""
    return re.sub(rb"\b1[67]\d{8}(?:\.\d+)?\b", b"1750000000", data)


def bad_encoding(data: bytes, rng: np.random.Generator) -> bytes:
    choice = int(rng.integers(0, 4))
    if choice == 0:
        return data.decode("utf-8", "replace").encode("utf-16")
    if choice == 1:
        return b"\xef\xbb\xbf" + data
    buf = bytearray(data)
    for pos in rng.integers(0, max(len(buf), 1), size=8):
        buf[int(pos):int(pos)] = b"\xff\xfe\xc3"
    return bytes(buf)


def line_ends(data: bytes, rng: np.random.Generator) -> bytes:
    return data.replace(b"\n", [b"\r\n", b"\r", b"\n\n\n", b"\r\r\n"][int(rng.integers(0, 4))])


def blank_head(data: bytes, rng: np.random.Generator) -> bytes:
    return b"\n" * int(rng.integers(60_000, 90_000)) + b"# comment\n" + data


def deep_nesting(data: bytes, rng: np.random.Generator) -> bytes:
    depth = int(rng.integers(10_000, 100_000))
    return data + b"[" * depth + b"]" * depth + b"\n" + b'{"a":' * depth + b"\n"


def duplicate_lines(data: bytes, rng: np.random.Generator) -> bytes:
    lines = data.split(b"\n")
    picks = rng.integers(0, len(lines), size=len(lines))
    return b"\n".join(lines[int(i)] for i in np.sort(picks))


MUTATIONS: tuple[Mutation, ...] = (truncate, flip_bytes, evil_numbers, scale_numbers,
                                   one_instant, bad_encoding, line_ends, blank_head,
                                   deep_nesting, duplicate_lines)


def _parquet_mutant(rows: list[dict[str, Any]], rng: np.random.Generator) -> bytes:
    """Parquet whose numeric columns hold non-finite, negative, huge and 1970 values."""
    evil = [float("nan"), float("inf"), -float("inf"), 1e308, -5.0, 1e19, 0.0, 1.0]
    out = []
    for r in rows:
        r = dict(r)
        for key in ("arrival_ts", "prompt_tokens", "output_tokens", "ttft_s", "kv_bytes"):
            if rng.random() < 0.2:
                r[key] = evil[int(rng.integers(0, len(evil)))]
        out.append({k: (float(v) if k in ("prompt_tokens", "output_tokens") else v)
                    for k, v in r.items()})
    data = _parquet(out)
    return data if rng.random() < 0.7 else truncate(data, rng)


@dataclass(frozen=True)
class Case:
    id: str
    name: str
    data: bytes
    beside_good: bool  # in a folder next to an intact request file


def _cases() -> list[Case]:
    rng = np.random.default_rng(FUZZ_SEED)
    cases = []
    for base in _bases():
        for k, mutate in enumerate(MUTATIONS):
            data = mutate(base.data, rng)
            if rng.random() < 0.15:  # sometimes compressed, sometimes cut inside the gzip
                data = gzip.compress(data, mtime=0)
                data = data if rng.random() < 0.5 else data[: max(12, len(data) // 2)]
                name = base.name + ".gz"
            else:
                name = base.name
            cases.append(Case(f"{base.kind}-{mutate.__name__}", name, data,
                              beside_good=bool(k % 3 == 0)))
    rows = _sample_rows()
    for i in range(4):
        cases.append(Case(f"parquet-values-{i}", "requests.parquet", _parquet_mutant(rows, rng),
                          beside_good=i % 2 == 1))
    return cases


CASES = _cases()


# --------------------------------------------------------------------------------------------
# Running and judging
# --------------------------------------------------------------------------------------------


def _place(tmp_path: Path, case: Case) -> tuple[Path, Path, dict[str, bytes]]:
    """Write the mutant (beside a good file when asked); return input, output, contents."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / case.name).write_bytes(case.data)
    if case.beside_good:
        rows = _sample_rows()[:40]
        (folder / "good.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                           encoding="utf-8")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = folder if case.beside_good else folder / case.name
    return target, out_dir / "report.json", {p.name: p.read_bytes() for p in folder.iterdir()}


@contextlib.contextmanager
def _captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


def negatives(node: Any, path: str = "") -> list[str]:
    """Paths of numbers in a JSON report that must not be negative but are."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}"
            if (isinstance(value, int | float) and not isinstance(value, bool)
                    and NON_NEGATIVE_KEY.search(key) and not SIGNED_KEY.search(key)
                    and value < 0):
                found.append(f"{where}={value}")
            found.extend(negatives(value, where))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(negatives(value, f"{path}[{i}]"))
    return found


def judge(rc: int, stdout: str, stderr: str, out: Path, inputs: dict[str, bytes],
          folder: Path) -> None:
    where = f"exit {rc}\nstderr: {stderr[-3000:]}"
    assert rc in EXIT_CODES, where
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, where
    assert "internal error" not in stderr, where
    if rc == 3 and not out.exists():  # refused: one line says why
        errors = [ln for ln in stderr.splitlines() if ln.startswith("pdprobe: error:")]
        assert len(errors) == 1, where
    else:  # judged (3: a report whose status is unknown, nothing could be judged)
        report = json.loads(out.read_text(encoding="utf-8"))
        expected = ("unknown",) if rc == 3 else ("ok", "warning", "critical")
        assert report["status"] in expected, where
        bad = negatives(report)
        assert not bad, f"negative values in the report: {bad[:10]}\n{where}"
    left = sorted(p.name for p in out.parent.iterdir())
    assert left in ([], [out.name]), f"left behind: {left}"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == inputs, "an input changed"
    assert stdout == "" or rc != 3, where


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_mutated_input_is_judged_or_refused_cleanly(tmp_path: Path, case: Case) -> None:
    target, out, inputs = _place(tmp_path, case)
    with _captured() as (stdout, stderr):
        rc = run(["diagnose", str(target), "--format", "json", "-o", str(out)])
    judge(rc, stdout.getvalue(), stderr.getvalue(), out, inputs, tmp_path / "in")


SUBPROCESS_CASES = [c for c in CASES if c.id.endswith(("evil_numbers", "bad_encoding"))][:3]


def test_mutated_inputs_through_the_console_entry(tmp_path: Path) -> None:
    """A few mutants through ``python -m pdprobe`` (the real exit path, pyarrow threads and
    all), concurrently."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDPROBE_")}
    env["NO_COLOR"] = "1"
    runs = []
    for case in SUBPROCESS_CASES:
        base = tmp_path / case.id
        base.mkdir()
        target, out, inputs = _place(base, case)
        proc = subprocess.Popen([sys.executable, "-m", "pdprobe", "diagnose", str(target),
                                 "--format", "json", "-o", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, stdin=subprocess.DEVNULL)
        runs.append((proc, out, inputs, base / "in"))
    for proc, out, inputs, folder in runs:
        stdout, stderr = proc.communicate(timeout=120)
        judge(proc.returncode, stdout, stderr, out, inputs, folder)
