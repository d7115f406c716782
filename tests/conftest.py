"""Every test runs with an empty user config folder and cache and no FITCHECK_* settings from the caller's
environment, so a developer's own saved profiles, catalog models or FITCHECK_PROFILE never change a result."""

import os

import pytest


@pytest.fixture(autouse=True)
def _isolated_user_config(tmp_path_factory, monkeypatch):
    for name in list(os.environ):
        if name.startswith("FITCHECK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))  # probe --bench's readings


@pytest.fixture(scope="module")
def node():
    """The one multi-node profile with a [cluster] table (8x-h100), shared by the multi-node tests."""
    from fitcheck.profiles import load_profile

    return load_profile("8x-h100")
