"""Capture files: one Parquet file, several tables, atomic, recognised by content."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdprobe.collectors.base import READERS, ReadContext, reader_for
from pdprobe.collectors.capture import (
    FORMAT_VERSION,
    read_capture,
    read_metadata,
    write_capture,
)
from pdprobe.collectors.fuse import fuse
from pdprobe.collectors.io import CAPTURE_METADATA_KEY, sniff
from pdprobe.dataset import (
    ROLE_FROM_LABEL,
    ROLE_FROM_NAME,
    Partial,
    RoleHint,
    SourceInfo,
)
from pdprobe.errors import InputError, UsageError


def _partial() -> Partial:
    metrics = pd.DataFrame({
        "ts": [10.0, 10.0, 25.0, 25.0],
        "instance": ["p:1", "d:1", "p:1", "d:1"],
        "signal": ["requests_waiting", "ttft_s", "requests_waiting", "ttft_s"],
        "kind": ["gauge", "bucket", "gauge", "bucket"],
        "le": [np.nan, np.inf, np.nan, np.inf],
        "value": [3.0, 10.0, 4.0, 12.0],
    })
    network = pd.DataFrame({"ts": [10.0], "node": ["h1"], "device": ["mlx5_0"], "port": ["1"],
                            "signal": ["rdma_tx_bytes_total"], "kind": ["counter"],
                            "value": [1e12]})
    events = pd.DataFrame({"ts": [12.0], "instance": ["d:1"], "event": ["kv_transfer_failed"],
                           "detail": [None], "source": ["x.log:3"]})
    requests = pd.DataFrame({"arrival_ts": [1.0, 2.0], "prompt_tokens": [100, 200],
                             "output_tokens": [5, 7], "decode_instance": ["d:1", None]})
    return Partial(
        source=SourceInfo(path="http://prom:9090", kind="prometheus", format="prometheus-api",
                          rows=8, notes=("window a to b",)),
        metrics=metrics, network=network, events=events, requests=requests,
        request_columns=frozenset({"arrival_ts", "prompt_tokens", "output_tokens",
                                   "decode_instance"}),
        role_hints=(RoleHint("p:1", "prefill", "label role='prefill'", ROLE_FROM_LABEL, "q"),
                    RoleHint("d:1", "decode", "name pattern in pod 'dec'", ROLE_FROM_NAME, "q")),
        nodes={"p:1": "h1"}, engines={"p:1": "vllm", "d:1": "vllm"},
        warnings=("no node_infiniband_* series",),
    )


def test_roundtrip_keeps_every_table_and_fact(tmp_path: Path) -> None:
    original = _partial()
    info = write_capture(original, tmp_path / "cap.parquet", {"queries": [{"promql": "up"}]})
    assert info.rows == {"metrics": 4, "network": 1, "events": 1, "requests": 2}
    back = read_capture(info.path, ReadContext())
    for table in ("metrics", "network", "events", "requests"):
        a = getattr(fuse([Partial(source=original.source, **{table: getattr(original, table)})]),
                    table)
        b = getattr(fuse([Partial(source=back.source, **{table: getattr(back, table)})]), table)
        pd.testing.assert_frame_equal(a, b)
    assert back.requests["prompt_tokens"].dtype == "int64"
    assert back.requests["decode_instance"].isna().tolist() == [False, True]
    assert back.role_hints == original.role_hints
    assert back.nodes == original.nodes and back.engines == original.engines
    assert back.warnings == original.warnings
    assert back.request_columns == original.request_columns
    assert back.source.kind == "capture" and back.source.path == str(info.path)
    assert back.source.notes[0].startswith("captured from http://prom:9090 at ")
    ds_a, ds_b = fuse([original]), fuse([back])
    assert ds_a.instances == ds_b.instances


def test_sniff_and_registry_recognise_a_capture(tmp_path: Path) -> None:
    info = write_capture(_partial(), tmp_path / "c.parquet")
    assert sniff(info.path).kind == "capture"
    assert READERS["capture"] == "pdprobe.collectors.capture:read_capture"
    assert reader_for("capture")(info.path, ReadContext()).metrics is not None
    plain = tmp_path / "plain.parquet"
    pd.DataFrame({"arrival_ts": [1.0], "prompt_tokens": [1], "output_tokens": [1]}).to_parquet(plain)
    assert sniff(plain).kind == "requests"


def test_one_parquet_table_with_a_discriminator(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    info = write_capture(_partial(), tmp_path / "c.parquet")
    table = pq.read_table(info.path)
    assert table.column("table").to_pylist().count("metrics") == 4
    assert {"ts", "instance", "le", "node", "event", "prompt_tokens"} <= set(table.column_names)
    doc = json.loads(table.schema.metadata[CAPTURE_METADATA_KEY])
    assert doc["format_version"] == FORMAT_VERSION and doc["tables"]["network"] == 1


def test_folder_output_gets_a_timestamped_name(tmp_path: Path) -> None:
    info = write_capture(_partial(), tmp_path)
    assert info.path.parent == tmp_path and info.path.name.startswith("pdprobe-capture-")
    with pytest.raises(UsageError, match="does not exist"):
        write_capture(_partial(), tmp_path / "nope" / "c.parquet")


def test_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        write_capture(_partial(), tmp_path / "c.parquet")
    assert os.listdir(tmp_path) == []  # neither the file nor a temporary is left


def test_credentials_never_reach_the_file(tmp_path: Path) -> None:
    part = _partial()
    with pytest.raises(AssertionError, match="credential"):
        write_capture(part, tmp_path / "c.parquet", secrets=("window a",))
    assert not (tmp_path / "c.parquet").exists()


def test_truncated_and_foreign_files_are_input_errors(tmp_path: Path) -> None:
    info = write_capture(_partial(), tmp_path / "c.parquet")
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(info.path.read_bytes()[:-200])
    with pytest.raises(InputError, match=r"cut.parquet: not a readable Parquet file"):
        read_capture(cut, ReadContext())
    plain = tmp_path / "plain.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(plain)
    with pytest.raises(InputError, match="without pdprobe capture metadata"):
        read_metadata(plain)


def test_newer_format_asks_for_an_upgrade(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    info = write_capture(_partial(), tmp_path / "c.parquet")
    table = pq.read_table(info.path)
    doc = json.loads(table.schema.metadata[CAPTURE_METADATA_KEY])
    doc["format_version"] = FORMAT_VERSION + 1
    newer = tmp_path / "newer.parquet"
    pq.write_table(table.replace_schema_metadata({CAPTURE_METADATA_KEY: json.dumps(doc)}), newer)
    with pytest.raises(InputError, match="newer than this pdprobe reads"):
        read_capture(newer, ReadContext())


def test_roundtrip_keeps_the_deployment_table(tmp_path: Path) -> None:
    """Deployment rows (a planner's replica counts) survive a capture."""
    dep = pd.DataFrame({"ts": [1.0, 2.0], "deployment": ["dyn", "dyn"],
                        "signal": ["planner_decode_replicas"] * 2, "kind": ["gauge"] * 2,
                        "value": [2.0, 4.0]})
    original = Partial(source=_partial().source, metrics=_partial().metrics, deployment=dep)
    info = write_capture(original, tmp_path / "cap.parquet", {})
    assert info.rows["deployment"] == 2
    back = read_capture(info.path, ReadContext())
    assert back.deployment is not None
    assert back.deployment["value"].tolist() == [2.0, 4.0]
    assert set(back.deployment["deployment"]) == {"dyn"}
