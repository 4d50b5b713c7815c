"""``pdprobe simulate --benchmark-format NAME``: the records as a load generator's output."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdprobe.cli.app import main
from pdprobe.sim.config import SimConfig


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_simulate_then_diagnose_the_benchmark_file(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "c"
    code, _out, err = _run(["simulate", "-o", str(out_dir), "--rate", "3", "--duration", "60",
                            "--benchmark-format", "vllm-bench"], capsys)
    assert code == 0, err
    result = out_dir / "vllm_bench_serve.json"
    assert result.exists() and not (out_dir / "requests.jsonl").exists()
    scenario = SimConfig.from_toml(out_dir / "scenario.toml")
    assert scenario.benchmark_format == "vllm-bench"  # the re-run writes the same layout
    code, out, err = _run(["diagnose", str(result)], capsys)
    assert code in (0, 1, 2), err
    words = " ".join(out.split())
    assert "vllm-bench" in words and "no instance names" in words


def test_unknown_benchmark_format_is_a_usage_error(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _run(["simulate", "-o", str(tmp_path / "c"), "--benchmark-format",
                            "locust"], capsys)
    assert code == 3 and "locust" in err and "Traceback" not in err
