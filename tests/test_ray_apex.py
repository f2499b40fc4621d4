"""What Ape-X and R2D2 ask of ``mmreplay.ray``, on a real local Ray cluster: a synchronous sample in one call
per shard, initial priorities from the actors, priority updates that do not wait, rate limits that survive a
shard's restart, a learner that is told when its writers are gone, and writers that carry on by themselves.

Some tests run the client against shards in this process (``LocalShard``: each call runs at once and its
answer is put in Ray's object store), so that every call a client makes can be counted.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray_loopback import ray_on_loopback  # before ray

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'mmreplay[ray]' to run the Ray tests")
scipy_stats = pytest.importorskip("scipy.stats")

from mmreplay import ClosedStoreError, PrioritizedSampler  # noqa: E402
from mmreplay.ray import RateLimit, ShardedReplay, split_ids  # noqa: E402
from mmreplay.ray.shard import ReplayShard, ShardConfig  # noqa: E402

FRAME = (4, 4)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Path]:
    with ray_on_loopback(namespace="mmreplay-apex-tests") as temp:
        yield temp


def numbered(n: int, tag: int = 0) -> np.ndarray:
    frame = np.zeros(FRAME, np.uint8)
    frame[0, 0], frame[0, 1], frame[0, 2] = n % 256, n // 256 % 256, tag
    return frame


def write_episode(writer: Any, steps: int, *, tag: int = 0, start: int = 0, priority: Any = None) -> None:
    """One episode of ``steps`` transitions whose frame n shows n (``priority(t)``: step t's, if given)."""
    for t in range(steps):
        obs = np.stack([numbered(start + t + i, tag) for i in range(4)])
        next_obs = np.stack([numbered(start + t + i + 1, tag) for i in range(4)])
        extra = {} if priority is None else {"priority": priority(t)}
        writer.add(obs, t % 3, float(t), next_obs, t == steps - 1, False, **extra)


class LocalShard:
    """A shard in this process behind an actor handle's surface: ``handle.method.remote(...)`` runs the
    call at once and returns its answer put in Ray's object store; ``calls`` counts them by method."""

    def __init__(self, shard: ReplayShard) -> None:
        self.shard = shard
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.shard, name)
        calls = self.calls

        class Remote:
            @staticmethod
            def remote(*args: Any, **kwargs: Any) -> Any:
                calls[name] += 1
                return ray.put(method(*args, **kwargs))

        return Remote()


def local_replay(root: Path, *, num_shards: int, capacity: int, sampler: Any = None,
                 rate_limit: RateLimit | None = None) -> tuple[ShardedReplay, list[LocalShard]]:
    """A ``ShardedReplay`` over shards in this process (``LocalShard``), their stores under ``root``
    (reopened if there)."""
    config = ShardConfig(frame_shape=FRAME, capacity=capacity // num_shards, stack_size=4, num_envs=4,
                         action_shape=(), action_dtype="int64", sampler=None if sampler is None else sampler.config(),
                         rate_limit=None if rate_limit is None else rate_limit.for_shard(num_shards),
                         commit_interval_s=None)
    handles = [LocalShard(ReplayShard(str(root), k, config)) for k in range(num_shards)]
    description = {"root": str(root), "num_shards": num_shards, "frame_shape": FRAME, "stack_size": 4,
                   "namespace": "local", "rate_limited": rate_limit is not None,
                   "prioritized": isinstance(sampler, PrioritizedSampler)}
    return ShardedReplay("local", description, handles), handles


def two_known_shards(root: Path) -> tuple[ShardedReplay, list[LocalShard]]:
    """Two local shards of 100 and 200 transitions, their states known (``refresh``), their calls then
    counted from 0."""
    replay, shards = local_replay(root, num_shards=2, capacity=1000)
    for k in range(2):
        writer = replay.writer(f"w{k}", shard=k, steps_per_send=50)
        write_episode(writer, 100 + 100 * k, tag=k)
        writer.flush()
    replay.refresh()
    for shard in shards:
        shard.calls.clear()
    return replay, shards


def test_a_synchronous_sample_is_one_call_per_shard_once_their_states_are_known(cluster: Path, tmp_path: Path) -> None:
    replay, shards = two_known_shards(tmp_path)
    for seed in range(10):
        batch = replay.sample(64, rng=seed)  # P(a shard gets no row) = 2/3^64 or less: both draw every time
        np.testing.assert_array_equal(batch.obs[:, 0, 0, 2], split_ids(batch.index)[0])
    assert [dict(shard.calls) for shard in shards] == [{"sample": 10}, {"sample": 10}]  # no info call first


def test_a_sample_from_the_last_answers_draws_the_union_uniformly_as_shards_grow(cluster: Path, tmp_path: Path) -> None:
    """Chi-square over the shards' shares after shard 0 grew: each answer carries its shard's new size, so
    every draw after the first one since the growth is exact again."""
    replay, _ = local_replay(tmp_path, num_shards=3, capacity=6000)
    writers = [replay.writer(f"w{k}", shard=k, steps_per_send=200) for k in range(3)]
    for k, size in enumerate([200, 600, 1200]):
        write_episode(writers[k], size, tag=k)
        writers[k].flush()
    rng = np.random.default_rng(0)
    replay.sample(64, rng)
    write_episode(writers[0], 1000, tag=0, start=2000)  # shard 0: 200 -> 1200
    writers[0].flush()
    replay.sample(64, rng)  # drawn from the sizes before the growth; its answers carry the new ones
    shards = np.concatenate([split_ids(replay.sample(64, rng).index)[0] for _ in range(150)])
    observed = np.bincount(shards, minlength=3)
    expected = len(shards) * np.array([1200, 600, 1200]) / 3000
    assert scipy_stats.chisquare(observed, expected).pvalue > 1e-3, (observed, expected)


def test_a_prefetched_sample_makes_no_call_while_a_group_lasts_and_is_the_batches_stream(
    cluster: Path, tmp_path: Path
) -> None:
    """``sample(prefetch=2, group=4)``: 12 batches, 4 draws a shard (2 ahead, then one a group taken) and one
    state request, where a synchronous sample calls every shard 12 times; the batches are those of
    ``batches`` seeded by one draw of the first call's rng."""
    replay, shards = two_known_shards(tmp_path)
    ours = [replay.sample(16, rng=7, prefetch=2, group=4) for _ in range(12)]
    # the stream's first state request, then its draws: 2 ahead, then one a group taken
    assert all(shard.calls["sample"] <= 4 and shard.calls["info"] <= 1 for shard in shards), [s.calls for s in shards]
    stream = replay.batches(16, prefetch=2, group=4, rng=int(np.random.default_rng(7).integers(2**63)))
    for batch in ours:
        expected = next(stream)
        for name in ("obs", "next_obs", "index", "reward"):
            np.testing.assert_array_equal(getattr(batch, name), getattr(expected, name), err_msg=name)
    # other arguments: a new stream (n-step 2: next_obs two frames on, within the episode)
    batch = replay.sample(16, rng=7, prefetch=2, group=4, n_step=2)
    inside = ~batch.terminated
    last = batch.obs[:, -1, 0, 0].astype(int) + 256 * batch.obs[:, -1, 0, 1].astype(int)
    after = batch.next_obs[:, -1, 0, 0].astype(int) + 256 * batch.next_obs[:, -1, 0, 1].astype(int)
    np.testing.assert_array_equal(after[inside], last[inside] + 2)
    with pytest.raises(ValueError, match=r"prefetch must be >= 0; got -1"):
        replay.sample(16, rng=7, prefetch=-1)
    with pytest.raises(TypeError, match=r"prefetch must be an int; got float 1.5"):
        replay.sample(16, rng=7, prefetch=1.5)


def test_a_prefetched_sample_draws_the_union_uniformly(cluster: Path, tmp_path: Path) -> None:
    """Chi-square over the shards' shares of 9,600 rows drawn by ``sample(prefetch=2, group=8)``."""
    replay, _ = local_replay(tmp_path, num_shards=3, capacity=6000)
    for k, size in enumerate([200, 600, 1200]):
        writer = replay.writer(f"w{k}", shard=k, steps_per_send=200)
        write_episode(writer, size, tag=k)
        writer.flush()
    rng = np.random.default_rng(0)
    shards = np.concatenate([split_ids(replay.sample(64, rng, prefetch=2, group=8).index)[0] for _ in range(150)])
    observed = np.bincount(shards, minlength=3)
    expected = len(shards) * np.array([200, 600, 1200]) / 2000
    assert scipy_stats.chisquare(observed, expected).pvalue > 1e-3, (observed, expected)


def test_a_prefetched_sample_that_timed_out_starts_a_new_stream(cluster: Path, tmp_path: Path) -> None:
    """A stream that raised is over: the next call draws from a new one (and times out again while the
    limit holds), not a StopIteration of the old one."""
    limit = RateLimit(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=20)
    replay, _ = local_replay(tmp_path, num_shards=1, capacity=1000, rate_limit=limit)
    writer = replay.writer("w", steps_per_send=10)
    write_episode(writer, 20)
    writer.flush(timeout_s=10)  # inserts 20: samples allowed down to a diff of -10, then no writer
    taken = 0
    with pytest.raises(TimeoutError, match="a rate limit holds sampling back"):
        while taken < 10:
            replay.sample(8, rng=0, prefetch=1, group=2, timeout_s=0.5)
            taken += 1
    assert taken == 3  # as batches(): a group of 2, then one batch drawn alone, then none
    with pytest.raises(TimeoutError, match="a rate limit holds sampling back"):
        replay.sample(8, rng=0, prefetch=1, group=2, timeout_s=0.5)
    write_episode(writer, 20, start=100)
    writer.flush(timeout_s=10)
    assert replay.sample(8, rng=0, prefetch=1, group=2, timeout_s=5).obs.shape == (8, 4, *FRAME)


def test_writer_add_priority_sets_each_steps_initial_priority(cluster: Path, tmp_path: Path) -> None:
    replay, _ = local_replay(tmp_path, num_shards=2, capacity=1000, sampler=PrioritizedSampler(alpha=1.0, epsilon=0))
    writer = replay.writer("w", shard=1, steps_per_send=7)
    write_episode(writer, 30, tag=1, priority=lambda t: 1.0 + t)
    vector = replay.writer("v", shard=0, num_envs=2, steps_per_send=5)
    for t in range(12):
        obs = np.stack([np.stack([numbered(t + i, env) for i in range(4)]) for env in range(2)])
        next_obs = np.stack([np.stack([numbered(t + i + 1, env) for i in range(4)]) for env in range(2)])
        vector.add(obs, np.array([0, 0]), np.zeros(2), next_obs, np.zeros(2, bool), np.zeros(2, bool),
                   priority=np.array([2.0, 0.5]))
    for bad, error, message in [
        (np.array([1.0, 2.0, 3.0]), ValueError, r"^priority has shape \(3,\); expected \(2,\), one per env, for num_envs=2$"),
        (np.array([1.0, -1.0]), ValueError, r"^priority must be finite and >= 0; got -1.0$"),
        (np.array(["a", "b"]), TypeError, r"^priority must be real numbers; got dtype <U1$"),
    ]:
        with pytest.raises(error, match=message):
            vector.add(obs, np.array([0, 0]), np.zeros(2), next_obs, np.zeros(2, bool), np.zeros(2, bool), priority=bad)
    writer.flush()
    vector.flush()
    infos = replay.stats()
    assert infos[1]["mass"] == pytest.approx(sum(1.0 + t for t in range(30)))
    assert infos[0]["mass"] == pytest.approx(12 * 2.0 + 12 * 0.5)  # nothing of the refused adds was kept
    assert (infos[0]["len"], infos[1]["len"]) == (24, 30)
    batch = replay.sample(256, rng=0, beta=1.0)
    shard, _, step = split_ids(batch.index)
    priority = np.where(shard == 1, 1.0 + step, np.where(batch.env_index == 0, 2.0, 0.5))
    np.testing.assert_allclose(batch.weight, (priority / 0.5) ** -1.0, rtol=1e-5)  # the global minimum is 0.5
    uniform, _ = local_replay(tmp_path / "uniform", num_shards=1, capacity=100)
    with pytest.raises(TypeError, match=r"^priority needs a replay created with sampler=PrioritizedSampler"):
        write_episode(uniform.writer("u"), 1, priority=lambda t: 1.0)
    with pytest.raises(TypeError, match=r"^update_priorities needs a replay created with sampler=PrioritizedSampler"):
        uniform.update_priorities(batch.index, np.ones(256))


def test_priority_updates_do_not_wait_and_a_refused_one_is_raised_by_the_next_call(cluster: Path) -> None:
    replay = ShardedReplay.create("updates", str(cluster / "updates"), num_shards=2, frame_shape=FRAME, capacity=1000,
                                  envs_per_shard=4, commit_interval_s=None, sampler=PrioritizedSampler(alpha=1.0, epsilon=0))
    for k in range(2):
        writer = replay.writer(f"w{k}", shard=k, steps_per_send=50)
        write_episode(writer, 50, tag=k)
        writer.flush()
    batch = replay.sample(64, rng=0)
    replay.update_priorities(batch.index, np.full(64, 5.0))
    again = replay.sample(64, rng=1)  # each shard ran the update before this draw
    hot = np.isin(again.index, batch.index)
    np.testing.assert_allclose(again.weight[hot], 1.0 * (5.0 / 1.0) ** -0.4, rtol=1e-5)
    infos = replay.stats()
    assert sum(info["mass"] for info in infos) == pytest.approx(100 + 4 * len(np.unique(batch.index)))
    ray.get(replay.shard(1).close.remote())  # shard 1's store is closed: it refuses the next update
    replay.update_priorities(again.index, np.full(64, 2.0))  # returns without waiting for the refusal
    with pytest.raises(ClosedStoreError, match="update_priorities"):
        replay.refresh()
    ray.kill(replay.shard(1), no_restart=True)
    replay.close(destroy=True)


def test_a_reopened_shard_resumes_its_limiter_counts_from_its_last_commit(cluster: Path, tmp_path: Path) -> None:
    """The limiter's samples are committed with the shard's store: reopened, the shard lets its writer in at
    once, where counting samples from 0 again would hold it back until the learner drew everything anew."""
    limit = RateLimit(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=20)
    replay, shards = local_replay(tmp_path, num_shards=1, capacity=1000, rate_limit=limit)
    writer = replay.writer("w", steps_per_send=10)
    write_episode(writer, 30)  # inserts 30, diff 30: the most the limit allows before a sample
    writer.flush(timeout_s=10)
    for seed in range(3):
        replay.sample(8, rng=seed, timeout_s=10)  # samples 24: diff 6
    writer.flush(timeout_s=10)  # a commit: the samples recorded with it
    replay.sample(8, rng=9, timeout_s=10)  # samples 32 after the commit: lost with the shard
    before = replay.stats()[0]
    assert (before["inserts"], before["samples"]) == (30, 32)
    shards[0].shard.store.close()  # as a kill after the last commit: the samples since are not recorded
    again, _ = local_replay(tmp_path, num_shards=1, capacity=1000, rate_limit=limit)
    after = again.stats()[0]
    assert (after["inserts"], after["samples"], after["epoch"], after["reopened"]) == (30, 24, 1, True)
    writer = again.writer("w", steps_per_send=10)
    write_episode(writer, 20, start=500)  # diff 6 + 20 <= 30: let in without a sample
    writer.flush(timeout_s=5)
    assert again.stats()[0]["inserts"] == 50


def test_batches_time_out_saying_what_the_limit_waits_for_and_that_the_writers_look_gone(
    cluster: Path, tmp_path: Path
) -> None:
    limit = RateLimit(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=20)
    replay, _ = local_replay(tmp_path, num_shards=1, capacity=1000, rate_limit=limit)
    writer = replay.writer("w", steps_per_send=10)
    write_episode(writer, 20)
    writer.flush(timeout_s=10)  # inserts 20, diff 20: samples allowed down to a diff of -10, then no writer
    batches = replay.batches(8, prefetch=1, group=2, rng=0, timeout_s=0.5)
    taken = 0
    message = (r"^no batch of 8 within 0.5 s: a rate limit holds sampling back \(shard 0 needs 2 more inserts before "
               r"its limit allows a sample of 8 \(samples_per_insert 1.0: 24 samples of 20 inserts\)\); no insert has "
               r"reached shard 0 for \d+\.\d s: its writers look gone$")
    with pytest.raises(TimeoutError, match=message):
        while taken < 10:
            next(batches)  # a group of 2 (diff 4), then one batch drawn alone (diff -4), then none
            taken += 1
    assert taken == 3


def test_a_writer_carries_on_by_itself_after_its_rate_limited_shard_is_killed(cluster: Path) -> None:
    limit = RateLimit(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=40)
    replay = ShardedReplay.create("restarts", str(cluster / "restarts"), num_shards=1, frame_shape=FRAME,
                                  capacity=1000, envs_per_shard=4, commit_interval_s=None, rate_limit=limit)
    writer = replay.writer("w", steps_per_send=10, max_in_flight=1)
    write_episode(writer, 40)
    writer.flush(timeout_s=30)  # inserts 40: diff 40 of at most 50
    for seed in range(4):
        replay.sample(8, rng=seed, timeout_s=30)  # samples 32: diff 8
    writer.flush(timeout_s=30)  # committed with the samples
    write_episode(writer, 10, start=200)  # sent, not committed: lost with the shard
    pid = replay.stats()[0]["pid"]
    os.kill(pid, signal.SIGKILL)  # the shard's worker process, which this test's cluster started
    write_episode(writer, 30, start=400)  # a send meets the dead shard: the writer waits for the new one
    writer.flush(timeout_s=30)  # diff 8 + the new inserts <= 50: let in without a sample
    assert writer.reconnects == 1
    info = replay.stats()[0]
    assert (info["epoch"], info["reopened"], info["samples"]) == (1, True, 32)
    assert info["len"] == info["inserts"] and info["len"] in (60, 70)  # the send that met the dead shard: lost
    batch = replay.sample(8, rng=0, timeout_s=30)  # and the learner carries on
    assert set(split_ids(batch.index)[1].tolist()) == {1}
    replay.close(destroy=True)


def test_update_priorities_refuses_bad_input_before_sending_any_part(cluster: Path, tmp_path: Path) -> None:
    replay, shards = local_replay(tmp_path, num_shards=2, capacity=1000, sampler=PrioritizedSampler())
    for k in range(2):
        writer = replay.writer(f"w{k}", shard=k)
        write_episode(writer, 20, tag=k)
        writer.flush()
    ids = replay.sample(16, rng=0).index
    for priorities, index, error, message in [
        (np.ones(15), ids, ValueError, r"^priority has shape \(15,\); expected \(16,\) like index$"),
        # mmreplay.validation.parse_priorities' message (numpy 2 writes the value as np.float64(...))
        (np.r_[np.ones(15), -2.0], ids, ValueError, r"^priority must be finite and >= 0; got (np\.float64\()?-2\.0\)?$"),
        (np.r_[np.ones(15), np.nan], ids, ValueError, r"^priority must be finite and >= 0; got (np\.float64\()?nan\)?$"),
        (np.ones(16), ids.astype(float), TypeError, r"^index must be a 1-D array of ints; got float64\[16\]$"),
        (np.ones(1), np.array([7 << 48]), ValueError, r"^index holds an id of shard 7; expected 0 <= shard < 2$"),
    ]:
        with pytest.raises(error, match=message):
            replay.update_priorities(index, priorities)
    assert all(shard.calls["update_priorities"] == 0 for shard in shards)
    replay.update_priorities(ids, np.full(16, 3.0))
    assert sum(shard.calls["update_priorities"] for shard in shards) == len(np.unique(split_ids(ids)[0]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.tuples(st.one_of(st.none(), st.floats(0.125, 8.0)), st.booleans()), min_size=1, max_size=40),
    steps_per_send=st.integers(1, 9),
)
def test_each_step_gets_the_priority_it_was_added_with_or_the_largest_before_it(
    cluster: Path, tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[float | None, bool]], steps_per_send: int
) -> None:
    """Reference model: a step added with a priority has it; one added without has the largest priority
    given so far (1 at first), as ``PrioritizedSampler`` gives new steps, whatever the sends cut."""
    replay, _ = local_replay(tmp_path_factory.mktemp("priorities"), num_shards=1, capacity=100,
                             sampler=PrioritizedSampler(alpha=1.0, epsilon=0))
    writer = replay.writer("w", steps_per_send=steps_per_send)
    expected, largest = [], 1.0
    for t, (priority, ends) in enumerate(steps):
        obs = np.stack([numbered(t + i) for i in range(4)])
        next_obs = np.stack([numbered(t + i + 1) for i in range(4)])
        writer.add(obs, 0, 0.0, next_obs, ends, False, **({} if priority is None else {"priority": priority}))
        largest = largest if priority is None else max(largest, priority)
        expected.append(largest if priority is None else priority)
    writer.flush()
    leaves = np.array(expected)
    assert replay.stats()[0]["mass"] == pytest.approx(leaves.sum())
    batch = replay.sample(256, rng=0, beta=1.0)
    step = split_ids(batch.index)[2]
    np.testing.assert_allclose(batch.weight, leaves.min() / leaves[step], rtol=1e-5)
    replay.close()


@settings(max_examples=200, deadline=None)
@given(calls=st.lists(st.integers(0, 2), min_size=1, max_size=30), data=st.data())
def test_a_state_answered_late_never_replaces_a_newer_one(calls: list[int], data: st.DataObject) -> None:
    """Reference model: each shard's state is that of its latest call (a shard runs a client's calls in
    order), whatever order the answers are collected in; a lost shard's None counts as a state."""
    from mmreplay.ray.shard_states import ShardStates

    states = ShardStates(3)
    answers = [(k, states.ticket(), data.draw(st.one_of(st.none(), st.just({"n": i})))) for i, k in enumerate(calls)]
    for k, ticket, info in data.draw(st.permutations(answers)):
        states.record(k, ticket, info)
    latest = {k: info for k, _, info in answers}  # the last call to each shard, in the order they were made
    assert states.infos == [latest.get(k) for k in range(3)]
