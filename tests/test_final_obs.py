"""A transition that ends its episode may carry any next_obs stack, and it is stored as given.

CleanRL's ``dqn_atari.py`` and SB3 pass, at a terminated step, the reset observation of the next
episode as next_obs; a gymnasium same-step autoreset loop that forgets ``final_obs`` does the same at
any ending. Such a next_obs is not obs shifted by one frame: the store keeps the whole stack (a
*detached* transition) and every reader returns exactly that stack as the transition's next_obs:
``read``, ``sample`` (also into ``out``), n-step windows, sequences, the episode list, ``verify``, the
HDF5 exports and imports, after eviction and after reopening. A transition that goes on must still give
a shifted stack. Frames hold their own number (``stack(1, 2, 3)`` is frames 1, 2, 3).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from dataclasses import fields
from pathlib import Path

import h5py
import numpy as np
import pytest
from reference import ReferenceStore, assert_batch_matches, assert_same_snapshot, snapshot
from strategies import frame, stack

import mmreplay
from mmreplay import ReferenceScheme, ReplayStore
from mmreplay.cli import verify_store

ENCODINGS = {
    "lz4": {},
    "lz4-reference": {
        "frame_encoding": "lz4-reference",
        "reference_scheme": ReferenceScheme(group_size=4, branching=2, max_distance=12),
    },
}


@pytest.fixture(params=list(ENCODINGS))
def encoding(request) -> dict:
    return ENCODINGS[request.param]


def play(pair, episodes: int, *, length: int = 3, first: int = 1, ending: str = "terminated",
         env_count: int = 1, reward: float = 1.0) -> int:
    """CleanRL's loop: each episode ends with the reset stack of the next as next_obs.

    Frames are numbered from ``first``; an episode's frames are consecutive numbers, and its reset
    stack repeats one new frame. Returns the next unused frame number."""
    size = pair.store.stack_size
    n = first
    obs = stack(*[n] * size)
    n += 1
    for _ in range(episodes):
        for t in range(length):
            if t < length - 1:
                next_obs = np.concatenate([obs[1:], frame(n)[None]])
                n += 1
                flags = (False, False)
            else:
                next_obs = stack(*[n] * size)  # the next episode's reset obs, not obs shifted
                n += 1
                flags = (ending == "terminated", ending == "truncated")
            pair.add(obs, t, reward, next_obs, *flags)
            obs = next_obs
    return n


# -- what add accepts and what read gives back ----------------------------------------------------


def test_a_terminated_transition_keeps_the_reset_stack_it_was_given_as_next_obs(make_pair, encoding) -> None:
    pair = make_pair(stack_size=3, **encoding)
    pair.add(stack(1, 2, 3), 0, 0.0, stack(2, 3, 4))
    pair.add(stack(2, 3, 4), 1, 1.0, stack(9, 9, 9), True, False)
    batch = pair.store.read([1])
    np.testing.assert_array_equal(batch.obs[0], stack(2, 3, 4))
    np.testing.assert_array_equal(batch.next_obs[0], stack(9, 9, 9))
    assert batch.terminated[0] and not batch.truncated[0]
    pair.check()


def test_a_truncated_transition_with_a_non_shifted_next_obs_is_stored_as_given(make_pair, encoding) -> None:
    pair = make_pair(stack_size=4, **encoding)
    pair.add(stack(1, 2, 3, 4), 0, 0.5, stack(7, 5, 8, 6), False, True)
    batch = pair.store.read([0])
    np.testing.assert_array_equal(batch.next_obs[0], stack(7, 5, 8, 6))
    np.testing.assert_array_equal(batch.obs[0], stack(1, 2, 3, 4))
    assert batch.truncated[0] and not batch.terminated[0]
    pair.check()


def test_a_next_obs_equal_to_the_obs_itself_is_kept_at_an_ending(make_pair) -> None:
    pair = make_pair(stack_size=2)
    pair.add(stack(1, 2), 0, 0.0, stack(1, 2), True, True)
    np.testing.assert_array_equal(pair.store.read([0]).next_obs[0], stack(1, 2))
    pair.check()


def test_the_next_add_starts_a_new_episode_whose_obs_is_that_reset_stack(make_pair, encoding) -> None:
    pair = make_pair(stack_size=3, **encoding)
    pair.add(stack(1, 2, 3), 0, 1.0, stack(2, 3, 4))
    pair.add(stack(2, 3, 4), 0, 2.0, stack(9, 9, 9), True, False)
    pair.add(stack(9, 9, 9), 1, 4.0, stack(9, 9, 10))
    pair.add(stack(9, 9, 10), 1, 8.0, stack(9, 10, 11))
    pair.check()
    episodes = pair.store.episodes()
    assert [(e.first_step, e.length, e.total_reward, e.ended_by, e.complete) for e in episodes] == [
        (0, 2, 3.0, "terminated", True), (2, 2, 12.0, "in progress", True)]
    np.testing.assert_array_equal(pair.store.read([2]).obs[0], stack(9, 9, 9))


def test_a_transition_that_goes_on_with_a_non_shifted_next_obs_is_refused_and_the_store_is_unchanged(
    make_pair,
) -> None:
    pair = make_pair(stack_size=3)
    pair.add(stack(1, 2, 3), 0, 0.0, stack(2, 3, 4))
    before = snapshot(pair.store)
    message = (r"next_obs\[:-1\] must equal obs\[1:\] \(a frame stack shifted by one frame\); it differs \(only a "
               r"transition that terminated or truncated may carry another next_obs, which is stored as given\)")
    with pytest.raises(ValueError, match=message):
        pair.store.add(stack(2, 3, 4), 0, 0.0, stack(9, 9, 9), False, False)
    assert_same_snapshot(before, snapshot(pair.store))
    pair.add(stack(2, 3, 4), 0, 0.0, stack(3, 4, 5))  # the episode goes on
    pair.check()
    assert len(pair.store.episodes()) == 1


def test_single_frame_adds_at_an_ending_push_the_frame_as_before(make_pair) -> None:
    pair = make_pair(stack_size=3)
    pair.add(frame(1), 0, 0.0, frame(2))
    pair.add(frame(2), 0, 0.0, frame(9), True, False)
    np.testing.assert_array_equal(pair.store.read([1]).next_obs[0], stack(1, 2, 9))
    pair.check()


def test_in_a_vector_env_one_env_ends_detached_while_the_others_go_on(make_pair, encoding) -> None:
    pair = make_pair(stack_size=2, num_envs=3, capacity=40, **encoding)
    obs = np.array([stack(1, 2), stack(11, 12), stack(21, 22)])
    for t in range(12):
        next_obs = np.concatenate([obs[:, 1:], obs[:, -1:] + 1], axis=1)
        terminated = np.zeros(3, bool)
        truncated = np.zeros(3, bool)
        if t % 4 == 3:  # env 1 ends with its reset stack
            next_obs[1] = stack(100 + t, 100 + t)
            terminated[1] = True
        if t % 5 == 4:  # env 2 truncates with its reset stack, as a same-step autoreset without final_obs
            next_obs[2] = stack(200 + t, 201 + t)
            truncated[2] = True
        pair.add(obs, np.arange(3), np.ones(3, np.float32), next_obs, terminated, truncated)
        obs = next_obs
    pair.check()
    assert [e.ended_by for e in pair.store.episodes() if e.env_index == 0] == ["in progress"]
    assert sum(e.ended_by == "terminated" for e in pair.store.episodes()) == 3
    assert_batch_matches(pair.store.sample(64, np.random.default_rng(0)), pair.ref)


def test_an_env_masked_out_does_not_make_another_env_detached(make_pair) -> None:
    pair = make_pair(stack_size=2, num_envs=2)
    obs = np.array([stack(1, 2), stack(3, 4)])
    next_obs = np.array([stack(8, 8), stack(4, 5)])
    pair.store.add(obs, np.arange(2), np.zeros(2), next_obs, np.array([True, False]), np.zeros(2, bool),
                   env_mask=np.array([True, True]))
    pair.ref.add(obs, np.arange(2), np.zeros(2), next_obs, np.array([True, False]), np.zeros(2, bool))
    pair.check()


# -- eviction, commits and reopening ---------------------------------------------------------------


@pytest.mark.parametrize("capacity", [1, 2, 3, 5])
def test_eviction_around_detached_transitions_keeps_every_stored_one_exact(make_pair, encoding, capacity) -> None:
    pair = make_pair(stack_size=3, capacity=capacity, **encoding)
    n = 1
    for round_ in range(6):
        n = play(pair, 2, length=1 + round_ % 3, first=n)
        pair.check()
        pair.store.flush()  # a commit moves the frame tail: the oldest obs chain must stay
        pair.check()
    pair.reopen("r")
    pair.check()


def test_a_store_of_detached_transitions_commits_many_frame_table_generations(make_pair) -> None:
    # Episodes of one transition write 2 * stack_size frames each: the frame table must grow.
    pair = make_pair(stack_size=4, capacity=50)
    play(pair, 200, length=1)
    pair.check()
    pair.reopen()
    pair.check()


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_detached_transitions_read_back_the_same_after_reopening(make_pair, encoding, mode) -> None:
    pair = make_pair(stack_size=3, capacity=30, **encoding)
    n = play(pair, 4, ending="terminated")
    n = play(pair, 3, ending="truncated", first=n)
    before = pair.store.sample(16, np.random.default_rng(3))
    pair.reopen(mode)
    pair.check()
    after = pair.store.sample(16, np.random.default_rng(3))
    for item in fields(before):
        np.testing.assert_array_equal(getattr(after, item.name), getattr(before, item.name))
    if mode == "r+":
        play(pair, 2, first=n)  # appending goes on: a new episode after the ended one
        pair.check()


def test_a_version_3_store_opens_and_its_next_commit_writes_version_4(make_store, tmp_path) -> None:
    store = make_store(stack_size=2)
    store.add(stack(1, 2), 0, 0.0, stack(2, 3), False, False)
    path = store.path
    store.close()
    header = json.loads((path / "header.json").read_text())
    body = {key: value for key, value in header.items() if key != "checksum"}
    body["format_version"] = 3
    body["checksum"] = zlib.crc32(json.dumps(body, sort_keys=True).encode())
    (path / "header.json").write_text(json.dumps(body))
    with ReplayStore.open(path, "r") as reader:
        np.testing.assert_array_equal(reader.read([0]).next_obs[0], stack(2, 3))
    with ReplayStore.open(path, "r+") as writer:
        writer.add(stack(2, 3), 0, 0.0, stack(7, 7), True, False)
    assert json.loads((path / "header.json").read_text())["format_version"] == 4
    with ReplayStore.open(path, "r") as reader:
        np.testing.assert_array_equal(reader.read([1]).next_obs[0], stack(7, 7))


def test_verify_finds_no_problem_in_a_store_with_detached_transitions(make_pair) -> None:
    pair = make_pair(stack_size=3, capacity=12)
    play(pair, 6)
    pair.store.flush()
    report = verify_store(str(pair.store.path))
    assert report["problems"] == [] and report["transitions"] == 12


# -- n-step windows and sequences ------------------------------------------------------------------


def expected_window(ref: ReferenceStore, step: int, length: int) -> list[int]:
    """The steps of the window from ``step``: its episode's next transitions until one ends."""
    first = ref.transition(step)
    episode = next(e for e in ref.episodes[first.env_index] if any(t.step == step for t in e))
    steps = [t.step for t in episode if t.step >= step][:length]
    cut = next((i for i, s in enumerate(steps) if ref.transition(s).terminated or ref.transition(s).truncated),
               len(steps) - 1)
    return steps[: cut + 1]


def test_an_n_step_window_ending_at_a_detached_transition_bootstraps_from_its_given_next_obs(
    make_pair, encoding
) -> None:
    pair = make_pair(stack_size=3, capacity=60, **encoding)
    n = play(pair, 5, length=4, ending="terminated")
    play(pair, 4, length=3, ending="truncated", first=n)
    gamma = 0.5
    batch = pair.store.sample(200, np.random.default_rng(1), n_step=3, gamma=gamma)
    for i, step in enumerate(batch.index.tolist()):
        window = expected_window(pair.ref, step, 3)
        last = pair.ref.transition(window[-1])
        np.testing.assert_array_equal(batch.obs[i], pair.ref.transition(step).obs)
        np.testing.assert_array_equal(batch.next_obs[i], last.next_obs)
        assert batch.terminated[i] == last.terminated and batch.truncated[i] == last.truncated
        rewards = [pair.ref.transition(s).reward for s in window]
        assert batch.reward[i] == pytest.approx(sum(r * gamma**k for k, r in enumerate(rewards)))
    detached_first = [i for i, s in enumerate(batch.index.tolist()) if expected_window(pair.ref, s, 3) == [s]]
    assert detached_first  # windows that start at a detached transition: obs by its own rule


def test_sequences_crossing_a_detached_transition_return_its_obs_and_given_next_obs(make_pair, encoding) -> None:
    pair = make_pair(stack_size=3, capacity=60, **encoding)
    n = play(pair, 6, length=3, ending="terminated")
    play(pair, 2, length=5, ending="truncated", first=n)
    batch = pair.store.sample_sequences(40, 4, np.random.default_rng(2))
    for b in range(40):
        window = expected_window(pair.ref, int(batch.index[b, 0]), 4)
        assert batch.mask[b].tolist() == [True] * len(window) + [False] * (4 - len(window))
        assert_batch_matches(WindowRows(batch, b, len(window)), pair.ref, window)
        assert not batch.obs[b, len(window):].any() and not batch.next_obs[b, len(window):].any()


class WindowRows:
    """The first ``count`` transitions of window ``b`` of a SequenceBatch, as a Batch's fields."""

    def __init__(self, batch, b: int, count: int) -> None:
        for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated", "index"):
            setattr(self, name, getattr(batch, name)[b, :count])
        self.env_index = np.full(count, batch.env_index[b])


# -- out= refills ----------------------------------------------------------------------------------


def assert_equal(a, b) -> None:
    for item in fields(a):
        np.testing.assert_array_equal(getattr(a, item.name), getattr(b, item.name), err_msg=item.name)


def addresses(batch) -> dict[str, int]:
    return {item.name: getattr(batch, item.name).__array_interface__["data"][0] for item in fields(batch)}


def test_a_batch_with_separate_obs_and_next_obs_is_refilled_in_place_with_and_without_detached_rows(
    make_pair,
) -> None:
    pair = make_pair(stack_size=3, capacity=200)
    play(pair, 30, length=6)
    fresh, reused = np.random.default_rng(4), np.random.default_rng(4)
    out = pair.store.sample(8, reused)
    pair.store.sample(8, fresh)
    while np.shares_memory(out.obs, out.next_obs):  # draw until a batch holds a detached row
        out = pair.store.sample(8, reused)
        pair.store.sample(8, fresh)
    where = addresses(out)
    kinds = set()
    for _ in range(40):
        expected = pair.store.sample(8, fresh)
        kinds.add(np.shares_memory(expected.obs, expected.next_obs))
        assert pair.store.sample(8, reused, out=out) is out
        assert_equal(out, expected)
        assert_batch_matches(out, pair.ref)
        assert addresses(out) == where
    assert kinds == {True, False}  # refilled with batches of both kinds


def test_a_batch_whose_obs_and_next_obs_share_frames_refuses_a_detached_row_and_batches_reuse_goes_on(
    make_pair,
) -> None:
    pair = make_pair(stack_size=3, capacity=200)
    for t in range(20):  # an episode without endings: every batch shares its frames
        pair.add(stack(t + 1, t + 2, t + 3), 0, 0.0, stack(t + 2, t + 3, t + 4))
    shared = pair.store.sample(8, 0)
    assert np.shares_memory(shared.obs, shared.next_obs)
    assert pair.store.sample(8, 1, out=shared) is shared
    play(pair, 40, length=1, first=100)  # now most transitions are detached
    with pytest.raises(ValueError, match=r"out's obs and next_obs share 2 frames, but this batch holds a "
                                         r"transition whose next_obs was stored as given"):
        pair.store.sample(8, 2, out=shared)
    fresh = np.random.default_rng(6)
    with pair.store.batches(8, prefetch=1, rng=np.random.default_rng(6), reuse=True) as reused:
        for _ in range(12):
            assert_equal(next(reused), pair.store.sample(8, fresh))


def test_a_sequence_batch_is_refilled_in_place_across_detached_rows(make_pair) -> None:
    pair = make_pair(stack_size=2, capacity=100)
    play(pair, 20, length=4)
    fresh, reused = np.random.default_rng(8), np.random.default_rng(8)
    out = pair.store.sample_sequences(6, 5, reused)
    pair.store.sample_sequences(6, 5, fresh)
    while np.shares_memory(out.obs, out.next_obs):
        out = pair.store.sample_sequences(6, 5, reused)
        pair.store.sample_sequences(6, 5, fresh)
    for _ in range(10):
        expected = pair.store.sample_sequences(6, 5, fresh)
        assert pair.store.sample_sequences(6, 5, reused, out=out) is out
        assert_equal(out, expected)


def test_n_step_batches_refill_in_place_with_detached_rows(make_pair) -> None:
    pair = make_pair(stack_size=3, capacity=100)
    play(pair, 20, length=3)
    fresh, reused = np.random.default_rng(9), np.random.default_rng(9)
    out = pair.store.sample(8, reused, n_step=2)
    pair.store.sample(8, fresh, n_step=2)
    for _ in range(10):
        expected = pair.store.sample(8, fresh, n_step=2)
        assert pair.store.sample(8, reused, n_step=2, out=out) is out
        assert_equal(out, expected)


# -- HDF5 ------------------------------------------------------------------------------------------


def fill_for_export(pair) -> None:
    """Two envs: detached endings of both kinds, shifted endings, a cut episode, one still going on;
    eviction removed the first transitions."""
    obs = np.array([stack(1, 2, 3), stack(101, 102, 103)])
    for t in range(30):
        next_obs = np.concatenate([obs[:, 1:], obs[:, -1:] + 1], axis=1)
        terminated, truncated = np.zeros(2, bool), np.zeros(2, bool)
        if t % 5 == 4:
            next_obs[0] = stack(50 + t, 50 + t, 50 + t)
            terminated[0] = True
        if t % 7 == 6:
            truncated[1] = True  # a shifted next_obs at a truncation
        if t % 9 == 8:
            next_obs[1] = stack(150 + t, 151 + t, 152 + t)
            terminated[1] = True
        pair.add(obs, np.arange(2), np.full(2, t, np.float32), next_obs, terminated, truncated)
        obs = next_obs


@pytest.mark.parametrize("layout", ["mmreplay", "minari"])
def test_an_hdf5_round_trip_keeps_every_detached_next_obs(make_pair, tmp_path, encoding, layout) -> None:
    pair = make_pair(stack_size=3, num_envs=2, capacity=45, **encoding)
    fill_for_export(pair)
    target = tmp_path / "export-v0"
    mmreplay.export_hdf5(pair.store, target, layout=layout, chunk_steps=7)
    mmreplay.import_hdf5(target, tmp_path / "copy.mmr", chunk_steps=5)
    with ReplayStore.open(tmp_path / "copy.mmr") as copy:
        stored = pair.store.stored_steps
        original, imported = pair.store.read(list(stored)), copy.read(list(copy.stored_steps))
        for name in ("obs", "next_obs", "action", "reward", "terminated", "truncated", "env_index"):
            np.testing.assert_array_equal(getattr(imported, name), getattr(original, name), err_msg=name)
        # (An episode whose first transitions were evicted comes back as a whole episode.)
        assert [(e.env_index, e.length, e.ended_by) for e in copy.episodes()] == [
            (e.env_index, e.length, e.ended_by) for e in pair.store.episodes()]
        assert not all(e.complete for e in pair.store.episodes())


def test_the_mmreplay_layout_marks_final_stacks_and_owns_their_frames(make_pair, tmp_path) -> None:
    pair = make_pair(stack_size=3)
    play(pair, 2, length=2)  # frames 1..; episode 0: obs 1,1,1 -> 2 -> reset 3,3,3; episode 1: 3,3,3 -> 4 -> 5,5,5
    mmreplay.export_hdf5(pair.store, tmp_path / "x.h5")
    with h5py.File(tmp_path / "x.h5", "r") as file:
        assert file.attrs["format_version"] == 2
        assert file["episodes/final_stack"][()].tolist() == [True, True]
        assert file["episodes/frame_start"][()].tolist() == [0, 7]  # 3 + 2 + 2 frames each
        values = file["frames"][:, 0, 0].tolist()
    assert values == [1, 1, 1, 2, 3, 3, 3, 3, 3, 3, 4, 5, 5, 5]


def test_the_minari_layout_ends_observations_with_the_final_stacks_newest_frame(make_pair, tmp_path) -> None:
    pair = make_pair(stack_size=3)
    pair.add(stack(1, 2, 3), 0, 0.0, stack(2, 3, 4))
    pair.add(stack(2, 3, 4), 0, 0.0, stack(7, 8, 9), True, False)
    mmreplay.export_hdf5(pair.store, tmp_path / "m-v0", layout="minari")
    with h5py.File(tmp_path / "m-v0" / "data" / "main_data.hdf5", "r") as file:
        episode = file["episode_0"]
        assert episode["observations"][:, 0, 0].tolist() == [3, 4, 9]
        assert episode["mmreplay_final_stack"][:, 0, 0].tolist() == [7, 8, 9]


def test_an_hdf5_file_of_format_version_1_still_imports(make_store, tmp_path) -> None:
    store = make_store(stack_size=2)
    for t in range(5):
        store.add(stack(t, t + 1), 0, float(t), stack(t + 1, t + 2), t == 4, False)
    mmreplay.export_hdf5(store, tmp_path / "x.h5")
    with h5py.File(tmp_path / "x.h5", "r+") as file:  # what version 1 wrote: no final_stack
        file.attrs["format_version"] = 1
        del file["episodes/final_stack"]
    mmreplay.import_hdf5(tmp_path / "x.h5", tmp_path / "copy.mmr")
    with ReplayStore.open(tmp_path / "copy.mmr") as copy:
        assert_equal(copy.read(range(5)), store.read(range(5)))


# -- the pure-Python path --------------------------------------------------------------------------

PURE_SCRIPT = """
import sys, numpy as np
from mmreplay import ReplayStore
sys.path.insert(0, sys.argv[2])
from strategies import stack
store = ReplayStore.create(sys.argv[1], frame_shape=(3, 4), capacity=6, stack_size=3)
for e in range(4):
    store.add(stack(10 * e + 1, 10 * e + 2, 10 * e + 3), e, 1.0, stack(10 * e + 2, 10 * e + 3, 10 * e + 4), False, False)
    store.add(stack(10 * e + 2, 10 * e + 3, 10 * e + 4), e, 2.0, stack(99 - e, 99 - e, 98 - e), e % 2 == 0, e % 2 == 1)
store.close()
"""


def test_the_pure_python_path_writes_and_reads_detached_transitions_as_the_compiled_one(tmp_path) -> None:
    tests = str(Path(__file__).resolve().parent)
    batches = []
    for pure in ("1", "0"):
        path = tmp_path / f"store-{pure}.mmr"
        environment = {**os.environ, "MMREPLAY_PURE_PYTHON": pure}
        subprocess.run([sys.executable, "-c", PURE_SCRIPT, str(path), tests], check=True, env=environment)
        with ReplayStore.open(path) as store:
            batches.append(store.read(list(store.stored_steps)))
        assert (path / "transitions.tbl").read_bytes() == (tmp_path / "store-1.mmr" / "transitions.tbl").read_bytes()
    assert_equal(batches[0], batches[1])
    np.testing.assert_array_equal(batches[0].next_obs[-1], stack(96, 96, 95))


# -- CleanRL's buffer calls ------------------------------------------------------------------------


def test_cleanrls_adds_with_the_reset_obs_at_termination_match_sb3s_replay_buffer(tmp_path) -> None:
    """CleanRL's dqn_atari.py: ``real_next_obs`` is the final observation only where an env truncated;
    where it terminated, it is the next episode's reset stack. Both buffers keep that row as given."""
    pytest.importorskip("stable_baselines3")
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    from mmreplay.sb3 import MmreplayBuffer

    n_envs, shape = 2, (4, 5, 6)
    observation_space, action_space = spaces.Box(0, 255, shape, np.uint8), spaces.Discrete(4)
    options = dict(device="cpu", n_envs=n_envs, handle_timeout_termination=False)
    theirs = ReplayBuffer(64, observation_space, action_space, **options)
    ours = MmreplayBuffer(64, observation_space, action_space, path=tmp_path / "cleanrl.mmr", **options)
    rng = np.random.default_rng(0)

    def reset_stack() -> np.ndarray:
        return np.repeat(rng.integers(0, 256, (1, *shape[1:]), np.uint8), shape[0], axis=0)

    obs = np.stack([reset_stack() for _ in range(n_envs)])
    for _ in range(60):
        final = np.concatenate([obs[:, 1:], rng.integers(0, 256, (n_envs, 1, *shape[1:]), np.uint8)], axis=1)
        terminations, truncations = rng.random(n_envs) < 0.15, rng.random(n_envs) < 0.05
        next_obs = final.copy()
        for env in np.flatnonzero(terminations | truncations):
            next_obs[env] = reset_stack()  # the vector env's autoreset obs
        real_next_obs = next_obs.copy()
        for env in np.flatnonzero(truncations):
            real_next_obs[env] = final[env]  # infos["final_observation"], truncated envs only
        row = (obs, real_next_obs, rng.integers(0, 4, n_envs), rng.standard_normal(n_envs).astype(np.float32),
               terminations, [{} for _ in range(n_envs)])
        theirs.add(*row)
        ours.add(*row)
        obs = next_obs
    positions = np.repeat(np.arange(theirs.size()), n_envs)
    envs = np.tile(np.arange(n_envs), theirs.size())
    got = ours.samples_at(positions, envs)
    assert np.array_equal(got.observations.numpy(), theirs.observations[positions, envs])
    assert np.array_equal(got.next_observations.numpy(), theirs.next_observations[positions, envs])
    assert np.array_equal(got.dones.numpy()[:, 0], theirs.dones[positions, envs])
    assert ours.store.read(ours.store.stored_steps).terminated.sum() > 3
    ours.close()
