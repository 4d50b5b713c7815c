"""Start and stop a real Prometheus on 127.0.0.1 over a TSDB built from an OpenMetrics file.

Used by the live fixtures and by bench/bench_live.py. The server is stopped by its own process
id (terminate, then kill); nothing is ever matched by name.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
CONFIG = "global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\n"


def binaries() -> tuple[str, str] | None:
    """Paths of promtool and prometheus, or None when either is missing."""
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    if promtool and prometheus:
        return promtool, prometheus
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def create_blocks(openmetrics: Path, tsdb: Path, promtool: str = "promtool") -> None:
    """``promtool tsdb create-blocks-from openmetrics`` (blocks must lie in the past)."""
    tsdb.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                           str(openmetrics), str(tsdb)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"promtool failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")


@dataclass
class PromServer:
    """A running Prometheus owned by this process."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    @classmethod
    def start(cls, tsdb: Path, workdir: Path, prometheus: str = "prometheus") -> PromServer:
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        config.write_text(CONFIG, encoding="utf-8")
        log = workdir / "prometheus.log"
        port = free_port()
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tsdb}",
                 f"--web.listen-address=127.0.0.1:{port}",
                 "--storage.tsdb.retention.time=100y", "--log.level=warn"],
                stdout=fh, stderr=subprocess.STDOUT, cwd=workdir,
                env={**os.environ, "GOMAXPROCS": os.environ.get("GOMAXPROCS", "2")})
        server = cls(proc, f"http://127.0.0.1:{port}", log)
        try:
            server.wait_ready()
        except BaseException:
            server.stop()
            raise
        return server

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: "
                                   f"{self.log.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after {READY_TIMEOUT_S:.0f} s: "
                           f"{self.log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
