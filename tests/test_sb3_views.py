"""SB3's buffer arrays as lazy views of the store: every way of indexing them reads what SB3's own arrays
hold (zeros where no add wrote), writes are refused but for the two flags SB3 itself sets."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stable_baselines3.common.buffers import ReplayBuffer

from mmreplay.sb3 import MmreplayBuffer

SPACE = spaces.Box(-1, 1, (2, 3), np.float32)


def filled_pair(tmp_path, rows: int, *, n_envs: int = 2, buffer_size: int = 24, seed: int = 0, handle_timeout_termination: bool = True):
    theirs = ReplayBuffer(buffer_size, SPACE, spaces.Discrete(4), device="cpu", n_envs=n_envs,
                          handle_timeout_termination=handle_timeout_termination)
    ours = MmreplayBuffer(buffer_size, SPACE, spaces.Discrete(4), device="cpu", n_envs=n_envs, path=tmp_path / "v.mmr",
                          handle_timeout_termination=handle_timeout_termination)
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n_envs, *SPACE.shape)).astype(np.float32)
    for _ in range(rows):
        next_obs = rng.uniform(-1, 1, (n_envs, *SPACE.shape)).astype(np.float32)
        done = rng.random(n_envs) < 0.2
        infos = [{"TimeLimit.truncated": bool(t)} for t in done & (rng.random(n_envs) < 0.5)]
        row = (obs, next_obs, rng.integers(0, 4, n_envs), rng.standard_normal(n_envs).astype(np.float32), done, infos)
        theirs.add(*row)
        ours.add(*row)
        obs = next_obs
    return theirs, ours


KEYS = [
    3, -1, slice(None), slice(2, 5), slice(None, None, -2), (4, 1), (slice(1, 4), 0), (-2, slice(None)),
    (np.array([0, 3, 3, 7]), np.array([1, 0, 1, 1])), (np.array([5, 1]), slice(None), slice(1, 2)),
    (np.array([[0, 1], [2, 3]]), np.array([1, 0])), np.array([True, False] * 6), (np.array([2, 9]), 1, 0),
]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.integers(0, 20), seed=st.integers(0, 2**16), handle_timeout_termination=st.booleans())
def test_every_indexing_of_every_array_reads_what_sb3s_array_holds(tmp_path_factory, rows, seed, handle_timeout_termination):
    theirs, ours = filled_pair(tmp_path_factory.mktemp("v"), rows, seed=seed, handle_timeout_termination=handle_timeout_termination)
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        want, view = getattr(theirs, name), getattr(ours, name)
        assert (view.shape, view.dtype, len(view)) == (want.shape, want.dtype, len(want)), name
        assert np.array_equal(np.asarray(view), want), name
        for key in KEYS:
            if name in ("rewards", "dones", "timeouts") and isinstance(key, tuple) and len(key) > 2:
                continue  # these have no item axes
            got, expected = view[key], want[key]
            assert np.shape(got) == np.shape(expected) and np.array_equal(got, expected), (name, key)
        assert np.array_equal(np.stack(list(view)), want), name
    ours.close()


def test_the_views_are_read_only_and_say_how_transitions_are_written(tmp_path):
    _, ours = filled_pair(tmp_path, 3)
    with pytest.raises(TypeError, match=r"^observations is a read-only view of the store at '.*v.mmr': transitions are written by add\(\)"):
        ours.observations[0] = 0.0
    with pytest.raises(TypeError, match=r"^rewards is a read-only view"):
        ours.rewards[0, 1] = 1.0
    assert repr(ours.actions).startswith("<StoredArray actions int64[12, 2, 1]: a view of '")
    ours.close()


def test_a_buffer_marked_full_before_any_add_samples_zeros_as_sb3s_buffer_does(tmp_path):
    # SB3's own test_buffer_dtypes does this: set full on an empty buffer, then sample.
    theirs = ReplayBuffer(1, SPACE, spaces.Box(-1, 1, (2,), np.float64), device="cpu")
    ours = MmreplayBuffer(1, SPACE, spaces.Box(-1, 1, (2,), np.float64), device="cpu", path=tmp_path / "e.mmr")
    theirs.full = ours.full = True
    expected, got = theirs.sample(8), ours.sample(8)
    for name in ("observations", "actions", "next_observations", "dones", "rewards"):
        want, have = getattr(expected, name), getattr(got, name)
        assert have.dtype == want.dtype and have.shape == want.shape and not have.any(), name
    ours.close()


def test_timeouts_can_be_set_where_sb3s_her_sets_them_and_nowhere_it_would_change_a_termination(tmp_path):
    _, ours = filled_pair(tmp_path, 6, seed=11)
    flags = np.asarray(ours.dones)
    going_on = np.argwhere(flags[:6] == 0)[0]
    ours.dones[going_on[0], going_on[1]] = True
    ours.timeouts[going_on[0], going_on[1]] = True  # HER's truncate_last_trajectory does both
    assert ours.timeouts[going_on[0], going_on[1]] == 1.0
    assert ours.samples_at([going_on[0]], [going_on[1]]).dones.item() == 0.0  # bootstraps
    terminated = np.argwhere((flags[:6] == 1) & (np.asarray(ours.timeouts)[:6] == 0))
    if len(terminated):
        with pytest.raises(ValueError, match=r"^timeouts: step \d+ terminated; it cannot be made a timeout$"):
            ours.timeouts[terminated[0][0], terminated[0][1]] = True
    with pytest.raises(ValueError, match=r"^timeouts: position 9 holds no transition yet \(pos=6\)$"):
        ours.timeouts[9] = True
    ours.close()
    _, without = filled_pair(tmp_path / "b", 3, handle_timeout_termination=False)
    assert not np.asarray(without.timeouts).any()
    with pytest.raises(ValueError, match=r"^timeouts: recorded only with handle_timeout_termination=True"):
        without.timeouts[0] = True
    without.close()
