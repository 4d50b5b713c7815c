"""``pdprobe simulate`` on the command line: exit codes, one-line errors, the summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pdprobe.cli.app import main


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_simulate_writes_a_capture_and_prints_a_summary(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = _run(["simulate", "-o", str(tmp_path / "c"), "--prefill", "2", "--decode",
                           "1", "--rate", "3", "--duration", "60", "--seed", "5",
                           "--fault", "straggler:role=prefill,index=1,factor=2",
                           "--engine", "sglang", "--naming", "dynamo"], capsys)
    assert code == 0
    assert "simulated 2P/1D" in out and "SLO" in out and "TTFT" in out
    assert (tmp_path / "c" / "scenario.toml").read_text().count("straggler") == 1
    assert 'worker_type="decode"' in (tmp_path / "c" / "metrics.om").read_text()


@pytest.mark.parametrize(("args", "message"), [
    (["--profile", "gpt-9"], "unknown profile 'gpt-9'"),
    (["--decode", "0"], "impossible cluster: 0 decode"),
    (["--fault", "no-rdma", "--fault", "rdma-retransmits"], "contradictory faults"),
    (["--prompt", "weird:3"], "unknown distribution"),
    (["--trace", "/nonexistent/trace.csv"], "no such trace file"),
])
def test_bad_input_exits_3_with_one_line_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    out_dir = tmp_path / "c"
    code, _out, err = _run(["simulate", "-o", str(out_dir), "--duration", "30", *args], capsys)
    assert code == 3
    errors = [ln for ln in err.splitlines() if ln.startswith("pdprobe: error:")]
    assert len(errors) == 1 and message in errors[0]
    assert "Traceback" not in err
    assert not out_dir.exists()


@pytest.mark.parametrize(("rows", "message"), [
    ('{"timestamp": 0, "input_length": -4, "output_length": 10}\n', "trace.jsonl"),
    ('{"timestamp": 0, "input_length": 40, "output_length": 10}\n'
     '{"timestamp": 5, "input_length": -4, "output_length": 10}\n', "negative"),
])
def test_traces_without_usable_rows_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           rows: str, message: str) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(rows)
    code, _, err = _run(["simulate", "-o", str(tmp_path / "c"), "--trace", str(trace)], capsys)
    errors = [ln for ln in err.splitlines() if ln.startswith("pdprobe: error:")]
    assert code == 3 and len(errors) == 1 and message in errors[0]
    assert not (tmp_path / "c").exists()


def test_help_does_not_import_pandas() -> None:
    done = subprocess.run([sys.executable, "-c", "import sys; from pdprobe.cli.app import app; "
                           "import pdprobe.cli.simulate; "
                           "print('pandas' in sys.modules, 'scipy' in sys.modules)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False False"
