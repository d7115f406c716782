"""The host: OS, version, architecture, hostname, and whether we run in a container or WSL."""

from __future__ import annotations

import os
import platform
import sys

from fitcheck.machine import Host, Unknown
from fitcheck.probe.cpu import normalise_architecture
from fitcheck.probe.files import read_text, under

CONTAINER_CGROUP_WORDS = ("docker", "containerd", "kubepods", "lxc", "libpod")


def is_container(has_dockerenv: bool, has_containerenv: bool, pid1_cgroup: str | None) -> bool:
    """Docker leaves /.dockerenv, Podman /run/.containerenv; otherwise PID 1's cgroup names the
    runtime (cgroup v1) - with cgroup namespaces (v2) it is just '0::/', which proves nothing."""
    if has_dockerenv or has_containerenv:
        return True
    return any(word in (pid1_cgroup or "") for word in CONTAINER_CGROUP_WORDS)


def is_wsl(osrelease: str | None) -> bool:
    """WSL kernels say so in /proc/sys/kernel/osrelease ('5.15.90.1-microsoft-standard-WSL2')."""
    return "microsoft" in (osrelease or "").lower()


def parse_os_release(text: str | None) -> str | None:
    """PRETTY_NAME from /etc/os-release ('Debian GNU/Linux 12 (bookworm)')."""
    for line in (text or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "PRETTY_NAME":
            return value.strip().strip('"').strip("'") or None
    return None


def _hostname() -> str:
    try:
        return os.uname().nodename
    except AttributeError:  # Windows
        return platform.node()


def read_host(root: str = "/") -> Host:
    """This host, from platform, /etc/os-release and /proc (no subprocess)."""
    architecture = normalise_architecture(platform.machine())
    if sys.platform.startswith("linux"):
        distro = parse_os_release(read_text(under(root, "/etc/os-release")))
        kernel = platform.release()
        version = f"{distro} (kernel {kernel})" if distro else f"Linux {kernel}"
        container = is_container(os.path.exists(under(root, "/.dockerenv")),
                                 os.path.exists(under(root, "/run/.containerenv")),
                                 read_text(under(root, "/proc/1/cgroup")))
        osrelease = read_text(under(root, "/proc/sys/kernel/osrelease"))
        wsl = is_wsl(osrelease) if osrelease is not None else Unknown("/proc/sys/kernel/osrelease not readable")
        return Host("linux", version, architecture, container, wsl, _hostname())
    if sys.platform == "darwin":
        release = platform.mac_ver()[0]
        return Host("darwin", f"macOS {release}" if release else Unknown("macOS version not readable"),
                    architecture, False, False, _hostname())
    name = "windows" if sys.platform.startswith("win") else sys.platform
    return Host(name, platform.version() or Unknown("not reported"), architecture,
                Unknown("not detected on this OS"), False, _hostname())
