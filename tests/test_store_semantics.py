"""Named tests for each boundary case of ReplayStore's contract, one sentence per test.

Frames are numbered by their pixel value (``frame(7)`` is all sevens), so the expected stacks below
read as lists of frame numbers, oldest first.
"""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from reference import (
    BATCH_FIELDS,
    ReferenceStore,
    assert_batch_matches,
    assert_same_snapshot,
    assert_store_matches,
    snapshot,
)
from strategies import frame, stack

from mmreplay import Batch, ReplayStore
from mmreplay.errors import (
    ClosedStoreError,
    CorruptStoreError,
    FormatVersionError,
    MmreplayError,
    ReadOnlyStoreError,
    StoreExistsError,
    StoreNotFoundError,
)


def add_episode(pair, numbers, *, terminated=False, truncated=False):
    """Add frames ``numbers[0] -> numbers[1] -> ...`` one at a time; the last transition ends as told."""
    steps = []
    for i, (a, b) in enumerate(zip(numbers[:-1], numbers[1:])):
        last = i == len(numbers) - 2
        steps += pair.add(frame(a), i, float(a), frame(b), terminated and last, truncated and last)
    return steps


def assert_same_batch(a, b) -> None:
    for name in BATCH_FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"batch.{name}")


# -- episodes and stacks ---------------------------------------------------------------------------


def test_stack_at_episode_start_repeats_first_frame(make_pair):
    pair = make_pair(stack_size=4)
    add_episode(pair, [1, 2, 3])
    batch = pair.store.read([0, 1])
    np.testing.assert_array_equal(batch.obs, [stack(1, 1, 1, 1), stack(1, 1, 1, 2)])
    np.testing.assert_array_equal(batch.next_obs, [stack(1, 1, 1, 2), stack(1, 1, 2, 3)])
    pair.check()


def test_stack_added_at_episode_start_is_sampled_exactly(make_pair):
    pair = make_pair(stack_size=3)
    pair.add(stack(7, 8, 9), 0, 0.0, stack(8, 9, 10))
    batch = pair.store.read([0])
    np.testing.assert_array_equal(batch.obs[0], stack(7, 8, 9))
    np.testing.assert_array_equal(batch.next_obs[0], stack(8, 9, 10))


def test_continuing_with_frames_after_a_stack_keeps_the_given_older_frames(make_pair):
    pair = make_pair(stack_size=3)
    pair.add(stack(7, 8, 9), 0, 0.0, stack(8, 9, 10))
    pair.add(frame(10), 1, 0.0, frame(11))
    pair.add(frame(11), 2, 0.0, frame(12))
    batch = pair.store.read([1, 2])
    np.testing.assert_array_equal(batch.obs, [stack(8, 9, 10), stack(9, 10, 11)])
    np.testing.assert_array_equal(batch.next_obs, [stack(9, 10, 11), stack(10, 11, 12)])
    pair.check()


def test_frames_and_stacks_can_alternate_within_an_episode(make_pair):
    pair = make_pair(stack_size=3)
    pair.add(frame(1), 0, 0.0, frame(2))
    pair.add(stack(1, 1, 2), 1, 0.0, stack(1, 2, 3))  # the previous next_obs as sampled: continues
    pair.add(frame(3), 2, 0.0, frame(4))
    pair.add(stack(2, 3, 4), 3, 0.0, stack(3, 4, 5))
    batch = pair.store.read([0, 1, 2, 3])
    np.testing.assert_array_equal(
        batch.obs, [stack(1, 1, 1), stack(1, 1, 2), stack(1, 2, 3), stack(2, 3, 4)]
    )
    np.testing.assert_array_equal(batch.next_obs[3], stack(3, 4, 5))
    pair.check()


def test_next_obs_at_truncation_is_the_final_frame(make_pair):
    pair = make_pair(stack_size=2)
    add_episode(pair, [1, 2, 3], truncated=True)
    add_episode(pair, [10, 11])  # the reset observation differs from the final one
    batch = pair.store.read([1, 2])
    np.testing.assert_array_equal(batch.next_obs[0], stack(2, 3))
    assert batch.truncated.tolist() == [True, False]
    assert batch.terminated.tolist() == [False, False]
    np.testing.assert_array_equal(batch.obs[1], stack(10, 10))
    pair.check()


def test_next_obs_at_termination_is_the_final_frame(make_pair):
    pair = make_pair(stack_size=2)
    add_episode(pair, [1, 2, 3], terminated=True)
    add_episode(pair, [10, 11])
    batch = pair.store.read([1])
    np.testing.assert_array_equal(batch.next_obs[0], stack(2, 3))
    assert batch.terminated.tolist() == [True]
    assert batch.truncated.tolist() == [False]
    pair.check()


def test_terminated_and_truncated_are_stored_independently(make_pair):
    pair = make_pair(stack_size=2)
    pair.add(frame(1), 0, 0.0, frame(2), True, True)
    pair.add(frame(3), 0, 0.0, frame(4), False, True)
    pair.add(frame(5), 0, 0.0, frame(6), True, False)
    batch = pair.store.read([0, 1, 2])
    assert batch.terminated.tolist() == [True, False, True]
    assert batch.truncated.tolist() == [True, True, False]
    pair.check()


@pytest.mark.parametrize("ending", ["terminated", "truncated"])
def test_episode_starts_after_an_ending_even_if_obs_equals_the_final_frame(make_pair, ending):
    pair = make_pair(stack_size=3)
    add_episode(pair, [1, 2, 3], **{ending: True})
    add_episode(pair, [3, 4])  # obs equals the previous next_obs, but the episode ended
    batch = pair.store.read([2])
    np.testing.assert_array_equal(batch.obs[0], stack(3, 3, 3))
    np.testing.assert_array_equal(batch.next_obs[0], stack(3, 3, 4))
    pair.check()


def test_stacks_never_cross_an_episode_start(make_pair):
    pair = make_pair(stack_size=3)
    add_episode(pair, [1, 2, 3], terminated=True)
    add_episode(pair, [4, 5, 6, 7])
    add_episode(pair, [8, 9])  # cut without a flag
    batch = pair.store.read([2, 3, 4, 5])
    np.testing.assert_array_equal(
        batch.obs, [stack(4, 4, 4), stack(4, 4, 5), stack(4, 5, 6), stack(8, 8, 8)]
    )
    np.testing.assert_array_equal(
        batch.next_obs, [stack(4, 4, 5), stack(4, 5, 6), stack(5, 6, 7), stack(8, 8, 9)]
    )
    pair.check()


def test_obs_not_equal_previous_next_obs_starts_new_episode(make_pair):
    pair = make_pair(stack_size=3)
    add_episode(pair, [1, 2, 3])
    pair.add(frame(5), 0, 0.0, frame(6))  # no flag on the previous transition
    batch = pair.store.read([2])
    np.testing.assert_array_equal(batch.obs[0], stack(5, 5, 5))
    np.testing.assert_array_equal(batch.next_obs[0], stack(5, 5, 6))
    assert batch.terminated.tolist() == [False] and batch.truncated.tolist() == [False]
    pair.check()


def test_obs_stack_differing_only_in_older_frames_starts_new_episode(make_pair):
    pair = make_pair(stack_size=2)
    pair.add(stack(1, 2), 0, 0.0, stack(2, 3))
    pair.add(stack(9, 3), 0, 0.0, stack(3, 4))  # newest frame equals, the older one does not
    pair.add(frame(4), 0, 0.0, frame(5))
    batch = pair.store.read([1, 2])
    np.testing.assert_array_equal(batch.obs, [stack(9, 3), stack(3, 4)])
    np.testing.assert_array_equal(batch.next_obs, [stack(3, 4), stack(4, 5)])
    pair.check()


def test_obs_stack_is_compared_with_the_padded_previous_next_obs(make_pair):
    pair = make_pair(stack_size=3)
    pair.add(frame(1), 0, 0.0, frame(2))  # next_obs as sampled: 1, 1, 2
    pair.add(stack(0, 1, 2), 0, 0.0, stack(1, 2, 3))  # not equal to 1, 1, 2: a new episode
    pair.add(frame(3), 0, 0.0, frame(4))
    batch = pair.store.read([1, 2])
    np.testing.assert_array_equal(batch.obs, [stack(0, 1, 2), stack(1, 2, 3)])
    pair.check()


def test_repeated_identical_frames_stay_in_one_episode(make_pair):
    pair = make_pair(stack_size=4)
    add_episode(pair, [1, 2, 2, 2, 3])
    batch = pair.store.read([3])
    np.testing.assert_array_equal(batch.obs[0], stack(1, 2, 2, 2))
    np.testing.assert_array_equal(batch.next_obs[0], stack(2, 2, 2, 3))
    pair.check()


def test_color_frames_round_trip(make_pair):
    shape = (2, 3, 3)
    pair = make_pair(frame_shape=shape, stack_size=2)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(6, *shape), dtype=np.uint8)
    for a, b in zip(frames[:-1], frames[1:]):
        pair.add(a, 0, 0.5, b)
    pair.check()
    np.testing.assert_array_equal(pair.store.read([4]).next_obs[0], frames[4:6])


# -- capacity and eviction -------------------------------------------------------------------------


def test_len_counts_transitions_up_to_capacity(make_pair):
    pair = make_pair(capacity=5, stack_size=2)
    for n in range(1, 9):
        pair.add(frame(n), 0, 0.0, frame(n + 1))
        assert len(pair.store) == min(n, 5)
        assert pair.store.transitions_added == n
    pair.check()


def test_wraparound_keeps_every_counted_transition_exact(make_pair):
    pair = make_pair(capacity=5, stack_size=4)
    episodes = [([1, 2, 3, 4], "terminated"), ([10, 11, 12, 13, 14, 15, 16], None),
                ([20, 21, 22], "truncated"), ([30, 31, 32, 33, 34, 35], None)]
    for numbers, ending in episodes:
        for i, (a, b) in enumerate(zip(numbers[:-1], numbers[1:])):
            last = i == len(numbers) - 2
            pair.add(frame(a), i, float(a), frame(b), ending == "terminated" and last,
                     ending == "truncated" and last)
            pair.check()  # exact right after every eviction
    assert len(pair.store) == 5 and pair.store.transitions_added == 16
    batch = pair.store.read([11])  # the oldest stored: 30 -> 31
    np.testing.assert_array_equal(batch.obs[0], stack(30, 30, 30, 30))
    np.testing.assert_array_equal(pair.store.read([15]).obs[0], stack(31, 32, 33, 34))


def test_episode_continues_after_its_previous_transition_was_evicted(make_pair):
    pair = make_pair(capacity=1, stack_size=3)
    add_episode(pair, [1, 2, 3, 4, 5])
    batch = pair.store.read([3])
    np.testing.assert_array_equal(batch.obs[0], stack(2, 3, 4))
    np.testing.assert_array_equal(batch.next_obs[0], stack(3, 4, 5))
    pair.check()


def test_evicted_steps_are_not_readable(make_pair):
    pair = make_pair(capacity=3, stack_size=2)
    add_episode(pair, [1, 2, 3, 4, 5, 6])
    for step in (0, 1):
        with pytest.raises(IndexError):
            pair.store.read([step])
    assert pair.store.read([2, 3, 4]).index.tolist() == [2, 3, 4]


def test_read_of_a_step_never_added_raises_index_error(make_pair):
    pair = make_pair(capacity=8, stack_size=2)
    add_episode(pair, [1, 2, 3])
    for steps in ([2], [0, 5], [-1]):
        with pytest.raises(IndexError):
            pair.store.read(steps)


def test_read_returns_steps_in_the_order_given(make_pair):
    pair = make_pair(capacity=8, stack_size=2)
    add_episode(pair, [1, 2, 3, 4, 5, 6])
    steps = [4, 2, 2, 0, 3]
    batch = pair.store.read(np.array(steps))
    assert batch.index.tolist() == steps
    assert_batch_matches(batch, pair.ref, steps)
    assert_batch_matches(pair.store.read(steps), pair.ref, steps)


def test_capacity_one(make_pair):
    pair = make_pair(capacity=1, stack_size=2)
    add_episode(pair, [1, 2, 3], terminated=True)
    pair.check()
    add_episode(pair, [7, 8])
    assert len(pair.store) == 1 and pair.store.transitions_added == 3
    batch = pair.store.read([2])
    np.testing.assert_array_equal(batch.obs[0], stack(7, 7))
    pair.check()
    assert pair.store.sample(4, rng=0).index.tolist() == [2, 2, 2, 2]


def test_stack_size_one(make_pair):
    pair = make_pair(stack_size=1, capacity=5)
    add_episode(pair, [1, 2, 3], truncated=True)
    pair.add(stack(9), 0, 0.0, stack(10))  # a stack of one frame is also accepted
    pair.add(frame(10), 0, 0.0, frame(11))
    batch = pair.store.read([0, 1, 2, 3])
    assert batch.obs.shape == (4, 1, 3, 4)
    np.testing.assert_array_equal(batch.obs, [stack(1), stack(2), stack(9), stack(10)])
    np.testing.assert_array_equal(batch.next_obs, [stack(2), stack(3), stack(10), stack(11)])
    pair.check()


def test_odd_capacity_with_vector_envs(make_pair):
    pair = make_pair(capacity=7, stack_size=3, num_envs=3)
    rng = np.random.default_rng(5)
    current = [frame(1 + 50 * e) for e in range(3)]
    for t in range(12):
        nxt = [frame(int(current[e][0, 0]) + 1) for e in range(3)]
        ends = rng.random((2, 3)) < 0.2
        pair.add(np.array(current), np.arange(3) + t, np.full(3, float(t)), np.array(nxt), ends[0], ends[1])
        current = [frame(200 + 3 * t + e) if ends[0, e] or ends[1, e] else nxt[e] for e in range(3)]
        pair.check()
    assert len(pair.store) == 7 and pair.store.transitions_added == 36


# -- vector envs -----------------------------------------------------------------------------------


def test_vector_add_numbers_env_0_first(make_pair):
    pair = make_pair(num_envs=3, stack_size=2)
    obs = np.array([frame(1), frame(11), frame(21)])
    nxt = np.array([frame(2), frame(12), frame(22)])
    assert pair.add(obs, np.array([0, 1, 2]), np.zeros(3), nxt, np.zeros(3, bool), np.zeros(3, bool)) == [0, 1, 2]
    pair.add(nxt, np.array([3, 4, 5]), np.zeros(3), nxt + 1, np.zeros(3, bool), np.zeros(3, bool))
    batch = pair.store.read(range(6))
    assert batch.index.tolist() == [0, 1, 2, 3, 4, 5]
    assert batch.env_index.tolist() == [0, 1, 2, 0, 1, 2]
    assert batch.action.tolist() == [0, 1, 2, 3, 4, 5]
    np.testing.assert_array_equal(batch.next_obs[4], stack(12, 13))
    pair.check()


def test_vector_envs_with_interleaved_endings(make_pair):
    pair = make_pair(num_envs=2, stack_size=3, capacity=40)
    f = np.array
    no = np.zeros(2, bool)
    # env 0: 1 -> 2 -> 3 (terminated), then 4 -> 5 -> 6;  env 1: 11 -> 12 -> 13 -> 14 (truncated), 15 -> 16
    pair.add(f([frame(1), frame(11)]), f([0, 0]), f([0.0, 0.0]), f([frame(2), frame(12)]), no, no)
    pair.add(f([frame(2), frame(12)]), f([0, 0]), f([0.0, 0.0]), f([frame(3), frame(13)]), f([True, False]), no)
    pair.add(f([frame(4), frame(13)]), f([0, 0]), f([0.0, 0.0]), f([frame(5), frame(14)]), no, f([False, True]))
    pair.add(f([frame(5), frame(15)]), f([0, 0]), f([0.0, 0.0]), f([frame(6), frame(16)]), no, no)
    batch = pair.store.read(range(8))
    assert batch.env_index.tolist() == [0, 1] * 4
    assert batch.terminated.tolist() == [False, False, True, False, False, False, False, False]
    assert batch.truncated.tolist() == [False, False, False, False, False, True, False, False]
    np.testing.assert_array_equal(batch.obs[4], stack(4, 4, 4))  # env 0 restarted
    np.testing.assert_array_equal(batch.obs[5], stack(11, 12, 13))  # env 1 continued
    np.testing.assert_array_equal(batch.next_obs[5], stack(12, 13, 14))
    np.testing.assert_array_equal(batch.obs[6], stack(4, 4, 5))
    np.testing.assert_array_equal(batch.obs[7], stack(15, 15, 15))  # env 1 restarted
    pair.check()


def test_identical_frames_in_two_envs_stay_separate(make_pair):
    pair = make_pair(num_envs=2, stack_size=3)
    f, no = np.array, np.zeros(2, bool)
    pair.add(f([frame(1), frame(1)]), f([0, 0]), f([0.0, 0.0]), f([frame(2), frame(2)]), no, no)
    pair.add(f([frame(2), frame(2)]), f([0, 0]), f([0.0, 0.0]), f([frame(3), frame(4)]), no, no)
    pair.add(f([frame(3), frame(4)]), f([0, 0]), f([0.0, 0.0]), f([frame(5), frame(6)]), no, no)
    batch = pair.store.read([4, 5])
    np.testing.assert_array_equal(batch.next_obs, [stack(2, 3, 5), stack(2, 4, 6)])
    pair.check()


def test_eviction_is_fifo_across_envs(make_pair):
    pair = make_pair(num_envs=2, capacity=3, stack_size=2)
    f, no = np.array, np.zeros(2, bool)
    pair.add(f([frame(1), frame(11)]), f([0, 1]), f([0.0, 0.0]), f([frame(2), frame(12)]), no, no)
    pair.add(f([frame(2), frame(12)]), f([2, 3]), f([0.0, 0.0]), f([frame(3), frame(13)]), no, no)
    batch = pair.store.read([1, 2, 3])
    assert batch.env_index.tolist() == [1, 0, 1]
    with pytest.raises(IndexError):
        pair.store.read([0])
    pair.check()


def test_capacity_equal_to_num_envs_keeps_only_the_latest_vector_add(make_pair):
    pair = make_pair(num_envs=3, capacity=3, stack_size=2)
    obs = np.array([frame(1), frame(11), frame(21)])
    for t in range(4):
        pair.add(obs + t, np.arange(3), np.zeros(3), obs + t + 1, np.zeros(3, bool), np.zeros(3, bool))
        pair.check()
    np.testing.assert_array_equal(pair.store.read([9, 10, 11]).obs[:, 0], [frame(3), frame(13), frame(23)])


# -- actions, rewards and flags as given ------------------------------------------------------------


def test_python_scalars_are_accepted(make_pair):
    pair = make_pair(stack_size=2)
    pair.add(frame(1), 3, 1, frame(2), False, False)
    pair.add(frame(2), np.int32(4), 0.25, frame(3), np.bool_(False), np.bool_(True))
    pair.add(frame(5), np.int64(5), np.float32(-1.5), frame(6), True, False)
    batch = pair.store.read([0, 1, 2])
    assert batch.action.tolist() == [3, 4, 5]
    assert batch.reward.tolist() == [1.0, 0.25, -1.5]
    pair.check()


def test_reward_is_stored_as_float32(make_pair):
    pair = make_pair(stack_size=2)
    pair.add(frame(1), 0, 0.1, frame(2))
    batch = pair.store.read([0])
    assert batch.reward.dtype == np.float32
    assert batch.reward[0] == np.float32(0.1)


def test_action_shape_and_dtype_round_trip(make_pair):
    pair = make_pair(stack_size=2, action_shape=(2,), action_dtype=np.float32, num_envs=2)
    actions = np.array([[0.5, -1.25], [3.0, 1e-3]], dtype=np.float32)
    no = np.zeros(2, bool)
    pair.add(np.array([frame(1), frame(2)]), actions, np.zeros(2), np.array([frame(3), frame(4)]), no, no)
    batch = pair.store.read([0, 1])
    assert batch.action.dtype == np.float32 and batch.action.shape == (2, 2)
    np.testing.assert_array_equal(batch.action, actions)
    pair.check()


def test_integer_actions_are_cast_into_a_float_action_dtype(make_pair):
    pair = make_pair(stack_size=2, action_shape=(2,), action_dtype=np.float32)
    pair.add(frame(1), np.array([1, 2], dtype=np.int64), 0.0, frame(2))
    batch = pair.store.read([0])
    assert batch.action.dtype == np.float32
    assert batch.action.tolist() == [[1.0, 2.0]]


def test_narrow_integer_action_dtype_round_trips(make_pair):
    pair = make_pair(stack_size=2, action_dtype=np.int16)
    pair.add(frame(1), np.int16(-7), 0.0, frame(2))
    pair.add(frame(2), 300, 0.0, frame(3))
    batch = pair.store.read([0, 1])
    assert batch.action.dtype == np.int16
    assert batch.action.tolist() == [-7, 300]


# -- sampling --------------------------------------------------------------------------------------


def test_sample_returns_a_frozen_batch_with_documented_shapes_and_dtypes(make_pair):
    pair = make_pair(frame_shape=(3, 4), stack_size=2, action_shape=(2,), action_dtype=np.float32)
    for a, b in [(1, 2), (2, 3), (3, 4)]:
        pair.add(frame(a), np.array([a, -a], np.float32), 1.0, frame(b))
    batch = pair.store.sample(5, rng=0)
    assert isinstance(batch, Batch)
    assert dataclasses.is_dataclass(batch)
    expected = {
        "obs": ((5, 2, 3, 4), np.uint8),
        "action": ((5, 2), np.float32),
        "reward": ((5,), np.float32),
        "next_obs": ((5, 2, 3, 4), np.uint8),
        "terminated": ((5,), np.bool_),
        "truncated": ((5,), np.bool_),
        "index": ((5,), np.int64),
        "env_index": ((5,), np.int64),
    }
    for name, (shape, dtype) in expected.items():
        value = getattr(batch, name)
        assert value.shape == shape, name
        assert value.dtype == np.dtype(dtype), name
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.reward = np.zeros(5, np.float32)  # type: ignore[misc]
    assert_batch_matches(batch, pair.ref)


def test_sample_rows_are_the_transitions_their_index_names(make_pair):
    pair = make_pair(capacity=6, stack_size=3, num_envs=2)
    f, no = np.array, np.zeros(2, bool)
    for t in range(7):
        pair.add(f([frame(t + 1), frame(t + 101)]), f([t, t]), f([t, -t]), f([frame(t + 2), frame(t + 102)]),
                 f([t == 3, False]), no)
    for seed in range(5):
        assert_batch_matches(pair.store.sample(16, rng=seed), pair.ref)


def test_sample_is_deterministic_for_a_seed(make_pair):
    pair = make_pair(capacity=20, stack_size=2)
    add_episode(pair, list(range(1, 16)))
    assert_same_batch(pair.store.sample(8, rng=123), pair.store.sample(8, rng=123))
    assert_same_batch(
        pair.store.sample(8, rng=np.random.default_rng(7)), pair.store.sample(8, rng=np.random.default_rng(7))
    )


def test_sample_accepts_a_generator_an_int_or_none(make_pair):
    pair = make_pair(capacity=20, stack_size=2)
    add_episode(pair, [1, 2, 3, 4])
    for rng in (np.random.default_rng(1), 1, None):
        batch = pair.store.sample(3, rng=rng)
        assert_batch_matches(batch, pair.ref)
    assert_batch_matches(pair.store.sample(3), pair.ref)


def test_sample_advances_a_given_generator(make_pair):
    pair = make_pair(capacity=64, stack_size=2)
    add_episode(pair, list(range(1, 60)))
    rng = np.random.default_rng(3)
    first = pair.store.sample(16, rng=rng).index
    second = pair.store.sample(16, rng=rng).index
    assert not np.array_equal(first, second)


def test_sample_is_deterministic_across_reopen(make_pair):
    pair = make_pair(capacity=9, stack_size=3, num_envs=1)
    add_episode(pair, list(range(1, 14)), terminated=True)
    add_episode(pair, [40, 41, 42])
    before = [pair.store.sample(6, rng=seed) for seed in range(4)]
    pair.reopen("r")
    after = [pair.store.sample(6, rng=seed) for seed in range(4)]
    for a, b in zip(before, after):
        assert_same_batch(a, b)
    pair.reopen("r+")
    assert_same_batch(pair.store.sample(6, rng=0), before[0])


def test_sample_depends_only_on_contents_and_seed(make_pair):
    first, second = make_pair(capacity=7, stack_size=2), make_pair(capacity=7, stack_size=2)
    for pair in (first, second):
        add_episode(pair, list(range(1, 12)))
    assert_same_batch(first.store.sample(10, rng=99), second.store.sample(10, rng=99))


def test_sample_is_uniform_over_stored_transitions(make_pair):
    pair = make_pair(capacity=8, stack_size=2, num_envs=2)
    f, no = np.array, np.zeros(2, bool)
    for t in range(7):  # 14 transitions: steps 6..13 stored
        pair.add(f([frame(t + 1), frame(t + 101)]), f([0, 0]), f([0.0, 0.0]),
                 f([frame(t + 2), frame(t + 102)]), no, no)
    rng = np.random.default_rng(2024)
    counts = np.zeros(14, dtype=np.int64)
    for _ in range(250):
        counts += np.bincount(pair.store.sample(256, rng=rng).index, minlength=14)
    assert counts[:6].sum() == 0, f"evicted steps were sampled: {counts[:6]}"
    expected = counts.sum() / 8  # 8,000 per stored step; one standard deviation is about 84
    assert np.all(np.abs(counts[6:] - expected) < 0.06 * expected), counts[6:]


def test_sample_draws_with_replacement(make_pair):
    pair = make_pair(capacity=3, stack_size=2)
    add_episode(pair, [1, 2, 3, 4])
    batch = pair.store.sample(50, rng=0)
    assert batch.index.shape == (50,)
    assert set(batch.index.tolist()) <= {0, 1, 2}
    assert len(set(batch.index.tolist())) < 50


def test_sample_of_empty_store_raises_value_error(make_store):
    store = make_store(stack_size=2)
    with pytest.raises(ValueError):
        store.sample(1, rng=0)


# -- configuration, reopen, persistence ------------------------------------------------------------


def test_store_reports_its_configuration(make_store):
    store = make_store(frame_shape=[3, 4], capacity=11, stack_size=3, num_envs=2, action_shape=[2],
                       action_dtype=np.float32)
    assert store.capacity == 11 and store.stack_size == 3 and store.num_envs == 2
    assert store.frame_shape == (3, 4) and isinstance(store.frame_shape, tuple)
    assert store.action_shape == (2,) and isinstance(store.action_shape, tuple)
    assert store.action_dtype == np.dtype(np.float32) and isinstance(store.action_dtype, np.dtype)
    assert store.closed is False
    assert len(store) == 0 and store.transitions_added == 0


def test_reopen_keeps_configuration(make_store):
    store = make_store(frame_shape=(2, 2, 3), capacity=5, stack_size=1, num_envs=1, action_shape=(),
                       action_dtype=np.uint8)
    path = store.path
    store.close()
    with ReplayStore.open(path) as reopened:
        assert reopened.mode == "r"
        assert Path(reopened.path) == Path(path)
        assert reopened.capacity == 5 and reopened.stack_size == 1 and reopened.num_envs == 1
        assert reopened.frame_shape == (2, 2, 3) and reopened.action_shape == ()
        assert reopened.action_dtype == np.dtype(np.uint8)


def test_store_path_is_the_path_given(store_path):
    store = ReplayStore.create(store_path, frame_shape=(3, 4), capacity=4)
    try:
        assert Path(store.path) == store_path
    finally:
        store.close()
    store = ReplayStore.open(str(store_path), mode="r+")
    try:
        assert Path(store.path) == store_path and store.mode == "r+"
    finally:
        store.close()


def test_reopen_continues_episode_in_progress(make_pair):
    pair = make_pair(stack_size=4)
    add_episode(pair, [1, 2, 3])
    pair.reopen("r+")
    pair.add(frame(3), 0, 0.0, frame(4))
    pair.add(frame(4), 0, 0.0, frame(5))
    batch = pair.store.read([2, 3])
    np.testing.assert_array_equal(batch.obs, [stack(1, 1, 2, 3), stack(1, 2, 3, 4)])
    np.testing.assert_array_equal(batch.next_obs, [stack(1, 2, 3, 4), stack(2, 3, 4, 5)])
    assert pair.store.transitions_added == 4
    pair.check()


def test_reopen_continues_an_episode_started_with_a_stack(make_pair):
    pair = make_pair(stack_size=3)
    pair.add(stack(7, 8, 9), 0, 0.0, stack(8, 9, 10))
    pair.reopen("r+")
    pair.add(stack(8, 9, 10), 0, 0.0, stack(9, 10, 11))
    pair.reopen("r+")
    pair.add(frame(11), 0, 0.0, frame(12))
    np.testing.assert_array_equal(pair.store.read([2]).obs[0], stack(9, 10, 11))
    pair.check()


def test_reopen_continues_each_vector_env(make_pair):
    pair = make_pair(num_envs=2, stack_size=3)
    f, no = np.array, np.zeros(2, bool)
    pair.add(f([frame(1), frame(11)]), f([0, 0]), f([0.0, 0.0]), f([frame(2), frame(12)]), no, f([True, False]))
    pair.reopen("r+")
    pair.add(f([frame(2), frame(12)]), f([0, 0]), f([0.0, 0.0]), f([frame(3), frame(13)]), no, no)
    batch = pair.store.read([2, 3])
    np.testing.assert_array_equal(batch.obs, [stack(2, 2, 2), stack(11, 11, 12)])
    pair.check()


def test_reopen_with_obs_not_equal_previous_next_obs_starts_new_episode(make_pair):
    pair = make_pair(stack_size=3)
    add_episode(pair, [1, 2, 3])
    pair.reopen("r+")
    pair.add(frame(9), 0, 0.0, frame(10))
    np.testing.assert_array_equal(pair.store.read([2]).obs[0], stack(9, 9, 9))
    pair.check()


def test_reopen_after_termination_starts_new_episode(make_pair):
    pair = make_pair(stack_size=3)
    add_episode(pair, [1, 2, 3], terminated=True)
    pair.reopen("r+")
    pair.add(frame(3), 0, 0.0, frame(4))
    np.testing.assert_array_equal(pair.store.read([2]).obs[0], stack(3, 3, 3))
    pair.check()


def test_reopen_after_wraparound_continues_exactly(make_pair):
    pair = make_pair(capacity=3, stack_size=4)
    add_episode(pair, list(range(1, 9)))
    pair.reopen("r+")
    pair.check()
    add_episode(pair, [8, 9, 10])
    np.testing.assert_array_equal(pair.store.read([8]).obs[0], stack(6, 7, 8, 9))
    pair.check()


def test_flush_keeps_the_store_usable(make_pair):
    pair = make_pair(stack_size=2)
    add_episode(pair, [1, 2, 3])
    pair.store.flush()
    pair.store.flush()
    add_episode(pair, [3, 4])
    pair.check()
    pair.reopen("r")
    pair.check()


def add_numbered(store, first, count):
    for t in range(first, first + count):
        store.add(frame(t + 1), t, 0.0, frame(t + 2), False, False)


def test_copy_taken_after_a_flush_opens_to_exactly_the_flushed_contents(make_pair, tmp_path):
    """A copy of the files stands for a crash: what was added after the last flush is not counted."""
    pair = make_pair(capacity=64, stack_size=3)
    add_episode(pair, list(range(1, 12)))  # steps 0..9, then committed
    pair.store.flush()
    add_numbered(pair.store, 11, 5)  # added but not committed
    crashed = tmp_path / "crashed.mmr"
    shutil.copytree(pair.store.path, crashed)
    with ReplayStore.open(crashed, mode="r+") as copy:
        assert copy.transitions_added == 10
        assert_store_matches(copy, pair.ref)
        copy.add(frame(11), 10, 0.0, frame(12), False, False)  # continues the committed episode
        pair.ref.add(frame(11), 10, 0.0, frame(12), False, False)
        assert_store_matches(copy, pair.ref)


def test_copy_taken_after_a_flush_and_a_wraparound_opens_as_of_some_commit(make_pair, tmp_path):
    pair = make_pair(capacity=6, stack_size=3)
    add_numbered(pair.store, 0, 8)
    pair.store.flush()
    add_numbered(pair.store, 8, 9)  # reuses slots that the flush committed
    crashed = tmp_path / "crashed.mmr"
    shutil.copytree(pair.store.path, crashed)
    with ReplayStore.open(crashed, mode="r") as copy:
        added = copy.transitions_added
        assert 8 <= added <= 17
        ref = ReferenceStore(frame_shape=(3, 4), capacity=6, stack_size=3)
        for t in range(added):
            ref.add(frame(t + 1), t, 0.0, frame(t + 2), False, False)
        assert_store_matches(copy, ref)


def test_anonymous_memory_does_not_grow_with_capacity(tmp_path):
    status = Path("/proc/self/status")
    if not status.exists():
        pytest.skip("needs /proc/self/status (Linux) to read anonymous memory")

    def anonymous_bytes():
        for line in status.read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
        pytest.skip("/proc/self/status has no RssAnon")

    before = anonymous_bytes()
    store = ReplayStore.create(tmp_path / "big.mmr", frame_shape=(84, 84), capacity=5_000_000)
    try:
        for t in range(100):
            store.add(np.full((84, 84), t % 7, np.uint8), 0, 0.0, np.full((84, 84), (t + 1) % 7, np.uint8),
                      False, False)
        store.sample(32, rng=0)
        store.flush()
        grown = anonymous_bytes() - before
        assert grown < 32 * 2**20, f"anonymous memory grew by {grown:,} bytes for capacity 5,000,000"
        assert store.bytes_on_disk < 2**20 + 64 * 100 + 100 * 7056, "disk use follows what is stored"
    finally:
        store.close()


def test_context_manager_closes_the_store(make_store):
    store = make_store(stack_size=2)
    path = store.path
    store.close()
    with ReplayStore.open(path, mode="r") as store:
        assert not store.closed
    assert store.closed


def test_bytes_on_disk_is_a_positive_int(make_pair):
    pair = make_pair(stack_size=2)
    add_episode(pair, [1, 2, 3])
    pair.store.flush()
    size = pair.store.bytes_on_disk
    assert isinstance(size, int) and size > 0


# -- modes, missing and existing paths, closed stores, corrupt headers -------------------------------


def test_read_only_refuses_add(make_pair):
    pair = make_pair(stack_size=2)
    add_episode(pair, [1, 2, 3])
    pair.reopen("r")
    before = snapshot(pair.store)
    with pytest.raises(ReadOnlyStoreError) as info:
        pair.store.add(frame(3), 0, 0.0, frame(4), False, False)
    assert isinstance(info.value, io.UnsupportedOperation)
    assert isinstance(info.value, MmreplayError)
    assert_same_snapshot(before, snapshot(pair.store))
    pair.check()


def test_read_only_store_can_read_and_sample(make_pair):
    pair = make_pair(stack_size=2, capacity=4)
    add_episode(pair, [1, 2, 3, 4, 5, 6])
    pair.reopen("r")
    assert pair.store.mode == "r"
    pair.check()
    assert_batch_matches(pair.store.sample(8, rng=0), pair.ref)


def test_create_refuses_existing_path(make_store, tmp_path):
    existing_store = make_store(stack_size=2)
    existing_dir = tmp_path / "empty"
    existing_dir.mkdir()
    existing_file = tmp_path / "file"
    existing_file.write_bytes(b"not a store")
    for path in (existing_store.path, existing_dir, existing_file):
        with pytest.raises(FileExistsError) as info:
            ReplayStore.create(path, frame_shape=(3, 4), capacity=4)
        assert isinstance(info.value, StoreExistsError)
    assert existing_file.read_bytes() == b"not a store"
    assert list(existing_dir.iterdir()) == []


def test_create_refusing_an_existing_store_leaves_it_intact(make_pair):
    pair = make_pair(stack_size=2)
    add_episode(pair, [1, 2, 3])
    pair.store.flush()
    with pytest.raises(FileExistsError):
        ReplayStore.create(pair.store.path, frame_shape=(5, 5), capacity=2)
    pair.reopen("r")
    pair.check()


def test_open_missing_store_raises_file_not_found(tmp_path):
    for mode in ("r", "r+"):
        with pytest.raises(FileNotFoundError) as info:
            ReplayStore.open(tmp_path / "missing.mmr", mode=mode)
        assert isinstance(info.value, StoreNotFoundError)
    assert not (tmp_path / "missing.mmr").exists()


def test_open_directory_without_a_store_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        ReplayStore.open(tmp_path, mode="r")


@pytest.mark.parametrize("mode", ["w", "a", "rw", "x", "", "R"])
def test_open_rejects_unknown_mode(make_store, mode):
    path = make_store(stack_size=2).path
    with pytest.raises(ValueError, match="mode"):
        ReplayStore.open(path, mode=mode)


def test_operations_after_close_raise_closed_store_error(make_pair):
    pair = make_pair(stack_size=2)
    add_episode(pair, [1, 2, 3])
    store = pair.store
    store.close()
    assert store.closed is True
    calls = {
        "add": lambda: store.add(frame(3), 0, 0.0, frame(4), False, False),
        "sample": lambda: store.sample(1, rng=0),
        "read": lambda: store.read([0]),
        "flush": lambda: store.flush(),
    }
    for name, call in calls.items():
        with pytest.raises(ClosedStoreError) as info:
            call()
        assert isinstance(info.value, ValueError), name


def edit_header(store_path, edit):
    header = Path(store_path) / "header.json"
    content = json.loads(header.read_text())
    edit(content)
    header.write_text(json.dumps(content))


def closed_store_path(make_pair):
    pair = make_pair(stack_size=2)
    add_episode(pair, [1, 2, 3])
    pair.store.close()
    return pair.store.path


def test_wrong_magic_raises_corrupt_store_error(make_pair):
    path = closed_store_path(make_pair)
    edit_header(path, lambda h: h.__setitem__("magic", "notmmreplay"))
    for mode in ("r", "r+"):
        with pytest.raises(CorruptStoreError):
            ReplayStore.open(path, mode=mode)


def test_newer_format_version_is_refused_naming_both_versions(make_pair):
    path = closed_store_path(make_pair)
    edit_header(path, lambda h: h.__setitem__("format_version", 99))
    # The version is checked before anything else is read (the checksum included).
    with pytest.raises(FormatVersionError, match="99") as info:
        ReplayStore.open(path, mode="r")
    assert "1" in str(info.value).replace("99", ""), f"{info.value} does not name version 1"
    assert isinstance(info.value, CorruptStoreError)


def test_hand_edited_header_raises_corrupt_store_error(make_pair):
    path = closed_store_path(make_pair)

    def edit(h):
        for key, value in h.items():  # change one count, keep the JSON well formed
            if isinstance(value, int) and not isinstance(value, bool) and key != "format_version":
                h[key] = value + 1
                return
        h["extra"] = 1

    edit_header(path, edit)
    with pytest.raises(CorruptStoreError):
        ReplayStore.open(path, mode="r")


@pytest.mark.parametrize("content", [b"", b"\x00\x01garbage", b"{not json", b"[]", b'"mmreplay"'])
def test_garbage_header_raises_corrupt_store_error(make_pair, content):
    path = closed_store_path(make_pair)
    (Path(path) / "header.json").write_bytes(content)
    with pytest.raises(CorruptStoreError) as info:
        ReplayStore.open(path, mode="r")
    assert isinstance(info.value, ValueError)


def test_header_names_magic_and_format_version(make_pair):
    path = closed_store_path(make_pair)
    content = json.loads((Path(path) / "header.json").read_text())
    assert content["magic"] == "mmreplay"
    assert content["format_version"] == 6


def test_reference_model_agrees_with_itself_on_a_vector_run():
    """Guards the reference: a vector add equals the same adds made env by env in single-env models."""
    vector = ReferenceStore(frame_shape=(3, 4), capacity=10, stack_size=2, num_envs=2)
    singles = [ReferenceStore(frame_shape=(3, 4), capacity=10, stack_size=2) for _ in range(2)]
    for t in range(4):
        obs = np.array([frame(t + 1), frame(t + 11)])
        nxt = obs + 1
        vector.add(obs, np.array([t, t]), np.zeros(2), nxt, np.array([t == 1, False]), np.zeros(2, bool))
        for e in range(2):
            singles[e].add(obs[e], t, 0.0, nxt[e], e == 0 and t == 1, False)
    for e in range(2):
        got = vector.expected([s for s in range(8) if s % 2 == e])
        want = singles[e].expected(range(4))
        np.testing.assert_array_equal(got["obs"], want["obs"])
        np.testing.assert_array_equal(got["next_obs"], want["next_obs"])


@pytest.mark.parametrize("frame_encoding", ["lz4", "lz4-reference"])
def test_a_frame_that_starts_exactly_at_a_segment_boundary_goes_into_that_segment(tmp_path: Path, frame_encoding: str) -> None:
    """Random 1,019-byte frames compress to exactly 1,024 bytes, so frame 1,024 starts exactly where the
    first 1 MiB segment ends; with three envs it is in the middle of an add's frames. It must be written
    into the second segment (it was once written past the first segment's end, and then was missing)."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (3 * 420 + 3, 1019), dtype=np.uint8)
    with ReplayStore.create(tmp_path / "s", frame_shape=(1019,), capacity=2000, stack_size=2, num_envs=3,
                            frame_encoding=frame_encoding) as store:
        obs = frames[:3]
        for t in range(420):
            next_obs = frames[3 * (t + 1) : 3 * (t + 2)]
            store.add(obs, np.zeros(3, np.int64), np.zeros(3, np.float32), next_obs,
                      np.zeros(3, bool), np.zeros(3, bool))
            obs = next_obs
        batch = store.read(np.arange(len(store)))
        env, t = np.arange(len(store)) % 3, np.arange(len(store)) // 3
        np.testing.assert_array_equal(batch.next_obs[:, -1], frames[3 * (t + 1) + env])
        np.testing.assert_array_equal(batch.obs[:, -1], frames[3 * t + env])
    # Two 1 MiB segments were written, and neither file grew past the segment's size.
    sizes = [segment.stat().st_size for segment in sorted((tmp_path / "s" / "frames").glob("*.seg"))]
    assert len(sizes) == 2 and sizes == [1 << 20] * 2, sizes


def test_a_sampler_given_as_a_string_is_refused_naming_the_samplers_before_anything_is_written(tmp_path):
    with pytest.raises(TypeError, match=r"sampler must be None, mmreplay.UniformSampler\(\) or mmreplay.PrioritizedSampler.*'prioritized' \(str\)"):
        ReplayStore.create(tmp_path / "s.mmr", capacity=10, frame_shape=(2, 2), sampler="prioritized")
    assert not (tmp_path / "s.mmr").exists()
