"""The server the serve tests ask: "this machine" is a fixed probed rtx-4090 and a fixed disk, so the CLI run in
the same test answers for the same machine."""

from __future__ import annotations

import shutil
from collections import namedtuple
from dataclasses import replace

import pytest

from tests.serve.client import running

DiskUsage = namedtuple("DiskUsage", "total used free")
DISK = DiskUsage(2 * 2**40, 2**40, 2**40)   # this machine's disks, the same for the CLI and the server


def this_machine():
    """'This machine' for the module: the rtx-4090 profile as if probed (a fixed answer, CLI and server alike)."""
    from fitcheck.profiles import load_profile

    return replace(load_profile("rtx-4090"), kind="probed", source="probe", driver_version="550.54.14",
                   cuda_version="12.4")


@pytest.fixture(scope="module")
def server():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("fitcheck.probe.probe", lambda **kw: this_machine())
        mp.setattr(shutil, "disk_usage", lambda path: DISK)
        mp.delenv("VIRTUAL_ENV", raising=False)
        mp.delenv("CONDA_PREFIX", raising=False)
        with running() as s:
            yield s
