"""The memory this process may really use: the lower of the machine's ``MemAvailable`` and the room its
memory cgroup leaves (a Docker, Kubernetes or Slurm job's limit, which the machine's figure does not see).

A cgroup's room is its limit minus its usage, at the process's own cgroup and at each cgroup above it
(the tightest wins), with the file pages the kernel can reclaim (``memory.stat``'s ``active_file`` and
``inactive_file``) left out of the usage, as ``MemAvailable`` counts them available: otherwise a store
that fits would count its own cached pages against itself. Both cgroup versions are read: v2's
``memory.max`` / ``memory.current``, v1's ``memory.limit_in_bytes`` / ``memory.usage_in_bytes``, each
found through ``/proc/self/cgroup`` and the cgroup file systems ``/proc/self/mountinfo`` lists. Every
path is read below ``root`` (``/`` on a real system, a fake tree in the tests); a file that is missing
or unreadable means no figure from it, never an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# cgroup v1 writes "no limit" as the largest page-aligned counter (0x7FFFFFFFFFFFF000 on 4 KiB pages).
_V1_UNLIMITED = 1 << 62


@dataclass(frozen=True)
class CgroupRoom:
    """What one memory cgroup leaves this process: ``limit - usage`` bytes (``usage`` without the
    reclaimable file pages), read from the cgroup directory ``path`` of cgroup ``version`` 1 or 2."""

    version: int
    path: Path
    limit: int
    usage: int

    @property
    def room(self) -> int:
        return max(0, self.limit - self.usage)

    def describe(self) -> str:
        return (f"cgroup v{self.version} {self.path}: limit {_mib(self.limit)} - usage {_mib(self.usage)} "
                f"(without reclaimable file pages)")


@dataclass(frozen=True)
class UsableMemory:
    """The memory this process may use, in bytes (``None``: nothing could tell), and where the figure
    came from (``source``: ``"MemAvailable"``, a cgroup's description, or ``"unknown"``)."""

    bytes: int | None
    source: str
    mem_available: int | None
    cgroup: CgroupRoom | None


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:,.0f} MiB"


def _read(path: Path) -> str | None:
    """A small file's text (at most 1 MiB: a mountinfo of many mounts); ``None`` where it cannot be read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        chunks: list[bytes] = []
        while sum(map(len, chunks)) < 1 << 20 and (chunk := os.read(descriptor, 1 << 16)):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(descriptor)
    return b"".join(chunks).decode("ascii", "replace")


def _read_int(path: Path) -> int | None:
    """A file holding one integer; ``None`` where it is missing, unreadable, or says ``max``."""
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None  # "max" (v2's no limit), or not a number


def mem_available(root: Path = Path("/")) -> int | None:
    """The kernel's estimate of the machine's memory available without swapping (``/proc/meminfo``'s
    ``MemAvailable``), in bytes.

    Args:
        root: The directory the system's ``/proc`` is under.

    Returns:
        The bytes, or ``None`` where ``/proc/meminfo`` cannot tell (not Linux, or a kernel before 3.14).
    """
    text = _read(root / "proc/meminfo")
    for line in (text or "").splitlines():
        if line.startswith("MemAvailable:"):
            try:
                return int(line.split()[1]) * 1024
            except (ValueError, IndexError):
                return None
    return None


def _own_cgroups(root: Path) -> tuple[str | None, str | None]:
    """The process's cgroup paths from ``/proc/self/cgroup``: (v1 memory controller's, v2's)."""
    v1 = v2 = None
    for line in (_read(root / "proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and parts[0] == "0":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v1, v2


def _unescape(field: str) -> str:
    """A mountinfo path with its octal escapes (``\\040`` for a space) undone."""
    return field.encode("ascii", "replace").decode("unicode_escape") if "\\" in field else field


def _cgroup_mounts(root: Path) -> dict[int, tuple[str, Path]]:
    """The memory cgroup file systems ``/proc/self/mountinfo`` lists, by version: (the mount's root in
    the cgroup hierarchy, where it is mounted). Without a mountinfo, the usual places."""
    text = _read(root / "proc/self/mountinfo")
    if text is None:
        return {1: ("/", Path("/sys/fs/cgroup/memory")), 2: ("/", Path("/sys/fs/cgroup"))}
    mounts: dict[int, tuple[str, Path]] = {}
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields or len(fields) < 5:
            continue
        after = fields[fields.index("-") + 1 :]
        if len(after) < 3:
            continue
        fstype, options = after[0], after[2].split(",")
        version = 2 if fstype == "cgroup2" else 1 if fstype == "cgroup" and "memory" in options else None
        if version is not None and version not in mounts:
            mounts[version] = (_unescape(fields[3]), Path(_unescape(fields[4])))
    return mounts


def _cgroup_directory(root: Path, cgroup: str, mount_root: str, mount_point: Path) -> Path:
    """Where the cgroup ``cgroup`` (a path in its hierarchy) is under ``root``: the mount point plus the
    path below the mount's root; the mount point itself where the path is not below it (a container's
    cgroup namespace shows its own cgroup as ``/`` or as a path outside the mount)."""
    base = root / mount_point.relative_to("/")
    relative = Path(cgroup).relative_to("/") if cgroup.startswith("/") else Path(cgroup)
    mount = Path(mount_root).relative_to("/") if mount_root.startswith("/") else Path(mount_root)
    if ".." in relative.parts:
        return base
    try:
        return base / relative.relative_to(mount)
    except ValueError:
        return base


def _file_pages(stat: str | None, names: tuple[str, ...]) -> int:
    """The sum of ``memory.stat``'s lines ``names`` (bytes); 0 where there is no such file or line."""
    values = {}
    for line in (stat or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in names:
            try:
                values[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return sum(values.values())


def _level_room(directory: Path, version: int) -> CgroupRoom | None:
    """One cgroup directory's limit and usage, or ``None`` where it sets no limit (or its files are gone)."""
    if version == 2:
        limit = _read_int(directory / "memory.max")
        usage_file, reclaimable = "memory.current", ("active_file", "inactive_file")
    else:
        limit = _read_int(directory / "memory.limit_in_bytes")
        usage_file, reclaimable = "memory.usage_in_bytes", ("total_active_file", "total_inactive_file")
        if limit is not None and limit >= _V1_UNLIMITED:
            limit = None
    usage = None if limit is None else _read_int(directory / usage_file)
    if limit is None or usage is None:
        return None
    usage = max(0, usage - _file_pages(_read(directory / "memory.stat"), reclaimable))
    return CgroupRoom(version, directory, limit, usage)


def cgroup_levels(root: Path = Path("/")) -> tuple[int, list[Path]]:
    """The process's memory cgroup and each cgroup above it, up to the cgroup file system's mount point.

    The v1 memory controller is read where ``/proc/self/cgroup`` names one (a hybrid system mounts v2
    without the memory controller), v2 otherwise.

    Args:
        root: The directory the system's ``/proc`` and cgroup file systems are under.

    Returns:
        The cgroup version and the directories, the process's own first; no directory where nothing
        names one.
    """
    v1, v2 = _own_cgroups(root)
    mounts = _cgroup_mounts(root)
    version, cgroup = (1, v1) if v1 is not None and 1 in mounts else (2, v2)
    if cgroup is None or version not in mounts:
        return version, []
    mount_root, mount_point = mounts[version]
    top = root / mount_point.relative_to("/")
    directory = _cgroup_directory(root, cgroup, mount_root, mount_point)
    levels = [directory]
    while directory != top and top in directory.parents:
        directory = directory.parent
        levels.append(directory)
    return version, levels


class MemoryProbe:
    """Reads the memory this process may use, again at each call, from the cgroups found once (when the
    probe is made: a store's reader makes one when it opens)."""

    def __init__(self, root: Path = Path("/")) -> None:
        """``root``: the directory the system's ``/proc`` and cgroup file systems are under."""
        self.root = root
        self.version, self.levels = cgroup_levels(root)

    def cgroup_room(self) -> CgroupRoom | None:
        """The tightest room of the cgroup levels (``None`` where none sets a limit)."""
        tightest = None
        for directory in self.levels:
            level = _level_room(directory, self.version)
            if level is not None and (tightest is None or level.room < tightest.room):
                tightest = level
        return tightest

    def usable(self) -> UsableMemory:
        """The lower of ``MemAvailable`` and the cgroups' room, read now, with its source."""
        available, cgroup = mem_available(self.root), self.cgroup_room()
        if cgroup is not None and (available is None or cgroup.room < available):
            return UsableMemory(cgroup.room, cgroup.describe(), available, cgroup)
        if available is not None:
            return UsableMemory(available, "MemAvailable", available, cgroup)
        return UsableMemory(None, "unknown", None, None)


def cgroup_room(root: Path = Path("/")) -> CgroupRoom | None:
    """The tightest room the process's memory cgroup and the cgroups above it leave.

    Each level from the process's cgroup up to the cgroup file system's mount point is read
    (``cgroup_levels``); a level without a limit (v2 ``max``, v1's largest counter, or no file) does
    not count.

    Args:
        root: The directory the system's ``/proc`` and cgroup file systems are under.

    Returns:
        The level with the least room, or ``None`` where no level sets a limit or nothing can be read.
    """
    return MemoryProbe(root).cgroup_room()


def usable_memory(root: Path = Path("/")) -> UsableMemory:
    """The memory this process may use: the lower of ``MemAvailable`` and its cgroups' room.

    Args:
        root: The directory the system's ``/proc`` and cgroup file systems are under.

    Returns:
        The figure with its source; ``bytes`` is ``None`` where neither can be read.
    """
    return MemoryProbe(root).usable()
