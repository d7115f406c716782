"""Hostile input through the CLI (a fast subset of benchmarks/hostile): one line, the right exit code,
never a traceback; plus the fixes that need a monkeypatch (an unreadable folder)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.hostile import cases as C
from fitcheck.cli import cli
from fitcheck.errors import FitcheckError


def _run(case: C.CliCase, cwd: Path, monkeypatch) -> tuple[int, str]:
    monkeypatch.chdir(cwd)
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    r = CliRunner().invoke(cli, case.argv)
    return r.exit_code, r.output


def _check(case: C.CliCase, code: int, output: str) -> None:
    assert "Traceback" not in output and code != 70, output
    assert code in case.expect, (case.name, code, output[-400:])
    if code == 2:
        assert len(output.strip().splitlines()) == 1, output
    for s in case.must_not_print:
        assert s not in output
    for s in case.must_print:
        assert s in output


@pytest.mark.parametrize("case", C.number_cases(), ids=lambda c: c.name)
def test_numbers_of_any_size_are_one_line_and_exit_2(case, tmp_path, monkeypatch):
    _check(case, *_run(case, tmp_path, monkeypatch))


# The battery's file and model-file cases, built once in a temporary folder (FIFOs, a sparse 2 GiB file,
# symlinks, GGUF and safetensors images; a few MB on disk).
_WORK = Path(tempfile.mkdtemp(prefix="fitcheck-hostile-test-"))
atexit.register(shutil.rmtree, _WORK, True)
_FILE_CASES = C.file_cases(_WORK) + C.model_cases(_WORK)


@pytest.mark.parametrize("case", _FILE_CASES, ids=lambda c: c.name)
def test_files_and_model_files(case, monkeypatch):
    _check(case, *_run(case, _WORK, monkeypatch))


def test_unreadable_model_folder_is_one_line(tmp_path, monkeypatch):
    folder = tmp_path / "m"
    folder.mkdir()

    def denied(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "is_dir", denied)
    from fitcheck.model.local import spec_from_path

    with pytest.raises(FitcheckError, match="cannot read .*Permission denied"):
        spec_from_path(folder)


def test_an_empty_folder_named_like_a_catalog_model_keeps_the_catalog_answer(tmp_path, monkeypatch):
    (tmp_path / "qwen-7b").mkdir()
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["qwen-7b", "--profile", "rtx-4090"])
    assert r.exit_code in (0, 1) and "Qwen/Qwen2.5-7B-Instruct" in r.output and "read as a model name" in r.output
    r = CliRunner().invoke(cli, ["./qwen-7b", "--profile", "rtx-4090"])
    assert r.exit_code == 2  # written as a path, it is the folder


def test_the_surfaces_batterys_readers_in_process(tmp_path):
    """benchmarks/hostile/surface_parsers.py: every new reader (receipts, the HF cache, Ollama manifests, package
    metadata, /proc/meminfo) with hostile files; a FIFO case runs in a child process that must not block."""
    from benchmarks.hostile import surface_parsers

    failures = []
    for case in surface_parsers.parser_cases(tmp_path):
        try:
            case.run()
        except (FitcheckError, ValueError):
            pass
        except Exception as exc:  # noqa: BLE001 - what the battery reports
            failures.append(f"{case.name}: {type(exc).__name__}: {exc}")
    assert not failures, failures
