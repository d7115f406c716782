"""``fitcheck serve``: the answers in a web page, served on this machine (fitcheck.serve)."""

from __future__ import annotations

import errno

import click

from fitcheck.errors import FitcheckError

DEFAULT_PORT = 8765


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, metavar="ADDRESS",
              help="The address to listen on. Another than this machine's own (127.0.0.1, ::1, localhost) lets "
                   "anyone who can reach it on the network use it: a warning says so.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="The port to listen on (0: a free one, printed).")
@click.option("--open", "open_browser", is_flag=True, help="Also open the page in the web browser.")
def serve(host: str, port: int, open_browser: bool) -> None:
    """Answer in a web page: a local server for the model box, the options and the answer's pictures.

    It prints the address to open (http://127.0.0.1:8765/ by default) and runs until Ctrl-C. The page asks
    the same questions as the command line through a JSON API (GET /api/check?model=qwen-7b&context=8192 is
    what `fitcheck qwen-7b --context 8192 --json` prints); this machine is probed once at start. It reads no
    files and no model from a request, never the network, and writes nothing.

    \b
    Examples:
      fitcheck serve                 # http://127.0.0.1:8765/
      fitcheck serve --port 0 --open # a free port, opened in the browser
    """
    import signal
    import sys

    from fitcheck.serve.server import is_loopback, make_server

    try:
        server = make_server(host, port)
    except OSError as exc:
        why = exc.strerror or str(exc)
        hint = ("another program listens there: pick another --port, or --port 0 for a free one"
                if exc.errno in _IN_USE else "give an address of this machine, e.g. 127.0.0.1")
        raise FitcheckError(f"serve: cannot listen on {host}:{port}: {why}", hint) from None
    if not is_loopback(host):
        click.echo(f"fitcheck serve: WARNING: listening on {host}, not only on this machine: anyone who can reach "
                   f"it on port {server.port} can use it (it answers; it reads no files from a request and writes "
                   "nothing)", err=True)
    click.echo(f"fitcheck serve: {server.url} (Ctrl-C stops it)")
    sys.stdout.flush()

    def stop(signum, frame):  # SIGTERM ends it as Ctrl-C does
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop) if _main_thread() else None
    try:
        if open_browser:
            import webbrowser

            webbrowser.open(server.url)
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    click.echo("fitcheck serve: stopped")


_IN_USE = (errno.EADDRINUSE, 10048)   # 10048: Windows' WSAEADDRINUSE


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
