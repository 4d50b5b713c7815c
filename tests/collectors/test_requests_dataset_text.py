"""Partitioned CSV/TSV and JSON Lines request records read as one input, the window pushed
down to partitions (pdprobe/collectors/requests_dataset_text.py, walk.partitioned).

The layout is Spark's ``df.write.partitionBy("date", "hour").csv(path)`` / ``.json(path)``
(apache/spark docs/sql-data-sources-csv.md and -json.md: one folder per partition value,
``part-00000-<uuid>.c000.csv`` files, a ``_SUCCESS`` marker).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

from pdprobe.cli.app import run
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.files import read_paths
from pdprobe.collectors.requests_dataset import read_dataset
from pdprobe.collectors.time_window import TimeWindow
from pdprobe.collectors.walk import walk_paths
from pdprobe.errors import InputError

T0 = 1796040000  # 2026-11-30T12:00:00Z
HOURS = 4
PER_HOUR = 700


def _hour(h: int) -> pa.Table:
    rng = np.random.default_rng(h)
    n = PER_HOUR
    return pa.table({
        "request_id": [f"h{h}-{i}" for i in range(n)],
        "arrival_ts": np.sort(T0 + 3600 * h + rng.uniform(0, 3600, n)),
        "input_tokens": rng.integers(500, 1500, n),
        "output_tokens": rng.integers(100, 300, n),
        "decode_instance": rng.choice(["decode-0", "decode-1"], n),
        "ttft_ms": rng.uniform(100, 300, n),
        "status": ["stop"] * n,
    })


def write_lake(root: Path, fmt: str) -> Path:
    for h in range(HOURS):
        folder = root / "date=2026-11-30" / f"hour={12 + h}"
        folder.mkdir(parents=True)
        path = folder / f"part-00000-8f1c.c000.{fmt}"
        if fmt == "jsonl":
            path.write_text("".join(json.dumps(r) + "\n" for r in _hour(h).to_pylist()))
        else:
            pcsv.write_csv(_hour(h), path, pcsv.WriteOptions(
                delimiter="\t" if fmt == "tsv" else ","))
    (root / "_SUCCESS").write_bytes(b"")
    return root


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_a_text_lake_is_one_source_read_as_its_files_are(tmp_path: Path, fmt: str) -> None:
    lake = write_lake(tmp_path / "requests", fmt)
    found = walk_paths([lake])
    assert not found.files and [(d.format, len(d.files)) for d in found.datasets] == [
        (fmt, HOURS)]
    data = read_paths([lake])
    alone = read_paths(sorted(lake.rglob(f"*.{fmt}")))
    assert [s.path for s in data.sources] == [str(lake)]
    assert data.sources[0].format == f"{fmt}-dataset"
    kind = "JSON Lines" if fmt == "jsonl" else fmt.upper()
    assert data.sources[0].notes[0].startswith(f"Hive-partitioned {kind} dataset of 4 files")
    assert len(data.requests) == HOURS * PER_HOUR
    cols = ["arrival_ts", "prompt_tokens", "output_tokens", "ttft_s"]
    np.testing.assert_array_equal(data.requests[cols].to_numpy(),
                                  alone.requests[cols].to_numpy())
    assert data.requests["decode_instance"].tolist() == alone.requests["decode_instance"].tolist()
    assert set(data.requests["status"].unique()) == {"ok"}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_an_hour_opens_only_its_partitions(tmp_path: Path, fmt: str) -> None:
    lake = write_lake(tmp_path / "requests", fmt)
    ref = walk_paths([lake]).datasets[0]
    window = TimeWindow(since_ts=T0 + 3600 + 600, until_ts=T0 + 3600 + 1800, text="w")
    done = read_dataset(ref, ReadContext(window=window))
    assert done.pushdown is not None
    assert (done.pushdown.files, done.pushdown.files_read) == (HOURS, 1)
    assert len(done.partial.requests) == PER_HOUR  # the partition; the exact cut comes later
    assert any("opened 1 of 4 files (partitions)" in n for n in done.partial.source.notes)
    data = read_paths([lake], ReadContext(window=window))
    assert 0 < len(data.requests) < PER_HOUR / 2
    assert data.requests["arrival_ts"].between(T0 + 4200, T0 + 5400).all()


def test_text_beside_parquet_parts_stays_a_plain_input(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    lake = write_lake(tmp_path / "requests", "csv")
    pq.write_table(_hour(0), lake / "date=2026-11-30" / "hour=12" / "part-1.parquet")
    found = walk_paths([lake])
    assert [d.format for d in found.datasets] == ["parquet"]
    assert len(found.files) == HOURS


def test_a_bad_member_is_one_line_naming_the_dataset(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = write_lake(tmp_path / "requests", "csv")
    member = sorted(lake.rglob("*.csv"))[2]
    member.write_text(member.read_text().replace("\n", "\nnot,a,number,x,y,z,w\n", 1))
    ref = walk_paths([lake]).datasets[0]
    with pytest.raises(InputError, match="cannot read the CSV dataset"):
        read_dataset(ref, ReadContext())
    assert run(["diagnose", str(lake), "--format", "json"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if "CSV dataset" in line]) == 1


def test_a_member_without_the_mapped_columns_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pyarrow reads a member lacking a column as nulls: without the header check its rows
    were dropped as 'missing arrival_ts' with no file named."""
    lake = write_lake(tmp_path / "requests", "csv")
    member = sorted(lake.rglob("*.csv"))[1]
    member.write_text("foo,bar\n1,2\n")
    ref = walk_paths([lake]).datasets[0]
    with pytest.raises(InputError, match=f"{member.name}: the header has no column"):
        read_dataset(ref, ReadContext())
    assert run(["diagnose", str(lake), "--format", "json"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if str(member) in line]) == 1
