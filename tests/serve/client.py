"""A fitcheck server in a thread on a free port, and a small HTTP client for it (http.client: every method,
header and raw request line a test needs)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlencode

from fitcheck.serve import api
from fitcheck.serve.server import make_server


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self):
        return json.loads(self.body)


@contextmanager
def running(here: api.Here | None = None, **limits):
    """A started server (port 0), stopped and closed after the block."""
    server = make_server("127.0.0.1", 0, here, **limits)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def url(path: str, params=()) -> str:
    """``path?params`` (a list of pairs or a dict), encoded as a browser's URLSearchParams encodes it."""
    query = urlencode(list(params.items()) if isinstance(params, dict) else list(params))
    return f"{path}?{query}" if query else path


def request(server, target: str, method: str = "GET", headers: dict[str, str] | None = None,
            body: bytes | None = None, host: str | None = None, timeout: float = 30) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.putrequest(method, target, skip_host=host is not None, skip_accept_encoding=True)
        if host is not None:
            conn.putheader("Host", host)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


def get(server, path: str, params=()) -> Reply:
    return request(server, url(path, params))


def raw(server, data: bytes, timeout: float = 10) -> bytes:
    """Send ``data`` as it is; everything the server answers before closing."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)
