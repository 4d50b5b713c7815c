"""CLI behaviour that runbooks rely on: exit codes, one-line errors, light --help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pdprobe.cli.common import FailOn, exit_code_for
from pdprobe.cli.live_options import parse_duration, parse_time
from pdprobe.errors import UsageError


def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PDPROBE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "pdprobe", *args], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=120)


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pdprobe: error: ")
    return lines[0]


def test_help_does_not_import_pandas_or_scipy() -> None:
    code = ("import sys; from pdprobe.cli.app import app; "
            "import typer.testing as t; r = t.CliRunner().invoke(app, ['--help']); "
            "assert r.exit_code == 0, r.output; "
            "bad = [m for m in ('pandas', 'scipy', 'pyarrow') if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_bad_option_exits_3_with_one_line() -> None:
    line = assert_one_line_error(run("diagnose", "--no-such-option"))
    assert "--no-such-option" in line


def test_missing_path_exits_3(tmp_path: Path) -> None:
    line = assert_one_line_error(run("diagnose", str(tmp_path / "nope.jsonl")))
    assert "nope.jsonl" in line


@pytest.mark.parametrize(("name", "content"), [("empty.jsonl", b""), ("blob.csv", b"\x00\xff" * 64),
                                                ("prose.txt", b"just some notes\n")])
def test_unusable_named_file_exits_3_and_leaves_no_output(tmp_path: Path, name: str, content: bytes) -> None:
    bad = tmp_path / name
    bad.write_bytes(content)
    out = tmp_path / "report.json"
    line = assert_one_line_error(run("diagnose", str(bad), "--format", "json", "-o", str(out)))
    assert name in line
    assert not out.exists()
    assert not list(tmp_path.glob(".report.json.*"))


def test_option_reads_environment_variable(tmp_path: Path) -> None:
    line = assert_one_line_error(run("diagnose", str(tmp_path / "x"), env={"PDPROBE_FORMAT": "yaml"}))
    assert "yaml" in line


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0 and result.stdout.startswith("pdprobe ")


class _R:
    def __init__(self, status: str) -> None:
        self.status = status


@pytest.mark.parametrize(("status", "fail_on", "code"), [
    ("ok", FailOn.warning, 0), ("warning", FailOn.warning, 1), ("warning", FailOn.critical, 0),
    ("critical", FailOn.warning, 2), ("critical", FailOn.critical, 2), ("unknown", FailOn.warning, 3),
])
def test_exit_codes_follow_nagios_and_fail_on(status: str, fail_on: FailOn, code: int) -> None:
    assert exit_code_for(_R(status), fail_on) == code  # type: ignore[arg-type]


def test_durations_and_times() -> None:
    assert parse_duration("30m", "--since") == 1800
    assert parse_duration("2h", "--since") == 7200
    assert parse_duration("900", "--since") == 900
    # one syntax for --window, --since, --interval, --step: what reports print parses back
    for text, seconds in (("90s", 90), ("5m", 300), ("6m30s", 390), ("1h", 3600),
                          ("2h05m", 7500), ("1.5h", 5400), ("250ms", 0.25), ("1d04h", 100800),
                          (" 15 s", 15), ("0.5", 0.5)):
        assert parse_duration(text, "--window") == seconds, text
    assert parse_time("2026-11-30T14:00:00Z", "--until") == 1796047200.0
    assert parse_time("1796047200", "--until") == 1796047200.0
    for bad in ("-5m", "soon", "30s5m", "5m5m", "5 minutes", "", "m", "nan", "inf", "1e3",
                "0", "0s"):
        with pytest.raises(UsageError):
            parse_duration(bad, "--since")
    with pytest.raises(UsageError):
        parse_time("yesterday", "--until")


def test_json_contract_fields_on_sample_when_present(tmp_path: Path) -> None:
    from pdprobe.services.diagnose import bundled_sample

    if not bundled_sample().is_dir():
        pytest.skip("bundled sample not generated yet")
    result = run("diagnose", "--format", "json", cwd=tmp_path)
    assert result.returncode in (0, 1, 2), result.stderr
    report = json.loads(result.stdout)
    for key in ("schema_version", "status", "window", "workload", "instances", "ratio", "findings"):
        assert key in report
    assert "bundled sample" in result.stderr


def test_output_file_gets_the_normal_mode_not_0600(tmp_path: Path) -> None:
    from pdprobe.cli.common import write_output
    from pdprobe.collectors.io import default_file_mode

    out = tmp_path / "report.md"
    write_output("# report\n", out)
    assert out.read_text() == "# report\n"
    assert out.stat().st_mode & 0o777 == default_file_mode()
    assert not list(tmp_path.glob(".report.md.*"))


def test_requests_at_one_instant_give_a_missing_rate_with_its_reason(tmp_path: Path) -> None:
    rows = [{"arrival_ts": 1.7e9, "prompt_tokens": p, "output_tokens": 20} for p in (100, 300)]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run("diagnose", str(path), "--format", "json")
    # two lengths and no timings: no rule can judge, so UNKNOWN, and stderr says why
    assert result.returncode == 3 and "could not judge: too little data" in result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "unknown" and report["status_reason"]
    assert report["workload"]["arrival_rate_rps"] is None
    assert "one instant" in report["missing"]["workload.arrival_rate_rps"]


def test_help_states_the_slo_defaults_the_model_uses() -> None:
    from pdprobe.analysis.slo import DEFAULT_SLO_TARGET, DEFAULT_SLO_TPOT_S, DEFAULT_SLO_TTFT_S
    from pdprobe.cli.common import SLO_TPOT_DEFAULT_HELP, SLO_TTFT_DEFAULT_HELP

    assert f"{DEFAULT_SLO_TTFT_S:g} s" == SLO_TTFT_DEFAULT_HELP
    assert f"{DEFAULT_SLO_TPOT_S:g} s" == SLO_TPOT_DEFAULT_HELP
    out = " ".join(run("diagnose", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert f"default: ({SLO_TTFT_DEFAULT_HELP})" in out
    assert f"default: ({SLO_TPOT_DEFAULT_HELP})" in out
    assert f"default: {DEFAULT_SLO_TARGET:g}" in out
    assert "default: 5m" in out  # --window, in the duration syntax


def test_usage_errors_point_to_the_subcommand_help() -> None:
    line = assert_one_line_error(run("diagnose", "--no-such-option"))
    assert line.endswith("(see 'pdprobe diagnose --help')"), line
    line = assert_one_line_error(run("no-such-command"))
    assert line.endswith("(see 'pdprobe --help')"), line


def test_shell_completion_is_offered() -> None:
    out = run("--help").stdout
    assert "--install-completion" in out and "--show-completion" in out


def test_per_command_format_variables(tmp_path: Path) -> None:
    """PDPROBE_<COMMAND>_FORMAT first; the shared PDPROBE_FORMAT only where its value is one
    of the command's formats (PDPROBE_FORMAT=html must not break ratio or diff)."""
    args = ("ratio", "--prompt-mean", "2000", "--output-mean", "200", "--rate", "4",
            "--profile", "llama3-70b-h100-tp4")
    res = run(*args, env={"PDPROBE_FORMAT": "html"})
    assert res.returncode == 0, res.stderr
    assert not res.stdout.lstrip().startswith("{")  # text, the default
    assert json.loads(run(*args, env={"PDPROBE_FORMAT": "json"}).stdout)
    assert json.loads(run(*args, env={"PDPROBE_FORMAT": "markdown",
                                      "PDPROBE_RATIO_FORMAT": "json"}).stdout)
    res = run(*args, env={"PDPROBE_RATIO_FORMAT": "html"})  # its own variable is checked
    assert_one_line_error(res)


def _in_fresh_process(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**environ, **env}, check=True, timeout=60)
    return proc.stdout.strip()


def test_cli_start_imports_no_numpy() -> None:
    """The process defaults act only if numpy is imported after them: the CLI's own start
    (everything ``entry`` imports before it runs a command) must not import it."""
    out = _in_fresh_process("import sys, pdprobe.cli.app\nprint('numpy' in sys.modules)")
    assert out == "False"


@pytest.mark.parametrize(("exported", "expected"), [(None, "False"), ("1", "True")])
def test_process_defaults_turn_numpy_hugepages_off_unless_exported(
        exported: str | None, expected: str) -> None:
    """``entry`` turns numpy's transparent-huge-page madvise off (short-lived temporaries pay
    the 2 MB faults without the TLB gain; docs/performance.md); a user's export wins."""
    code = ("from pdprobe.cli.app import set_process_defaults\nset_process_defaults()\n"
            "import numpy\nprint(numpy._core.multiarray._get_madvise_hugepage())")
    env = {} if exported is None else {"NUMPY_MADVISE_HUGEPAGE": exported}
    assert _in_fresh_process(code, **env) == expected


_OPENBLAS_THREADS = """
import ctypes, sys
if sys.argv[1] == "defaults":
    from pdprobe.cli.app import set_process_defaults
    set_process_defaults()
import numpy, scipy.linalg
paths = sorted({w for w in open("/proc/self/maps").read().split() if "openblas" in w})
for path in paths:
    lib = ctypes.CDLL(path)
    for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                 "openblas_get_num_threads64_", "openblas_get_num_threads"):
        if hasattr(lib, name):
            print(getattr(lib, name)())
            break
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
@pytest.mark.parametrize(("exported", "expected"), [(None, "1"), ("2", "2")])
def test_process_defaults_give_openblas_one_thread_unless_exported(
        exported: str | None, expected: str) -> None:
    """``entry`` keeps numpy's OpenBLAS to one thread (its idle threads spin on the cores
    pdprobe's own threads use; docs/performance.md); a user's export wins."""
    env = {} if exported is None else {"OPENBLAS_NUM_THREADS": exported}
    environ = {k: v for k, v in os.environ.items()
               if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}

    def counts(mode: str) -> set[str]:
        proc = subprocess.run([sys.executable, "-c", _OPENBLAS_THREADS, mode],
                              capture_output=True, text=True, env={**environ, **env},
                              check=True, timeout=60)
        return set(proc.stdout.split())

    control = counts("control")  # OpenBLAS's own choice: a thread per core
    if not control:
        pytest.skip("numpy and scipy are not linked with OpenBLAS here")
    if exported is None and control == {"1"}:
        pytest.skip("OpenBLAS uses one thread here anyway (one core)")
    assert counts("defaults") == {expected}


def test_entry_applies_the_process_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    from pdprobe.cli import app as app_module

    def leave(code: int) -> None:
        raise SystemExit(code)

    for name in ("NUMPY_MADVISE_HUGEPAGE", "OPENBLAS_NUM_THREADS", "ARROW_DEFAULT_MEMORY_POOL"):
        monkeypatch.setenv(name, "")  # recorded, so undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setattr(app_module, "run", lambda: 0)
    monkeypatch.setattr(app_module, "keep_freed_memory", lambda: True)  # not in pytest's process
    monkeypatch.setattr(app_module.os, "_exit", leave)
    with pytest.raises(SystemExit):
        app_module.entry()
    assert os.environ["NUMPY_MADVISE_HUGEPAGE"] == "0"
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    assert dict(app_module.arrow_pool_default()).items() <= os.environ.items()
