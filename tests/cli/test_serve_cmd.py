"""`fitcheck serve`: its help, a port in use, the warning for another host than this machine, the URL line, the
browser only with --open, and a clean stop on Ctrl-C (a real process)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import urllib.request

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli

# Ctrl-C must reach the server even where the test runner's own process ignores SIGINT (which a child inherits).
START = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
         "from fitcheck.cli import main; main(sys.argv[1:])")


def test_help_says_how_to_start_it_and_what_it_does():
    r = CliRunner().invoke(cli, ["serve", "--help"])
    assert r.exit_code == 0
    for words in ("--host", "127.0.0.1", "--port", "8765", "--open", "Ctrl-C", "/api/check", "writes nothing"):
        assert words in r.output, words
    assert "serve" in CliRunner().invoke(cli, ["--help"]).output


def test_a_port_in_use_is_one_line_and_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = CliRunner().invoke(cli, ["serve", "--port", str(port)])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert lines == [f"fitcheck: serve: cannot listen on 127.0.0.1:{port}: Address already in use (another program "
                     "listens there: pick another --port, or --port 0 for a free one)"]
    assert r.stdout == ""


def test_a_bad_port_is_bad_input():
    r = CliRunner().invoke(cli, ["serve", "--port", "70000"])
    assert r.exit_code == 2 and "70000 is not in the range 0<=x<=65535" in r.output


def test_open_opens_the_browser_at_the_url_and_only_then(monkeypatch):
    from fitcheck.serve.server import FitcheckServer

    opened: list[str] = []
    monkeypatch.setattr("webbrowser.open", lambda u, *a, **k: opened.append(u))

    def interrupted(self, poll_interval=0.5):
        raise KeyboardInterrupt

    monkeypatch.setattr(FitcheckServer, "serve_forever", interrupted)
    r = CliRunner().invoke(cli, ["serve", "--port", "0"])
    assert r.exit_code == 0 and opened == []
    r = CliRunner().invoke(cli, ["serve", "--port", "0", "--open"])
    assert r.exit_code == 0
    first, last = r.stdout.splitlines()
    assert first.startswith("fitcheck serve: http://127.0.0.1:") and first.endswith("/ (Ctrl-C stops it)")
    assert opened == [first.split()[2]] and last == "fitcheck serve: stopped"
    assert "WARNING" not in r.stderr


def _start(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", START, "serve", "--port", "0", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(60)
    if not line or not line[0].startswith("fitcheck serve: http://"):
        proc.kill()
        pytest.fail(f"no URL line: {line} {proc.stderr.read() if proc.poll() is not None else ''}")
    return proc, line[0]


def _stop(proc: subprocess.Popen) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, out, err


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT")
def test_a_real_server_answers_and_stops_cleanly_on_ctrl_c():
    proc, line = _start()
    try:
        url = line.split()[2]
        assert url.startswith("http://127.0.0.1:") and line.rstrip("\n").endswith("(Ctrl-C stops it)")
        with urllib.request.urlopen(url + "api/options", timeout=30) as reply:
            doc = json.loads(reply.read())
        assert doc["schema"] == "fitcheck.options/1"
    finally:
        code, out, err = _stop(proc)
    assert code == 0, err
    assert out == "fitcheck serve: stopped\n" and "Traceback" not in err and "WARNING" not in err


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT")
def test_another_host_than_this_machine_is_a_loud_warning():
    proc, line = _start("--host", "0.0.0.0")
    try:
        port = line.split()[2].rsplit(":", 1)[1].rstrip("/")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/profiles", timeout=30) as reply:
            assert json.loads(reply.read())["schema"] == "fitcheck.profiles/1"
    finally:
        code, out, err = _stop(proc)
    assert code == 0
    warning = [w for w in err.splitlines() if "WARNING" in w]
    assert warning == [f"fitcheck serve: WARNING: listening on 0.0.0.0, not only on this machine: anyone who can "
                       f"reach it on port {port} can use it (it answers; it reads no files from a request and writes "
                       "nothing)"]
