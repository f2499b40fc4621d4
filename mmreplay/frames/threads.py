"""How many threads share a batch of frames, decoding or compressing it: from the batch's size, at most
the cores this process may use, at most what the caller allows (``decode_threads=``).

The compiled decoders and a vector add's compiled compression share one call's work between the
calling thread and helper threads that sleep between calls (``_c/pool/work_pool.c``). The cores a process may use are its CPU affinity (``os.sched_getaffinity``) and,
in a container, its cgroup's CPU quota: a container allowed 4 CPUs of a 64-core host that decoded on 64
threads would spend its quota in the first few milliseconds of each period and then stall until the
next one. Both codecs (``lz4_codec``, ``reference_codec``) and the compiled read of a sampled batch ask
``batch_threads``; the store resolves ``thread_limit`` once, when it opens.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path

from mmreplay.validation import MAX_DECODE_THREADS

# The most threads one batch may use: the compiled pool's POOL_MAX_THREADS (_c/work_pool.h).
MAX_THREADS = MAX_DECODE_THREADS

# A second thread pays from about half a sampled batch: see the benchmarks page for how a sampled batch's
# rate changes with it (benchmarks/bench_sampling_threads.py).
SPLIT_MIN_BYTES = 512 << 10
# Each thread past the second from this many more decoded bytes: ~9 Atari frames, two of the pool's
# tasks of 4 frames, a few microseconds of decoding against the ~1 us a helper takes to join a batch.
# On 16 cores (issue 25) a batch of 32 MsPacman stacks (1.1 MB decoded) sampled 1.70x the numpy ring on
# 12 threads and 1.44x on 8, against 0.55x on 2: this gives it 11.
BYTES_PER_THREAD = 64 << 10

# Compressing a frame costs a few times decoding it (lz4 compresses an Atari frame in ~3-10 us), so a
# helper pays for a smaller share: one thread for each ~12 KiB of a call's frames (about two 84x84
# frames: a vector of envs' new frames, ``encode_frames``' batch), at most one a frame. Only from
# COMPRESS_MIN_CORES usable cores: on the 2-core development VM, shared with other jobs (load ~7), a helper
# that lost its core mid-frame held the caller up (8 MsPacman frames appended in 79 us alone, 192 us
# with a helper; 160 frames compressed in 990 us alone, 1,873 us with one), and adds must stay as fast
# as they were there. Decoding keeps its measured split at two cores (SPLIT_MIN_BYTES).
COMPRESS_BYTES_PER_THREAD = 12 << 10
COMPRESS_MIN_CORES = 4
CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")


def batch_threads(nbytes: int, limit: int) -> int:
    """Threads for a batch of ``nbytes`` decoded bytes, at most ``limit``: one below
    ``SPLIT_MIN_BYTES`` (tiny batches, CartPole's 1.6 KB, never wake a helper: that would cost more
    than their whole decode), two from it, and one more for each further ``BYTES_PER_THREAD``. On 2
    cores that is the measured ``1 if n < split_rows else 2``."""
    if nbytes < SPLIT_MIN_BYTES or limit < 2:
        return 1
    return min(limit, 2 + (nbytes - SPLIT_MIN_BYTES) // BYTES_PER_THREAD, MAX_THREADS)


def helper_rows(row_nbytes: int) -> int:
    """The fewest rows of ``row_nbytes`` decoded bytes each that ``batch_threads`` may give a helper: a
    caller that decides per batch from its row count skips the call below it (CartPole's batches)."""
    return -(-SPLIT_MIN_BYTES // row_nbytes)


def compress_threads(count: int, frame_nbytes: int, limit: int) -> int:
    """Threads for compressing ``count`` frames of ``frame_nbytes`` bytes in one call, at most ``limit``:
    one for each ``COMPRESS_BYTES_PER_THREAD`` of frames, at most one a frame (a single frame, or two
    Atari frames, compress on the calling thread), and one where ``limit`` is below ``COMPRESS_MIN_CORES``."""
    if limit < COMPRESS_MIN_CORES:
        return 1
    return max(1, min(limit, count, count * frame_nbytes // COMPRESS_BYTES_PER_THREAD, MAX_THREADS))


def thread_limit(cap: int | None = None) -> int:
    """The most threads a batch may decode on: the cores this process may use (``usable_cores``), at
    most ``cap`` (``decode_threads=``; None: no cap) and ``MAX_THREADS``."""
    return max(1, min(usable_cores(), MAX_THREADS if cap is None else cap, MAX_THREADS))


def background_limit(limit: int) -> int:
    """The most threads a batch decodes on when a background thread prepares it while its consumer works
    (``batches()``): ``limit``, less the consumer's core (at least 1). A learner's thread that launches
    kernels from Python runs on one core the whole time; a decode that took every core made it wait for
    one: on the 2-core machine (``benchmarks/bench_feed_gil.py``, a learner of 400 small torch ops an
    update, MsPacman batches of 32) it kept 0.58-0.65 of its rate fed by a two-thread decode and
    0.77-0.85 by a one-thread one."""
    return max(1, min(limit, usable_cores() - 1))


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, at most its cgroup's CPU quota rounded down
    (at least 1). The quota is read once per process (~40 us of file reads); the affinity every call
    (~0.5 us), as ``os.sched_setaffinity`` may change it."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_limit_of_this_process()
    if quota is not None:
        cores = min(cores, max(1, math.floor(quota)))
    return max(1, cores)


@functools.cache
def _cgroup_limit_of_this_process() -> float | None:
    return cgroup_cpu_limit()


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> float | None:
    """The CPUs a cgroup CPU quota allows this process (quota / period), the smallest along its cgroup
    and the cgroup's ancestors; None where no quota is set or none can be read.

    cgroup v2: ``cpu.max`` ("max 100000", or "<quota> <period>") in the directory that ``self_cgroup``'s
    ``0::<path>`` line names under ``root``, and in its parents. cgroup v1: ``cpu.cfs_quota_us`` (-1: no
    quota) and ``cpu.cfs_period_us`` under the cpu controller's mount (``root/cpu``, ``root/cpu,cpuacct``,
    or the line's own controller list). A container usually sees its own cgroup as the mount's root, where
    the path the line names (the host's) does not exist: the mount's root is read then.
    """
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    limits: list[float | None] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            limits += [_cpu_max(directory / "cpu.max") for directory in _ancestors(root, path)]
        elif "cpu" in controllers.split(","):
            for mount in dict.fromkeys([root / controllers, root / "cpu", root / "cpu,cpuacct"]):
                limits += [_cfs_quota(directory) for directory in _ancestors(mount, path)]
    if not lines:  # no /proc/self/cgroup: the mount roots alone
        limits += [_cpu_max(root / "cpu.max"), _cfs_quota(root / "cpu"), _cfs_quota(root / "cpu,cpuacct")]
    found = [limit for limit in limits if limit is not None]
    return min(found) if found else None


def _ancestors(mount: Path, path: str) -> list[Path]:
    """``mount / path`` and its parents up to ``mount``, those that exist."""
    directories = [mount]
    parts = [part for part in path.split("/") if part and part not in (".", "..")]
    for depth in range(1, len(parts) + 1):
        directories.append(mount.joinpath(*parts[:depth]))
    return [directory for directory in directories if directory.is_dir()]


def _cpu_max(file: Path) -> float | None:
    try:
        quota, period = file.read_text().split()[:2]
        return None if quota == "max" else _ratio(int(quota), int(period))
    except (OSError, ValueError):
        return None


def _cfs_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota < 0 else _ratio(quota, period)


def _ratio(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None
