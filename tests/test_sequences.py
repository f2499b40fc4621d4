"""``sample_sequences``: windows of consecutive transitions of one env and episode, with ``mask`` False,
fields zero and ``index`` -1 past the episode's end; stacks inside windows; vector envs; prioritized
window starts. Every batch is compared with the reference model's episode lists.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import StoreAndReference
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_windows import add_masked, continues_after_eviction, assert_distribution, assert_sequences_match
from reference import ReferenceStore, assert_batch_matches
from strategies import FrameSource, draw_add, frame, stack, store_configs

from mmreplay import PrioritizedSampler, ReplayStore, SequenceBatch


def add_episode(pair, numbers, *, terminated=False, truncated=False):
    steps = []
    for i, (a, b) in enumerate(zip(numbers[:-1], numbers[1:])):
        last = i == len(numbers) - 2
        steps += pair.add(frame(a), i, float(a), frame(b), terminated and last, truncated and last)
    return steps


def sample_all(pair, length, *, draws=300, seed=0):
    """Windows starting at every stored step, checked against the reference."""
    batch = pair.store.sample_sequences(draws, length, rng=seed)
    assert set(batch.index[:, 0].tolist()) == set(pair.ref.stored_steps().tolist()), "draw more"
    assert_sequences_match(batch, pair.ref, length)
    return batch


def window_from(batch, step):
    return int(np.flatnonzero(batch.index[:, 0] == step)[0])


def test_sequence_batch_fields_have_a_batch_and_a_time_axis(make_pair):
    pair = make_pair(frame_shape=(3, 4), stack_size=3, capacity=32)
    add_episode(pair, list(range(1, 12)))
    batch = pair.store.sample_sequences(5, 7, rng=0)
    assert isinstance(batch, SequenceBatch) and len(batch) == 5
    assert batch.obs.shape == batch.next_obs.shape == (5, 7, 3, 3, 4) and batch.obs.dtype == np.uint8
    assert batch.action.shape == (5, 7) and batch.action.dtype == np.int64
    assert batch.reward.shape == (5, 7) and batch.reward.dtype == np.float32
    assert batch.mask.shape == batch.terminated.shape == batch.truncated.shape == (5, 7)
    assert batch.mask.dtype == batch.terminated.dtype == np.bool_
    assert batch.index.shape == (5, 7) and batch.index.dtype == np.int64
    assert batch.env_index.shape == (5,) and batch.weight.shape == (5,) and batch.weight.dtype == np.float32
    np.testing.assert_array_equal(batch.weight, np.ones(5, np.float32))
    assert repr(batch).startswith("SequenceBatch(obs=uint8[5, 7, 3, 3, 4], action=int64[5, 7]")


def test_a_window_holds_consecutive_transitions_of_its_episode(make_pair):
    pair = make_pair(stack_size=2, capacity=32)
    add_episode(pair, list(range(1, 12)))
    batch = sample_all(pair, 4)
    i = window_from(batch, 2)
    np.testing.assert_array_equal(batch.index[i], [2, 3, 4, 5])
    assert batch.mask[i].all()
    np.testing.assert_array_equal(batch.obs[i], [stack(2, 3), stack(3, 4), stack(4, 5), stack(5, 6)])
    np.testing.assert_array_equal(batch.next_obs[i, -1], stack(6, 7))
    np.testing.assert_array_equal(batch.reward[i], [3.0, 4.0, 5.0, 6.0])


def test_stacks_inside_a_window_repeat_the_first_frame_at_the_episode_start(make_pair):
    pair = make_pair(stack_size=4, capacity=32)
    add_episode(pair, [1, 2, 3, 4, 5, 6])
    batch = sample_all(pair, 3)
    i = window_from(batch, 0)
    np.testing.assert_array_equal(batch.obs[i], [stack(1, 1, 1, 1), stack(1, 1, 1, 2), stack(1, 1, 2, 3)])
    np.testing.assert_array_equal(batch.next_obs[i], [stack(1, 1, 1, 2), stack(1, 1, 2, 3), stack(1, 2, 3, 4)])


@pytest.mark.parametrize("ending", ["terminated", "truncated"])
def test_the_mask_is_false_and_fields_zero_after_an_episode_ends_with_a_flag(make_pair, ending):
    pair = make_pair(stack_size=2, capacity=32)
    add_episode(pair, [1, 2, 3, 4], **{ending: True})  # steps 0..2
    add_episode(pair, [20, 21, 22, 23, 24])  # steps 3..6: a window never crosses into it
    batch = sample_all(pair, 5)
    i = window_from(batch, 1)
    np.testing.assert_array_equal(batch.mask[i], [True, True, False, False, False])
    np.testing.assert_array_equal(batch.index[i], [1, 2, -1, -1, -1])
    assert getattr(batch, ending)[i].tolist() == [False, True, False, False, False]
    np.testing.assert_array_equal(batch.next_obs[i, 1], stack(3, 4))  # the final observation
    assert not batch.obs[i, 2:].any() and not batch.next_obs[i, 2:].any()
    assert not batch.reward[i, 2:].any() and not batch.action[i, 2:].any()


def test_the_mask_is_false_after_an_episode_cut_without_a_flag(make_pair):
    pair = make_pair(stack_size=1, capacity=32)
    add_episode(pair, [1, 2, 3])  # cut: the next obs is frame(30), not frame(3)
    add_episode(pair, [30, 31, 32])
    batch = sample_all(pair, 4)
    i = window_from(batch, 0)
    np.testing.assert_array_equal(batch.mask[i], [True, True, False, False])
    assert not batch.terminated[i].any() and not batch.truncated[i].any()


def test_the_mask_is_false_past_the_envs_newest_transition_until_the_env_adds(make_pair):
    pair = make_pair(stack_size=1, capacity=32)
    add_episode(pair, [1, 2, 3])
    batch = sample_all(pair, 3)
    np.testing.assert_array_equal(batch.mask[window_from(batch, 1)], [True, False, False])
    pair.add(frame(3), 0, 3.0, frame(4), False, False)
    batch = sample_all(pair, 3)
    np.testing.assert_array_equal(batch.index[window_from(batch, 1)], [1, 2, -1])


def test_windows_start_only_at_stored_steps_after_eviction_and_ring_wrap(make_pair):
    pair = make_pair(stack_size=3, capacity=12)
    number = 1
    for length in [9, 2, 1, 14, 4] * 50:  # about 1,500 transitions: row slots wrap
        add_episode(pair, [n % 250 + 1 for n in range(number, number + length + 1)], terminated=length == 2)
        number += length + 1
    sample_all(pair, 6, draws=400)


def test_vector_env_windows_stay_in_one_env_and_carry_its_env_index(make_store):
    store = make_store(frame_shape=(3, 4), capacity=60, stack_size=2, num_envs=3)
    ref = ReferenceStore(frame_shape=(3, 4), capacity=60, stack_size=2, num_envs=3)
    rng = np.random.default_rng(0)
    current = np.array([10, 100, 200])
    for t in range(24):
        mask = rng.random(3) < 0.75
        ended = np.array([t % 6 == 5, t % 9 == 8, False])
        next_frames = current + 1
        args = (np.array([frame(int(c)) for c in current]), np.array([t, t + 1, t + 2]),
                np.arange(3, dtype=np.float32) + t, np.array([frame(int(c)) for c in next_frames]),
                ended, np.zeros(3, bool))
        store.add(*args, env_mask=mask)
        add_masked(ref, args, mask)
        current = np.where(mask, np.where(ended, next_frames + 5, next_frames), current) % 250
    batch = store.sample_sequences(2_000, 5, rng=2)
    assert set(batch.index[:, 0].tolist()) == set(ref.stored_steps().tolist())
    assert_sequences_match(batch, ref, 5)
    steps = np.diff(np.where(batch.mask, batch.index, 0), axis=1)[batch.mask[:, 1:]]
    assert (steps > 1).any(), "interleaved envs: consecutive transitions of one env are steps apart"


def test_a_window_of_length_one_is_the_sampled_transition(make_pair):
    pair = make_pair(stack_size=2, capacity=16)
    add_episode(pair, [1, 2, 3, 4, 5], terminated=True)
    add_episode(pair, [7, 8, 9])
    sequences = pair.store.sample_sequences(50, 1, rng=4)
    batch = pair.store.sample(50, rng=4)
    np.testing.assert_array_equal(sequences.index[:, 0], batch.index)
    assert sequences.mask.all()
    assert_batch_matches(batch, pair.ref)
    np.testing.assert_array_equal(sequences.obs[:, 0], batch.obs)
    np.testing.assert_array_equal(sequences.next_obs[:, 0], batch.next_obs)


def test_prioritized_windows_start_by_the_priority_of_their_first_transition(make_store):
    kwargs = dict(frame_shape=(3, 4), capacity=16, stack_size=1)
    pair = StoreAndReference(make_store(**kwargs, sampler=PrioritizedSampler(alpha=1.0, epsilon=0.0)),
                             ReferenceStore(**kwargs))
    add_episode(pair, list(range(1, 18)))  # 16 transitions, one episode
    priorities = np.arange(1, 17, dtype=np.float64)
    pair.store.update_priorities(np.arange(16), priorities)
    batch = pair.store.sample_sequences(6_000, 4, rng=5, beta=1.0)
    assert_distribution(batch.index[:, 0], np.arange(16), priorities / priorities.sum())
    np.testing.assert_allclose(batch.weight, 1.0 / (batch.index[:, 0] + 1), rtol=1e-6)  # p_min / p_first
    assert_sequences_match(batch, pair.ref, 4)


@pytest.mark.parametrize("length", [0, -1])
def test_a_length_below_one_is_rejected_naming_length(make_pair, length):
    pair = make_pair()
    add_episode(pair, [1, 2])
    with pytest.raises(ValueError, match=r"length"):
        pair.store.sample_sequences(4, length, rng=0)


def test_sampling_sequences_from_an_empty_store_says_so(make_pair):
    pair = make_pair()
    with pytest.raises(ValueError, match=r"^cannot sample from an empty store: add transitions first$"):
        pair.store.sample_sequences(4, 3, rng=0)


@settings(max_examples=30)
@given(config=store_configs(), data=st.data(), length=st.integers(1, 6))
def test_sequences_equal_the_reference_for_any_episode_structure(tmp_path_factory, config, data, length):
    path = tmp_path_factory.mktemp("seq") / "store.mmr"
    ref = ReferenceStore(**config)
    frames = FrameSource.of(config)
    with ReplayStore.create(path, **config) as store:
        for _ in range(data.draw(st.integers(1, 25), label="adds")):
            args = draw_add(data, ref, frames).as_tuple()
            if ref.num_envs > 1:
                mask = np.array(data.draw(st.lists(st.booleans(), min_size=ref.num_envs, max_size=ref.num_envs),
                                          label="env_mask"))
                mask &= ~continues_after_eviction(ref, args, mask)
                store.add(*args, env_mask=mask)
                add_masked(ref, args, mask)
            else:
                store.add(*args)
                ref.add(*args)
        if len(ref) == 0:
            return
        batch = store.sample_sequences(6 * len(ref), length, rng=data.draw(st.integers(0, 2**16), label="seed"))
        assert_sequences_match(batch, ref, length)
