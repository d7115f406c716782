"""pyproject.toml and setup.py: SPDX licence with its file, one version, every package and data folder
in the wheel, and dependencies only where the code imports them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import fitcheck

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def test_spdx_licence_and_the_licence_file():
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert not any(c.startswith("License ::") for c in PROJECT["classifiers"])  # PEP 639: the expression only
    requires = PYPROJECT["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in requires)


def test_one_version_source():
    assert "version" not in PROJECT and PROJECT["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fitcheck.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", fitcheck.__version__)


def test_metadata_a_user_can_trust():
    # No URL that points nowhere: there is no public repository yet, so pyproject.toml has no [project.urls]
    # rather than placeholders; any URL added later must be a real one.
    assert not [u for u in PROJECT.get("urls", {}).values() if re.search(r"OWNER|example\.com|TODO", u)]
    assert len(PROJECT["keywords"]) >= 5 and any(c.startswith("Programming Language :: Python :: 3.1")
                                                  for c in PROJECT["classifiers"])


def test_every_package_and_data_folder_is_in_the_wheel():
    """setup.py finds the code packages; the data folders are mapped in pyproject and listed there."""
    assert "packages" not in PYPROJECT["tool"]["setuptools"]  # no hand-written list to forget a package in
    tree = ast.parse((ROOT / "setup.py").read_text())
    assert "find_packages" in ast.dump(tree)
    from setuptools import find_packages

    found = set(find_packages(str(ROOT), include=["fitcheck", "fitcheck.*"]))
    # every folder with code: one without __init__.py is a namespace package, which find_packages skips, so
    # `pip install .` would leave it out (fitcheck.speed once was)
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "fitcheck").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert found == on_disk, on_disk - found
    mapped = PYPROJECT["tool"]["setuptools"]["package-dir"]
    assert mapped == {"fitcheck.hardware_profiles": "hardware_profiles", "fitcheck.schemas": "schemas"}
    for package, folder in mapped.items():
        assert (ROOT / folder / "__init__.py").is_file() and f'"{package}"' in (ROOT / "setup.py").read_text()
        assert package in PYPROJECT["tool"]["setuptools"]["package-data"]


def test_the_pages_files_ship_in_the_wheel():
    from fitcheck.serve.server import STATIC

    assert PYPROJECT["tool"]["setuptools"]["package-data"]["fitcheck.serve"] == ["static/*"]
    assert {p.name for p in STATIC.iterdir()} >= {"index.html", "app.js", "app.css", "favicon.svg"}
    assert not [p for p in STATIC.iterdir() if p.is_dir()]     # static/* takes no sub-folder


def test_installed_fitcheck_finds_its_data():
    from fitcheck.contracts import DOCUMENTS, all_schemas
    from fitcheck.profiles import profile_names

    assert set(all_schemas()) == set(DOCUMENTS.values()) and "rtx-4090" in profile_names()


def _imports(module: Path) -> set[str]:
    tree = ast.parse(module.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_psutil_and_py_cpuinfo_are_required_only_where_they_are_imported():
    deps = {re.split(r"[<>=;\[ ]", d, maxsplit=1)[0]: d for d in PROJECT["dependencies"]}
    users = {name: sorted(str(p.relative_to(ROOT)) for p in (ROOT / "fitcheck").rglob("*.py") if name in _imports(p))
             for name in ("psutil", "cpuinfo")}
    assert users == {"psutil": ["fitcheck/probe/memory.py", "fitcheck/probe/windows_cpu.py"],
                     "cpuinfo": ["fitcheck/probe/cpu.py"]}
    assert "sys_platform != 'linux'" in deps["psutil"]
    assert all(f"sys_platform != '{p}'" in deps["py-cpuinfo"] for p in ("linux", "darwin", "win32"))
