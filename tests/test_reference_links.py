"""Damaged links in an ``lz4-reference`` store are corruption, listed per step by verify.

Each frame-table entry's links (``prev_delta``: the frame before it in its episode; ``ref_delta``: the
frame it is compressed against) are overwritten with values that lead outside the ring; reading the
transitions that use it raises ``CorruptStoreError`` and ``verify`` lists the damaged steps instead of
stopping. Entry layout (docs/formats.md, format version 5): the links' field holds prev_delta in its low
bits (as many as the ring's frame_slots need) and ref_delta above them (as many as max_distance needs).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import store_files

from mmreplay import CorruptStoreError, ReplayStore
from mmreplay.cli import verify_store

LARGEST = -1  # the largest value the link's bits hold


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ref") / "s.mmr"
    with ReplayStore.create(path, frame_shape=(6, 6), capacity=64, stack_size=3, frame_encoding="lz4-reference") as store:
        for t in range(40):
            obs = np.stack([np.full((6, 6), t + k, np.uint8) for k in range(3)])
            next_obs = np.stack([np.full((6, 6), t + k + 1, np.uint8) for k in range(3)])
            store.add(obs, 0, 0.0, next_obs, t % 13 == 12, False)
    return path


@pytest.mark.parametrize("field,value", [("prev_delta", LARGEST), ("prev_delta", 1000), ("ref_delta", LARGEST),
                                         ("ref_delta", 500)])
@pytest.mark.parametrize("frame", [3, 17, 30])
def test_a_damaged_link_is_corruption_that_verify_lists_per_step(built: Path, tmp_path: Path, field: str,
                                                                   value: int, frame: int) -> None:
    path = tmp_path / "s.mmr"
    shutil.copytree(built, path)
    entries = store_files.entry_format(path)
    if value == LARGEST:
        value = (1 << (entries.prev_bits if field == "prev_delta" else entries.ref_bits)) - 1
    store_files.set_links(path, frame, **{field: value})
    try:
        store = ReplayStore.open(path)
    except CorruptStoreError:
        return  # found at open: also a library error
    with store:
        failed = []
        for step in store.stored_steps:
            try:
                store.read([step])
            except CorruptStoreError:
                failed.append(step)
    report = verify_store(str(path))
    assert failed and set(failed) <= set(report["damaged_steps"])
    assert report["damaged_frames"][0]["step"] == frame
