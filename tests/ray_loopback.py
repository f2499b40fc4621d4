"""How the project starts Ray: on loopback alone, in a temporary directory of its own, and the check of it.

Ray 2.60 turns ``_node_ip_address="127.0.0.1"`` into the machine's own interface address and listens on
every interface (``*:port``), unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is in the environment when
``ray`` is first imported: ``ray._private.ray_constants`` reads it then, and the processes Ray starts read
it from the environment they inherit. Importing this module sets it, so a test module imports this one
before ``ray``. ``scripts/`` and ``benchmarks/`` repeat :func:`ray_on_loopback`'s few lines.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
os.environ.update(LOOPBACK_ONLY)  # before the importing module's ``import ray``


@contextmanager
def ray_on_loopback(**options: Any) -> Iterator[Path]:
    """A local Ray cluster bound to 127.0.0.1 in a temporary directory, stopped and removed on exit.

    Yields the directory (Ray's files are in its ``ray/``). ``options`` go to ``ray.init`` over these
    defaults: ``num_cpus=2``, no dashboard, no worker logs on the driver.
    """
    os.environ.update(LOOPBACK_ONLY)
    import ray
    from ray._private import ray_constants

    if ray_constants.ENABLE_RAY_CLUSTER:
        raise RuntimeError("ray was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set, so it would listen "
                           "on every interface: import tests/ray_loopback.py before ray")
    temp = Path(tempfile.mkdtemp(prefix="mmr-ray-"))
    settings = {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False, **options}
    try:
        ray.init(**settings, _node_ip_address="127.0.0.1", _temp_dir=str(temp / "ray"))
        yield temp
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


class Listener(NamedTuple):
    """A listening TCP socket and the process that holds it."""

    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int
    pid: int
    command: str

    def __str__(self) -> str:
        return f"{self.address}:{self.port} (pid {self.pid}: {self.command})"


def is_loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``address`` is in 127.0.0.0/8 (IPv4-mapped too) or is ::1; 0.0.0.0 and :: are every interface."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def listening(root: int | None = None) -> list[Listener]:
    """The TCP sockets in LISTEN held by process ``root`` (default: this one) and its descendants.

    Read from ``/proc``: the sockets of ``/proc/net/tcp`` and ``tcp6``, matched by inode to the open
    files of each process of the tree.
    """
    owners = socket_owners(process_tree(os.getpid() if root is None else root))
    found = []
    for address, port, inode in listening_sockets():
        if inode in owners:
            found.append(Listener(address, port, owners[inode], command_line(owners[inode])))
    return found


def listening_beyond_loopback(root: int | None = None) -> list[Listener]:
    """The sockets of :func:`listening` that are not on loopback: empty when Ray listens on loopback alone."""
    return [listener for listener in listening(root) if not is_loopback(listener.address)]


def process_tree(root: int) -> set[int]:
    """``root`` and every process descended from it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                # The name, in parentheses, may hold spaces: the parent's pid is the second field after it.
                parent = int(file.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # it exited meanwhile
        children.setdefault(parent, []).append(int(entry))
    tree: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, []))
    return tree


def socket_owners(pids: set[int]) -> dict[int, int]:
    """The inode of each socket the processes ``pids`` hold open -> the pid that holds it."""
    owners = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # it exited meanwhile
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                owners[int(target[len("socket:["):-1])] = pid
    return owners


def listening_sockets() -> list[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int, int]]:
    """(address, port, inode) of every TCP socket of this network namespace in the LISTEN state."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as file:
                rows = file.read().splitlines()[1:]
        except FileNotFoundError:
            continue  # a kernel without IPv6
        for row in rows:
            fields = row.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            address, port = fields[1].split(":")
            # The address is printed as 32-bit words in the host's byte order.
            packed = b"".join(struct.pack("=I", int(address[i:i + 8], 16)) for i in range(0, len(address), 8))
            found.append((ipaddress.ip_address(packed), int(port, 16), int(fields[9])))
    return found


def command_line(pid: int) -> str:
    """The first 100 characters of process ``pid``'s command line (``?`` once it has exited)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().replace(b"\0", b" ").decode(errors="replace").strip()[:100]
    except OSError:
        return "?"
