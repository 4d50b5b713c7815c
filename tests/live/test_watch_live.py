"""``pdprobe watch`` against the real Prometheus of ``tests/live/conftest.py``: it serves the
verdict on /metrics, and SIGTERM ends it cleanly (exit 143, the port released)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.live.conftest import LiveCluster
from tests.live.prom_server import free_port

pytestmark = pytest.mark.live
READY_TIMEOUT_S = 180.0


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            return str(resp.read().decode("utf-8"))
    except OSError:
        return None


def test_watch_serves_metrics_and_stops_on_sigterm(live_cluster: LiveCluster) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pdprobe", "watch", *live_cluster.cli_args(), "--interval", "10s",
         "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "NO_COLOR": "1"})
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        text = None
        while time.monotonic() < deadline:
            text = _scrape(port)
            if text and "pdprobe_status{" in text:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(1.0)
        assert text and "pdprobe_status{" in text, text
        assert "pdprobe_watch_rounds_total 1" in text or "pdprobe_watch_rounds_total 2" in text
        assert 'pdprobe_status{status="unknown"}' not in text
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "pdprobe: terminated" in err and "Traceback" not in err
    first = out.splitlines()[0]
    assert first.split("  ", 1)[1].split()[0] in ("OK", "WARNING", "CRITICAL"), out
    assert len(out.splitlines()) == 1, out  # the same window again: no change, no line
    with socket.socket() as s:  # the listener is gone
        assert s.connect_ex(("127.0.0.1", port)) != 0
