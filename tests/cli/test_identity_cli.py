"""``--alias``/``--aliases`` end to end: matches by hand, and one-line errors for bad mappings."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROWS = 40
T0 = 1_750_000_000.0


def _records(path: Path, prefill: str, decode: str) -> Path:
    lines = [json.dumps({"arrival_ts": T0 + i, "prompt_tokens": 500, "output_tokens": 50,
                         "prefill_instance": prefill, "decode_instance": decode,
                         "ttft_s": 0.2, "tpot_s": 0.02})
             for i in range(ROWS)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _metrics(path: Path, instance: str, role: str) -> Path:
    text = ["# TYPE vllm:num_requests_running gauge"]
    text += [f'vllm:num_requests_running{{instance="{instance}",role="{role}"}} 3 {T0 + 15 * i}'
             for i in range(4)]
    path.write_bytes(gzip.compress(("\n".join(text) + "\n# EOF\n").encode()))
    return path


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pdprobe", "diagnose", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    folder = tmp_path / "cap"
    folder.mkdir()
    _records(folder / "requests.jsonl", "gw-p", "gw-d")
    _metrics(folder / "p.om.gz", "10.0.0.5:8000", "prefill")
    _metrics(folder / "d.om.gz", "10.0.0.6:8000", "decode")
    return folder


def _report(run: subprocess.CompletedProcess[str]) -> dict:
    assert run.returncode in (0, 1, 2), run.stderr
    return json.loads(run.stdout)


def test_without_aliases_the_gateway_names_are_extra_instances(capture: Path) -> None:
    report = _report(_run(capture, "-f", "json"))
    assert report["instances"]["prefill"] == 2  # gw-p (column) and 10.0.0.5:8000 (label)


def test_alias_options_make_one_cluster(capture: Path) -> None:
    report = _report(_run(capture, "-f", "json", "--alias", "gw-p=10.0.0.5:8000",
                          "--alias", "gw-d=10.0.0.6:8000"))
    assert report["instances"] == {"prefill": 1, "decode": 1, "unknown": 0}
    ident = {e["name"]: e for e in report["identity"]}
    assert {a["name"]: a["how"] for a in ident["10.0.0.5:8000"]["aliases"]}["gw-p"] == "--alias"


def test_alias_file_makes_one_cluster(capture: Path, tmp_path: Path) -> None:
    mapping = tmp_path / "names.toml"
    mapping.write_text('[aliases]\n"gw-p" = "10.0.0.5:8000"\n\n'
                       '[instances."10.0.0.6:8000"]\nnames = ["gw-d"]\n')
    report = _report(_run(capture, "-f", "json", "--aliases", mapping))
    assert report["instances"] == {"prefill": 1, "decode": 1, "unknown": 0}


def test_verbose_text_shows_the_identity_table(capture: Path) -> None:
    run = _run(capture, "-v", "--alias", "gw-p=10.0.0.5:8000")
    assert "IDENTITY" in run.stdout
    assert "gw-p in requests.jsonl (--alias)" in run.stdout


@pytest.mark.parametrize("content, message", [
    ('[aliases]\n"gw-p" = "10.9.9.9:8000"\n', "'10.9.9.9:8000' is not named by any input"),
    ('[instances."10.0.0.5:8000"]\nnames = ["gw-p"]\n[instances."10.0.0.6:8000"]\n'
     'names = ["gw-p"]\n', "'gw-p' is mapped to two instances"),
    ("[aliases\n", "not valid TOML"),
])
def test_bad_mapping_file_is_one_line_and_exit_3(capture: Path, tmp_path: Path, content: str,
                                                 message: str) -> None:
    mapping = tmp_path / "names.toml"
    mapping.write_text(content)
    out = tmp_path / "report.json"
    run = _run(capture, "-f", "json", "-o", out, "--aliases", mapping)
    assert run.returncode == 3
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert message in lines[0]
    assert "Traceback" not in run.stderr
    assert not out.exists()


def test_alias_without_equals_is_a_usage_error(capture: Path) -> None:
    run = _run(capture, "--alias", "gw-p")
    assert run.returncode == 3
    assert "NAME=INSTANCE" in run.stderr
