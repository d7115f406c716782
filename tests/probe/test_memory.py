from __future__ import annotations

from fitcheck.probe.cgroup import ancestors, parse_proc_cgroup
from fitcheck.probe.memory import (
    CgroupMemoryLevel,
    effective_memory,
    parse_limit,
    parse_meminfo,
    read_cgroup_memory,
    read_memory,
)

GIB = 1024**3
V1_UNLIMITED = "9223372036854771712\n"  # 0x7FFFFFFFFFFFF000, what v1 shows with no limit

MEMINFO = """MemTotal:       32768000 kB
MemFree:         1000000 kB
MemAvailable:   20971520 kB
SwapTotal:       8388608 kB
SwapFree:        4194304 kB
"""


def test_parse_meminfo_in_bytes():
    info = parse_meminfo(MEMINFO)
    assert info["MemTotal"] == 32768000 * 1024 and info["MemAvailable"] == 20 * GIB
    assert info["SwapFree"] == 4 * GIB


def test_parse_limit_values():
    assert parse_limit("max\n") is None
    assert parse_limit(V1_UNLIMITED) is None
    assert parse_limit(str(2**60)) is None
    assert parse_limit("4294967296\n") == 4 * GIB
    assert parse_limit("garbage") is None and parse_limit(None) is None


def test_proc_cgroup_and_ancestors():
    lines = parse_proc_cgroup("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/user.slice/app.scope\n")
    assert lines[1].controllers == ("cpu", "cpuacct")
    assert lines[2].hierarchy_id == "0" and lines[2].controllers == ()
    assert ancestors("/a/b") == ["/a/b", "/a", "/"]
    assert ancestors("/") == ["/"]


def test_headroom_subtracts_reclaimable_cache():
    level = CgroupMemoryLevel("x", limit_bytes=8 * GIB, usage_bytes=5 * GIB, inactive_file_bytes=2 * GIB)
    assert level.headroom_bytes == 5 * GIB  # 8 - (5 - 2)


def test_effective_memory_takes_the_tightest():
    levels = [CgroupMemoryLevel("child", 16 * GIB, 3 * GIB, 1 * GIB),
              CgroupMemoryLevel("parent", 6 * GIB, 4 * GIB, 0),
              CgroupMemoryLevel("root", None, 50 * GIB, 0)]
    assert effective_memory(30 * GIB, levels) == (6 * GIB, 2 * GIB)
    assert effective_memory(1 * GIB, levels) == (6 * GIB, 1 * GIB)  # the OS can be tighter
    assert effective_memory(30 * GIB, []) == (None, 30 * GIB)


def test_cgroup_v2_nested_parent_limit_is_smaller(tree):
    root = tree({
        "proc/self/cgroup": "0::/kubepods/pod1/ctr\n",
        "proc/meminfo": MEMINFO,
        "sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
        "sys/fs/cgroup/kubepods/memory.max": "max\n",
        "sys/fs/cgroup/kubepods/pod1/memory.max": "6442450944\n",  # 6 GiB
        "sys/fs/cgroup/kubepods/pod1/memory.current": str(3 * GIB),
        "sys/fs/cgroup/kubepods/pod1/memory.stat": f"anon 1000\nfile 2000\ninactive_file {1 * GIB}\nactive_file 5\n",
        "sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "8589934592\n",  # 8 GiB: looser than the pod
        "sys/fs/cgroup/kubepods/pod1/ctr/memory.current": str(2 * GIB),
        "sys/fs/cgroup/kubepods/pod1/ctr/memory.stat": "inactive_file 0\n",
    })
    levels = read_cgroup_memory(str(root))
    assert [level.limit_bytes for level in levels] == [8 * GIB, 6 * GIB, None, None]  # ctr, pod1, kubepods, root
    memory = read_memory(str(root))
    assert memory.cgroup_limit_bytes == 6 * GIB
    assert memory.available_bytes == 4 * GIB  # pod: 6 - (3 - 1); container: 8 - 2 = 6; OS: 20
    assert memory.total_bytes == 32768000 * 1024 and memory.swap_total_bytes == 8 * GIB


def test_cgroup_v2_no_limit(tree):
    root = tree({
        "proc/self/cgroup": "0::/\n",
        "proc/meminfo": MEMINFO,
        "sys/fs/cgroup/cgroup.controllers": "memory\n",
        "sys/fs/cgroup/memory.max": "max\n",
    })
    memory = read_memory(str(root))
    assert memory.cgroup_limit_bytes is None and memory.available_bytes == 20 * GIB


def test_cgroup_v1_sentinel_and_limit(tree):
    root = tree({
        "proc/self/cgroup": "9:pids:/\n4:memory:/docker/abc\n0::/\n",
        "proc/meminfo": MEMINFO,
        "sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED,
        "sys/fs/cgroup/memory/docker/memory.limit_in_bytes": V1_UNLIMITED,
        "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": str(2 * GIB),
        "sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes": str(1 * GIB),
        # v1 memory.stat: the hierarchical total_* figures are the ones to use
        "sys/fs/cgroup/memory/docker/abc/memory.stat": f"inactive_file 1\ntotal_inactive_file {GIB // 2}\n",
    })
    memory = read_memory(str(root))
    assert memory.cgroup_limit_bytes == 2 * GIB
    assert memory.available_bytes == 2 * GIB - (GIB - GIB // 2)


def test_v1_container_without_namespace_reads_mount_root(tree):
    # Inside the container /sys/fs/cgroup/memory IS the container's cgroup; /docker/abc is absent.
    root = tree({
        "proc/self/cgroup": "4:memory:/docker/abc\n",
        "proc/meminfo": MEMINFO,
        "sys/fs/cgroup/memory/memory.limit_in_bytes": str(3 * GIB),
        "sys/fs/cgroup/memory/memory.usage_in_bytes": "0",
    })
    assert read_memory(str(root)).cgroup_limit_bytes == 3 * GIB


def test_no_cgroup_information(tree):
    root = tree({"proc/meminfo": MEMINFO})
    memory = read_memory(str(root))
    assert memory.cgroup_limit_bytes is None and memory.available_bytes == 20 * GIB
