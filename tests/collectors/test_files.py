"""Folder reading (issue 14): every unusable member is a warning, nothing aborts the folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pdprobe.collectors import files
from pdprobe.collectors.files import own_report, read_paths, walk_paths
from pdprobe.errors import InputError, InsufficientDataError

T0 = 1_750_000_000.0


def _requests(path: Path, n: int = 30, same_instant: bool = False) -> Path:
    rows = [{"arrival_ts": T0 if same_instant else T0 + i, "prompt_tokens": 100 + i,
             "output_tokens": 10} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_walk_names_what_it_does_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    _requests(tmp_path / "good.jsonl")
    os.mkfifo(tmp_path / "stream.jsonl")
    (tmp_path / "gone.jsonl").symlink_to(tmp_path / "nowhere")
    (tmp_path / "elsewhere").symlink_to(tmp_path.parent)
    (tmp_path / ".hidden.jsonl").write_text("x")
    (tmp_path / "locked").mkdir()
    real_walk = os.walk

    def walk(top: str, onerror=None, followlinks: bool = False):  # type: ignore[no-untyped-def]
        # running as root, permissions cannot make a folder unreadable: simulate scandir's error
        for entry in real_walk(top, onerror=onerror, followlinks=followlinks):
            if entry[0].endswith("locked"):
                assert onerror is not None
                onerror(PermissionError(13, "Permission denied", entry[0]))
                continue
            yield entry

    monkeypatch.setattr(files.os, "walk", walk)
    found = walk_paths([tmp_path])
    assert [p.name for p, _ in found.files] == ["good.jsonl"]
    text = "\n".join(found.warnings)
    assert f"skipped {tmp_path / 'stream.jsonl'}: a FIFO" in text
    assert f"skipped {tmp_path / 'gone.jsonl'}: a symbolic link to nothing" in text
    assert f"skipped {tmp_path / 'elsewhere'}: a symbolic link to a folder" in text
    assert f"skipped folder {tmp_path / 'locked'}: cannot read it (Permission denied)" in text
    assert ".hidden" not in text


def test_broken_members_are_warnings_and_a_lone_one_is_its_own_error(tmp_path: Path) -> None:
    _requests(tmp_path / "good.jsonl")
    (tmp_path / "cut.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 40)
    (tmp_path / "metrics.prom").write_text("# TYPE x gauge\nx{a=\"b\" 1 2\n")
    ds = read_paths([tmp_path])
    assert len(ds.requests) == 30
    text = "\n".join(ds.warnings)
    assert f"skipped {tmp_path / 'cut.jsonl.gz'}: " in text
    assert f"skipped {tmp_path / 'metrics.prom'}: no metric sample line" in text
    with pytest.raises(InputError, match="no metric sample line"):
        read_paths([tmp_path / "metrics.prom"])
    with pytest.raises(InsufficientDataError, match=r"2 problem\(s\)"):
        read_paths([tmp_path / "metrics.prom", tmp_path / "cut.jsonl.gz"])


def test_own_reports_are_recognised(tmp_path: Path) -> None:
    heads = {"r.json": '{\n  "schema_version": 1,\n  "status": "ok",\n',
             "r.md": "# pdprobe report: OK\n",
             "r.prom": "# HELP pdprobe_status Diagnosis status\n",
             "r.html": '<!DOCTYPE html>\n<html>\n<meta name="generator" content="pdprobe 0.1">',
             "r.txt": "OK  no finding\nthan needed\nwindow                     2025-06-02\n"}
    for name, head in heads.items():
        (tmp_path / name).write_text(head)
        assert own_report(tmp_path / name), name
    assert not own_report(_requests(tmp_path / "good.jsonl"))
    os.mkfifo(tmp_path / "fifo")
    assert not own_report(tmp_path / "fifo")  # and does not block


def test_a_zero_second_window_is_said(tmp_path: Path) -> None:
    ds = read_paths([_requests(tmp_path / "r.jsonl", same_instant=True)])
    assert any("same instant (a 0 s window)" in w for w in ds.warnings), ds.warnings
    ds = read_paths([_requests(tmp_path / "ok.jsonl")])
    assert not any("0 s window" in w for w in ds.warnings)
