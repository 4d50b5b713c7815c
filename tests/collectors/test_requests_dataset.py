"""Hive-partitioned Parquet request records read as one input, with the window pushed down
to partitions and row groups (pdprobe/collectors/requests_dataset.py, walk.partitioned).

The layouts are the producers' own: Spark's ``df.write.partitionBy("date", "hour")
.parquet(path)`` (apache/spark docs/sql-data-sources-parquet.md, "Partition Discovery":
``table/gender=male/country=US/data.parquet``; part files ``part-00000-<uuid>.c000.snappy
.parquet`` and a ``_SUCCESS`` marker from its commit protocol) and pyarrow's own
``pyarrow.dataset.write_dataset(..., partitioning_flavor="hive")`` (apache/arrow
python/pyarrow/dataset.py). Object storage is tested against moto's S3 server
(``moto.server.ThreadedMotoServer``) on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from pdprobe.cli.app import run
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.files import read_paths
from pdprobe.collectors.requests_dataset import partition_range, read_dataset
from pdprobe.collectors.time_window import TimeWindow
from pdprobe.collectors.walk import DatasetRef, partitioned, uri_of, walk_paths
from pdprobe.errors import InputError

T0 = 1796040000  # 2026-11-30T12:00:00Z
HOURS = 6
PER_HOUR = 2000
ROW_GROUP = 500  # four row groups per hour file


def _hour_table(h: int, time_type: pa.DataType | None = None) -> pa.Table:
    rng = np.random.default_rng(h)
    n = PER_HOUR
    ts = np.sort(T0 + 3600 * h + rng.uniform(0, 3600, n))
    arrival = (pa.array(ts) if time_type is None
               else pa.array((ts * 1000).astype("int64")).cast(time_type))
    return pa.table({
        "arrival_ts": arrival,
        "prompt_tokens": rng.integers(500, 1500, n),
        "output_tokens": rng.integers(100, 300, n),
        "prefill_instance": rng.choice(["prefill-0", "prefill-1"], n),
        "decode_instance": rng.choice(["decode-0", "decode-1"], n),
        "ttft_s": rng.uniform(0.1, 0.3, n),
        "status": ["stop"] * n,
    })


def write_spark_layout(root: Path, hours: int = HOURS) -> Path:
    """What Spark's partitionBy("date", "hour") writes: one part file per partition, a
    _SUCCESS marker at the root."""
    for h in range(hours):
        folder = root / "date=2026-11-30" / f"hour={12 + h}"
        folder.mkdir(parents=True)
        pq.write_table(_hour_table(h), folder / "part-00000-8f1c.c000.snappy.parquet",
                       row_group_size=ROW_GROUP)
    (root / "_SUCCESS").write_bytes(b"")
    return root


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    return write_spark_layout(tmp_path / "requests")


def test_partition_names_give_time_ranges() -> None:
    day = T0 + 12 * 3600.0  # 2026-12-01T00:00Z
    assert partition_range({"date": "2026-11-30", "hour": 13}) == (T0 + 3600, T0 + 7200)
    assert partition_range({"dt": "20261130"}) == (day - 86400, day)
    assert partition_range({"dt": "2026-11-30-13"}) == (T0 + 3600, T0 + 7200)
    assert partition_range({"year": 2026, "month": 11, "day": 30, "hour": "12",
                            "minute": 5}) == (T0 + 300, T0 + 360)
    assert partition_range({"year": "2026", "month": "11"}) == (day - 30 * 86400, day)
    assert partition_range({"hour": 13}) is None  # an hour of which day?
    assert partition_range({"region": "eu"}) is None
    assert partition_range({"date": "yesterday"}) is None


def test_a_partitioned_folder_is_one_input_beside_the_other_files(lake: Path) -> None:
    (lake.parent / "metrics.om").write_text("# EOF\n")
    found = walk_paths([lake.parent])
    assert [p.name for p, _ in found.files] == ["metrics.om"]  # _SUCCESS is a marker
    assert [(d.root, len(d.files), d.base_dir) for d in found.datasets] == [
        (str(lake), HOURS, str(lake))]
    # a partition folder named directly keeps the partition names above it
    files, refs = partitioned(lake / "date=2026-11-30",
                              sorted((lake / "date=2026-11-30").rglob("*.parquet")))
    assert not files and refs[0].base_dir == str(lake)


def test_non_parquet_members_stay_plain_inputs_and_excludes_apply(lake: Path) -> None:
    extra = lake / "date=2026-11-30" / "hour=12" / "notes.csv"
    extra.write_text("a,b\n1,2\n")
    found = walk_paths([lake], exclude=["*hour=13*"])
    assert [p for p, _ in found.files] == [extra]
    assert len(found.datasets[0].files) == HOURS - 1
    assert any("hour=13" in str(p) for p in found.excluded)


def test_the_dataset_is_one_source_with_one_set_of_notes(lake: Path) -> None:
    data = read_paths([lake])
    assert len(data.requests) == HOURS * PER_HOUR
    assert [s.path for s in data.sources] == [str(lake)]
    assert data.sources[0].format == "parquet-dataset"
    assert data.sources[0].notes[0] == ("Hive-partitioned Parquet dataset of 6 files "
                                        "(partitions date, hour)")
    assert {i.name for i in data.instances} == {"prefill-0", "prefill-1", "decode-0",
                                                "decode-1"}
    assert data.requests["arrival_ts"].is_monotonic_increasing
    assert set(data.requests["status"].unique()) == {"ok"}  # mapped as for one file


def test_an_hour_reads_only_its_partition_and_row_groups(lake: Path) -> None:
    window = TimeWindow(since_ts=T0 + 7200 + 900, until_ts=T0 + 7200 + 1800, text="w")
    done = read_dataset(DatasetRef(str(lake), tuple(str(p) for p in sorted(
        lake.rglob("*.parquet"))), str(lake)), ReadContext(window=window))
    push = done.pushdown
    assert push is not None and (push.files, push.files_read) == (HOURS, 1)
    assert push.row_groups == 4 and push.row_groups_read < 4
    assert done.partial.requests is not None
    ts = done.partial.requests["arrival_ts"]
    assert ts.min() <= T0 + 8100 and ts.max() >= T0 + 9000  # whole row groups: cut later
    # the same rows as cutting the whole dataset
    data = read_paths([lake], ReadContext(window=window))
    whole = read_paths([lake]).requests
    inside = whole[(whole.arrival_ts >= T0 + 8100) & (whole.arrival_ts <= T0 + 9000)]
    assert len(data.requests) == len(inside)
    note = data.notes[-1]
    assert note.startswith("window 2026-11-30T14:15:00Z to 2026-11-30T14:30:00Z (w)")
    assert f"of {HOURS * PER_HOUR - 5 * PER_HOUR:,} request records" in note
    assert "5 partition files not opened" in note


def test_a_length_ends_at_the_dataset_end_from_statistics(lake: Path) -> None:
    data = read_paths([lake], ReadContext(window=TimeWindow(length_s=3600, text="1h")))
    end = T0 + 3600 * HOURS
    assert data.requests["arrival_ts"].min() >= end - 3600 - 3600  # last hour (+ the edge)
    assert "opened 2 of 6 files" in data.sources[0].notes[1]


def test_timestamp_columns_from_pyarrow_write_dataset(tmp_path: Path) -> None:
    table = pa.concat_tables(_hour_table(h, pa.timestamp("ms", tz="UTC")) for h in range(3))
    table = table.append_column("date", pa.array(["2026-11-30"] * table.num_rows))
    hours = pa.compute.hour(table.column("arrival_ts"))
    table = table.append_column("hour", hours.cast(pa.int32()))
    ds.write_dataset(table, tmp_path / "lake", format="parquet",
                     partitioning=["date", "hour"], partitioning_flavor="hive",
                     max_rows_per_group=ROW_GROUP, min_rows_per_group=ROW_GROUP)
    window = TimeWindow(since_ts=T0 + 3600, until_ts=T0 + 3600 + 600, text="w")
    data = read_paths([tmp_path / "lake"], ReadContext(window=window))
    assert data.requests["arrival_ts"].between(T0 + 3600, T0 + 4200).all()
    assert len(data.requests) > 0
    assert "opened 1 of 3 files" in data.sources[0].notes[1]


def test_a_broken_part_file_is_one_line_naming_the_dataset(lake: Path) -> None:
    part = next(lake.rglob("*.parquet"))
    part.write_bytes(b"PAR1" + b"\0" * 64)
    with pytest.raises(InputError) as err:
        read_paths([lake])
    assert str(lake) in err.value.one_line() and "\n" not in err.value.one_line()


def test_a_uri_argument_survives_path() -> None:
    assert uri_of(Path("s3://bucket/lake/requests")) == "s3://bucket/lake/requests"
    assert uri_of(Path("relative/dir")) is None


# --- object storage (moto's S3 server on loopback) ----------------------------------------


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    moto_server = pytest.importorskip(
        "moto.server", reason="moto[server] is not installed (pip install -e '.[test]')")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_lake(s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    import pyarrow.fs as pafs

    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_REGION", "us-east-1"),
                        ("AWS_ENDPOINT_URL", f"http://{s3_endpoint}")):
        monkeypatch.setenv(name, value)
    local = write_spark_layout(tmp_path / "requests")
    s3 = pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http", access_key="testing",
                           secret_key="testing", region="us-east-1", allow_bucket_creation=True)
    bucket = f"lake-{os.getpid()}-{tmp_path.name[-6:].lower().replace('_', '-')}"
    s3.create_dir(bucket)
    pafs.copy_files(str(local), f"{bucket}/requests", source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=s3)
    return f"s3://{bucket}/requests/"


def test_object_storage_reads_the_same_with_the_window_pushed_down(s3_lake: str) -> None:
    window = TimeWindow(since_ts=T0 + 7200, until_ts=T0 + 7200 + 1800, text="w")
    data = read_paths([Path(s3_lake)], ReadContext(window=window))
    assert [s.path for s in data.sources] == [s3_lake.rstrip("/")]
    assert "opened 1 of 6 files" in data.sources[0].notes[1]
    assert data.requests["arrival_ts"].between(T0 + 7200, T0 + 9000).all()
    assert len(data.requests) > 0


def test_object_storage_through_the_cli(s3_lake: str, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    code = run(["diagnose", s3_lake, "--since", "1h", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code in (0, 1, 2, 3)
    assert report["input"]["sources"][0]["format"] == "parquet-dataset"
    assert report["workload"]["requests"] > 0


def test_a_missing_prefix_exits_3_in_one_line(s3_lake: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["diagnose", s3_lake + "nothing-here/"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and len(err) == 1 and "no Parquet files under this prefix" in err[0]


def test_a_window_outside_the_partitions_names_their_span(lake: Path) -> None:
    from pdprobe.errors import InsufficientDataError

    window = TimeWindow(since_ts=T0 + 86400, text="--since 2026-12-01T12:00:00Z")
    with pytest.raises(InsufficientDataError) as err:
        read_paths([lake], ReadContext(window=window))
    assert ("the capture spans 2026-11-30T12:00:00Z to 2026-11-30T18:00:00Z"
            in err.value.one_line())
