"""Segment files map with MADV_RANDOM exactly when they outgrow half of the available memory (see
``SegmentMaps._outgrows_page_cache``); the kernel reports the advice as the ``rr`` flag of the mapping in
/proc/self/smaps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from strategies import numbered_frame

from mmreplay import ReplayStore
from mmreplay.frames import segment_maps

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
    monkeypatch.setattr(segment_maps, "_available_memory", lambda: available)
    path = tmp_path / "store.mmr"
    with ReplayStore.create(path, frame_shape=(8, 8), capacity=50, stack_size=2) as store:
        for i in range(60):
            store.add(numbered_frame((8, 8), i), i % 3, 1.0, numbered_frame((8, 8), i + 1), False, False)
    with ReplayStore.open(path, "r") as reader:
        reader.sample(8, rng=np.random.default_rng(0))
        flags = segment_flags(reader.path)
        assert flags, "sampling mapped no segment file"
        assert all(("rr" in f) == random_access for f in flags), flags
