"""The memory this process may use (``mmreplay.process_memory``), read from fake ``/proc`` and cgroup
trees: the machine's MemAvailable, cgroup v1 and v2 limits and usages, no limit, nested cgroups, a
container's namespaced paths, and missing or garbled files."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmreplay.process_memory import cgroup_room, mem_available, usable_memory

MIB = 1 << 20
V1_UNLIMITED = "9223372036854771712"
HYBRID_MOUNTS = (
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)
V2_MOUNTS = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def meminfo(root: Path, available_kib: int) -> None:
    write(root, "proc/meminfo", f"MemTotal:       24683504 kB\nMemFree:  1 kB\nMemAvailable:   {available_kib} kB\n")


def v2_level(root: Path, directory: str, limit: str, current: int, *, active: int = 0, inactive: int = 0) -> None:
    write(root, f"sys/fs/cgroup{directory}/memory.max", limit + "\n")
    write(root, f"sys/fs/cgroup{directory}/memory.current", f"{current}\n")
    write(root, f"sys/fs/cgroup{directory}/memory.stat",
          f"anon 1000\nfile {active + inactive}\nactive_file {active}\ninactive_file {inactive}\n")


def v1_level(root: Path, directory: str, limit: str, usage: int, *, active: int = 0, inactive: int = 0) -> None:
    base = f"sys/fs/cgroup/memory{directory}"
    write(root, f"{base}/memory.limit_in_bytes", limit + "\n")
    write(root, f"{base}/memory.usage_in_bytes", f"{usage}\n")
    write(root, f"{base}/memory.stat", f"cache {active + inactive}\nactive_file {active // 2}\n"
                                       f"total_active_file {active}\ntotal_inactive_file {inactive}\n")


def test_mem_available_reads_proc_meminfo_in_bytes(tmp_path: Path) -> None:
    meminfo(tmp_path, 1024)
    assert mem_available(tmp_path) == 1024 * 1024


def test_without_a_cgroup_the_machine_figure_is_the_usable_memory(tmp_path: Path) -> None:
    meminfo(tmp_path, 4096)
    memory = usable_memory(tmp_path)
    assert (memory.bytes, memory.source, memory.cgroup) == (4096 * 1024, "MemAvailable", None)


def test_v2_limit_minus_usage_is_used_when_below_mem_available(tmp_path: Path) -> None:
    meminfo(tmp_path, 8 * 1024 * 1024)  # 8 GiB on the machine
    write(tmp_path, "proc/self/mountinfo", V2_MOUNTS)
    write(tmp_path, "proc/self/cgroup", "0::/job.slice/job-1\n")
    v2_level(tmp_path, "/job.slice/job-1", str(300 * MIB), 120 * MIB, active=30 * MIB, inactive=10 * MIB)
    memory = usable_memory(tmp_path)
    assert memory.bytes == 300 * MIB - (120 - 40) * MIB  # the reclaimable file pages do not count as used
    assert memory.cgroup is not None and memory.cgroup.version == 2
    assert memory.cgroup.path == tmp_path / "sys/fs/cgroup/job.slice/job-1"
    assert memory.source.startswith("cgroup v2 ") and "limit 300 MiB - usage 80 MiB" in memory.source


def test_v2_max_means_no_limit(tmp_path: Path) -> None:
    meminfo(tmp_path, 4096)
    write(tmp_path, "proc/self/mountinfo", V2_MOUNTS)
    write(tmp_path, "proc/self/cgroup", "0::/job\n")
    v2_level(tmp_path, "/job", "max", 120 * MIB)
    assert cgroup_room(tmp_path) is None
    assert usable_memory(tmp_path).source == "MemAvailable"


def test_v2_a_parent_with_a_tighter_limit_wins(tmp_path: Path) -> None:
    write(tmp_path, "proc/self/mountinfo", V2_MOUNTS)
    write(tmp_path, "proc/self/cgroup", "0::/kubepods/pod1/container\n")
    v2_level(tmp_path, "/kubepods/pod1/container", "max", 50 * MIB)
    v2_level(tmp_path, "/kubepods/pod1", str(200 * MIB), 150 * MIB)
    v2_level(tmp_path, "/kubepods", str(1000 * MIB), 600 * MIB)
    room = cgroup_room(tmp_path)
    assert room is not None and (room.path, room.room) == (tmp_path / "sys/fs/cgroup/kubepods/pod1", 50 * MIB)


def test_v2_the_own_cgroup_wins_when_it_is_the_tightest(tmp_path: Path) -> None:
    write(tmp_path, "proc/self/mountinfo", V2_MOUNTS)
    write(tmp_path, "proc/self/cgroup", "0::/a/b\n")
    v2_level(tmp_path, "/a/b", str(100 * MIB), 90 * MIB)
    v2_level(tmp_path, "/a", str(200 * MIB), 100 * MIB)
    room = cgroup_room(tmp_path)
    assert room is not None and (room.path.name, room.room) == ("b", 10 * MIB)


def test_v2_a_namespaced_container_reads_the_mount_point_itself(tmp_path: Path) -> None:
    # Inside a cgroup namespace the process's cgroup is "/" and the container's cgroup is mounted whole.
    write(tmp_path, "proc/self/mountinfo", V2_MOUNTS)
    write(tmp_path, "proc/self/cgroup", "0::/\n")
    v2_level(tmp_path, "", str(512 * MIB), 12 * MIB)
    room = cgroup_room(tmp_path)
    assert room is not None and (room.path, room.room) == (tmp_path / "sys/fs/cgroup", 500 * MIB)


def test_a_cgroup_path_outside_the_mount_reads_the_mount_point(tmp_path: Path) -> None:
    write(tmp_path, "proc/self/mountinfo", V2_MOUNTS.replace(" / /sys/fs/cgroup ", " /ns /sys/fs/cgroup "))
    write(tmp_path, "proc/self/cgroup", "0::/../other\n")
    v2_level(tmp_path, "", str(64 * MIB), 4 * MIB)
    room = cgroup_room(tmp_path)
    assert room is not None and room.room == 60 * MIB


def test_v1_memory_controller_is_read_on_a_hybrid_system(tmp_path: Path) -> None:
    meminfo(tmp_path, 8 * 1024 * 1024)
    write(tmp_path, "proc/self/mountinfo", HYBRID_MOUNTS)
    write(tmp_path, "proc/self/cgroup", "9:name=systemd:/\n4:memory:/process_api/job\n3:cpuset:/\n0::/\n")
    v1_level(tmp_path, "", V1_UNLIMITED, 5000 * MIB)
    v1_level(tmp_path, "/process_api", V1_UNLIMITED, 4000 * MIB)
    v1_level(tmp_path, "/process_api/job", str(300 * MIB), 290 * MIB, active=100 * MIB, inactive=50 * MIB)
    memory = usable_memory(tmp_path)
    assert memory.bytes == 300 * MIB - 140 * MIB
    assert memory.cgroup is not None and memory.cgroup.version == 1
    assert memory.source.startswith(f"cgroup v1 {tmp_path / 'sys/fs/cgroup/memory/process_api/job'}: limit 300 MiB")


def test_v1_largest_counter_means_no_limit(tmp_path: Path) -> None:
    meminfo(tmp_path, 4096)
    write(tmp_path, "proc/self/mountinfo", HYBRID_MOUNTS)
    write(tmp_path, "proc/self/cgroup", "4:memory:/job\n0::/\n")
    v1_level(tmp_path, "", V1_UNLIMITED, 5000 * MIB)
    v1_level(tmp_path, "/job", V1_UNLIMITED, 10 * MIB)
    assert cgroup_room(tmp_path) is None and usable_memory(tmp_path).bytes == 4096 * 1024


def test_v1_docker_without_a_namespace_strips_the_mount_root(tmp_path: Path) -> None:
    # Docker's v1 bind mount: the container's cgroup is the mount's root, and /proc/self/cgroup names it.
    write(tmp_path, "proc/self/mountinfo",
          "700 699 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n")
    write(tmp_path, "proc/self/cgroup", "4:memory:/docker/abc\n")
    v1_level(tmp_path, "", str(256 * MIB), 56 * MIB)
    room = cgroup_room(tmp_path)
    assert room is not None and (room.path, room.room) == (tmp_path / "sys/fs/cgroup/memory", 200 * MIB)


def test_v1_controllers_sharing_a_hierarchy_are_found(tmp_path: Path) -> None:
    write(tmp_path, "proc/self/mountinfo", "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,cpu,memory\n")
    write(tmp_path, "proc/self/cgroup", "4:cpu,memory:/job\n")
    v1_level(tmp_path, "/job", str(100 * MIB), 60 * MIB)
    room = cgroup_room(tmp_path)
    assert room is not None and room.room == 40 * MIB


def test_a_mount_point_with_a_space_is_unescaped(tmp_path: Path) -> None:
    write(tmp_path, "proc/self/mountinfo", "30 23 0:26 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\n")
    write(tmp_path, "proc/self/cgroup", "0::/job\n")
    write(tmp_path, "sys/fs/my cgroup/job/memory.max", f"{100 * MIB}\n")
    write(tmp_path, "sys/fs/my cgroup/job/memory.current", f"{30 * MIB}\n")
    room = cgroup_room(tmp_path)
    assert room is not None and room.room == 70 * MIB  # no memory.stat: the whole usage counts


def test_without_a_mountinfo_the_usual_places_are_read(tmp_path: Path) -> None:
    write(tmp_path, "proc/self/cgroup", "0::/job\n")
    v2_level(tmp_path, "/job", str(100 * MIB), 25 * MIB)
    room = cgroup_room(tmp_path)
    assert room is not None and room.room == 75 * MIB


def test_usage_above_the_limit_leaves_no_room(tmp_path: Path) -> None:
    meminfo(tmp_path, 4096)
    write(tmp_path, "proc/self/mountinfo", V2_MOUNTS)
    write(tmp_path, "proc/self/cgroup", "0::/job\n")
    v2_level(tmp_path, "/job", str(100 * MIB), 130 * MIB)
    assert usable_memory(tmp_path).bytes == 0


def test_mem_available_wins_when_it_is_lower(tmp_path: Path) -> None:
    meminfo(tmp_path, 100 * 1024)  # 100 MiB on the machine
    write(tmp_path, "proc/self/mountinfo", V2_MOUNTS)
    write(tmp_path, "proc/self/cgroup", "0::/job\n")
    v2_level(tmp_path, "/job", str(1000 * MIB), 10 * MIB)
    memory = usable_memory(tmp_path)
    assert (memory.bytes, memory.source) == (100 * MIB, "MemAvailable")
    assert memory.cgroup is not None and memory.cgroup.room == 990 * MIB


@pytest.mark.parametrize("missing", ["memory.max", "memory.current"])
def test_a_level_missing_its_limit_or_usage_does_not_count(tmp_path: Path, missing: str) -> None:
    write(tmp_path, "proc/self/mountinfo", V2_MOUNTS)
    write(tmp_path, "proc/self/cgroup", "0::/job\n")
    v2_level(tmp_path, "/job", str(100 * MIB), 25 * MIB)
    (tmp_path / "sys/fs/cgroup/job" / missing).unlink()
    assert cgroup_room(tmp_path) is None


@pytest.mark.parametrize("cgroup_file", [None, "", "garbage\n", "0::\n"])
def test_a_missing_or_garbled_proc_self_cgroup_gives_no_cgroup(tmp_path: Path, cgroup_file: str | None) -> None:
    write(tmp_path, "proc/self/mountinfo", V2_MOUNTS)
    if cgroup_file is not None:
        write(tmp_path, "proc/self/cgroup", cgroup_file)
    v2_level(tmp_path, "", str(100 * MIB), 25 * MIB)
    room = cgroup_room(tmp_path)
    # "0::" (an empty path) is the root cgroup, which the mount point holds; the others name none.
    assert (room is not None) == (cgroup_file == "0::\n")


@pytest.mark.parametrize("text", ["", "MemAvailable:\n", "MemAvailable: lots kB\n", "MemFree: 10 kB\n"])
def test_a_garbled_meminfo_gives_no_machine_figure(tmp_path: Path, text: str) -> None:
    write(tmp_path, "proc/meminfo", text)
    assert mem_available(tmp_path) is None
    memory = usable_memory(tmp_path)
    assert (memory.bytes, memory.source) == (None, "unknown")


def test_garbled_limits_and_stats_give_no_figure_from_them(tmp_path: Path) -> None:
    write(tmp_path, "proc/self/mountinfo", V2_MOUNTS + "garbage line\n - \n")
    write(tmp_path, "proc/self/cgroup", "0::/job\n")
    write(tmp_path, "sys/fs/cgroup/job/memory.max", "a lot\n")
    write(tmp_path, "sys/fs/cgroup/job/memory.current", "\n")
    assert cgroup_room(tmp_path) is None
    write(tmp_path, "sys/fs/cgroup/job/memory.max", f"{100 * MIB}\n")
    write(tmp_path, "sys/fs/cgroup/job/memory.current", f"{50 * MIB}\n")
    write(tmp_path, "sys/fs/cgroup/job/memory.stat", "inactive_file many\nactive_file\n")
    room = cgroup_room(tmp_path)
    assert room is not None and room.room == 50 * MIB


def test_nothing_at_all_gives_an_unknown_figure(tmp_path: Path) -> None:
    memory = usable_memory(tmp_path)
    assert (memory.bytes, memory.source, memory.mem_available, memory.cgroup) == (None, "unknown", None, None)


def test_the_real_system_gives_a_figure_on_linux() -> None:
    if not Path("/proc/meminfo").exists():
        pytest.skip("not Linux")
    memory = usable_memory()
    assert memory.bytes is not None and memory.bytes > 0 and memory.mem_available is not None
    assert memory.bytes <= memory.mem_available


def test_a_probe_finds_the_cgroups_once_and_reads_their_figures_at_each_call(tmp_path: Path) -> None:
    from mmreplay.process_memory import MemoryProbe

    meminfo(tmp_path, 8 * 1024 * 1024)
    write(tmp_path, "proc/self/mountinfo", V2_MOUNTS)
    write(tmp_path, "proc/self/cgroup", "0::/job\n")
    v2_level(tmp_path, "/job", str(300 * MIB), 100 * MIB)
    probe = MemoryProbe(tmp_path)
    assert probe.levels == [tmp_path / "sys/fs/cgroup/job", tmp_path / "sys/fs/cgroup"]
    assert probe.usable().bytes == 200 * MIB
    v2_level(tmp_path, "/job", str(300 * MIB), 250 * MIB)  # the job's usage grew
    assert probe.usable().bytes == 50 * MIB
    v2_level(tmp_path, "/job", "max", 250 * MIB)  # and its limit was lifted
    assert probe.usable().source == "MemAvailable"
