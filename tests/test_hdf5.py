"""HDF5 export and import: store -> HDF5 -> store gives back the same transitions, in both layouts.

Frames encode a number (``frame(7)`` is all sevens), so a wrong stack shows up as wrong numbers.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from atari_data import load_stream
from strategies import frame, stack

from mmreplay import ReplayStore
from mmreplay.errors import CorruptStoreError, FormatVersionError
from mmreplay.hdf5 import export_hdf5, import_hdf5

FIELDS = ("obs", "next_obs", "action", "reward", "terminated", "truncated", "env_index")
LAYOUTS = ("mmreplay", "minari")


def out_path(tmp_path: Path, layout: str) -> Path:
    return tmp_path / ("export.h5" if layout == "mmreplay" else "export-v0")


def record_vector_store(path: Path, *, capacity: int = 64) -> ReplayStore:
    """Two envs: terminations, truncations, a masked (resetting) step, a first obs given as a stack of
    distinct frames, eviction of the oldest transitions, and an episode of each env still in progress."""
    store = ReplayStore.create(path, frame_shape=(3, 4), capacity=capacity, stack_size=3, num_envs=2,
                               action_shape=(2,), action_dtype=np.float32)
    obs = np.stack([stack(1, 2, 3), stack(101, 101, 101)])
    value = [4, 102]
    resetting = np.zeros(2, bool)
    for t in range(80):
        next_obs = obs.copy()
        for env in range(2):
            next_obs[env] = np.concatenate([obs[env][1:], frame(value[env] % 256)[None]])
            value[env] += 1
        terminated = np.array([t % 13 == 12, False])
        truncated = np.array([False, t % 9 == 8])
        action = np.array([[t, -t], [t / 2, 1]], np.float32)
        store.add(obs, action, np.array([t, -1], np.float32), next_obs, terminated, truncated, env_mask=~resetting)
        resetting = terminated | truncated
        obs = next_obs
        for env in np.flatnonzero(resetting):
            start = 50 + 3 * t
            obs[env] = stack(start % 256, (start + 1) % 256, (start + 2) % 256) if env == 0 else stack(*[start % 256] * 3)
    return store


def assert_same_transitions(original: ReplayStore, imported: ReplayStore) -> None:
    a = original.read(np.array(original.stored_steps))
    b = imported.read(np.array(imported.stored_steps))
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_array_equal(a.index - original.stored_steps.start, b.index)
    summary = [(e.env_index, e.length, e.total_reward, e.ended_by) for e in original.episodes()]
    assert summary == [(e.env_index, e.length, e.total_reward, e.ended_by) for e in imported.episodes()]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_trip_reads_back_every_transition_of_vector_envs(tmp_path: Path, layout: str) -> None:
    with record_vector_store(tmp_path / "a.mmr") as store:
        assert store.stored_steps.start > 0 and not store.episodes()[0].complete
        assert export_hdf5(store, out_path(tmp_path, layout), layout=layout) == len(store)
        assert import_hdf5(out_path(tmp_path, layout), tmp_path / "b.mmr") == len(store)
        with ReplayStore.open(tmp_path / "b.mmr") as imported:
            assert (imported.capacity, imported.num_envs, imported.stack_size) == (64, 2, 3)
            assert imported.action_dtype == np.float32 and imported.action_shape == (2,)
            assert_same_transitions(store, imported)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_episode_in_progress_can_be_continued_after_import(tmp_path: Path, layout: str) -> None:
    with ReplayStore.create(tmp_path / "a.mmr", frame_shape=(3, 4), capacity=16) as store:
        store.add(frame(1), 0, 1.0, frame(2), False, False)
        store.add(frame(2), 1, 1.0, frame(3), False, False)
        export_hdf5(store, out_path(tmp_path, layout), layout=layout)
    import_hdf5(out_path(tmp_path, layout), tmp_path / "b.mmr")
    with ReplayStore.open(tmp_path / "b.mmr", "r+") as imported:
        assert imported.episodes()[0].ended_by == "in progress"
        imported.add(frame(3), 2, 1.0, frame(4), True, False)
        [episode] = imported.episodes()
        assert (episode.length, episode.ended_by) == (3, "terminated")
        assert imported.read([2]).obs[0, :, 0, 0].tolist() == [1, 1, 2, 3]


def test_mmreplay_layout_is_readable_with_plain_h5py(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "a.mmr", frame_shape=(3, 4), capacity=16, stack_size=2) as store:
        store.add(frame(1), 0, 0.5, frame(2), False, False)
        store.add(frame(2), 1, 0.5, frame(3), True, False)
        store.add(stack(7, 8), 2, 1.0, stack(8, 9), False, True)
        export_hdf5(store, tmp_path / "x.h5")
    with h5py.File(tmp_path / "x.h5", "r") as file:
        assert file.attrs["format"] == "mmreplay-hdf5" and file.attrs["format_version"] == 2
        frames = file["frames"]
        assert frames.chunks == (1, 3, 4) and frames.compression == "gzip"
        assert frames[:, 0, 0].tolist() == [1, 1, 2, 3, 7, 8, 9]
        episodes = file["episodes"]
        assert episodes["frame_start"][()].tolist() == [0, 4]
        assert episodes["ended_by"][()].tolist() == [b"terminated", b"truncated"]
        assert file["transitions/step"][()].tolist() == [0, 1, 2]
        assert file["transitions/truncated"][()].tolist() == [False, False, True]


@functools.cache
def pong(limit: int) -> dict[str, np.ndarray]:
    return load_stream("pong", ("frames", "action", "reward", "terminated", "truncated"), limit)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_real_pong_frames_round_trip_bit_exact(tmp_path: Path, layout: str) -> None:
    s = pong(1200)
    with ReplayStore.create(tmp_path / "a.mmr", frame_shape=(84, 84), capacity=1000, action_dtype=np.int16) as store:
        for t in np.flatnonzero(s["action"][:-1] >= 0):
            store.add(s["frames"][t], s["action"][t], s["reward"][t], s["frames"][t + 1], s["terminated"][t],
                      s["truncated"][t])
        export_hdf5(store, out_path(tmp_path, layout), layout=layout, chunk_steps=300)
        import_hdf5(out_path(tmp_path, layout), tmp_path / "b.mmr", chunk_steps=100)
        with ReplayStore.open(tmp_path / "b.mmr") as imported:
            assert_same_transitions(store, imported)


def test_minari_loads_the_exported_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    minari = pytest.importorskip("minari", reason="minari is an optional extra: pip install 'mmreplay[minari]'")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    with record_vector_store(tmp_path / "a.mmr") as store:
        (tmp_path / "datasets").mkdir()
        export_hdf5(store, tmp_path / "datasets" / "vector-v0", layout="minari")
        dataset = minari.load_dataset("vector-v0")
        assert (dataset.total_steps, dataset.total_episodes) == (len(store), len(store.episodes()))
        for episode, listed in zip(dataset.iterate_episodes(), store.episodes()):
            batch = store.read(listed.steps)
            assert episode.observations.shape == (listed.length + 1, 3, 4)
            np.testing.assert_array_equal(episode.observations[1:], batch.next_obs[:, -1])
            np.testing.assert_array_equal(episode.observations[0], batch.obs[0, -1])
            np.testing.assert_array_equal(episode.actions, batch.action)
            np.testing.assert_array_equal(episode.rewards, batch.reward)
            np.testing.assert_array_equal(episode.terminations, batch.terminated)
            np.testing.assert_array_equal(episode.truncations, batch.truncated)


def write_foreign_minari(directory: Path, episodes: list[list[int]]) -> None:
    """A Minari-style dataset as another tool would write it: episodes of single frames, no mmreplay data."""
    (directory / "data").mkdir(parents=True)
    with h5py.File(directory / "data" / "main_data.hdf5", "w") as file:
        for i, numbers in enumerate(episodes):
            group = file.create_group(f"episode_{i}")
            group.create_dataset("observations", data=np.array([frame(n) for n in numbers]))
            group.create_dataset("actions", data=np.arange(len(numbers) - 1))
            group.create_dataset("rewards", data=np.ones(len(numbers) - 1))
            group.create_dataset("terminations", data=np.arange(len(numbers) - 1) == len(numbers) - 2)
            group.create_dataset("truncations", data=np.zeros(len(numbers) - 1, bool))
    (directory / "data" / "metadata.json").write_text(json.dumps({"dataset_id": "foreign-v0"}))


def test_foreign_minari_dataset_imports_as_one_env_episode_after_episode(tmp_path: Path) -> None:
    write_foreign_minari(tmp_path / "foreign-v0", [[1, 2, 3], [10, 11, 12, 13]])
    assert import_hdf5(tmp_path / "foreign-v0", tmp_path / "b.mmr", stack_size=2) == 5
    with ReplayStore.open(tmp_path / "b.mmr") as store:
        batch = store.read(np.arange(5))
        assert batch.obs[:, :, 0, 0].tolist() == [[1, 1], [1, 2], [10, 10], [10, 11], [11, 12]]
        assert batch.next_obs[:, -1, 0, 0].tolist() == [2, 3, 11, 12, 13]
        assert [e.ended_by for e in store.episodes()] == ["terminated", "terminated"]


def test_export_refuses_an_existing_path(tmp_path: Path) -> None:
    (tmp_path / "x.h5").write_bytes(b"")
    with (ReplayStore.create(tmp_path / "a.mmr", frame_shape=(3, 4), capacity=4) as store,
          pytest.raises(FileExistsError, match="cannot create an export at .*x.h5.: the path already exists")):
        export_hdf5(store, tmp_path / "x.h5")


def test_export_validates_layout_and_dataset_id_before_writing(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "a.mmr", frame_shape=(3, 4), capacity=4) as store:
        with pytest.raises(ValueError, match=r"layout must be one of \('mmreplay', 'minari'\); got 'zarr'"):
            export_hdf5(store, tmp_path / "x", layout="zarr")
        with pytest.raises(ValueError, match="dataset_id must look like '\\[namespace/\\]name-v0'"):
            export_hdf5(store, tmp_path / "x", layout="minari", dataset_id="noversion")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mmr"]


def test_a_minari_id_defaults_to_a_valid_one_made_from_the_folder_name(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "a.mmr", frame_shape=(3, 4), capacity=4) as store:
        store.add(frame(1), 0, 1.0, frame(2), True, False)
        export_hdf5(store, tmp_path / "export", layout="minari")
    metadata = json.loads((tmp_path / "export" / "data" / "metadata.json").read_text())
    assert metadata["dataset_id"] == "export-v0"


def test_an_export_or_import_into_a_missing_directory_is_refused_not_created(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "a.mmr", frame_shape=(3, 4), capacity=4) as store:
        store.add(frame(1), 0, 1.0, frame(2), True, False)
        with pytest.raises(FileNotFoundError, match=r"cannot create an export at .*: the directory .*nowhere' does "
                                                    r"not exist \(it is not created for you\)"):
            export_hdf5(store, tmp_path / "nowhere" / "x.h5")
        export_hdf5(store, tmp_path / "x.h5")
    with pytest.raises(FileNotFoundError, match=r"cannot create a store at .*: the directory .*nowhere' does not"):
        import_hdf5(tmp_path / "x.h5", tmp_path / "nowhere" / "b.mmr")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mmr", "x.h5"]


def test_a_file_that_is_not_hdf5_gives_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "notes.h5").write_text("hello")
    with pytest.raises(CorruptStoreError, match=r"notes\.h5: not an HDF5 file"):
        import_hdf5(tmp_path / "notes.h5", tmp_path / "b.mmr")
    assert not (tmp_path / "b.mmr").exists()


def test_a_foreign_hdf5_file_gives_an_error_naming_it(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "other.h5", "w") as file:
        file["weights"] = np.zeros(3)
    with pytest.raises(CorruptStoreError, match=r"other\.h5: neither an mmreplay HDF5 export .* nor a Minari"):
        import_hdf5(tmp_path / "other.h5", tmp_path / "b.mmr")


def test_a_newer_format_version_is_refused_with_both_versions(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "a.mmr", frame_shape=(3, 4), capacity=4) as store:
        store.add(frame(1), 0, 0.0, frame(2), False, False)
        export_hdf5(store, tmp_path / "x.h5")
    with h5py.File(tmp_path / "x.h5", "r+") as file:
        file.attrs["format_version"] = 3
    with pytest.raises(FormatVersionError, match=r"x\.h5: format version 3; this mmreplay reads 1 and 2"):
        import_hdf5(tmp_path / "x.h5", tmp_path / "b.mmr")


def test_a_damaged_frame_fails_the_import_and_leaves_no_store(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "a.mmr", frame_shape=(3, 4), capacity=4) as store:
        store.add(frame(1), 0, 0.0, frame(2), False, False)
        export_hdf5(store, tmp_path / "x.h5")
    with h5py.File(tmp_path / "x.h5", "r+") as file:
        file["frames"].id.write_direct_chunk((1, 0, 0), b"not zlib")
    with pytest.raises(OSError):
        import_hdf5(tmp_path / "x.h5", tmp_path / "b.mmr")
    assert not (tmp_path / "b.mmr").exists()


def test_a_truncated_episode_table_is_reported_with_the_file(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "a.mmr", frame_shape=(3, 4), capacity=4) as store:
        store.add(frame(1), 0, 0.0, frame(2), False, False)
        export_hdf5(store, tmp_path / "x.h5")
    with h5py.File(tmp_path / "x.h5", "r+") as file:
        del file["transitions/reward"]
        file["transitions/reward"] = np.zeros(5, np.float32)
    with pytest.raises(CorruptStoreError, match=r"x\.h5: transitions/reward has 5 rows; expected 1"):
        import_hdf5(tmp_path / "x.h5", tmp_path / "b.mmr")


@pytest.mark.parametrize("layout", ["mmreplay", "minari"])
def test_a_fragment_stays_incomplete_through_export_and_import(tmp_path: Path, layout: str) -> None:
    with ReplayStore.create(tmp_path / "a.mmr", frame_shape=(3, 4), capacity=4, num_envs=2) as store:
        for t in range(5):  # env 0's episode loses its start to eviction; env 1's episodes are whole
            store.add(np.stack([frame(t), frame(50 + t % 2)]), np.array([0, 1]), np.ones(2, np.float32),
                      np.stack([frame(t + 1), frame(60)]), np.array([False, False]), np.array([False, True]),
                      env_mask=np.array([True, t % 2 == 0]))
        listed = [(e.env_index, e.complete) for e in store.episodes()]
        assert (0, False) in listed
        export_hdf5(store, tmp_path / "x", layout=layout, dataset_id="x-v0")
    import_hdf5(tmp_path / "x", tmp_path / "b.mmr")
    with ReplayStore.open(tmp_path / "b.mmr") as copy:
        assert [(e.env_index, e.complete) for e in copy.episodes()] == listed
