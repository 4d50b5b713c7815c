"""Drive headless Chromium over the DevTools protocol with the standard library only.

Used by the HTML report tests and ``scripts/make_screenshot.py``: open a file, collect console
messages, exceptions, log entries (CSP violations, failed loads) and every network request,
evaluate DOM queries, and take a full-page PNG screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
)
START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 30.0


def find_chromium() -> str | None:
    env = os.environ.get("PDPROBE_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class _WebSocket:
    """A minimal RFC 6455 client: text frames, client masking, fragmentation, ping/close."""

    def __init__(self, url: str, timeout: float) -> None:
        assert url.startswith("ws://"), url
        hostport, _, path = url[len("ws://"):].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("websocket handshake: connection closed")
            head += chunk
        head, _, self._buf = head.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status + b" ":
            raise ConnectionError(f"websocket handshake failed: {status!r}")

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise ConnectionError("websocket closed")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def send(self, text: str) -> None:
        payload = text.encode()
        head = bytearray([0x81])
        n = len(payload)
        if n < 126:
            head.append(0x80 | n)
        elif n < 65536:
            head.append(0x80 | 126)
            head += struct.pack("!H", n)
        else:
            head.append(0x80 | 127)
            head += struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes(head) + mask + masked)

    def recv(self) -> str:
        parts = []
        while True:
            b0, b1 = self._read(2)
            opcode = b0 & 0x0F
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            data = self._read(n)
            if opcode == 0x8:
                raise ConnectionError("websocket closed by peer")
            if opcode == 0x9:  # ping -> pong (masked, as a client must)
                mask = os.urandom(4)
                self.sock.sendall(bytes([0x8A, 0x80 | len(data)]) + mask
                                  + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))
                continue
            if opcode in (0x1, 0x0, 0x2):
                parts.append(data)
                if b0 & 0x80:
                    return b"".join(parts).decode()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


@dataclass
class PageResult:
    console: list[dict[str, Any]] = field(default_factory=list)  # {"type", "text"}
    exceptions: list[str] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)  # {"level", "source", "text", "url"}
    requests: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    screenshot: bytes = b""

    @property
    def errors(self) -> list[str]:
        out = [f"console.{c['type']}: {c['text']}" for c in self.console
               if c["type"] in ("error", "assert")]
        out += [f"exception: {e}" for e in self.exceptions]
        out += [f"log {e['level']} ({e['source']}): {e['text']}" for e in self.log
                if e["level"] == "error"]
        return out


class Chromium:
    """A headless Chromium process with one page, driven over CDP."""

    def __init__(self, binary: str, width: int = 1280, height: int = 900) -> None:
        self.profile = tempfile.mkdtemp(prefix="pdprobe-chromium-")
        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}",
             "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.width, self.height = width, height
        self._id = 0
        self.ws = self._connect()

    def _connect(self) -> _WebSocket:
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            if port_file.exists() and port_file.read_text().strip():
                port = int(port_file.read_text().split()[0])
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                                timeout=5) as resp:
                        targets = json.load(resp)
                except OSError:
                    time.sleep(0.1)
                    continue
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    return _WebSocket(pages[0]["webSocketDebuggerUrl"], CALL_TIMEOUT_S)
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    def call(self, method: str, params: dict[str, Any] | None = None,
             events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Send one command; events received meanwhile are appended to ``events``."""
        self._id += 1
        my_id = self._id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            if events is not None and "method" in msg:
                events.append(msg)
        raise TimeoutError(method)

    def wait_for(self, event: str, events: list[dict[str, Any]]) -> None:
        if any(e["method"] == event for e in events):
            return
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                events.append(msg)
                if msg["method"] == event:
                    return
        raise TimeoutError(event)

    def open(self, path: Path, queries: dict[str, str] | None = None,
             full_page: bool = True, max_height: int = 16000) -> PageResult:
        """Load ``path``; evaluate ``queries`` (name -> JS expression); screenshot."""
        events: list[dict[str, Any]] = []
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable", events=events)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1,
                   "mobile": False}, events=events)
        self.call("Page.navigate", {"url": path.resolve().as_uri()}, events=events)
        self.wait_for("Page.loadEventFired", events)
        result = PageResult()
        for name, expr in (queries or {}).items():
            res = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True},
                            events=events)
            if "exceptionDetails" in res:
                raise RuntimeError(f"query {name!r} failed: {res['exceptionDetails']}")
            result.values[name] = res["result"].get("value")
        clip = None
        if full_page:
            metrics = self.call("Page.getLayoutMetrics", events=events)
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            clip = {"x": 0, "y": 0, "width": self.width,
                    "height": min(max_height, math.ceil(size["height"])), "scale": 1}
        shot = self.call("Page.captureScreenshot",
                         {"format": "png", "captureBeyondViewport": full_page,
                          **({"clip": clip} if clip else {})}, events=events)
        result.screenshot = base64.b64decode(shot["data"])
        # let late console/log events arrive
        self.call("Runtime.evaluate", {"expression": "1"}, events=events)
        for e in events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])
                result.console.append({"type": p["type"], "text": text})
            elif m == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                result.exceptions.append(d.get("exception", {}).get("description", d["text"]))
            elif m == "Log.entryAdded":
                entry = p["entry"]
                result.log.append({"level": entry["level"], "source": entry["source"],
                                   "text": entry["text"], "url": entry.get("url", "")})
            elif m == "Network.requestWillBeSent":
                result.requests.append(p["request"]["url"])
        return result

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError, ConnectionError):
            self.call("Browser.close")
        self.ws.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



# Evaluated in the page: every rendered text that is cut or collides, as one line each.
# SVG text: its box (getBBox, in the chart's viewBox units) must lie inside the viewBox (an
# <svg> clips what is outside: "00,000,000" for 400,000,000) and must not overlap another text
# of the same chart by more than TEXT_OVERLAP_PX in both directions (legend items running into
# each other, labels over labels). HTML: an element whose content is wider than its box while
# its overflow is not visible (an ellipsis or hidden overflow cuts the text).
TEXT_OVERLAP_PX = 1.0
TEXT_LAYOUT_JS = """
(() => {
  const problems = [];
  const own = (t) => Array.from(t.childNodes).filter(n => n.nodeType === 3 || n.nodeName === 'tspan')
      .map(n => n.textContent).join('').trim();
  const f = (v) => v.toFixed(1);
  const svgs = Array.from(document.querySelectorAll('svg'));
  svgs.forEach((svg, k) => {
    const name = svg.id || ('svg#' + k);
    const vb = svg.viewBox && svg.viewBox.baseVal;
    const W = vb && vb.width ? vb.width : svg.width.baseVal.value;
    const H = vb && vb.height ? vb.height : svg.height.baseVal.value;
    const boxes = [];
    for (const t of svg.querySelectorAll('text')) {
      const label = own(t);
      if (!label) continue;
      const b = t.getBBox();
      if (b.width <= 0 || b.height <= 0) continue;
      const box = {label, x0: b.x, y0: b.y, x1: b.x + b.width, y1: b.y + b.height};
      if (box.x0 < -0.5 || box.y0 < -0.5 || box.x1 > W + 0.5 || box.y1 > H + 0.5)
        problems.push(`${name}: text '${label}' clipped: box x ${f(box.x0)}..${f(box.x1)}, `
                      + `y ${f(box.y0)}..${f(box.y1)} outside the chart's 0..${W} x 0..${H}`);
      boxes.push(box);
    }
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      const dx = Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0);
      const dy = Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0);
      if (dx > %(tol)s && dy > %(tol)s)
        problems.push(`${name}: text '${a.label}' overlaps '${b.label}' by ${f(dx)} x ${f(dy)} px`);
    }
  });
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('svg') || el.closest('details:not([open])') || !el.textContent.trim()) continue;
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.overflowX === 'visible') continue;
    if (el.scrollWidth > el.clientWidth + 1)
      problems.push(`<${el.tagName.toLowerCase()}> '${el.textContent.trim().slice(0, 60)}' cut: `
                    + `content ${el.scrollWidth} px wide in a ${el.clientWidth} px box`);
  }
  return problems;
})()
""".replace("%(tol)s", str(TEXT_OVERLAP_PX))
