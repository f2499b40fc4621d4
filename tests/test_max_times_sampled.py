"""``max_times_sampled`` as Reverb defines it: a transition leaves the sampling set once drawn that many times.

Checked against a reference model (a dict of draw counts by step): no draw returns a transition that the
draws before it exhausted, a batch is refused whole (nothing counted) when fewer draws are left than it
asks for, and a store whose every stored transition is exhausted refuses as an empty store does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmreplay import PrioritizedSampler, ReplayStore, UniformSampler

FRAME = (2, 2)


def frame(t: int) -> np.ndarray:
    return np.full(FRAME, t % 256, np.uint8)


def add(store: ReplayStore, count: int) -> None:
    first = store.transitions_added
    for t in range(first, first + count):
        store.add(frame(t), 0, 0.0, frame(t + 1), True, False)  # one-step episodes: each obs starts anew


operations = st.lists(st.one_of(st.tuples(st.just("add"), st.integers(1, 6)),
                                st.tuples(st.just("sample"), st.integers(1, 7)),
                                st.tuples(st.just("sequences"), st.integers(1, 3)),
                                st.tuples(st.just("update"), st.integers(0, 2**16))), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, limit=st.integers(1, 3), capacity=st.integers(2, 8), prioritized=st.booleans(),
       seed=st.integers(0, 2**16))
def test_draws_never_return_an_exhausted_transition_and_exhaustion_refuses_as_an_empty_store(
    tmp_path_factory: pytest.TempPathFactory, ops: list, limit: int, capacity: int, prioritized: bool, seed: int
) -> None:
    sampler = PrioritizedSampler(alpha=0.7) if prioritized else None
    store = ReplayStore.create(tmp_path_factory.mktemp("s") / "s", frame_shape=FRAME, capacity=capacity,
                               stack_size=1, sampler=sampler, commit_interval_s=None, max_times_sampled=limit)
    counts: dict[int, int] = {}  # the reference: each stored step's draws
    rng = np.random.default_rng(seed)
    for op, value in ops:
        if op == "add":
            add(store, value)
            stored = range(max(0, store.transitions_added - capacity), store.transitions_added)
            counts = {step: counts.get(step, 0) for step in stored}
        elif op == "update":
            if prioritized and counts:
                steps = np.array(sorted(counts))
                store.update_priorities(steps, np.random.default_rng(value).random(len(steps)) * 5)
        else:
            left = sum(limit - count for count in counts.values())
            draw = (lambda n: store.sample(n, rng=rng).index) if op == "sample" else (
                lambda n: store.sample_sequences(n, 1, rng=rng).index[:, 0])
            if not counts:
                with pytest.raises(ValueError, match="cannot sample from an empty store"):
                    draw(value)
            elif left == 0:
                with pytest.raises(ValueError, match=rf"every stored transition has been sampled max_times_sampled "
                                                     rf"\({limit}\) times"):
                    draw(value)
            elif left < value:
                with pytest.raises(ValueError, match=rf"cannot sample {value}: the stored transitions have {left} "
                                                     "draws left"):
                    draw(value)
            else:
                for step in draw(value).tolist():
                    assert step in counts, f"step {step} is not stored"
                    assert counts[step] < limit, f"step {step} drawn after it was exhausted ({counts[step]} draws)"
                    counts[step] += 1
    store.close()


def test_a_uniform_draw_stays_uniform_over_the_transitions_left(tmp_path: Path) -> None:
    # 10 transitions, each drawable 400 times: the first 2,000 draws (half the budget) spread evenly, as
    # one-at-a-time draws from the remaining set do; exhausting steps 0-4 first leaves 5-9 equally likely.
    store = ReplayStore.create(tmp_path / "s", frame_shape=FRAME, capacity=10, stack_size=1, commit_interval_s=None,
                               max_times_sampled=400)
    add(store, 10)
    drawn = np.concatenate([store.sample(100, rng=i).index for i in range(20)])
    share = np.bincount(drawn, minlength=10) / len(drawn)
    np.testing.assert_allclose(share, 0.1, atol=0.025)  # the standard error of a share of 0.1 is 0.0067
    counts = np.bincount(drawn, minlength=10)
    assert counts.max() <= 400


def test_the_limit_is_saved_with_the_sampler_and_refused_when_not_an_int(tmp_path: Path) -> None:
    store = ReplayStore.create(tmp_path / "s", frame_shape=FRAME, capacity=4, stack_size=1,
                               sampler=PrioritizedSampler(alpha=0.5), max_times_sampled=2)
    assert repr(store.sampler) == "PrioritizedSampler(alpha=0.5, epsilon=1e-06, max_times_sampled=2)"
    add(store, 3)
    drawn = np.concatenate([store.sample(1, rng=i).index for i in range(6)])
    np.testing.assert_array_equal(np.bincount(drawn, minlength=3), [2, 2, 2])
    store.close()
    with ReplayStore.open(tmp_path / "s", "r+") as again:  # the exhausted leaves were committed as 0
        assert again.sampler.max_times_sampled == 2
        with pytest.raises(ValueError, match="every stored transition has been sampled max_times_sampled"):
            again.sample(1, rng=0)
        add(again, 1)
        np.testing.assert_array_equal(again.sample(2, rng=0).index, [3, 3])
    uniform = ReplayStore.create(tmp_path / "u", frame_shape=FRAME, capacity=4, stack_size=1, max_times_sampled=0)
    assert repr(uniform.sampler) == "UniformSampler()"  # 0: unlimited, as Reverb's
    with pytest.raises(TypeError, match="max_times_sampled must be None or an int; got float"):
        ReplayStore.create(tmp_path / "bad", frame_shape=FRAME, capacity=4, max_times_sampled=1.5)
    with pytest.raises(ValueError, match=r"max_times_sampled must be >= 0 \(0 or None: unlimited\); got -1"):
        UniformSampler(max_times_sampled=-1)
    assert not (tmp_path / "bad").exists()
