"""``--exclude`` (issue 15): folder members matching a glob are left out, with one grouped note;
a file named on the command line is always read."""

from __future__ import annotations

import json
from pathlib import Path

from pdprobe.collectors.files import read_paths
from pdprobe.collectors.walk import excluded, walk_paths

T0 = 1_750_000_000.0


def _requests(path: Path, n: int = 30) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"arrival_ts": T0 + i, "prompt_tokens": 100 + i, "output_tokens": 10}
            for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_patterns_match_the_relative_path_or_the_name() -> None:
    assert excluded("old/a.jsonl", "a.jsonl", ["old/*"])
    assert excluded("x/y/a.log.1", "a.log.1", ["*.log.1"])  # by name, at any depth
    assert excluded("x/y/a.log.1", "a.log.1", ["x/*"])  # fnmatch: * crosses /
    assert excluded("a.jsonl", "a.jsonl", ["[ab].jsonl"])
    assert not excluded("new/a.jsonl", "a.jsonl", ["old/*", "*.log"])
    assert not excluded("a.jsonl", "a.jsonl", [])


def test_walk_leaves_out_matches_but_never_a_named_file(tmp_path: Path) -> None:
    keep = _requests(tmp_path / "cap" / "keep.jsonl")
    old = _requests(tmp_path / "cap" / "old" / "r.jsonl")
    rotated = _requests(tmp_path / "cap" / "deep" / "r.jsonl.1")
    found = walk_paths([tmp_path / "cap"], ["old/*", "*.1"])
    assert [p for p, _ in found.files] == [keep]
    assert found.excluded == [rotated, old]
    # named directly: read whatever the patterns say
    found = walk_paths([tmp_path / "cap", old], ["old/*", "*.1"])
    assert {p for p, _ in found.files} == {keep, old}
    assert found.excluded == [rotated]


def test_read_paths_notes_the_excluded_files_once(tmp_path: Path) -> None:
    _requests(tmp_path / "keep.jsonl")
    for i in range(7):
        _requests(tmp_path / "old" / f"r{i}.jsonl")
    ds = read_paths([tmp_path], exclude=("old/*",))
    assert len(ds.requests) == 30
    notes = [n for n in ds.notes if "--exclude" in n]
    assert len(notes) == 1, ds.notes
    assert notes[0].startswith("left out 7 files matching --exclude 'old/*': ")
    assert notes[0].endswith(" and 2 more")
    assert not any("old" in w for w in ds.warnings)
    assert len(read_paths([tmp_path]).requests) == 8 * 30
