"""Loads and imports replace only after they succeed: TorchRL's ``loads`` and
``load_state_dict``, SB3's ``load_replay_buffer``, ``import_hdf5`` and ``import_dopamine``. Whatever
they replace (a buffer's own store, a model's buffer) is replaced only once the new content is complete;
a load that fails (a flipped byte in the dump, an interrupt part way) leaves the old store as it was, and
no partial files beside it."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

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


# -- SB3: load_replay_buffer ------------------------------------------------------------------------


def sb3_model(path: Path) -> object:
    """A DQN on SB3's FakeImageEnv whose MmreplayBuffer at ``path`` holds 40 transitions (no training)."""
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import DQN

    from mmreplay.sb3 import MmreplayBuffer
    from tests.test_sb3 import image_env

    model = DQN("CnnPolicy", image_env(), buffer_size=100, learning_starts=1000, device="cpu", seed=0,
                replay_buffer_class=MmreplayBuffer, replay_buffer_kwargs={"path": path})
    model.learn(40)
    model.replay_buffer.flush()
    return model


def test_sb3_load_replay_buffer_of_a_truncated_pickle_keeps_the_models_buffer_and_store(tmp_path: Path) -> None:
    model = sb3_model(tmp_path / "own" / "dqn.mmr")
    own = tmp_path / "own" / "dqn.mmr"
    model.save_replay_buffer(tmp_path / "replay.pkl")
    pickled = (tmp_path / "replay.pkl").read_bytes()
    (tmp_path / "replay.pkl").write_bytes(pickled[: len(pickled) // 2])
    buffer, files = model.replay_buffer, tree_signature(own)
    with pytest.raises(pickle.UnpicklingError, match="truncated"):
        model.load_replay_buffer(tmp_path / "replay.pkl")
    assert model.replay_buffer is buffer and buffer.size() == 40
    assert tree_signature(own) == files and siblings(own) == []
    model.learn(8, reset_num_timesteps=False)  # the buffer goes on with its store
    assert buffer.size() == 48


def test_sb3_load_replay_buffer_whose_store_is_damaged_keeps_the_models_buffer_and_store(tmp_path: Path) -> None:
    model = sb3_model(tmp_path / "own" / "dqn.mmr")
    other = sb3_model(tmp_path / "other" / "dqn.mmr")
    own = tmp_path / "own" / "dqn.mmr"
    other.save_replay_buffer(tmp_path / "replay.pkl")
    other.replay_buffer.close()
    header = tmp_path / "other" / "dqn.mmr" / "header.json"
    header.write_bytes(header.read_bytes().replace(b'"transitions_added"', b'"transitions_addeD"'))
    buffer, files = model.replay_buffer, tree_signature(own)
    with pytest.raises(CorruptStoreError):
        model.load_replay_buffer(tmp_path / "replay.pkl")
    assert model.replay_buffer is buffer and buffer.size() == 40
    assert tree_signature(own) == files and siblings(own) == []
    assert siblings(tmp_path / "other" / "dqn.mmr") == []


# -- import_hdf5 and import_dopamine ------------------------------------------------------------------


def fail_adds_after(monkeypatch: pytest.MonkeyPatch, successful: int) -> None:
    """Make every ``ReplayStore.add`` after the first ``successful`` raise ENOSPC, as a full disk does."""
    import errno

    real_add, calls = ReplayStore.add, []

    def add(self: ReplayStore, *args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) > successful:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_add(self, *args, **kwargs)

    monkeypatch.setattr(ReplayStore, "add", add)


def small_hdf5(tmp_path: Path) -> Path:
    pytest.importorskip("h5py")
    from mmreplay import export_hdf5
    from tests.test_hdf5 import record_vector_store

    with record_vector_store(tmp_path / "source.mmr") as store:
        export_hdf5(store, tmp_path / "data.h5")
    return tmp_path / "data.h5"


def test_import_hdf5_that_fails_part_way_leaves_no_store_and_no_partial_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mmreplay import import_hdf5

    dataset = small_hdf5(tmp_path)
    fail_adds_after(monkeypatch, 5)
    with pytest.raises(OSError, match="No space left"):
        import_hdf5(dataset, tmp_path / "imported.mmr")
    assert sorted(os.listdir(tmp_path)) == ["data.h5", "source.mmr"]


def test_import_hdf5_onto_an_existing_store_refuses_it_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    from mmreplay import import_hdf5

    dataset = small_hdf5(tmp_path)
    files = tree_signature(tmp_path / "source.mmr")
    with pytest.raises(FileExistsError, match="the path already exists"):
        import_hdf5(dataset, tmp_path / "source.mmr")
    assert tree_signature(tmp_path / "source.mmr") == files
    assert sorted(os.listdir(tmp_path)) == ["data.h5", "source.mmr"]


def dopamine_checkpoints(tmp_path: Path) -> Path:
    from tests.test_dopamine import DopamineRing

    ring = DopamineRing(capacity=64)
    ring.play([list(range(1, 12)), list(range(20, 31)), list(range(40, 47))])
    directory = tmp_path / "ckpt"
    directory.mkdir()
    ring.save(directory, 0, episode_ends=True)
    return directory


def test_import_dopamine_that_fails_part_way_leaves_no_store_and_no_partial_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mmreplay import import_dopamine

    directory = dopamine_checkpoints(tmp_path)
    fail_adds_after(monkeypatch, 5)
    with pytest.raises(OSError, match="No space left"):
        import_dopamine(directory, tmp_path / "imported.mmr")
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_import_dopamine_onto_an_existing_store_refuses_it_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    from mmreplay import import_dopamine

    directory = dopamine_checkpoints(tmp_path)
    assert import_dopamine(directory, tmp_path / "imported.mmr") > 0
    files = tree_signature(tmp_path / "imported.mmr")
    with pytest.raises(FileExistsError, match="the path already exists"):
        import_dopamine(directory, tmp_path / "imported.mmr")
    assert tree_signature(tmp_path / "imported.mmr") == files
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "imported.mmr"]
