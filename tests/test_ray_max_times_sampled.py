"""``ShardedReplay.create(max_times_sampled=)``: each shard's store keeps Reverb's limit, and its mass is what it
has left to draw, so the draw over the shards stays exact over the transitions left."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from ray_loopback import ray_on_loopback  # before ray

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'mmreplay[ray]' to run the Ray tests")

from mmreplay import PrioritizedSampler  # noqa: E402
from mmreplay.ray import ShardedReplay, split_ids  # noqa: E402

FRAME = (2, 2)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Path]:
    with ray_on_loopback(namespace="mmreplay-limit-tests") as temp:
        yield temp


@pytest.mark.parametrize("sampler", [None, PrioritizedSampler(alpha=0.6)], ids=["uniform", "prioritized"])
def test_every_transition_is_drawn_at_most_max_times_sampled_times_over_the_shards(cluster: Path, sampler) -> None:
    name = f"limit-{'p' if sampler else 'u'}"
    replay = ShardedReplay.create(name, str(cluster / name), num_shards=2, frame_shape=FRAME, capacity=200,
                                  stack_size=1, envs_per_shard=1, commit_interval_s=None, sampler=sampler,
                                  max_times_sampled=2)
    for k, size in enumerate([10, 30]):
        writer = replay.writer(f"w{k}", shard=k)
        for t in range(size):
            writer.add(np.full(FRAME, t, np.uint8), 0, 0.0, np.full(FRAME, t + 1, np.uint8), True, False)
        writer.flush()
    if sampler is None:  # a uniform shard's mass: its transitions left to draw
        assert [info["mass"] for info in replay.stats()] == [10.0, 30.0]
    drawn: dict[tuple[int, int], int] = {}
    for i in range(80):  # the whole budget: 40 transitions, 2 draws each
        shard, _, step = split_ids(replay.sample(1, rng=i).index)
        key = (int(shard[0]), int(step[0]))
        drawn[key] = drawn.get(key, 0) + 1
        assert drawn[key] <= 2, f"{key} drawn {drawn[key]} times"
    assert len(drawn) == 40 and set(drawn.values()) == {2}
    assert [info["mass"] for info in replay.stats()] == [0.0, 0.0]
    with pytest.raises(ValueError, match="no shard that answers holds a transition"):
        replay.sample(1, rng=99)
    replay.close(destroy=True)
