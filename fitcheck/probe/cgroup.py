"""Where this process's cgroup lives, for the memory and CPU limits that apply to it.

``/proc/self/cgroup`` lists one line per hierarchy, ``ID:CONTROLLERS:PATH``
(man 7 cgroups).  cgroup v2 is the line ``0::/path`` and is mounted at ``/sys/fs/cgroup``
(or ``/sys/fs/cgroup/unified`` on "hybrid" systems); a v1 controller such as ``memory`` is mounted
at ``/sys/fs/cgroup/memory`` (or under its joined name, e.g. ``cpu,cpuacct``).

A limit set on any ancestor applies too, so callers walk from this process's cgroup up to the
mount root.  Inside a container without a cgroup namespace the listed path may not exist under
the container's mount (its root *is* the container's cgroup): such levels are skipped, and the
mount root is always read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fitcheck.probe.files import read_text, under


@dataclass(frozen=True)
class CgroupLine:
    """One line of /proc/self/cgroup."""

    hierarchy_id: str
    controllers: tuple[str, ...]  # () for the v2 line
    path: str  # '/', '/user.slice/...'


def parse_proc_cgroup(text: str) -> list[CgroupLine]:
    """Parse /proc/self/cgroup ('4:memory:/docker/abc', '0::/') into lines; bad lines are skipped."""
    lines = []
    for raw in text.splitlines():
        parts = raw.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy_id, controllers, path = parts
        names = tuple(name for name in controllers.split(",") if name)
        lines.append(CgroupLine(hierarchy_id, names, path or "/"))
    return lines


def ancestors(path: str) -> list[str]:
    """'/a/b' -> ['/a/b', '/a', '/']: the cgroup and each parent up to the root."""
    parts = [part for part in path.split("/") if part and part != "."]
    return ["/" + "/".join(parts[:n]) for n in range(len(parts), -1, -1)]


def cgroup_dirs(lines: list[CgroupLine], controller: str, root: str = "/") -> tuple[int, list[str]]:
    """(version, folders from this process's cgroup up to the mount root) holding ``controller``.

    v1 wins when the controller is mounted there (hybrid systems keep memory/cpu on v1 and an
    empty v2 tree); otherwise v2.  (0, []) when neither is found.
    """
    cgroup_root = under(root, "/sys/fs/cgroup")
    for line in lines:
        if controller in line.controllers:
            for name in (controller, ",".join(line.controllers)):
                mount = os.path.join(cgroup_root, name)
                if os.path.isdir(mount):
                    return 1, _existing_levels(mount, line.path)
    for line in lines:
        if line.hierarchy_id == "0" and not line.controllers:
            for mount in (cgroup_root, os.path.join(cgroup_root, "unified")):
                if os.path.exists(os.path.join(mount, "cgroup.controllers")):
                    return 2, _existing_levels(mount, line.path)
    return 0, []


def _existing_levels(mount: str, path: str) -> list[str]:
    levels = [os.path.join(mount, level.lstrip("/")) if level != "/" else mount for level in ancestors(path)]
    return [level for level in levels if os.path.isdir(level)]


def read_cgroup_dirs(controller: str, root: str = "/") -> tuple[int, list[str]]:
    """:func:`cgroup_dirs` for this process (reads /proc/self/cgroup under ``root``)."""
    text = read_text(under(root, "/proc/self/cgroup"))
    if text is None:
        return 0, []
    return cgroup_dirs(parse_proc_cgroup(text), controller, root)
