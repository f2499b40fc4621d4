"""Dopamine checkpoint import: files written exactly as Dopamine's OutOfGraphReplayBuffer.save writes them.

``DopamineRing`` below is a plain copy of Dopamine's rules: ``stack_size - 1`` zero padding slots
before each episode (at the start and after a terminal slot), one frame per slot, a ring of
``capacity`` slots written at ``add_count % capacity``; ``save`` np.save's each array into a gzip file.
Frames are numbered by their pixel value.
"""

from __future__ import annotations

import gzip
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
from strategies import frame

from mmreplay import ReplayStore
from mmreplay.dopamine import import_dopamine
from mmreplay.errors import CorruptStoreError

SHAPE = (3, 4)


class DopamineRing:
    def __init__(self, capacity: int, stack_size: int = 4) -> None:
        self.capacity, self.stack_size = capacity, stack_size
        self.observation = np.zeros((capacity, *SHAPE), np.uint8)
        self.action = np.zeros(capacity, np.int32)
        self.reward = np.zeros(capacity, np.float32)
        self.terminal = np.zeros(capacity, np.uint8)
        self.add_count = 0
        self.episode_end_indices: set[int] = set()
        self.starts_episode = True

    def add(self, number: int, action: int, reward: float, terminal: bool, episode_end: bool = False) -> None:
        if self.starts_episode:
            for _ in range(self.stack_size - 1):
                self._add(np.zeros(SHAPE, np.uint8), 0, 0.0, 0)
        self.starts_episode = terminal or episode_end
        self._add(frame(number, SHAPE), action, reward, int(terminal))
        if self.starts_episode:
            self.episode_end_indices.add((self.add_count - 1) % self.capacity)

    def _add(self, observation: np.ndarray, action: int, reward: float, terminal: int) -> None:
        cursor = self.add_count % self.capacity
        self.episode_end_indices.discard(cursor)
        self.observation[cursor], self.action[cursor] = observation, action
        self.reward[cursor], self.terminal[cursor] = reward, terminal
        self.add_count += 1

    def save(self, directory: Path, number: int, update_horizon: int = 1, *, episode_ends: bool = False,
             final_log: bool = False) -> None:
        """As Dopamine saves (``episode_ends``: as since 2021); ``final_log``: as batch_rl's
        ``log_final_buffer``, with add_count replaced by the cursor."""
        cursor = self.add_count % self.capacity
        invalid = np.array([(cursor - update_horizon + i) % self.capacity
                            for i in range(self.stack_size + update_horizon)])
        arrays = {"$store$_observation": self.observation, "$store$_action": self.action,
                  "$store$_reward": self.reward, "$store$_terminal": self.terminal,
                  "add_count": np.array(cursor if final_log else self.add_count), "invalid_range": invalid}
        for name, array in arrays.items():
            with open(directory / f"{name}_ckpt.{number}.gz", "wb") as f, gzip.GzipFile(fileobj=f, mode="wb") as out:
                np.save(out, array, allow_pickle=False)
        if episode_ends:
            with gzip.open(directory / f"episode_end_indices_ckpt.{number}.gz", "wb") as out:
                pickle.dump(set(self.episode_end_indices), out)

    def play(self, episodes: list[list[int]], *, last_terminal: bool = True) -> None:
        """Each episode's frame numbers; every step's action is its frame number, its reward 1."""
        for i, numbers in enumerate(episodes):
            for j, n in enumerate(numbers):
                ends = j == len(numbers) - 1 and (last_terminal or i < len(episodes) - 1)
                self.add(n, n, 1.0, ends)


def transitions(store: ReplayStore) -> list[tuple[list[int], int, list[int], bool]]:
    batch = store.read(np.array(store.stored_steps))
    return [(o[:, 0, 0].tolist(), int(a), n[:, 0, 0].tolist(), bool(t))
            for o, a, n, t in zip(batch.obs, batch.action, batch.next_obs, batch.terminated)]


def test_padding_is_skipped_and_episodes_start_with_their_first_frame_repeated(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=64, stack_size=3)
    ring.play([[1, 2, 3], [10, 11]])
    ring.save(tmp_path, 0)
    assert import_dopamine(tmp_path, tmp_path / "s.mmr", stack_size=3, stack_padding="first") == 5
    with ReplayStore.open(tmp_path / "s.mmr") as store:
        assert transitions(store) == [
            ([1, 1, 1], 1, [1, 1, 2], False), ([1, 1, 2], 2, [1, 2, 3], False),
            ([1, 2, 3], 3, [2, 3, 0], True),
            ([10, 10, 10], 10, [10, 10, 11], False), ([10, 10, 11], 11, [10, 11, 0], True)]
        assert [(e.length, e.ended_by) for e in store.episodes()] == [(3, "terminated"), (2, "terminated")]


def test_a_terminal_slots_next_frame_is_all_zero_as_dopamine_samples_it(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=16)
    ring.play([[5]])
    ring.save(tmp_path, 0)
    import_dopamine(tmp_path, tmp_path / "s.mmr")
    with ReplayStore.open(tmp_path / "s.mmr") as store:
        assert transitions(store) == [([0, 0, 0, 5], 5, [0, 0, 5, 0], True)]


def test_the_newest_slot_waits_for_its_next_frame_and_its_episode_stays_in_progress(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=32, stack_size=2)
    ring.play([[1, 2, 3]], last_terminal=False)
    ring.save(tmp_path, 0)
    assert import_dopamine(tmp_path, tmp_path / "s.mmr", stack_size=2) == 2
    with ReplayStore.open(tmp_path / "s.mmr") as store:
        assert transitions(store)[-1] == ([1, 2], 2, [2, 3], False)
        assert transitions(store)[0] == ([0, 1], 1, [1, 2], False)
        assert store.episodes()[0].ended_by == "in progress"


def test_an_episode_spans_two_checkpoint_files(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=8, stack_size=2)
    ring.play([[1, 2, 3, 4, 5]], last_terminal=False)  # slots 0..5 (one padding slot)
    ring.save(tmp_path, 0)
    ring.play([[6, 7, 8, 9], [20, 21]])  # the first episode goes on in checkpoint 1's slots
    ring.save(tmp_path, 1)
    assert import_dopamine(tmp_path, tmp_path / "s.mmr", stack_size=2) == 11
    with ReplayStore.open(tmp_path / "s.mmr") as store:
        assert [t[1] for t in transitions(store)] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 20, 21]
        first = store.episodes()[0]
        assert (first.length, first.ended_by) == (9, "terminated")
        assert store.read(first.steps).next_obs[:, -1, 0, 0].tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 0]
        assert [(e.length, e.ended_by) for e in store.episodes()[1:]] == [(2, "terminated")]
        assert len(store) == 11


def test_a_wrapped_ring_starts_after_the_stale_slots_at_the_write_cursor(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=8, stack_size=3)
    ring.play([list(range(1, 12))], last_terminal=False)  # 2 padding + 11 slots: wraps, cursor at slot 5
    ring.save(tmp_path, 0)
    import_dopamine(tmp_path, tmp_path / "s.mmr", stack_size=3)
    with ReplayStore.open(tmp_path / "s.mmr") as store:
        # the ring keeps frames 4..11; frames 4 and 5 only make the first obs stack
        assert transitions(store) == [([4, 5, 6], 6, [5, 6, 7], False), ([5, 6, 7], 7, [6, 7, 8], False),
                                      ([6, 7, 8], 8, [7, 8, 9], False), ([7, 8, 9], 9, [8, 9, 10], False),
                                      ([8, 9, 10], 10, [9, 10, 11], False)]
        assert store.episodes()[0].ended_by == "in progress"
        assert store.episodes()[0].complete is False  # its start was overwritten


def test_zero_slots_at_a_wrapped_cursor_are_kept_as_frames_of_a_fragment(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=8, stack_size=3)
    ring.play([[1, 2, 3, 4], [7, 8, 9, 10, 11, 12, 13]], last_terminal=False)
    ring.save(tmp_path, 0)  # 2 + 4 + 2 + 7 slots: the ring keeps slots 7..14, the oldest one padding
    import_dopamine(tmp_path, tmp_path / "s.mmr", stack_size=3)
    with ReplayStore.open(tmp_path / "s.mmr") as store:
        # whether the zero slot is padding or a real black frame cannot be told: it is a frame of a
        # fragment, and the stacks are Dopamine's either way
        assert transitions(store)[0] == ([0, 7, 8], 8, [7, 8, 9], False)
        assert len(store) == 5
        assert [e.complete for e in store.episodes()] == [False]


def test_overlapping_checkpoints_import_each_slot_once(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=32, stack_size=2)
    ring.play([[1, 2, 3]])
    ring.save(tmp_path, 0)
    ring.play([[4, 5]])
    ring.save(tmp_path, 1)  # holds checkpoint 0's slots too
    assert import_dopamine(tmp_path, tmp_path / "s.mmr", stack_size=2) == 5


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=8)
    ring.play([[1, 2]])
    ring.save(tmp_path, 3)
    (tmp_path / "$store$_reward_ckpt.3.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"checkpoint 3 is incomplete: .*\$store\$_reward_ckpt\.3\.gz does not exist"):
        import_dopamine(tmp_path, tmp_path / "s.mmr")
    assert not (tmp_path / "s.mmr").exists()


def test_a_file_that_is_not_gzipped_npy_is_named(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=8)
    ring.play([[1, 2]])
    ring.save(tmp_path, 0)
    (tmp_path / "$store$_action_ckpt.0.gz").write_bytes(b"plain bytes")
    with pytest.raises(CorruptStoreError, match=r"\$store\$_action_ckpt\.0\.gz: not a gzip'd \.npy array"):
        import_dopamine(tmp_path, tmp_path / "s.mmr")


def test_a_truncated_observation_file_fails_naming_it_and_leaves_no_store(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=64)
    ring.play([list(range(1, 40))])
    ring.save(tmp_path, 0)
    path = tmp_path / "$store$_observation_ckpt.0.gz"
    raw = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(raw[: len(raw) // 3]))
    with pytest.raises(CorruptStoreError, match=r"\$store\$_observation_ckpt\.0\.gz: ends after .* the file is truncated"):
        import_dopamine(tmp_path, tmp_path / "s.mmr")
    assert not (tmp_path / "s.mmr").exists()


def test_checkpoints_out_of_written_order_are_refused(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=16)
    ring.play([[1, 2]])
    ring.save(tmp_path, 0)
    ring.play([[3, 4]])
    ring.save(tmp_path, 1)
    with pytest.raises(ValueError, match="checkpoints must be given in the order they were written: checkpoint 0"):
        import_dopamine(tmp_path, tmp_path / "s.mmr", checkpoints=[1, 0])


def test_batch_rls_final_log_imports_after_the_log_before_it(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=8, stack_size=2)
    ring.play([[1, 2, 3, 4, 5, 6]], last_terminal=False)  # 1 padding + 6 slots: add_count 7 = capacity - 1
    ring.save(tmp_path, 0)
    ring.play([[7, 8, 9]])  # the episode ends in the final log, whose add_count is the cursor
    ring.save(tmp_path, 1, final_log=True)
    for checkpoints in (None, [0, 1]):
        target = tmp_path / f"s{checkpoints is None}.mmr"
        assert import_dopamine(tmp_path, target, stack_size=2, checkpoints=checkpoints) == 9
        with ReplayStore.open(target) as store:
            assert [t[1] for t in transitions(store)] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
            assert [(e.length, e.ended_by, e.complete) for e in store.episodes()] == [(9, "terminated", True)]


def test_a_final_log_alone_is_counted_from_the_log_numbered_before_it(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=8, stack_size=2)
    ring.play([[1, 2, 3, 4, 5, 6]], last_terminal=False)
    ring.save(tmp_path, 0)
    ring.play([[7, 8, 9]])
    ring.save(tmp_path, 1, final_log=True)
    import_dopamine(tmp_path, tmp_path / "s.mmr", stack_size=2, checkpoints=[1])
    with ReplayStore.open(tmp_path / "s.mmr") as store:
        # the ring holds written slots 2..9: frames 2..9, frame 2 only makes the first obs stack
        assert [t[1] for t in transitions(store)] == [3, 4, 5, 6, 7, 8, 9]
        assert [e.complete for e in store.episodes()] == [False]


def test_a_time_limit_in_episode_end_indices_becomes_a_truncation(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=32, stack_size=2)
    ring.add(1, 1, 1.0, False)
    ring.add(2, 2, 1.0, False)
    ring.add(3, 3, 1.0, False, episode_end=True)  # a time limit: slot 3's next frame is never written
    ring.play([[10, 11]])
    ring.save(tmp_path, 0, episode_ends=True)
    assert import_dopamine(tmp_path, tmp_path / "s.mmr", stack_size=2) == 4
    with ReplayStore.open(tmp_path / "s.mmr") as store:
        batch = store.read(np.array(store.stored_steps))
        assert batch.truncated.tolist() == [False, True, False, False]
        assert batch.next_obs[1, :, 0, 0].tolist() == [2, 3]  # bootstraps from the last real frame
        assert [(e.length, e.ended_by) for e in store.episodes()] == [(2, "truncated"), (2, "terminated")]


@pytest.mark.parametrize("where", [-6, -12, 40])  # the CRC, the last deflate block, the first one
def test_one_flipped_byte_in_an_observation_file_is_an_error_naming_it(tmp_path: Path, where: int) -> None:
    ring = DopamineRing(capacity=64)
    ring.play([list(range(1, 40))])
    ring.save(tmp_path, 0)
    path = tmp_path / "$store$_observation_ckpt.0.gz"
    raw = bytearray(path.read_bytes())
    raw[where] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptStoreError, match=r"\$store\$_observation_ckpt\.0\.gz: "):
        import_dopamine(tmp_path, tmp_path / "s.mmr")
    assert not (tmp_path / "s.mmr").exists()


def test_a_wrong_crc_is_reported_as_such(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=64)
    ring.play([list(range(1, 40))])
    ring.save(tmp_path, 0)
    path = tmp_path / "$store$_action_ckpt.0.gz"
    raw = bytearray(path.read_bytes())
    raw[-6] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptStoreError, match=r"\$store\$_action_ckpt\.0\.gz: the gzip stream is corrupt \(CRC check failed"):
        import_dopamine(tmp_path, tmp_path / "s.mmr")


@pytest.mark.parametrize("store_stack", [1, 2, 8])
def test_the_stores_stack_size_is_independent_of_the_writers(tmp_path: Path, store_stack: int) -> None:
    ring = DopamineRing(capacity=64, stack_size=4)
    ring.play([list(range(1, 11)), list(range(20, 31))])
    ring.save(tmp_path, 0)
    import_dopamine(tmp_path, tmp_path / "s.mmr", stack_size=store_stack)
    with ReplayStore.open(tmp_path / "s.mmr") as store:
        assert [t[1] for t in transitions(store)] == list(range(1, 11)) + list(range(20, 31))
        assert [(e.length, e.complete) for e in store.episodes()] == [(10, True), (11, True)]
        assert transitions(store)[0][0] == [0] * (store_stack - 1) + [1]


def test_a_writer_stack_size_the_files_contradict_is_an_error(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=64, stack_size=2)
    ring.play([[1, 2], [3, 4]])
    ring.save(tmp_path, 0)
    with pytest.raises(ValueError, match="writer_stack_size=4 means 3 padding slots before each episode; the files "
                                         "show only 1 after an episode end"):
        import_dopamine(tmp_path, tmp_path / "s.mmr", writer_stack_size=4)


def test_a_checkpoint_missing_only_its_observation_file_is_named(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=8)
    ring.play([[1, 2]])
    ring.save(tmp_path, 0)
    ring.save(tmp_path, 1)
    (tmp_path / "$store$_observation_ckpt.1.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"checkpoint 1 is incomplete: .*\$store\$_observation_ckpt\.1\.gz"):
        import_dopamine(tmp_path, tmp_path / "s.mmr")


def test_extra_stored_arrays_are_reported_not_dropped_silently(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=8)
    ring.play([[1, 2]])
    ring.save(tmp_path, 0)
    with gzip.open(tmp_path / "$store$_priority_ckpt.0.gz", "wb") as out:
        np.save(out, np.ones(8, np.float32))
    with pytest.warns(UserWarning, match=r"checkpoint 0: \$store\$_priority_ckpt\.0\.gz not imported"):
        import_dopamine(tmp_path, tmp_path / "s.mmr")


def test_a_gap_between_checkpoints_starts_a_fragment_listed_incomplete(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=8, stack_size=2)
    ring.play([[1, 2, 3]], last_terminal=False)
    ring.save(tmp_path, 0)
    ring.play([list(range(4, 20))], last_terminal=False)  # 16 more slots: checkpoint 1 misses 8 of them
    ring.save(tmp_path, 1)
    import_dopamine(tmp_path, tmp_path / "s.mmr", stack_size=2)
    with ReplayStore.open(tmp_path / "s.mmr") as store:
        assert [(e.ended_by, e.complete) for e in store.episodes()] == [("cut", True), ("in progress", False)]


def test_the_pickle_of_episode_ends_may_hold_nothing_but_slots(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=8)
    ring.play([[1, 2]])
    ring.save(tmp_path, 0)
    with gzip.open(tmp_path / "episode_end_indices_ckpt.0.gz", "wb") as out:
        pickle.dump(warnings.warn, out)
    with pytest.raises(CorruptStoreError, match="refusing to load _warnings.warn: expected a set of slot indices"):
        import_dopamine(tmp_path, tmp_path / "s.mmr")


def test_the_imported_store_zero_pads_its_own_stacks_and_says_so(tmp_path: Path) -> None:
    ring = DopamineRing(capacity=64, stack_size=3)
    ring.play([[1, 2, 3], [10, 11]])
    ring.save(tmp_path, 0)
    import_dopamine(tmp_path, tmp_path / "s.mmr", stack_size=3)
    with ReplayStore.open(tmp_path / "s.mmr") as store:
        assert store.stack_padding == "zeros"
        batch = store.sample(64, rng=0, n_step=2)
        starts = batch.index % 3 == 0  # steps 0 and 3 start episodes
        assert (batch.obs[starts, :2] == 0).all()
