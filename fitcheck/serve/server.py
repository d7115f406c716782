"""The HTTP edge of `fitcheck serve`: a ThreadingHTTPServer that answers GET only, within limits, with the API's
answers (fitcheck.serve.api) and the page's static files (fitcheck/serve/static/).

Limits, so that it is safe to leave running:

- the request line (the URL) at most MAX_REQUEST_LINE bytes (414), at most MAX_HEADERS headers of MAX_HEADER_BYTES
  in all (431), no body (a Content-Length over 0 or any Transfer-Encoding: 413);
- GET only (405 for every other method, with ``Allow: GET``); a loopback server answers only requests whose Host
  names loopback (403: a web page elsewhere cannot reach it through DNS rebinding);
- each API request computed by one of WORKERS worker threads, at most QUEUED more waiting (beyond: 503 at once),
  answered within REQUEST_TIMEOUT_S (else 503; the computation ends on its own, it writes nothing);
- at most MAX_CONNECTIONS open connections (beyond: 503 at once), each idle at most SOCKET_TIMEOUT_S;
- static files: names under fitcheck/serve/static/ only (no '..', no absolute path, no hidden file, no symlink),
  regular files of at most MAX_STATIC_BYTES, of a fixed set of content types.

Every error is JSON: ``{"error": "<one line>", "exit_code": N}``.
"""

from __future__ import annotations

import ipaddress
import queue
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from fitcheck import __version__
from fitcheck.errors import EXIT_BAD_INPUT, FitcheckError
from fitcheck.serve import api

STATIC = Path(__file__).resolve().parent / "static"
MAX_REQUEST_LINE = 8 * 1024
MAX_HEADERS = 64
MAX_HEADER_BYTES = 16 * 1024
MAX_STATIC_BYTES = 8 * 1024 * 1024
WORKERS = 16
QUEUED = 64
MAX_CONNECTIONS = 128
REQUEST_TIMEOUT_S = 10.0
SOCKET_TIMEOUT_S = 10.0
EXIT_BUSY = 75        # sysexits.h's EX_TEMPFAIL: busy or too slow, try again (never a verdict)
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
    ".woff2": "font/woff2",
}
LOOPBACK_NAMES = ("localhost", "localhost.")
# The page's own files only: no inline script, no other origin; SVG answers may be shown in <img>.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
         b"Connection: close\r\nContent-Length: 64\r\n\r\n"
         b'{"error": "too many connections: try again", "exit_code": 75}\n\n\n')


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 in brackets or not) is this machine only."""
    text = host.strip().strip("[]").lower()
    if text in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def url_of(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/"


# ---- the workers --------------------------------------------------------------------------------------------
class Job:
    def __init__(self, fn: Callable[[], api.Answer]):
        self.fn = fn
        self.done = threading.Event()
        self.abandoned = False
        self.result: api.Answer | None = None

    def run(self) -> None:
        try:
            if not self.abandoned:   # its client stopped waiting while it was queued
                self.result = self.fn()
        except BaseException as exc:  # noqa: BLE001 - the API turns every error into an answer; this is the last net
            self.result = api.internal_error("request", exc)
        finally:
            self.done.set()


class Workers:
    """``count`` daemon threads taking jobs from a queue of at most ``queued`` (a stuck job never holds up exit)."""

    def __init__(self, count: int = WORKERS, queued: int = QUEUED):
        self._jobs: queue.Queue[Job | None] = queue.Queue(maxsize=queued)
        self._threads = [threading.Thread(target=self._loop, name=f"fitcheck-serve-{i}", daemon=True)
                         for i in range(count)]
        for t in self._threads:
            t.start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job.run()

    def submit(self, fn: Callable[[], api.Answer]) -> Job | None:
        """The job queued, or None when the queue is full."""
        job = Job(fn)
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            return None
        return job

    def stop(self) -> None:
        for _ in self._threads:
            try:
                self._jobs.put_nowait(None)
            except queue.Full:
                break


# ---- the server ---------------------------------------------------------------------------------------------
class FitcheckServer(ThreadingHTTPServer):
    daemon_threads = True           # connection threads are not kept for joining: no list grows with requests
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], here: api.Here | None = None, *, workers: int = WORKERS,
                 queued: int = QUEUED, timeout_s: float = REQUEST_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS, static: Path = STATIC):
        host = address[0]
        if ":" in host.strip("[]"):
            self.address_family = socket.AF_INET6
            address = (host.strip("[]"), address[1])
        super().__init__(address, Handler)   # binds: OSError when the port is taken
        try:
            self.loopback = is_loopback(host)
            self.timeout_s = timeout_s
            self.static = static
            self.connections = threading.BoundedSemaphore(max_connections)
            self.here = here if here is not None else api.Here()
            self.workers = Workers(workers, queued)
        except BaseException:
            self.server_close()
            raise

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return url_of(str(self.server_address[0]), self.port)

    def process_request(self, request, client_address) -> None:
        if not self.connections.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()

    def server_close(self) -> None:
        super().server_close()
        workers = getattr(self, "workers", None)   # None: the bind failed (TCPServer closes the socket itself)
        if workers is not None:
            workers.stop()

    def answer(self, path: str, query: list[tuple[str, str]]) -> api.Answer:
        """The API's answer, computed by a worker within the time limit."""
        job = self.workers.submit(lambda: api.answer(path, query, self.here))
        if job is None:
            return api.error_answer(503, f"busy: more than {len(self.workers._threads) + self.workers._jobs.maxsize} "
                                         "requests at once; try again", EXIT_BUSY)
        if not job.done.wait(self.timeout_s):
            job.abandoned = True
            return api.error_answer(503, f"no answer within {self.timeout_s:g} s; try again, or ask less "
                                         "(a narrower --fits, fewer options)", EXIT_BUSY)
        assert job.result is not None
        return job.result


def make_server(host: str = "127.0.0.1", port: int = 8765, here: api.Here | None = None, **limits: Any
                ) -> FitcheckServer:
    """A server bound to ``host``:``port`` (0: a free port), this machine read once; OSError when it cannot bind."""
    return FitcheckServer((host, port), here, **limits)


# ---- the handler --------------------------------------------------------------------------------------------
class Handler(BaseHTTPRequestHandler):
    server: FitcheckServer
    server_version = f"fitcheck/{__version__}"
    sys_version = ""
    protocol_version = "HTTP/1.0"   # one request a connection: no idle keep-alive holds a thread
    timeout = SOCKET_TIMEOUT_S

    # -- parsing and limits --
    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if len(self.raw_requestline) > MAX_REQUEST_LINE:
            self.send_error(414, f"request line of {len(self.raw_requestline):,} bytes: at most {MAX_REQUEST_LINE:,}")
            return False
        size = sum(len(k) + len(v) for k, v in self.headers.items())
        if len(self.headers) > MAX_HEADERS or size > MAX_HEADER_BYTES:
            self.send_error(431, f"{len(self.headers)} headers of {size:,} bytes: at most {MAX_HEADERS} of "
                                 f"{MAX_HEADER_BYTES:,}")
            return False
        return True

    def __getattr__(self, name: str):
        if name.startswith("do_"):   # every method but GET (http.server would answer 501)
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self._send(api.error_answer(405, f"method {self.command[:20]} is not allowed: GET only", EXIT_BAD_INPUT),
                   {"Allow": "GET"})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        refusal = self._refusal()
        if refusal is not None:
            self._send(refusal)
            return
        split = urlsplit(self.path)
        path = split.path
        try:
            query = parse_qsl(split.query, keep_blank_values=True, max_num_fields=api.MAX_PARAMS)
        except ValueError:
            self._send(api.error_answer(400, f"more than {api.MAX_PARAMS} query parameters", EXIT_BAD_INPUT))
            return
        if path.startswith("/api/"):
            self._send(self.server.answer(path, query), {"Cache-Control": "no-store"})
        elif path in ("/", "/index.html"):
            self._send(self._static("index.html"))
        elif path.startswith("/static/"):
            self._send(self._static(path[len("/static/"):]))
        else:
            self._send(api.error_answer(404, f"no such page {path[:100]!r} (the page is /, the API /api/...)",
                                        EXIT_BAD_INPUT))

    def _refusal(self) -> api.Answer | None:
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding") or (length and length.strip() not in ("", "0")):
            return api.error_answer(413, "a request body is not accepted: GET with a query string only",
                                    EXIT_BAD_INPUT)
        host = self.headers.get("Host")
        if self.server.loopback and host is not None and not is_loopback(_hostname(host)):
            return api.error_answer(403, f"Host {host[:100]!r} is not this machine: the server answers "
                                         f"{self.server.url} only", EXIT_BAD_INPUT)
        return None

    # -- static files --
    def _static(self, name: str) -> api.Answer:
        missing = api.error_answer(404, f"no such file {name[:100]!r} in the page's files", EXIT_BAD_INPUT)
        text = unquote(name)
        parts = text.split("/")
        if (not text or "\\" in text or "\x00" in text or ":" in text
                or any(p in ("", ".", "..") or p.startswith(".") for p in parts)):
            return missing
        ctype = CONTENT_TYPES.get(Path(parts[-1]).suffix.lower())
        if ctype is None:
            return missing
        root = self.server.static.resolve()
        target = root
        for part in parts:
            target = target / part
            if target.is_symlink():
                return missing
        try:
            if root not in target.resolve().parents:
                return missing
            from fitcheck.bounded import read_regular_file

            body = read_regular_file(target, "static file", MAX_STATIC_BYTES)
        except (OSError, FitcheckError):
            return missing
        return api.Answer(200, ctype, body)

    # -- writing --
    def _send(self, answer: api.Answer, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("Content-Security-Policy", CSP)
            for key, value in {"Cache-Control": "no-cache", **(headers or {})}.items():
                self.send_header(key, value)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(answer.body)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (a malformed request line, too many headers: the client's) as JSON too."""
        self.close_connection = True
        self.request_version = "HTTP/1.0"   # a status line even for a request line that named none
        short = self.responses.get(code, ("error",))[0]
        self._send(api.error_answer(code, message or short, EXIT_BAD_INPUT))

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a local page makes many requests (internal errors are logged by fitcheck.serve.api)."""

    def log_error(self, format: str, *args: Any) -> None:
        if "Request timed out" not in format % args:
            print(f"fitcheck serve: {format % args}", file=sys.stderr, flush=True)


def _hostname(host: str) -> str:
    """The name of a Host header: '127.0.0.1:8765' -> '127.0.0.1', '[::1]:8765' -> '::1'."""
    text = host.strip()
    if text.startswith("["):
        return text[1:text.find("]")] if "]" in text else text
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text
