"""``ShardedReplay.sequence_batches``: R2D2's sequences through the shard actors, requested ahead.

Frames encode their own step and shard (``numbered``), so each window's pixels, its episode boundary and its
shard are checked against what was written.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from ray_loopback import ray_on_loopback  # before ray

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'mmreplay[ray]' to run the Ray tests")

from mmreplay.ray import RateLimit, ShardedReplay, split_ids  # noqa: E402

FRAME = (4, 4)
EPISODE = 25  # each writer's episodes are this long


@pytest.fixture(scope="module")
def cluster() -> Iterator[Path]:
    with ray_on_loopback(namespace="mmreplay-sequence-tests") as temp:
        yield temp


def numbered(n: int, tag: int) -> np.ndarray:
    frame = np.zeros(FRAME, np.uint8)
    frame[0, 0], frame[0, 1], frame[0, 2] = n % 256, n // 256 % 256, tag
    return frame


def number_of(frames: np.ndarray) -> np.ndarray:
    return frames[..., 0, 0].astype(np.int64) + 256 * frames[..., 0, 1].astype(np.int64)


def write(replay: ShardedReplay, shard: int, steps: int) -> None:
    """``steps`` transitions into ``shard``, in episodes of ``EPISODE``: transition t's obs shows frames t, t+1."""
    writer = replay.writer(f"w{shard}", shard=shard, steps_per_send=16)
    for t in range(steps):
        start = t - t % EPISODE  # each episode's frames continue the count (a new episode: a new obs)
        offset = 1000 * (t // EPISODE)
        obs = np.stack([numbered(offset + t - start + i, shard) for i in range(2)])
        following = np.stack([numbered(offset + t - start + i + 1, shard) for i in range(2)])
        writer.add(obs, 0, 1.0, following, t % EPISODE == EPISODE - 1, False)
    writer.flush()


def assert_windows_are_what_was_written(batch, length: int) -> np.ndarray:
    """Each window: consecutive transitions of one episode of one shard, pixels as written, cut at its
    episode's end. Returns each window's shard."""
    shard, _, first = split_ids(batch.index[:, 0])
    assert (batch.index[:, 0] >= 0).all() and batch.mask[:, 0].all()
    position = first % EPISODE  # the window's first transition within its episode
    np.testing.assert_array_equal(batch.mask, np.arange(length)[None] < (EPISODE - position)[:, None])
    shown = number_of(batch.obs[:, :, 0])  # each position's first obs frame
    expected = 1000 * (first // EPISODE)[:, None] + position[:, None] + np.arange(length)
    np.testing.assert_array_equal(np.where(batch.mask, shown, -1), np.where(batch.mask, expected, -1))
    np.testing.assert_array_equal(batch.obs[:, 0, 0, 0, 2], shard)
    ids = np.where(batch.mask, batch.index, -1)
    np.testing.assert_array_equal(batch.index, ids)  # -1 past a window's end
    return shard


def test_prefetched_sequences_stay_within_an_episode_and_are_drawn_over_shards_by_size(cluster: Path) -> None:
    replay = ShardedReplay.create("seq", str(cluster / "seq"), num_shards=2, frame_shape=FRAME, capacity=2000,
                                  stack_size=2, envs_per_shard=2, commit_interval_s=None)
    write(replay, 0, 100)
    write(replay, 1, 400)
    shards = []
    stream = replay.sequence_batches(32, 6, prefetch=2, group=3, rng=0)
    for batch, _ in zip(stream, range(45)):
        assert batch.obs.shape == (32, 6, 2, *FRAME)
        shards.append(assert_windows_are_what_was_written(batch, 6))
    share = np.bincount(np.concatenate(shards), minlength=2) / (45 * 32)
    np.testing.assert_allclose(share, [0.2, 0.8], atol=0.04)  # 1,440 windows: the standard error is 0.011
    # A group of one is exactly what sample_sequences draws with the same seed.
    first = next(replay.sequence_batches(8, 4, group=1, rng=np.random.default_rng(11)))
    again = replay.sample_sequences(8, 4, rng=np.random.default_rng(11))
    for name in ("obs", "mask", "index", "reward", "weight"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name), err_msg=name)
    with pytest.raises(ValueError, match="length must be >= 1; got 0"):
        replay.sequence_batches(8, 0)
    replay.close(destroy=True)


def test_prefetched_sequences_wait_for_a_rate_limit_and_time_out_when_the_writers_are_gone(cluster: Path) -> None:
    replay = ShardedReplay.create("seq-limited", str(cluster / "seq-limited"), num_shards=1, frame_shape=FRAME,
                                  capacity=500, stack_size=2, envs_per_shard=2, commit_interval_s=None,
                                  rate_limit=RateLimit(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=40))
    write(replay, 0, 50)
    stream = replay.sequence_batches(8, 3, group=2, prefetch=1, rng=1, timeout_s=0.5)
    drawn = 0
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="a rate limit holds sampling back .*its writers look gone"):
        for batch in stream:
            assert_windows_are_what_was_written(batch, 3)
            drawn += 1
            assert drawn < 100 and time.monotonic() - started < 60, "the rate limit never held the stream back"
    assert drawn >= 2  # what the inserts allowed was drawn first
    with pytest.raises(ValueError, match="rate limit holds sampling back .*sample_sequences does not wait"):
        replay.sample_sequences(8, 3, rng=2)
    replay.close(destroy=True)


def rows_of(windows, rows: slice):
    """Windows ``rows`` of an encoded sequence batch, with all its frames: one shard's share of one batch."""
    from mmreplay import EncodedSequenceBatch

    arrays = {name: getattr(windows, name)[rows] for name in
              ("frame_index", "action", "reward", "terminated", "truncated", "mask", "index", "env_index", "weight")}
    return EncodedSequenceBatch(frames=windows.frames, stack_size=windows.stack_size, **arrays,
                                user_fields={name: array[rows] for name, array in windows.fields.items()})


@pytest.mark.parametrize("frame_encoding", ["lz4", "lz4-reference"])
def test_a_group_of_windows_laid_out_once_is_each_batch_joined_alone(tmp_path: Path, frame_encoding: str) -> None:
    """``SequenceParts`` (a group's windows laid out and checked once, each batch one decode) gives each batch
    exactly what ``join_sequences`` gives for that batch's windows of each shard, shard after shard."""
    from mmreplay import ReplayStore
    from mmreplay.ray.assembly import Part, SequenceParts, join_sequences

    stores = []
    for k in range(3):
        store = ReplayStore.create(tmp_path / f"s{k}.mmr", frame_shape=FRAME, capacity=400, stack_size=2,
                                   frame_encoding=frame_encoding, fields={"q": ((), np.float32)})
        for t in range(150 + 40 * k):
            obs = np.stack([numbered(t + i, k) for i in range(2)])
            store.add(obs, t % 3, float(t), np.stack([numbered(t + i + 1, k) for i in range(2)]),
                      t % EPISODE == EPISODE - 1, False, fields={"q": np.float32(t)})
        stores.append(store)
    rng = np.random.default_rng(5)
    for trial in range(6):
        groups, batch_size, length = int(rng.integers(1, 6)), int(rng.integers(1, 9)), int(rng.integers(1, 7))
        counts = rng.multinomial(batch_size, [0.2, 0.3, 0.5], size=groups)  # some shards get no window at all
        parts = [Part(k, stores[k].sample_sequences_encoded(int(counts[:, k].sum()), length, rng, beta=0.5),
                      {"epoch": trial, "min_leaf": 1.0 + k}, counts[:, k])
                 for k in (2, 0, 1) if counts[:, k].any()]  # any order; a shard with no window is not asked
        group = SequenceParts(parts, batch_size=batch_size, stack_size=2, global_min=1.0, beta=0.5)
        assert len(group) == groups
        by_shard = sorted(parts, key=lambda part: part.shard)
        for g in range(groups):
            pieces = [(part.shard, rows_of(part.batch, slice(
                           int(part.counts[:g].sum()), int(part.counts[:g + 1].sum()))),
                       part.info) for part in by_shard if part.counts[g]]
            expected = join_sequences(pieces, stack_size=2, global_min=1.0, beta=0.5)
            got = group.batch(g)
            for name in ("obs", "next_obs", "action", "reward", "terminated", "truncated", "mask", "index",
                         "env_index", "weight"):
                np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), err_msg=name)
            np.testing.assert_array_equal(got.fields["q"], expected.fields["q"])
    for store in stores:
        store.close()
