"""Loads and imports replace only after they succeed (issue 42, item 5): TorchRL's ``loads`` and
``load_state_dict``, SB3's ``load_replay_buffer``, ``import_hdf5`` and ``import_dopamine``. Whatever
they replace (a buffer's own store, a model's buffer) is replaced only once the new content is complete;
a load that fails (a flipped byte in the dump, an interrupt part way) leaves the old store as it was, and
no partial files beside it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from mmreplay import CorruptStoreError, ReplayStore


def flip_a_stored_frame_byte(store_path: Path) -> None:
    """Flip one byte in the middle of the frames a store has written (a frame every read of all the
    stored transitions decodes fails its checksum)."""
    written = json.loads((store_path / "header.json").read_text())["commit"]["bytes_written"]
    segment = sorted((store_path / "frames").glob("*.seg"))[0]
    with open(segment, "r+b") as file:
        file.seek(written // 2)
        byte = file.read(1)
        file.seek(written // 2)
        file.write(bytes([byte[0] ^ 0xFF]))


def tree_signature(path: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``path`` by its relative name: (size, contents); the writer's lock file aside."""
    return {str(p.relative_to(path)): (p.stat().st_size, p.read_bytes()) for p in sorted(path.rglob("*"))
            if p.is_file()}


def siblings(path: Path) -> list[str]:
    return sorted(entry for entry in os.listdir(path.parent) if entry != path.name)


# -- TorchRL ------------------------------------------------------------------------------------------


def torchrl_buffers(tmp_path: Path) -> tuple[object, object, object]:
    """A buffer of 13 stacked transitions at ``own/a.mmr``, and a dump of another buffer's 9 in
    ``checkpoint`` (its store's frames damaged by the caller where it needs)."""
    pytest.importorskip("torchrl")
    from torchrl.data import TensorDictReplayBuffer

    from mmreplay.torchrl import MmreplayStorage
    from tests.torchrl_transitions import FakeCollector

    (tmp_path / "own").mkdir()
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=[(False, False)] * 4 + [(True, False)])
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(20, tmp_path / "own" / "a.mmr", stack_size=4))
    rb.extend(collector.next_batch(13))
    other = TensorDictReplayBuffer(storage=MmreplayStorage(20, tmp_path / "b.mmr", stack_size=4))
    other.extend(collector.next_batch(9))
    other.dumps(tmp_path / "checkpoint")
    return rb, other, collector


def test_torchrl_loads_of_a_damaged_dump_leaves_the_buffers_own_store_intact(tmp_path: Path) -> None:
    rb, _, collector = torchrl_buffers(tmp_path)
    own = tmp_path / "own" / "a.mmr"
    before = rb[:]
    flip_a_stored_frame_byte(tmp_path / "checkpoint" / "storage" / "store")
    with pytest.raises(CorruptStoreError):
        rb.loads(tmp_path / "checkpoint")
    assert siblings(own) == []  # no partial copy beside it
    assert len(rb) == 13 and (rb[:] == before).all()
    rb.storage.flush()
    with ReplayStore.open(own, "r") as store:
        assert store.transitions_added == 13 and len(store) == 13
    rb.extend(collector.next_batch(2))  # the buffer goes on with its own store
    assert len(rb) == 15


def test_torchrl_loads_interrupted_part_way_leaves_the_buffers_own_store_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mmreplay.torchrl import persistence

    rb, _, _ = torchrl_buffers(tmp_path)
    own = tmp_path / "own" / "a.mmr"
    before = rb[:]
    rb.storage.flush()
    files = tree_signature(own)
    copy = persistence.copy_transitions

    def interrupted(source: ReplayStore, target: ReplayStore) -> None:
        real_add = target.add
        calls = []

        def add(*args: object, **kwargs: object) -> None:
            calls.append(1)
            if len(calls) == 5:
                raise KeyboardInterrupt
            real_add(*args, **kwargs)

        monkeypatch.setattr(target, "add", add)
        copy(source, target)

    monkeypatch.setattr(persistence, "copy_transitions", interrupted)
    with pytest.raises(KeyboardInterrupt):
        rb.loads(tmp_path / "checkpoint")
    assert siblings(own) == []
    assert (rb[:] == before).all()
    rb.storage.flush()
    assert tree_signature(own).keys() == files.keys()
    with ReplayStore.open(own, "r") as store:
        assert store.transitions_added == 13


def test_torchrl_loads_replaces_the_store_once_the_copy_is_complete(tmp_path: Path) -> None:
    rb, other, collector = torchrl_buffers(tmp_path)
    own = tmp_path / "own" / "a.mmr"
    rb.loads(tmp_path / "checkpoint")
    assert siblings(own) == []  # the old store is gone, not left beside the new one
    assert len(rb) == 9 and (rb[:] == other[:]).all()
    more = collector.next_batch(2)
    assert rb.extend(more.clone()).tolist() == other.extend(more.clone()).tolist()
    assert (rb[:] == other[:]).all()
    rb.storage.flush()
    with ReplayStore.open(own, "r") as store:
        assert store.transitions_added == 11


def test_torchrl_load_state_dict_of_a_damaged_store_leaves_the_buffers_own_store_intact(tmp_path: Path) -> None:
    rb, other, _ = torchrl_buffers(tmp_path)
    own = tmp_path / "own" / "a.mmr"
    before = rb[:]
    state = other.state_dict()
    other.storage.store.close()
    flip_a_stored_frame_byte(tmp_path / "b.mmr")
    with pytest.raises(CorruptStoreError):
        rb.load_state_dict(state)
    assert siblings(own) == [] and (rb[:] == before).all()


def test_torchrl_loads_into_a_storage_with_no_store_yet_leaves_nothing_on_failure(tmp_path: Path) -> None:
    rb, _, _ = torchrl_buffers(tmp_path)
    from torchrl.data import TensorDictReplayBuffer

    from mmreplay.torchrl import MmreplayStorage

    fresh = TensorDictReplayBuffer(storage=MmreplayStorage(20, tmp_path / "own" / "c.mmr", stack_size=4))
    flip_a_stored_frame_byte(tmp_path / "checkpoint" / "storage" / "store")
    with pytest.raises(CorruptStoreError):
        fresh.loads(tmp_path / "checkpoint")
    assert siblings(tmp_path / "own" / "a.mmr") == []  # neither c.mmr nor a partial copy of it
    assert len(fresh) == 0
