"""The HTTP transport of the live collector: one deadline per request, bounded bodies, and
custom headers kept to the origin they were meant for.

- ``Watchdog``: socket timeouts bound each read, not a request: a server trickling one byte a
  second keeps a read alive for ever. The watchdog shuts the request's sockets down when the
  run's deadline passes, whatever phase it is in (TLS handshake, headers, body).
- ``read_body``: the body read in chunks, decompressed here (gzip/deflate) with a cap on the
  decompressed size and ratio, so a gzip bomb ends in a one-line error, not gigabytes.
- ``make_session``: a ``requests`` session whose redirects to another origin drop the ``-H``
  headers (requests itself drops only ``Authorization``), unless the user allows it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import requests

# A 512-instance hour answers ~61 MB of JSON per query at most; 1 GiB decompressed is far
# beyond any real answer and still fits in memory.
MAX_BODY_BYTES: Final = 1 << 30
# Prometheus JSON compresses 10-30x; above this ratio, once past RATIO_CHECK_AFTER bytes, the
# answer is a decompression bomb, not data (deflate's own limit is ~1030x).
MAX_RATIO: Final = 200
RATIO_CHECK_AFTER: Final = 64 << 20
# Error answers are read for their message only.
ERROR_BODY_BYTES: Final = 64 << 10
READ_CHUNK: Final = 1 << 20
# Redirects followed per request (requests' default of 30 only wastes the budget).
MAX_REDIRECTS: Final = 5
# Encodings asked for: the ones read_body decompresses itself.
ACCEPT_ENCODING: Final = "gzip, deflate"

_active = threading.local()


class BodyTooLarge(Exception):
    """The answer passed ``MAX_BODY_BYTES`` or ``MAX_RATIO``; ``args[0]`` says which."""


class BodyUndecodable(Exception):
    """The answer's ``Content-Encoding`` is unknown or its compressed data is corrupt."""


class Watchdog:
    """Shuts down the sockets a request opens or reuses on this thread at ``deadline``.

    Used as a context manager around one request (headers and body). The sockets are
    duplicated (``os.dup``) when registered: shutting a duplicate down ends the connection
    even after TLS has taken over the original socket object.
    """

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True

    def __enter__(self) -> Watchdog:
        _active.dog = self
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        _active.dog = None
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
            self._sockets.clear()

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        try:
            dup = socket.socket(fileno=os.dup(sock.fileno()))
        except (OSError, ValueError):
            return
        with self._lock:
            self._sockets.append(dup)
            if self.fired:
                self._shutdown(dup)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets:
                self._shutdown(sock)

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _watch(sock: Any) -> None:
    dog: Watchdog | None = getattr(_active, "dog", None)
    if dog is not None:
        dog.watch(sock)


def _pool_classes() -> dict[str, Any]:
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Watched:
        """Registers its socket with the thread's watchdog when created and when reused."""

        def _new_conn(self) -> Any:
            sock = super()._new_conn()  # type: ignore[misc]
            _watch(sock)
            return sock

        def request(self, *args: Any, **kwargs: Any) -> Any:
            _watch(getattr(self, "sock", None))
            return super().request(*args, **kwargs)  # type: ignore[misc]

    class WatchedHTTP(Watched, HTTPConnection):
        pass

    class WatchedHTTPS(Watched, HTTPSConnection):
        pass

    class HTTPPool(HTTPConnectionPool):
        ConnectionCls = WatchedHTTP

    class HTTPSPool(HTTPSConnectionPool):
        ConnectionCls = WatchedHTTPS

    return {"http": HTTPPool, "https": HTTPSPool}


def make_session(custom_headers: Iterable[str], *, follow: bool, pool_size: int) -> requests.Session:
    """A session whose connections are watched and whose redirects keep ``-H`` headers to
    the original origin (unless ``follow``)."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    custom = {h.lower() for h in custom_headers}
    classes = _pool_classes()

    class OriginSession(requests.Session):
        def rebuild_auth(self, prepared_request: Any, response: Any) -> None:
            super().rebuild_auth(prepared_request, response)
            if not follow and self.should_strip_auth(response.request.url, prepared_request.url):
                for name in list(prepared_request.headers):
                    if name.lower() in custom:
                        del prepared_request.headers[name]

    class WatchedAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = classes

        def proxy_manager_for(self, proxy: Any, **kwargs: Any) -> Any:
            manager = super().proxy_manager_for(proxy, **kwargs)
            manager.pool_classes_by_scheme = classes
            return manager

    session = OriginSession()
    session.max_redirects = MAX_REDIRECTS
    no_retry = Retry(total=0, connect=0, read=0, redirect=0, status=0, raise_on_status=False)
    adapter = WatchedAdapter(max_retries=no_retry, pool_connections=pool_size,
                             pool_maxsize=pool_size)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["Accept-Encoding"] = ACCEPT_ENCODING
    return session


def read_body(resp: requests.Response, cap: int, *, truncate: bool = False) -> bytes:
    """The body of a streamed response, decompressed, at most ``cap`` bytes.

    Over ``cap`` (or ``MAX_RATIO`` past ``RATIO_CHECK_AFTER``): ``BodyTooLarge``, or with
    ``truncate`` the first ``cap`` bytes.
    """
    encoding = (resp.headers.get("Content-Encoding") or "").strip().lower()
    if encoding in ("", "identity"):
        decomp = None
    elif encoding in ("gzip", "x-gzip"):
        decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        decomp = zlib.decompressobj()
    else:
        raise BodyUndecodable(f"Content-Encoding {encoding[:40]!r}, which pdprobe does not read")
    parts: list[bytes] = []
    size = wire = 0
    raw = resp.raw
    try:
        while True:
            chunk = raw.read(READ_CHUNK, decode_content=False)
            if not chunk:
                break
            wire += len(chunk)
            pending = chunk
            while pending:
                if decomp is None:
                    out, pending = pending, b""
                else:
                    out = decomp.decompress(pending, READ_CHUNK)
                    pending = decomp.unconsumed_tail
                size += len(out)
                parts.append(out)
                too_big = size > cap
                bomb = decomp is not None and size > RATIO_CHECK_AFTER and size > MAX_RATIO * wire
                if too_big or bomb:
                    if truncate:
                        return b"".join(parts)[:cap]
                    raise BodyTooLarge(f"more than {MAX_RATIO}x decompression" if bomb and not too_big
                                       else f"more than {cap / 2**20:.0f} MiB")
                if decomp is not None and decomp.eof:
                    pending = b""
        if decomp is not None:
            parts.append(decomp.flush())
    except zlib.error as exc:
        if truncate:
            return b"".join(parts)[:cap]
        raise BodyUndecodable(f"corrupt {encoding} data ({exc})") from None
    return b"".join(parts)
