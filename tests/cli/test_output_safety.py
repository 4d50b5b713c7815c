"""The one output writer (``cli/common.write_output``): no data loss, no leftovers (issue 14).

It refuses to replace an input of the run (also one inside an input folder), a symbolic link,
a FIFO, a device or a folder; a failed or interrupted write leaves neither a half file nor its
temp file; a closed stdout or a signal ends the run with one line and a clear exit code.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pdprobe.cli.app import run
from pdprobe.cli.common import write_output
from pdprobe.errors import PdprobeError, UsageError

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "tests" / "fixtures" / "requests" / "mooncake_snippet.jsonl"
OLD = "old content\n"


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSON report to re-render (render is the cheapest command that writes -o)."""
    path = tmp_path_factory.mktemp("report") / "report.json"
    assert run(["diagnose", str(TRACE), "-f", "json", "-o", str(path)]) in (0, 1, 2)
    return path


# --------------------------------------------------------------------------------------------
# What the writer refuses
# --------------------------------------------------------------------------------------------


def test_output_onto_an_input_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "x.jsonl"
    src.write_text(OLD)
    with pytest.raises(UsageError, match="one of this run's inputs"):
        write_output("report", src, inputs=[src])
    alias = tmp_path / "hard.jsonl"
    os.link(src, alias)  # another name of the same file
    with pytest.raises(UsageError, match="one of this run's inputs"):
        write_output("report", alias, inputs=[src])
    assert src.read_text() == OLD and not _leftovers(tmp_path)


def test_output_onto_a_file_inside_an_input_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "capture" / "deep"
    folder.mkdir(parents=True)
    inner = folder / "metrics.om"
    inner.write_text(OLD)
    with pytest.raises(UsageError, match="one of this run's inputs"):
        write_output("report", inner, inputs=[tmp_path / "capture"])
    assert inner.read_text() == OLD
    write_output("report", tmp_path / "capture" / "new.txt", inputs=[tmp_path / "capture"])


def test_cli_render_refuses_its_own_input(report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = report.read_bytes()
    assert run(["render", str(report), "-f", "json", "-o", str(report)]) == 3
    err = capsys.readouterr().err
    assert "one of this run's inputs" in err and len(err.splitlines()) == 1
    assert report.read_bytes() == before


@pytest.mark.parametrize("kind", ["symlink", "dangling-symlink", "fifo", "directory"])
def test_special_outputs_are_refused(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "target.txt"
    target.write_text(OLD)
    out = tmp_path / "out"
    if kind == "symlink":
        out.symlink_to(target)
    elif kind == "dangling-symlink":
        out.symlink_to(tmp_path / "nowhere")
    elif kind == "fifo":
        os.mkfifo(out)
    else:
        out.mkdir()
    mode = os.lstat(out).st_mode
    with pytest.raises(UsageError):
        write_output("report", out)
    assert os.lstat(out).st_mode == mode and target.read_text() == OLD
    assert not _leftovers(tmp_path)


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_devices_are_refused_and_stay_devices(device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    with pytest.raises(UsageError, match="character device"):
        write_output("report", Path(device))
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def test_dash_is_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    write_output("hello\n", Path("-"))
    assert capsys.readouterr().out == "hello\n"


# --------------------------------------------------------------------------------------------
# Failures while writing
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_read_only_folder_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      code: int) -> None:
    real_open = os.open

    def refuse(path: object, flags: int, *args: object) -> int:
        if str(path).endswith(".tmp"):
            raise OSError(code, os.strerror(code))
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(PdprobeError, match="is not writable"):
        write_output("report", tmp_path / "out.txt")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_really_read_only_folder(tmp_path: Path) -> None:
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(PdprobeError, match="not writable"):
            write_output("report", tmp_path / "out.txt")
    finally:
        tmp_path.chmod(0o755)


def test_full_disk_keeps_the_old_file_and_no_temp(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out.txt"
    out.write_text(OLD)
    calls = {"n": 0}
    real_write = os.write

    def enospc(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, bytes(data[:10]))  # a partial write first

    monkeypatch.setattr(os, "write", enospc)
    with pytest.raises(PdprobeError, match="no space left"):
        write_output("x" * 100_000, out)
    assert out.read_text() == OLD and not _leftovers(tmp_path)


# --------------------------------------------------------------------------------------------
# The process: closed stdout, signals, hostile names
# --------------------------------------------------------------------------------------------


def test_closed_stdout_is_exit_3_with_one_line(report: Path) -> None:
    proc = subprocess.run(["bash", "-c", f'"{sys.executable}" -c "from pdprobe.cli.app import '
                           f'entry; import sys; sys.argv[1:] = [\'render\', \'{report}\']; '
                           f'entry()" >&-'], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 3
    assert proc.stderr.count("\n") == 1 and "stdout is closed" in proc.stderr
    assert "Traceback" not in proc.stderr


# Runs pdprobe with every os.write slowed to a byte per 50 ms: the test sees the temp file
# appear and signals the process in the middle of its write.
_SLOW_WRITE = """
import os, sys, time
real = os.write
def slow(fd, data):
    time.sleep(0.05)
    return real(fd, bytes(data[:1]))
os.write = slow
from pdprobe.cli.app import entry
sys.argv[1:] = {args!r}
entry()
"""


@pytest.mark.parametrize(("signum", "code", "word"), [(signal.SIGTERM, 143, "terminated"),
                                                      (signal.SIGINT, 130, "interrupted")])
def test_a_signal_during_a_write_leaves_nothing(report: Path, tmp_path: Path, signum: int,
                                                code: int, word: str) -> None:
    out = tmp_path / "out.txt"
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITE.format(
        args=["render", str(report), "-o", str(out)])], cwd=REPO, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not _leftovers(tmp_path) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert _leftovers(tmp_path), "the write never started"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert err == f"pdprobe: {word}\n"
    assert not out.exists() and not _leftovers(tmp_path)


def test_hostile_file_names_reach_stderr_harmless(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    name = tmp_path / "a\x1b]8;;http://evil\x07link\x1b]8;;\x07\x1b[31m\u202eb\nc\udcff.json"
    assert run(["render", str(name)]) == 3
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert "\x1b" not in err and "\u202e" not in err and "\x07" not in err
    assert "\\n" in err and "\\u202e" in err
