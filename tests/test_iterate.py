"""Ordered passes (``iterate``) and whole episodes (``sample_episodes``).

``iterate`` against ``read`` of the stored steps is also a rule of the model test (test_store_model.py);
here: its bounds, a reader's pass while a writer appends, eviction overtaking a pass, flat memory, and
the distribution of ``sample_episodes`` under both weightings (chi-square, reference_windows's bound).
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from reference_windows import assert_distribution

from mmreplay import ReplayStore


def frame(step: int, shape: tuple[int, ...] = (4, 4)) -> np.ndarray:
    return np.full(shape, step % 251, np.uint8)


def add_episodes(store: ReplayStore, lengths: list[int], *, first_step: int = 0, end_last: bool = True) -> int:
    """Episodes of these lengths, one after another (env 0); returns the next step."""
    step, shape = first_step, store.frame_shape
    for number, length in enumerate(lengths):
        for position in range(length):
            ends = position == length - 1 and (end_last or number < len(lengths) - 1)
            store.add(frame(step + number * 7, shape), np.int64(step), float(number), frame(step + number * 7 + 1, shape),
                      ends, False)
            step += 1
    return step


def test_iterate_gives_every_stored_transition_once_in_step_order(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=50) as store:
        add_episodes(store, [9, 20, 31])  # 60 added, 50 stored
        batches = list(store.iterate(16))
        assert [len(b) for b in batches] == [16, 16, 16, 2]
        steps = np.concatenate([b.index for b in batches])
        assert steps.tolist() == list(store.stored_steps)
        whole = store.read(store.stored_steps)
        np.testing.assert_array_equal(np.concatenate([b.obs for b in batches]), whole.obs)
        np.testing.assert_array_equal(np.concatenate([b.reward for b in batches]), whole.reward)
        assert [b.index.tolist() for b in store.iterate(4, start=20, stop=27)] == [[20, 21, 22, 23], [24, 25, 26]]
        assert list(store.iterate(4, start=30, stop=30)) == []


def test_iterate_gives_weight_one_and_the_discount_read_gives_also_where_an_episode_terminates(tmp_path: Path) -> None:
    # weight and discount once shared one array, so the zero discount of a terminal row zeroed its weight
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=50) as store:
        add_episodes(store, [3, 4, 5])
        whole = store.read(store.stored_steps)
        batches = list(store.iterate(5))
        weight = np.concatenate([b.weight for b in batches])
        discount = np.concatenate([b.discount for b in batches])
        assert whole.terminated.sum() == 3 and weight.tolist() == [1.0] * 12
        np.testing.assert_array_equal(discount, whole.discount)
        assert discount[whole.terminated].tolist() == [0.0] * 3


@pytest.mark.parametrize(
    ("start", "stop", "message"),
    [(5, None, r"start and stop must satisfy 10 <= start <= stop <= 60 \(the stored steps\); got start=5, stop=60"),
     (None, 61, r"got start=10, stop=61"),
     (40, 30, r"got start=40, stop=30")],
)
def test_iterate_refuses_bounds_outside_the_stored_steps(tmp_path: Path, start, stop, message) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=50) as store:
        add_episodes(store, [60])
        with pytest.raises(ValueError, match=message):
            store.iterate(8, start=start, stop=stop)


def test_a_reader_passes_over_the_commit_it_started_on_while_the_writer_appends(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    writer = ReplayStore.create(path, frame_shape=(4, 4), capacity=100)
    step = add_episodes(writer, [30])
    writer.flush()
    with ReplayStore.open(path) as reader:
        passing = reader.iterate(10)
        first = next(passing)
        step = add_episodes(writer, [25], first_step=step)  # within capacity: nothing the pass needs is evicted
        writer.flush()
        rest = list(passing)
        assert np.concatenate([first.index] + [b.index for b in rest]).tolist() == list(range(30))
        assert len(reader) == 55  # the reader follows the writer; the pass kept its snapshot
    writer.close()


def test_eviction_that_overtakes_a_pass_raises_naming_the_lost_steps(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    writer = ReplayStore.create(path, frame_shape=(4, 4), capacity=40)
    step = add_episodes(writer, [40])
    writer.flush()
    with ReplayStore.open(path) as reader:
        passing = reader.iterate(10)
        assert next(passing).index.tolist() == list(range(10))
        add_episodes(writer, [25], first_step=step)  # evicts steps 0..24
        writer.flush()
        with pytest.raises(IndexError, match=r"iterate: steps \[10, 25\) of the pass over \[0, 40\) were evicted by the "
                                             r"writer's adds before the pass reached them \(stored steps are now \[25, 65\)\)"):
            next(passing)
    writer.close()


def test_iterate_memory_stays_flat_in_the_store_size(tmp_path: Path) -> None:
    """The peak memory of a pass over 8x as many transitions grows by less than one batch's pixels."""
    peaks = []
    for count in (500, 4000):
        with ReplayStore.create(tmp_path / f"s{count}.mmr", frame_shape=(16, 16), capacity=count) as store:
            add_episodes(store, [count])
            tracemalloc.start()
            for _ in store.iterate(32):
                pass
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
    batch_pixels = 32 * (4 + 1) * 16 * 16
    assert peaks[1] - peaks[0] < batch_pixels, peaks


def test_sample_episodes_gives_whole_ended_episodes_in_step_order(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=30) as store:
        # 35 added: the first episode (5) loses its start; the last (8) is still in progress.
        add_episodes(store, [5, 4, 6, 3, 9, 8], end_last=False)
        episodes = store.sample_episodes(200, rng=0)
        firsts = sorted({int(batch.index[0]) for batch in episodes})
        assert firsts == [5, 9, 15, 18]  # complete and ended only
        for batch in episodes:
            steps = batch.index.tolist()
            assert steps == list(range(steps[0], steps[0] + len(steps)))
            assert batch.terminated[-1] and not batch.terminated[:-1].any()
        with pytest.raises(ValueError, match=r"weighting must be 'uniform' or 'length'; got 'priority'"):
            store.sample_episodes(1, weighting="priority")


@pytest.mark.parametrize("weighting", ["uniform", "length"])
def test_sample_episodes_draws_uniformly_or_by_length(tmp_path: Path, weighting: str) -> None:
    lengths = [1, 2, 3, 4, 5, 6]
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=100) as store:
        add_episodes(store, lengths)
        starts = np.cumsum([0] + lengths[:-1])
        draws = np.array([int(b.index[0]) for b in store.sample_episodes(3000, rng=np.random.default_rng(7),
                                                                          weighting=weighting)])
    weights = np.ones(len(lengths)) if weighting == "uniform" else np.array(lengths, np.float64)
    assert_distribution(draws, starts, weights / weights.sum())


def test_sample_episodes_of_a_store_without_a_whole_episode_raises(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=10) as store:
        add_episodes(store, [4], end_last=False)
        with pytest.raises(ValueError, match="cannot sample episodes: no stored episode is complete and ended"):
            store.sample_episodes(1)
