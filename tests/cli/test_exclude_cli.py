"""``pdprobe diagnose --exclude`` and ``PDPROBE_DIAGNOSE_EXCLUDE`` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

T0 = 1_750_000_000.0


def _run(*args: str | Path, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "pdprobe", "diagnose", *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=full_env)


def _capture(folder: Path) -> Path:
    rows = [{"arrival_ts": T0 + i, "prompt_tokens": 500, "output_tokens": 50,
             "ttft_s": 0.2, "tpot_s": 0.02} for i in range(40)]
    (folder / "old").mkdir(parents=True)
    for path in (folder / "requests.jsonl", folder / "old" / "requests.jsonl"):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "junk.bin").write_bytes(b"\x00\x01" * 100)
    return folder


def _requests(result: subprocess.CompletedProcess[str]) -> int:
    assert result.returncode in (0, 1, 2), result.stderr
    return int(json.loads(result.stdout)["workload"]["requests"])


def test_exclude_option_and_environment(tmp_path: Path) -> None:
    folder = _capture(tmp_path / "cap")
    everything = _run(folder, "-f", "json")
    assert any("junk.bin" in w for w in json.loads(everything.stdout)["warnings"])
    assert _requests(everything) == 80
    one = _run(folder, "-f", "json", "--exclude", "old/*", "--exclude", "*.bin")
    assert _requests(one) == 40
    report = json.loads(one.stdout)
    assert not any("junk.bin" in w for w in report["warnings"])  # not read: no warning
    assert [n for n in report["notes"] if "--exclude" in n] == [
        f"left out 2 files matching --exclude 'old/*', '*.bin': {folder / 'junk.bin'}, "
        f"{folder / 'old' / 'requests.jsonl'}"]
    env = _run(folder, "-f", "json", env={"PDPROBE_DIAGNOSE_EXCLUDE": "old/*"})
    assert _requests(env) == 40


def test_exclude_is_for_folders_not_prometheus(tmp_path: Path) -> None:
    res = _run("--prometheus", "http://127.0.0.1:9", "--exclude", "*.log")
    assert res.returncode == 3
    assert "--exclude" in res.stderr and "Traceback" not in res.stderr
