"""Every test runs with an empty user config folder and cache and no FITCHECK_* settings from the caller's
environment, so a developer's own saved profiles, catalog models or FITCHECK_PROFILE never change a result; and
with FITCHECK_NO_BENCH=1, so no check on this machine spends a quarter second measuring its RAM bandwidth."""

import itertools
import os

import pytest

_TEST_NUMBER = itertools.count()


@pytest.fixture(scope="session")
def _user_dirs(tmp_path_factory):
    return tmp_path_factory.mktemp("user-dirs")


@pytest.fixture(autouse=True)
def _isolated_user_config(_user_dirs, monkeypatch):
    for name in list(os.environ):
        if name.startswith("FITCHECK_"):
            monkeypatch.delenv(name)
    # The answer wraps at $COLUMNS (fitcheck.render.layout); a test that reads bytes sets its own width.
    monkeypatch.delenv("COLUMNS", raising=False)
    # Each test's own folders, not created: a missing folder reads as empty, and fitcheck creates what it
    # writes (parents included).  tmp_path_factory.mktemp twice per test scanned the ever larger base folder
    # each time and left ~4,500 folders for a later run to delete: 3-4 ms a test here, and as long again
    # deleting them.
    home = _user_dirs / str(next(_TEST_NUMBER))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg-config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg-cache"))  # probe --bench's readings
    # A check on this machine without a RAM-bandwidth reading would measure it (about 0.25 s): the tests that
    # mean to measure unset this (tests/probe/test_auto_bench.py, with a fake measurement).
    monkeypatch.setenv("FITCHECK_NO_BENCH", "1")


@pytest.fixture(scope="module")
def node():
    """The one multi-node profile with a [cluster] table (8x-h100), shared by the multi-node tests."""
    from fitcheck.profiles import load_profile

    return load_profile("8x-h100")


@pytest.fixture
def no_one_node_holds_deepseek(monkeypatch):
    """The shipped profiles without 8x-h200, whose one node holds DeepSeek-R1 at its own FP8 (8 × 141 GB): the
    tests of `where`'s multi-node rows ask for a model no single machine serves at its default, which `where` then
    rents several nodes of."""
    import fitcheck.profiles as profiles

    shipped = profiles.list_profiles
    monkeypatch.setattr(profiles, "list_profiles", lambda *a, **k: [m for m in shipped(*a, **k)
                                                                      if m.name != "8x-h200"])
