"""A fresh clone runs the benchmarks on its own: everything they read lives in the repository.

The repository's files (what git tracks, plus new files not ignored: what a commit would hold) are
copied to an empty folder, and the accuracy scripts README quotes run there, reading only that copy.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {  # command -> a line its summary must print (the figures README quotes)
    "benchmarks/accuracy.py": r"^inference: 112 rows, median \|error\| [0-9.]+ %",
    "benchmarks/speed_accuracy.py": r"^all: 358 rows, ratio predicted/measured median",
    "-m benchmarks.measure.compare": r"rows",
}


def _repository_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("clone") / "fitcheck"
    for rel in _repository_files():
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest)
    return target


@pytest.mark.parametrize("command", list(SCRIPTS))
def test_benchmark_runs_from_a_fresh_clone(clone, command):
    args = command.split()
    p = subprocess.run([sys.executable, *args], cwd=clone, capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(clone), "HOME": str(clone)})
    assert p.returncode == 0, p.stderr[-2000:]
    assert re.search(SCRIPTS[command], p.stdout, re.M), p.stdout[-2000:]


def test_no_benchmark_or_test_reads_outside_the_repository():
    pattern = re.compile(r"REPO\.parent|ROOT\.parent|/work/|\.\./shared|parents\[[3-9]\]")
    offenders = []
    for path in [*(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.sh"),
                 *(ROOT / "tests").rglob("*.py")]:
        if path == Path(__file__):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []


def test_every_data_table_has_its_source_and_licence_noted():
    notes = (ROOT / "benchmarks" / "data" / "SOURCES.md").read_text()
    tables = sorted(p.relative_to(ROOT / "benchmarks" / "data").as_posix()
                    for p in (ROOT / "benchmarks" / "data").rglob("*") if p.suffix in (".csv", ".json"))
    assert tables and all(f"`{t}`" in notes for t in tables), tables
