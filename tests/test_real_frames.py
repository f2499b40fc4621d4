"""Lossless round trips and disk footprint on real Atari frames (recorded by mmreplay.testing.atari_frames).

A game's frame stream (see mmreplay/testing/atari_frames.py) holds every observation in order: transition t is
``(frames[t], action[t], reward[t], frames[t + 1], terminated[t], truncated[t])`` for every t with
``action[t] >= 0``. The frames are recorded one at a time, so the store must detect every episode
start on its own (``episode_start``) and rebuild every 4-frame stack from stored frames.
"""

from __future__ import annotations

import functools

import lz4.block
import numpy as np
import pytest
from atari_data import load_stream
from reference import ReferenceStore, assert_batch_matches, assert_store_matches

from mmreplay import ReplayStore

GAMES = ["pong", "mspacman"]
STACK = 4
MAX_FRAMES = 3000  # per game: enough for several episode ends
KEYS = ("frames", "episode_start", "action", "reward", "terminated", "truncated")


@functools.cache
def stream(game: str) -> dict[str, np.ndarray]:
    """The first MAX_FRAMES of a game's frame stream."""
    return load_stream(game, KEYS, MAX_FRAMES)


def transition_positions(s: dict[str, np.ndarray], stop: int) -> np.ndarray:
    """The stream positions t < stop - 1 that begin a transition."""
    return np.flatnonzero(s["action"][: stop - 1] >= 0)


def stack_positions(s: dict[str, np.ndarray], t: int, first: int) -> tuple[list[int], list[int]]:
    """Stream positions of obs and next_obs for the transition at t, by plain arithmetic on the stream.

    ``first`` is the first position recorded; episodes start there and wherever ``episode_start``.
    """
    starts = np.flatnonzero(s["episode_start"][: t + 1])
    start = max(first, int(starts[-1]) if len(starts) else first)
    obs = [max(start, t - k) for k in range(STACK - 1, -1, -1)]
    return obs, obs[1:] + [t + 1]


def record(pair_store, ref, s, positions) -> None:
    for t in positions:
        args = (s["frames"][t], s["action"][t], s["reward"][t], s["frames"][t + 1],
                bool(s["terminated"][t]), s["truncated"][t])
        pair_store.add(*args)
        ref.add(*args)


def lz4_sizes(frames: np.ndarray) -> np.ndarray:
    return np.array([len(lz4.block.compress(np.ascontiguousarray(f).tobytes())) for f in frames])


def footprint_bound(s, positions_stored, first, n_stored) -> float:
    """1.15 x the lz4 sizes of every frame a stored transition needs + 64 B per transition + 1 MiB."""
    needed: set[int] = set()
    for t in positions_stored:
        obs, nxt = stack_positions(s, int(t), first)
        needed.update(obs)
        needed.update(nxt)
    compressed = int(lz4_sizes(s["frames"][sorted(needed)]).sum())
    return 1.15 * compressed + 64 * n_stored + 2**20


def make(tmp_path, name, capacity, num_envs=1):
    config = dict(frame_shape=(84, 84), capacity=capacity, stack_size=STACK, num_envs=num_envs)
    return ReplayStore.create(tmp_path / name, **config), ReferenceStore(**config)


@pytest.mark.parametrize("game", GAMES)
def test_recorded_stream_round_trips_losslessly(tmp_path, game):
    s = stream(game)
    positions = transition_positions(s, 2500)
    store, ref = make(tmp_path, f"{game}.mmr", capacity=len(positions))
    try:
        record(store, ref, s, positions)
        # The reference found the episode starts the stream records, and nothing else.
        starts = [ref.transition(i).episode_start for i in range(len(positions))]
        want = [i == 0 or bool(s["episode_start"][t]) for i, t in enumerate(positions)]
        assert starts == want
        assert sum(starts) >= 2, "the test needs at least one episode boundary"
        assert_store_matches(store, ref)
        # An independent check of the stacks, by arithmetic on stream positions.
        for step in range(0, len(positions), 97):
            t = int(positions[step])
            obs, nxt = stack_positions(s, t, 0)
            batch = store.read([step])
            np.testing.assert_array_equal(batch.obs[0], s["frames"][obs], err_msg=f"obs of step {step}")
            np.testing.assert_array_equal(batch.next_obs[0], s["frames"][nxt], err_msg=f"next_obs of step {step}")
        assert_batch_matches(store.sample(64, rng=0), ref)
        store.close()
        with ReplayStore.open(tmp_path / f"{game}.mmr") as reopened:
            assert_store_matches(reopened, ref)
    finally:
        if not store.closed:
            store.close()


@pytest.mark.parametrize("game", GAMES)
def test_footprint_is_within_lz4_size_plus_64_bytes_per_transition(tmp_path, game):
    s = stream(game)
    positions = transition_positions(s, 2500)
    store, ref = make(tmp_path, f"{game}.mmr", capacity=len(positions))
    try:
        record(store, ref, s, positions)
        store.flush()
        bound = footprint_bound(s, positions, 0, len(store))
        used = store.bytes_on_disk
        assert used <= bound, f"{game}: {used:,} bytes on disk for {len(store)} transitions; bound {bound:,.0f}"
    finally:
        if not store.closed:
            store.close()


@pytest.mark.parametrize("game", GAMES)
def test_wraparound_on_real_frames_keeps_every_stored_transition_and_the_footprint(tmp_path, game):
    s = stream(game)
    positions = transition_positions(s, MAX_FRAMES)
    capacity = 1001
    store, ref = make(tmp_path, f"{game}.mmr", capacity=capacity)
    try:
        # Record most of the stream, reopen for append mid-episode, record the rest.
        split = int(np.searchsorted(positions, 2600))
        record(store, ref, s, positions[:split])
        store.close()
        store = ReplayStore.open(tmp_path / f"{game}.mmr", mode="r+")
        record(store, ref, s, positions[split:])
        assert len(store) == capacity and store.transitions_added == len(positions)
        assert_store_matches(store, ref)
        assert_batch_matches(store.sample(128, rng=1), ref)
        store.flush()
        stored = positions[len(positions) - capacity:]
        bound = footprint_bound(s, stored, 0, len(store))
        used = store.bytes_on_disk
        assert used <= bound, f"{game}: {used:,} bytes on disk for {len(store)} transitions; bound {bound:,.0f}"
    finally:
        if not store.closed:
            store.close()


def test_footprint_follows_stored_transitions_not_capacity(tmp_path):
    s = stream("pong")
    positions = transition_positions(s, 1500)
    store, ref = make(tmp_path, "pong.mmr", capacity=100_000)
    try:
        record(store, ref, s, positions)
        store.flush()
        bound = footprint_bound(s, positions, 0, len(store))
        used = store.bytes_on_disk
        assert used <= bound, f"{used:,} bytes on disk for {len(store)} of 100,000 transitions; bound {bound:,.0f}"
    finally:
        if not store.closed:
            store.close()


def test_two_real_games_as_vector_envs_with_interleaved_endings(tmp_path):
    games = [stream("pong"), stream("mspacman")]
    per_env = [transition_positions(g, 2000) for g in games]
    adds = min(len(p) for p in per_env)
    store, ref = make(tmp_path, "two.mmr", capacity=1001, num_envs=2)
    try:
        for i in range(adds):
            ts = [int(p[i]) for p in per_env]
            args = (
                np.array([g["frames"][t] for g, t in zip(games, ts)]),
                np.array([g["action"][t] for g, t in zip(games, ts)]),
                np.array([g["reward"][t] for g, t in zip(games, ts)]),
                np.array([g["frames"][t + 1] for g, t in zip(games, ts)]),
                np.array([g["terminated"][t] for g, t in zip(games, ts)]),
                np.array([g["truncated"][t] for g, t in zip(games, ts)]),
            )
            store.add(*args)
            ref.add(*args)
        assert min(len(ref.episodes[e]) for e in range(2)) >= 2, "the test needs an episode end per env"
        assert_store_matches(store, ref)
        assert_batch_matches(store.sample(128, rng=2), ref)
        store.close()
        store = ReplayStore.open(tmp_path / "two.mmr", mode="r+")
        assert_store_matches(store, ref)
    finally:
        if not store.closed:
            store.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_cuts_stacks_and_reopens_on_real_frames_match_the_reference(tmp_path, seed):
    """MsPacman frames (about 1.8 kB each compressed) so the frame segments fill, roll over and go."""
    frames = stream("mspacman")["frames"]
    rng = np.random.default_rng(seed)
    num_envs, stack_size = [(1, 4), (2, 3), (2, 1)][seed]
    capacity = [97, 250, 31][seed]
    config = dict(frame_shape=(84, 84), capacity=capacity, stack_size=stack_size, num_envs=num_envs)
    path = tmp_path / "fuzz.mmr"
    store, ref = ReplayStore.create(path, **config), ReferenceStore(**config)
    cursor = [0] * num_envs
    try:
        for _ in range(1200 // num_envs):
            as_stack = rng.random() < 0.3
            obs, next_obs = [], []
            for env in range(num_envs):
                previous = ref.previous_next_obs(env)
                if previous is None or rng.random() < 0.03:  # cut without a flag: jump in the stream
                    cursor[env] = int(rng.integers(stack_size, len(frames) - 2))
                    first = frames[cursor[env] - stack_size + 1 : cursor[env] + 1] if as_stack else frames[cursor[env]]
                else:
                    first = previous.copy() if as_stack else previous[-1].copy()
                cursor[env] = min(cursor[env] + 1, len(frames) - 1)
                newest = frames[cursor[env]]
                obs.append(first)
                next_obs.append(np.concatenate([first[1:], newest[None]]) if as_stack else newest)
            ends = rng.random((2, num_envs)) < 0.02
            if num_envs == 1:
                args = (obs[0], 1, 0.5, next_obs[0], bool(ends[0, 0]), bool(ends[1, 0]))
            else:
                args = (np.array(obs), np.ones(num_envs, np.int64), np.zeros(num_envs), np.array(next_obs),
                        ends[0], ends[1])
            store.add(*args)
            ref.add(*args)
            if rng.random() < 0.01:
                store.close()
                store = ReplayStore.open(path, mode="r+")
        assert_store_matches(store, ref)
        assert_batch_matches(store.sample(64, rng=seed), ref)
        store.close()
        store = ReplayStore.open(path, mode="r")
        assert_store_matches(store, ref)
    finally:
        if not store.closed:
            store.close()
