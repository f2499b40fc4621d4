"""n-step returns against the reference model at every boundary: termination, truncation, an episode cut
without a flag, the env's newest transition, eviction, vector envs with ``env_mask``; and a hypothesis
test over random episode structures.

Frames are numbered by their pixel value (``frame(7)`` is all sevens); rewards are the frame's number,
so expected returns read as sums of frame numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import StoreAndReference
from reference_windows import add_masked, continues_after_eviction, assert_n_step_matches, episode_tail
from reference import ReferenceStore, assert_batch_matches
from strategies import FrameSource, draw_add, frame, store_configs

from mmreplay import PrioritizedSampler


def add_episode(pair, numbers, *, terminated=False, truncated=False, rewards=None):
    """Frames ``numbers[0] -> numbers[1] -> ...`` one add each; the last transition ends as told."""
    steps = []
    for i, (a, b) in enumerate(zip(numbers[:-1], numbers[1:])):
        last = i == len(numbers) - 2
        reward = float(a) if rewards is None else rewards[i]
        steps += pair.add(frame(a), i, reward, frame(b), terminated and last, truncated and last)
    return steps


def sample_all(pair, *, n_step, gamma, draws=400, seed=0):
    """A uniform sample that holds every stored step, checked against the reference."""
    batch = pair.store.sample(draws, rng=seed, n_step=n_step, gamma=gamma)
    assert set(batch.index.tolist()) == set(pair.ref.stored_steps().tolist()), "draw more: a step was missed"
    assert_n_step_matches(batch, pair.ref, n_step, gamma)
    return batch


def row_of(batch, step):
    return int(np.flatnonzero(batch.index == step)[0])


def test_n_step_reward_is_the_discounted_sum_of_the_next_n_rewards(make_pair):
    pair = make_pair(stack_size=2, capacity=32)
    add_episode(pair, [1, 2, 3, 4, 5, 6], rewards=[1.0, 2.0, 4.0, 8.0, 16.0])
    batch = sample_all(pair, n_step=3, gamma=0.5)
    i = row_of(batch, 0)
    assert batch.reward[i] == pytest.approx(1.0 + 0.5 * 2.0 + 0.25 * 4.0)
    assert batch.discount[i] == pytest.approx(0.125)
    np.testing.assert_array_equal(batch.next_obs[i], [frame(3), frame(4)])  # after three steps
    np.testing.assert_array_equal(batch.obs[i], [frame(1), frame(1)])  # of the first step
    assert batch.action[i] == 0


def test_n_step_of_one_is_the_plain_transition_with_discount_gamma_and_zero_at_termination(make_pair):
    pair = make_pair(stack_size=3, capacity=32)
    add_episode(pair, [1, 2, 3, 4], terminated=True)
    add_episode(pair, [10, 11, 12])
    batch = sample_all(pair, n_step=1, gamma=0.9)
    assert_batch_matches(batch, pair.ref)
    np.testing.assert_allclose(batch.discount, np.where(batch.terminated, 0.0, 0.9).astype(np.float32))
    assert batch.discount[row_of(batch, 2)] == 0.0  # the terminating transition bootstraps from nothing


def test_read_gives_discount_one_and_zero_at_termination(make_pair):
    pair = make_pair(stack_size=2, capacity=32)
    add_episode(pair, [1, 2, 3], terminated=True)
    batch = pair.store.read([0, 1])
    np.testing.assert_array_equal(batch.discount, np.array([1.0, 0.0], np.float32))


def test_a_window_stops_at_a_termination_reports_it_and_has_discount_zero(make_pair):
    pair = make_pair(stack_size=2, capacity=32)
    add_episode(pair, [1, 2, 3, 4], terminated=True)  # steps 0, 1, 2
    add_episode(pair, [20, 21, 22, 23])  # steps 3, 4, 5: never reached from the first episode
    batch = sample_all(pair, n_step=5, gamma=0.9)
    i = row_of(batch, 1)
    assert batch.reward[i] == pytest.approx(2 + 0.9 * 3)
    assert batch.discount[i] == 0.0  # r + discount * Q(next_obs) must not bootstrap past the termination
    assert batch.terminated[i] and not batch.truncated[i]
    np.testing.assert_array_equal(batch.next_obs[i], [frame(3), frame(4)])


def test_a_window_stops_at_a_truncation_and_bootstraps_from_the_final_observation(make_pair):
    pair = make_pair(stack_size=2, capacity=32)
    add_episode(pair, [1, 2, 3, 4], truncated=True)
    add_episode(pair, [20, 21, 22])
    batch = sample_all(pair, n_step=4, gamma=0.5)
    i = row_of(batch, 0)
    assert batch.truncated[i] and not batch.terminated[i]
    np.testing.assert_array_equal(batch.next_obs[i], [frame(3), frame(4)])  # the final obs, not a reset
    assert batch.discount[i] == pytest.approx(0.5**3)
    assert batch.reward[i] == pytest.approx(1 + 0.5 * 2 + 0.25 * 3)


def test_a_window_stops_where_an_episode_is_cut_without_a_flag(make_pair):
    pair = make_pair(stack_size=2, capacity=32)
    add_episode(pair, [1, 2, 3])  # no flag: cut by the next add's obs != frame(3)
    add_episode(pair, [30, 31, 32, 33])
    batch = sample_all(pair, n_step=3, gamma=0.5)
    i = row_of(batch, 0)
    assert batch.discount[i] == pytest.approx(0.25)
    assert not batch.terminated[i] and not batch.truncated[i]
    np.testing.assert_array_equal(batch.next_obs[i], [frame(2), frame(3)])
    assert batch.reward[i] == pytest.approx(1 + 0.5 * 2)


def test_a_window_stops_at_the_envs_newest_transition_and_grows_when_the_env_adds(make_pair):
    pair = make_pair(stack_size=1, capacity=32)
    add_episode(pair, [1, 2, 3])
    batch = sample_all(pair, n_step=3, gamma=0.5)
    assert batch.discount[row_of(batch, 0)] == pytest.approx(0.25)
    pair.add(frame(3), 0, 3.0, frame(4), False, False)
    batch = sample_all(pair, n_step=3, gamma=0.5)
    i = row_of(batch, 0)
    assert batch.discount[i] == pytest.approx(0.125)
    np.testing.assert_array_equal(batch.next_obs[i], [frame(4)])


def test_windows_from_the_oldest_stored_steps_after_eviction_match_the_reference(make_pair):
    pair = make_pair(stack_size=3, capacity=8)
    add_episode(pair, list(range(1, 12)))  # 10 transitions: steps 0, 1 evicted
    add_episode(pair, [50, 51, 52, 53], terminated=True)
    add_episode(pair, [60, 61, 62])
    batch = sample_all(pair, n_step=4, gamma=0.8)
    assert batch.index.min() == pair.ref.stored_steps()[0]


def test_windows_after_the_row_ring_wraps_many_times_match_the_reference(make_pair):
    pair = make_pair(stack_size=2, capacity=10)
    number = 1
    for length in [7, 3, 1, 5, 11] * 60:  # about 1,600 transitions: rows wrap past capacity + slack
        add_episode(pair, [n % 250 + 1 for n in range(number, number + length + 1)],
                    terminated=length % 2 == 1, truncated=length == 5)
        number += length + 1
    sample_all(pair, n_step=3, gamma=0.9, draws=300)


def test_vector_env_windows_follow_their_own_env_and_skip_masked_entries(make_store):
    store = make_store(frame_shape=(3, 4), capacity=40, stack_size=2, num_envs=3)
    ref = ReferenceStore(frame_shape=(3, 4), capacity=40, stack_size=2, num_envs=3)
    rng = np.random.default_rng(0)
    current = np.array([10, 100, 200])
    for t in range(18):
        mask = rng.random(3) < 0.7
        ended = np.array([t % 5 == 4, t % 7 == 6, False])  # env 2: one long episode
        next_frames = current + 1
        args = (
            np.array([frame(int(c)) for c in current]),
            np.array([t, t, t]),
            np.array([1.0, 2.0, 3.0], np.float32) * (t + 1),
            np.array([frame(int(c)) for c in next_frames]),
            ended & ~np.array([False, True, False]),
            ended & np.array([False, True, False]),  # env 1 truncates, env 0 terminates
        )
        store.add(*args, env_mask=mask)
        add_masked(ref, args, mask)
        current = np.where(mask, np.where(ended, next_frames + 5, next_frames), current) % 250
    batch = store.sample(600, rng=1, n_step=4, gamma=0.7)
    assert set(batch.index.tolist()) == set(ref.stored_steps().tolist())
    assert_n_step_matches(batch, ref, 4, 0.7)
    for step in ref.stored_steps().tolist():
        env = ref.transition(step).env_index
        assert all(t.env_index == env for t in episode_tail(ref, step, 4))


def test_n_step_with_a_prioritized_sampler_keeps_the_steps_and_weights_of_the_first_step(make_store):
    kwargs = dict(frame_shape=(3, 4), capacity=16, stack_size=2)
    pair = StoreAndReference(make_store(**kwargs, sampler=PrioritizedSampler(alpha=1.0, epsilon=0.0)),
                             ReferenceStore(**kwargs))
    add_episode(pair, [1, 2, 3, 4, 5], terminated=True)
    add_episode(pair, [9, 10, 11])
    pair.store.update_priorities(np.arange(6), [1.0, 2.0, 4.0, 1.0, 1.0, 8.0])
    plain = pair.store.sample(300, rng=3, beta=1.0)
    batch = pair.store.sample(300, rng=3, beta=1.0, n_step=3, gamma=0.9)
    np.testing.assert_array_equal(batch.index, plain.index)
    np.testing.assert_array_equal(batch.weight, plain.weight)
    assert_n_step_matches(batch, pair.ref, 3, 0.9)


@pytest.mark.parametrize("n_step", [0, -2])
def test_n_step_below_one_is_rejected_naming_n_step(make_pair, n_step):
    pair = make_pair()
    add_episode(pair, [1, 2])
    with pytest.raises(ValueError, match=r"n_step"):
        pair.store.sample(4, rng=0, n_step=n_step)


@pytest.mark.parametrize("gamma", [-0.1, 1.5, float("nan")])
def test_gamma_outside_zero_one_is_rejected_naming_gamma(make_pair, gamma):
    pair = make_pair()
    add_episode(pair, [1, 2])
    with pytest.raises(ValueError, match=r"^gamma must be \[0, 1\]; got"):
        pair.store.sample(4, rng=0, n_step=2, gamma=gamma)


@settings(max_examples=30)
@given(config=store_configs(), data=st.data(), n_step=st.integers(1, 5), gamma=st.sampled_from([0.0, 0.5, 0.99, 1.0]))
def test_n_step_batches_equal_the_reference_for_any_episode_structure(tmp_path_factory, config, data, n_step, gamma):
    from mmreplay import ReplayStore

    path = tmp_path_factory.mktemp("nstep") / "store.mmr"
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
        batch = store.sample(8 * len(ref), rng=data.draw(st.integers(0, 2**16), label="seed"),
                             n_step=n_step, gamma=gamma)
        assert_n_step_matches(batch, ref, n_step, gamma)


def test_an_env_whose_previous_transition_was_evicted_by_other_envs_continues_its_episode(make_store):
    store = make_store(frame_shape=(3, 4), capacity=3, stack_size=2, num_envs=3)
    ref = ReferenceStore(frame_shape=(3, 4), capacity=3, stack_size=2, num_envs=3)
    current = [1, 3, 5]
    for mask in ([1, 1, 0], [0, 0, 1], [0, 0, 1], [1, 0, 0]):  # the last add: env 0, whose step 0 is evicted
        args = (np.array([frame(c) for c in current]), np.zeros(3, np.int64), np.zeros(3, np.float32),
                np.array([frame(c + 1) for c in current]), np.zeros(3, bool), np.zeros(3, bool))
        store.add(*args, env_mask=np.array(mask, bool))
        add_masked(ref, args, np.array(mask, bool))
        current = [c + m for c, m in zip(current, mask)]
    np.testing.assert_array_equal(store.read([4]).obs[0], [frame(1), frame(2)])
    assert_n_step_matches(store.sample(50, rng=0, n_step=2, gamma=0.5), ref, 2, 0.5)
