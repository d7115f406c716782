"""The exit-code contract holds for crashes: an internal error is one line and exit 70 in every command."""

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from fitcheck.cli import COMMANDS, cli
from fitcheck.errors import EXIT_INTERNAL_ERROR


def _boom(*args, **kwargs):
    raise RuntimeError("injected failure")


@pytest.fixture(params=sorted(COMMANDS))
def broken_command(request, monkeypatch):
    """Each command in turn, with its body replaced by one that raises an internal error."""
    command = cli.get_command(click.Context(cli), request.param)
    monkeypatch.setattr(command, "callback", _boom)
    required = ["qwen-7b" for p in command.params if isinstance(p, click.Argument) and p.required]
    return request.param, required


def test_every_command_reports_an_internal_error_with_its_own_exit_code(broken_command, monkeypatch):
    monkeypatch.delenv("FITCHECK_DEBUG", raising=False)
    name, arguments = broken_command
    r = CliRunner().invoke(cli, [name, *arguments])
    assert r.exit_code == EXIT_INTERNAL_ERROR, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    assert lines[0].startswith(f"fitcheck {name}: internal error (RuntimeError: injected failure)")
    assert "report" in lines[0] and "Traceback" not in r.output


def test_the_implicit_check_command_is_named(monkeypatch):
    monkeypatch.setattr(cli.get_command(click.Context(cli), "check"), "callback", _boom)
    r = CliRunner().invoke(cli, ["qwen-7b", "--profile", "rtx-4090"])
    assert r.exit_code == EXIT_INTERNAL_ERROR
    assert r.output.startswith("fitcheck check: internal error")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_prints_the_traceback(how, monkeypatch):
    monkeypatch.setattr(cli.get_command(click.Context(cli), "profiles"), "callback", _boom)
    args, env = (["--debug", "profiles"], {}) if how == "flag" else (["profiles"], {"FITCHECK_DEBUG": "1"})
    r = CliRunner().invoke(cli, args, env=env)
    assert r.exit_code == EXIT_INTERNAL_ERROR
    assert "Traceback (most recent call last)" in r.output and "injected failure" in r.output


def test_internal_error_exit_code_is_outside_the_verdict_codes():
    assert EXIT_INTERNAL_ERROR not in (0, 1, 2, 3)


def test_console_script_uses_the_handler(tmp_path):
    # A real process: an exception raised under the entry point exits 70 with one line.
    code = ("import fitcheck.cli as c, click\n"
            "cmd = c.cli.get_command(click.Context(c.cli), 'profiles')\n"
            "cmd.callback = lambda **k: 1 / 0\n"
            "c.main(['profiles'])\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == EXIT_INTERNAL_ERROR
    assert p.stderr.count("\n") == 1 and "ZeroDivisionError" in p.stderr
