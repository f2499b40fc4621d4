"""A header's sizes are checked against what the machine can give before anything is allocated, mapped
or reserved: files can be sparse, so a store of a few KiB on disk may declare rings
of 2^40 slots. What it cannot have raises ``StoreLimitError`` (an ``OSError``: ENOMEM or ENOSPC)."""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hostile_cases import build_store, sparse_store
from test_hostile_inputs import escaped, run_cases

from mmreplay import PrioritizedSampler, ReplayStore, StoreLimitError

ROOT = Path(__file__).resolve().parent.parent


def test_headers_asking_for_large_rings_in_sparse_files_end_in_a_library_error_within_the_bound() -> None:
    # Each case under an address-space limit 512 MiB above what the process had: opened read-only, read,
    # sampled, verified, opened to append. Main let 12 of these 15 out as MemoryError, OSError ENOMEM from
    # a memory map, or the compiled read's ValueError.
    report = run_cases("sparse")
    assert escaped(report) == []
    cases = report["cases"]
    assert isinstance(cases, list)
    for slots in (24, 28, 32, 36, 40):  # the issue's: a read-only open and sample took 6.3 GB and 21.8 s
        assert f"prioritized row_slots=2**{slots} => library:StoreLimitError" in cases
    assert "uniform stack_size=2**20 => library:StoreLimitError" in cases
    assert "prioritized row_slots=2**16 => ok" in cases and "uniform stack_size=2**12 => ok" in cases


def test_a_read_only_open_of_a_sparse_prioritized_store_is_refused_before_its_tree_is_allocated(tmp_path: Path) -> None:
    # In a child whose address space is capped 512 MiB above what it has mapped: the reader's tree of
    # 2^24 slots needs 1 GiB, and the refusal names the header's row_slots and what was needed.
    build_store(tmp_path / "small.mmr", prioritized=True)
    sparse_store(tmp_path / "small.mmr", tmp_path / "big.mmr", row_slots=2**24)
    script = f"""
import resource, sys
from pathlib import Path
from mmreplay import ReplayStore, StoreLimitError
size = next(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines()
            if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (size + (512 << 20), size + (512 << 20)))
try:
    ReplayStore.open({str(tmp_path / 'big.mmr')!r}, "r")
except StoreLimitError as error:
    print(error.errno, error)
# This process's peak resident memory (VmHWM: since its exec; ru_maxrss would count the parent's before)
print(next(int(line.split()[1]) // 1024 for line in Path("/proc/self/status").read_text().splitlines()
           if line.startswith("VmHWM:")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    refusal, peak_mib = done.stdout.splitlines()
    assert refusal.startswith(f"{errno.ENOMEM} [Errno {errno.ENOMEM}] ")
    assert "priorities.tree: the priorities of 16,777,216 row slots (the header's row_slots) needs 536,871,296 " \
           "bytes of memory; this process can get" in refusal
    assert int(peak_mib) < 256  # nothing of the tree was allocated


@pytest.fixture
def small_filesystem(tmp_path: Path):
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 16 MiB tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        gc.collect()  # a refused open's half-made store (in its traceback's frames) holds files mapped
        if subprocess.run(["umount", str(mount_point)], check=False, capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


def used_bytes(path: Path) -> int:
    status = os.statvfs(path)
    return (status.f_blocks - status.f_bfree) * status.f_frsize


def test_a_writer_of_a_sparse_prioritized_store_reserves_nothing_when_the_disk_cannot_hold_its_scratch(
    small_filesystem: Path,
) -> None:
    # The issue's: a 76 KiB store filled a 600 MB disk. Here 2^19 row slots need 20 MiB of scratch
    # reserved on a 16 MiB file system: refused, nothing reserved; a reader (16 MiB of memory) still opens.
    build_store(small_filesystem / "small.mmr", prioritized=True)
    sparse_store(small_filesystem / "small.mmr", small_filesystem / "big.mmr", row_slots=2**19)
    before = used_bytes(small_filesystem)
    with pytest.raises(StoreLimitError, match=r"priorities.tree: the priorities of 524,288 row slots \(the header's "
                                              r"row_slots\) needs 20,9\d\d,\d{3} bytes of disk reserved; the file "
                                              r"system of '.*big.mmr' has [\d,]+ free") as refused:
        ReplayStore.open(small_filesystem / "big.mmr", "r+")
    assert refused.value.errno == errno.ENOSPC and isinstance(refused.value, OSError)
    assert used_bytes(small_filesystem) == before
    with ReplayStore.open(small_filesystem / "big.mmr", "r") as store:
        assert len(store.sample(4, rng=0)) == 4


def test_a_writer_within_the_free_space_reserves_its_scratch_as_before(small_filesystem: Path) -> None:
    with ReplayStore.create(small_filesystem / "s.mmr", frame_shape=(4, 4), capacity=16,
                            sampler=PrioritizedSampler()) as store:
        store.add(np.zeros((4, 4), np.uint8), 0, 1.0, np.ones((4, 4), np.uint8), False, False)
    tree = small_filesystem / "s.mmr" / "priorities.tree"
    assert tree.stat().st_blocks * 512 >= 40 * 2048  # 1,040 row slots: a tree of 2,048, 40 bytes a slot


def test_a_store_of_more_than_1024_frames_a_stack_reads_without_the_compiled_path(tmp_path: Path) -> None:
    # The compiled read takes stacks of at most 1,024 frames; main raised its "out of range" ValueError.
    size = 1100
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(2, 2), capacity=8, stack_size=size) as store:
        for t in range(3):
            store.add(np.full((2, 2), t, np.uint8), 0, 0.0, np.full((2, 2), t + 1, np.uint8), False, False)
        batch = store.read([0, 1, 2])
        assert batch.obs.shape == (3, size, 2, 2)
        assert batch.obs[:, -1, 0, 0].tolist() == [0, 1, 2] and batch.next_obs[:, -1, 0, 0].tolist() == [1, 2, 3]
        assert batch.obs[2, : size - 2, 0, 0].tolist() == [0] * (size - 2)  # padded with the first frame
        assert store.sample(5, rng=0).obs.shape == (5, size, 2, 2)
