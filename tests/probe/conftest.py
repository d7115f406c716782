from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "probe"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True)
def fresh_nvml_state():
    """Each test starts and ends with NVML not initialised (the probe caches it per process)."""
    from fitcheck.probe import nvidia

    nvidia._state.update(module=None, error=None, done=False)
    yield
    nvidia._state.update(module=None, error=None, done=False)


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Create ``files`` ({'sys/fs/cgroup/memory.max': 'max\\n'}) under ``root``."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def tree(tmp_path):
    return lambda files: write_tree(tmp_path, files)
