"""Segment files map with MADV_RANDOM exactly when they outgrow half of the memory the process may use
(``frames.page_cache``: the lower of MemAvailable and the memory cgroup's room, ``process_memory``); the
kernel reports the advice as the ``rr`` flag of the mapping in /proc/self/smaps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from strategies import numbered_frame

from mmreplay import ReplayStore
from mmreplay.cli import main
from mmreplay.frames import segment_maps
from mmreplay.frames.page_cache import read_advice
from mmreplay.process_memory import UsableMemory

SMAPS = Path("/proc/self/smaps")
pytestmark = pytest.mark.skipif(not SMAPS.exists(), reason="needs Linux's /proc/self/smaps")


def segment_flags(store_path: Path) -> list[set[str]]:
    """The VmFlags of every mapping of one of the store's segment files in this process."""
    flags, in_segment = [], False
    for line in SMAPS.read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5:  # a mapping's first line: range, perms, offset, dev, inode, path
            in_segment = len(fields) >= 6 and fields[5].startswith(str(store_path)) and fields[5].endswith(".seg")
        elif fields[0] == "VmFlags:" and in_segment:
            flags.append(set(fields[1:]))
    return flags


@pytest.mark.parametrize("available,random_access", [(1 << 50, False), (1 << 10, True)])
def test_segments_map_for_random_reads_only_when_they_outgrow_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, available: int, random_access: bool
) -> None:
    monkeypatch.setattr(segment_maps.SegmentMaps, "usable_memory", lambda _: UsableMemory(available, "test", available, None))
    path = tmp_path / "store.mmr"
    with ReplayStore.create(path, frame_shape=(8, 8), capacity=50, stack_size=2) as store:
        for i in range(60):
            store.add(numbered_frame((8, 8), i), i % 3, 1.0, numbered_frame((8, 8), i + 1), False, False)
    with ReplayStore.open(path, "r") as reader:
        reader.sample(8, rng=np.random.default_rng(0))
        flags = segment_flags(reader.path)
        assert flags, "sampling mapped no segment file"
        assert all(("rr" in f) == random_access for f in flags), flags


def noise_store(path: Path, transitions: int = 600) -> Path:
    """A store of incompressible 64x64 frames whose segment files are 1 MiB each: five of them."""
    rng = np.random.default_rng(0)
    with ReplayStore.create(path, frame_shape=(64, 64), capacity=transitions, stack_size=1,
                            frame_encoding="lz4") as store:
        for i in range(transitions):
            store.add(rng.integers(0, 256, (64, 64), dtype=np.uint8), 0, 0.0,
                      rng.integers(0, 256, (64, 64), dtype=np.uint8), False, i % 100 == 99)
    return path


def test_read_advice_is_random_only_past_half_of_the_usable_memory() -> None:
    memory = UsableMemory(100, "MemAvailable", 100, None)
    assert read_advice(50, memory).policy == "read-around"
    assert read_advice(51, memory).policy == "random"
    assert read_advice(51, memory).reason == "segment files 0 MiB > half of 0 MiB usable (MemAvailable)"
    assert read_advice(10**12, UsableMemory(None, "unknown", None, None)).policy == "read-around"
    assert "unknown" in read_advice(10**12, UsableMemory(None, "unknown", None, None)).reason
    assert read_advice(51, memory, madvise=False).policy == "read-around"
    assert "no MADV_RANDOM" in read_advice(51, memory, madvise=False).reason


def test_mapped_segments_take_the_new_policy_when_the_usable_memory_shrinks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = noise_store(tmp_path / "store.mmr")
    memory = {"bytes": 1 << 50}
    monkeypatch.setattr(segment_maps.SegmentMaps, "usable_memory",
                        lambda _: UsableMemory(memory["bytes"], "test", memory["bytes"], None))
    with ReplayStore.open(path, "r") as reader:
        reader.read([10])  # maps the first segment, read-around
        assert [("rr" in f) for f in segment_flags(reader.path)] == [False]
        memory["bytes"] = 1 << 20  # the cgroup's room shrank: the next segment mapped turns them all
        reader.read([len(reader) - 1])
        flags = segment_flags(reader.path)
        assert len(flags) == 2 and all("rr" in f for f in flags), flags
        memory["bytes"] = 1 << 50  # and back
        reader.read([len(reader) // 2])
        flags = segment_flags(reader.path)
        assert len(flags) == 3 and not any("rr" in f for f in flags), flags


def test_page_cache_advice_names_the_policy_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = noise_store(tmp_path / "store.mmr")
    monkeypatch.setattr(segment_maps.SegmentMaps, "usable_memory",
                        lambda _: UsableMemory(8 << 20, "cgroup v2 /job: limit 9 MiB - usage 1 MiB", 1 << 40, None))
    with ReplayStore.open(path, "r") as reader:
        advice = reader.page_cache_advice()
        assert (advice.policy, advice.segment_files_bytes, advice.memory.bytes) == ("random", 5 << 20, 8 << 20)
        assert advice.reason == ("segment files 5 MiB > half of 8 MiB usable "
                                 "(cgroup v2 /job: limit 9 MiB - usage 1 MiB)")
    with pytest.raises(ValueError, match="cannot tell its page-cache policy: the store .* is closed"):
        reader.page_cache_advice()


def test_info_says_which_page_cache_policy_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = noise_store(tmp_path / "store.mmr")
    monkeypatch.setattr(segment_maps.SegmentMaps, "usable_memory", lambda _: UsableMemory(10 << 20, "MemAvailable", 10 << 20, None))
    assert main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["page_cache"] == {"policy": "read-around", "reason": "segment files 5 MiB <= half of 10 MiB "
                                  "usable (MemAvailable)", "segment_files_bytes": 5 << 20, "usable_memory": 10 << 20,
                                  "memory_source": "MemAvailable"}
    assert main(["info", str(path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("page cache")]
    assert lines and lines[0].split(None, 2)[2] == ("read-around: segment files 5 MiB <= half of 10 MiB "
                                                    "usable (MemAvailable)")


# The child opens the store inside the cgroup it is moved to and prints its segments' VmFlags.
CHILD = """
import json, sys
sys.path.insert(0, sys.argv[3])
from test_page_cache_advice import segment_flags
with open(sys.argv[1] + "/cgroup.procs", "w") as procs:
    procs.write("0")  # this process
from mmreplay import ReplayStore
with ReplayStore.open(sys.argv[2], "r") as reader:
    reader.read([0])
    print(json.dumps({"policy": reader.page_cache_advice().policy,
                      "rr": ["rr" in f for f in segment_flags(reader.path)]}))
"""


def own_v1_memory_cgroup() -> Path | None:
    """This process's own cgroup v1 memory directory, where it can make a child cgroup there."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, cgroup = line.split(":", 2)
        if "memory" in controllers.split(","):
            directory = Path("/sys/fs/cgroup/memory") / cgroup.lstrip("/")
            return directory if os.access(directory, os.W_OK) else None
    return None


def test_a_store_larger_than_its_cgroup_allows_maps_for_random_reads(tmp_path: Path) -> None:
    """In a 96 MiB memory cgroup, a store whose (sparse) segment files take 64 MiB maps them MADV_RANDOM,
    on a machine whose MemAvailable would read them around."""
    parent = own_v1_memory_cgroup() if Path("/proc/self/cgroup").exists() else None
    if parent is None:
        pytest.skip("needs a writable cgroup v1 memory controller (root, hybrid or v1 host)")
    path = tmp_path / "store.mmr"
    with ReplayStore.create(path, frame_shape=(8, 8), capacity=4 << 20, stack_size=1) as store:
        store.add(numbered_frame((8, 8), 0), 0, 0.0, numbered_frame((8, 8), 1), False, False)
    with ReplayStore.open(path, "r") as reader:
        assert reader.page_cache_advice().policy == "read-around"  # this machine's MemAvailable
        assert reader.page_cache_advice().segment_files_bytes == 64 << 20
    child = parent / f"mmreplay-test-{os.getpid()}"
    child.mkdir()
    try:
        (child / "memory.limit_in_bytes").write_text(str(96 << 20))
        result = subprocess.run([sys.executable, "-c", CHILD, str(child), str(path), str(Path(__file__).parent)],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"policy": "random", "rr": [True]}
    finally:
        child.rmdir()
