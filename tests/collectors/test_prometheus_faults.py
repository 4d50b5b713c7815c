"""The live client against a fault-injecting HTTP server on loopback (issue 14).

The server is a raw socket loop (threads), so a fault can be anything a broken or hostile
server does: trickle its headers or body a byte at a time, never answer, answer 5xx/429 with
odd Retry-After values, malformed JSON or values, a gzip bomb, a redirect to another origin,
echo the credentials back. Every run must end within its timeout + 2 s with one clear
``PdprobeError`` (never another exception), and no secret may appear in what it says.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from pdprobe.collectors.prometheus_client import PromClient, PrometheusUnreachable
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.errors import PdprobeError, SourceError
from pdprobe.redact import spellings

TIMEOUT_S = 1.5
SLACK_S = 2.0  # every run ends within its timeout + this
TOKEN = "tok-\u00e9xyz/+=#secret"  # Latin-1, with characters that quote and escape
API_KEY = "key-4242-abcd"
USER, PASSWORD = "bob", "pa#ss/w0rd"


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Handler = Callable[[socket.socket, Request], None]


@dataclass
class FaultServer:
    """Serves each connection in a thread: reads one request, lets ``handler`` answer."""

    handler: Handler
    host: str = "127.0.0.1"
    seen: list[Request] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> FaultServer:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((self.host, 0))
        self.sock.listen(32)
        self.sock.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            line, *lines = head.decode("latin-1").split("\r\n")
            method, path, _ = line.split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (h.partition(":") for h in lines)}
            length = int(headers.get("content-length", "0"))
            while len(rest) < length:
                rest += conn.recv(65536)
            req = Request(method, path, headers, rest)
            self.seen.append(req)
            self.handler(conn, req)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def reply(conn: socket.socket, status: int, body: bytes | str | object,
          headers: dict[str, str] | None = None) -> None:
    if not isinstance(body, bytes | str):
        body = json.dumps(body)
    data = body.encode() if isinstance(body, str) else body
    head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(data)}\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    conn.sendall(head.encode("latin-1") + b"\r\n" + data)


def ok(data: object, **extra: object) -> dict[str, object]:
    return {"status": "success", "data": data, **extra}


SCALAR = ok({"resultType": "scalar", "result": [1796047200.0, "1796047200"]})


@pytest.fixture
def serve() -> Iterator[Callable[..., FaultServer]]:
    servers: list[FaultServer] = []

    def start(handler: Handler, host: str = "127.0.0.1") -> FaultServer:
        server = FaultServer(handler, host).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def _client(url: str, **kw: object) -> PromClient:
    target = PrometheusTarget(url=url, timeout_s=TIMEOUT_S, **kw)  # type: ignore[arg-type]
    return PromClient(target, time.monotonic() + TIMEOUT_S)


def _fails_in_time(fn: Callable[[], object]) -> PdprobeError:
    t0 = time.monotonic()
    with pytest.raises(PdprobeError) as info:
        fn()
    assert time.monotonic() - t0 < TIMEOUT_S + SLACK_S
    return info.value


# --------------------------------------------------------------------------------------------
# Time: every request ends at the deadline, whatever phase it hangs in
# --------------------------------------------------------------------------------------------


def _trickle_headers(conn: socket.socket, req: Request) -> None:
    for ch in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
        conn.sendall(bytes([ch]))
        time.sleep(0.1)


def _trickle_body(conn: socket.socket, req: Request) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
    for _ in range(1000):
        conn.sendall(b"{")
        time.sleep(0.1)


def _never(conn: socket.socket, req: Request) -> None:
    time.sleep(TIMEOUT_S + 3)


@pytest.mark.parametrize("handler", [_trickle_headers, _trickle_body, _never],
                         ids=["trickled-headers", "trickled-body", "never-answers"])
def test_a_slow_server_cannot_outlast_the_timeout(serve, handler: Handler) -> None:
    srv = serve(handler)
    err = _fails_in_time(lambda: _client(srv.url).query("time()"))
    assert isinstance(err, PrometheusUnreachable)
    assert "within the 1.5 s budget" in err.one_line()


@pytest.mark.parametrize("retry_after", ["0", "1", "-5", "inf", "nan", "soon", "99999",
                                         "Wed, 21 Oct 2015 07:28:00 GMT", "1e400"])
@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_variants_end_in_time(serve, status: int, retry_after: str) -> None:
    srv = serve(lambda conn, req: reply(conn, status, {"status": "error", "error": "busy"},
                                        {"Retry-After": retry_after}))
    err = _fails_in_time(lambda: _client(srv.url).query("time()"))
    assert isinstance(err, SourceError) and f"HTTP {status}" in err.one_line()


# --------------------------------------------------------------------------------------------
# Content: malformed answers and bombs are one clear error
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [
    b"<html>not json</html>",
    b"[" * 100_000,
    json.dumps({"status": "success", "data": 5}).encode(),
    json.dumps(ok({"resultType": "matrix", "result": 5})).encode(),
    json.dumps(ok({"resultType": "matrix", "result": [5]})).encode(),
    json.dumps(ok({"resultType": "matrix", "result": [{"metric": {}, "values": [["a"]]}]})).encode(),
    json.dumps(ok({"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "abc"]]}]})).encode(),
    json.dumps(ok({"resultType": "matrix", "result": [{"metric": 7, "values": [[1, "1"]]}]})).encode(),
    json.dumps(ok({"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "1"], [2]]}]})).encode(),
    json.dumps(ok({"resultType": "matrix", "result": []}, warnings=5)).encode(),
], ids=["html", "deep", "data-5", "result-5", "item-5", "short-pair", "abc-value", "metric-7",
        "ragged", "warnings-5"])
def test_malformed_answers_are_source_errors(serve, body: bytes) -> None:
    srv = serve(lambda conn, req: reply(conn, 200, body))
    client = _client(srv.url)
    for call in (lambda: client.query("up"), lambda: client.query_range("up", 0, 60, 15)):
        with contextlib.suppress(SourceError):  # one clear line; anything else fails the test
            call()


def test_a_gzip_bomb_is_refused_with_one_line(serve) -> None:
    bomb = gzip.compress(b" " * (200 << 20), compresslevel=9)
    srv = serve(lambda conn, req: reply(conn, 200, bomb, {"Content-Encoding": "gzip"}))
    err = _fails_in_time(lambda: _client(srv.url).query("time()"))
    assert "decompression bomb" in err.one_line()


def test_gzip_and_deflate_answers_are_read(serve) -> None:
    body = json.dumps(SCALAR).encode()
    for encoding, data in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        srv = serve(lambda conn, req, e=encoding, d=data: reply(conn, 200, d,
                                                                 {"Content-Encoding": e}))
        assert _client(srv.url).query("time()")[0]["value"][1] == "1796047200"


# --------------------------------------------------------------------------------------------
# Credentials: origin-only headers, nothing echoed
# --------------------------------------------------------------------------------------------


def _other_host() -> str:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
        return "127.0.0.2"
    except OSError:
        return "127.0.0.1"  # another port is another origin too


@pytest.mark.parametrize("follow", [False, True])
def test_custom_headers_do_not_follow_a_redirect_to_another_origin(serve, follow: bool) -> None:
    other = serve(lambda conn, req: reply(conn, 200, SCALAR), host=_other_host())
    first = serve(lambda conn, req: reply(conn, 302, b"", {"Location": other.url + req.path}))
    client = _client(first.url, bearer_token="tok-abcdef", headers=(("X-Api-Key", API_KEY),),
                     headers_follow_redirects=follow)
    assert client.query("time()")[0]["value"][1] == "1796047200"
    assert first.seen[0].headers["x-api-key"] == API_KEY
    assert "authorization" not in other.seen[0].headers  # requests' own rule
    assert ("x-api-key" in other.seen[0].headers) is follow


def test_echoed_credentials_never_reach_a_message(serve) -> None:
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    echo = json.dumps({"status": "error", "errorType": "bad_data",
                       "error": f"{TOKEN} {API_KEY} Basic {basic} {PASSWORD!r}"}) + f" {TOKEN}"
    srv = serve(lambda conn, req: reply(conn, 400, echo))
    client = _client(srv.url, bearer_token=TOKEN, headers=(("X-Api-Key", API_KEY),),
                     basic_auth_user=USER, basic_auth_password=PASSWORD)
    with pytest.raises(Exception) as info:
        client.query("time()")
    text = str(info.value) + " ".join(client.warnings)
    for secret in (TOKEN, API_KEY, PASSWORD):
        for form in spellings(secret, user=USER if secret == PASSWORD else None):
            assert form not in text, form
    assert srv.seen[0].headers["authorization"] == f"Basic {basic}"  # basic wins over bearer


# --------------------------------------------------------------------------------------------
# Every output channel of the CLI, grepped for every spelling of every secret
# --------------------------------------------------------------------------------------------


def _cluster(echo: str) -> Handler:
    """A one-instance vLLM cluster whose every answer warns with the echoed credentials."""

    def handle(conn: socket.socket, req: Request) -> None:
        path = req.path.split("?")[0]
        if path.endswith("/query") and b"time" in req.body + req.path.encode():
            data: object = SCALAR["data"]
        elif "/label/" in path:
            data = ["vllm:num_requests_running"]
        elif path.endswith("/query"):
            data = {"resultType": "vector", "result": [
                {"metric": {"instance": "i1:8000", "role": "decode"}, "value": [1796047200, "1"]}]}
        elif path.endswith("/query_range"):
            data = {"resultType": "matrix", "result": [
                {"metric": {"__name__": "vllm:num_requests_running", "instance": "i1:8000"},
                 "values": [[1796047200 - 60 * k, "1"] for k in range(30, -1, -1)]}]}
        else:
            reply(conn, 404, b"")
            return
        reply(conn, 200, ok(data, warnings=[echo]))

    return handle


def test_no_secret_in_any_output_channel(serve, tmp_path, capsys) -> None:
    from pdprobe.cli.app import run
    from pdprobe.redact import clear

    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    echo = f"seen {TOKEN} {API_KEY} {PASSWORD} Basic {basic} {TOKEN!r} {json.dumps(TOKEN)}"
    srv = serve(_cluster(echo))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    url = srv.url.replace("http://", f"http://{USER}:{PASSWORD}@")
    live = ["--prometheus", url, "--bearer-token-file", str(token_file), "-H",
            f"X-Api-Key: {API_KEY}", "--timeout", "5", "--until", "1796047200", "--since", "30m"]
    channels: list[str] = []
    try:
        for args in (["check", "-f", "json", "-o", str(tmp_path / "check.json")],
                     ["check"], ["collect", "-o", str(tmp_path / "cap.parquet")]):
            run([*args, *live])
            out = capsys.readouterr()
            channels += [out.out, out.err]
    finally:
        clear()
    channels.append((tmp_path / "check.json").read_text())
    capture = tmp_path / "cap.parquet"
    assert capture.exists(), channels
    import pyarrow.parquet as pq

    table = pq.read_table(capture)
    channels.append(str(table.schema.metadata) + str(table.to_pylist()))
    channels.append(capture.read_bytes().decode("latin-1"))
    text = "\n".join(channels)
    assert "seen" in text  # the echoing warnings did reach the output, redacted
    for secret, user in ((TOKEN, None), (API_KEY, None), (PASSWORD, USER)):
        for form in spellings(secret, user=user):
            assert form not in text, form
