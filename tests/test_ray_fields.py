"""User fields through ``mmreplay.ray``: ``ShardedReplay.create(fields=...)``, ``writer.add(..., fields=)``,
and every batch (``sample``, ``batches``, ``sample_sequences``) carrying each transition's fields.

The shards' own part (sends with fields in, encoded parts with fields out, joined into a group's batches)
is checked against a reference without a cluster (``ReplayShard`` is a plain class); the transport on a
small local cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray_loopback import ray_on_loopback  # before ray

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'mmreplay[ray]' to run the Ray tests")

from mmreplay import encode_frames  # noqa: E402
from mmreplay.ray import ShardedReplay, split_ids  # noqa: E402
from mmreplay.ray.assembly import GroupBatches, Part, join_sequences  # noqa: E402
from mmreplay.ray.shard import ReplayShard, Send, ShardConfig  # noqa: E402

FRAME = (4, 4)
SPECS = (("tag", (), "<i8"), ("logits", (3,), "<f4"), ("done_mask", (2,), "|b1"))


def numbered(n: int, tag: int = 0) -> np.ndarray:
    frame = np.zeros(FRAME, np.uint8)
    frame[0, 0], frame[0, 1], frame[0, 2] = n % 256, n // 256 % 256, tag
    return frame


def field_values(shard: int, step: np.ndarray) -> dict[str, np.ndarray]:
    """The fields a test writes with shard ``shard``'s transition ``step``: the reference."""
    step = np.asarray(step, np.int64)
    return {"tag": shard * 1_000_000 + step, "logits": np.stack([step, -step, step * 0.5 + shard], -1).astype(np.float32),
            "done_mask": np.stack([step % 2 == 0, step % 3 == 0], -1)}


def assert_fields(fields: dict[str, np.ndarray], shards: np.ndarray, steps: np.ndarray,
                  mask: np.ndarray | None = None) -> None:
    """Each row's fields are those written with its (shard, step); zero past a window's end."""
    assert sorted(fields) == sorted(name for name, _, _ in SPECS)
    for name, shape, dtype in SPECS:
        want = np.zeros((*steps.shape, *shape), dtype)
        for k in np.unique(shards).tolist():
            rows = shards == k if mask is None else (shards == k) & mask
            want[rows] = field_values(k, steps[rows])[name]
        got = fields[name]
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
        np.testing.assert_array_equal(got, want, err_msg=name)


def config(capacity: int) -> ShardConfig:
    return ShardConfig(frame_shape=FRAME, capacity=capacity, stack_size=2, num_envs=2, action_shape=(),
                       action_dtype="int64", sampler=None, rate_limit=None, commit_interval_s=None,
                       frame_encoding="lz4", fields=SPECS)


def send_of(shard: int, env: int, first: int, count: int, ends: bool) -> Send:
    """``count`` steps of env ``env`` from its step ``first`` (frame n shows n), the fields of the shard's
    steps they become (one env writes, so env steps are the store's)."""
    frames = encode_frames(np.stack([numbered(first + i, shard) for i in range(count + 2)]))
    obs = np.stack([np.arange(count), np.arange(1, count + 1)], axis=1)
    steps = np.arange(first, first + count)
    return Send(env, frames, obs, steps % 3, np.ones(count, np.float32), obs + 1,
                np.arange(count) == count - 1 if ends else np.zeros(count, bool), np.zeros(count, bool),
                fields=field_values(shard, steps))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sends=st.lists(st.lists(st.tuples(st.integers(1, 9), st.booleans()), min_size=1, max_size=5), min_size=2,
                      max_size=2),
       group=st.integers(1, 3), batch_size=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_a_shards_encoded_parts_and_the_joined_batches_carry_each_steps_fields(
    tmp_path_factory: pytest.TempPathFactory, sends: list, group: int, batch_size: int, seed: int
) -> None:
    root = tmp_path_factory.mktemp("shards")
    shards = [ReplayShard(str(root), k, config(capacity=100)) for k in range(2)]
    for k, shard in enumerate(shards):
        first = 0
        for count, ends in sends[k]:
            shard.add(send_of(k, 0, first, count, ends))
            first += count
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(batch_size, [0.5, 0.5], size=group)
    parts = []
    for k, shard in enumerate(shards):
        if not counts[:, k].any():
            continue  # a shard drawn for no row is not asked (as ``Draws.request`` does)
        batch, info = shard.sample(int(counts[:, k].sum()), seed + k, beta=0.4, n_step=1, gamma=0.99)
        assert_fields(batch.fields, np.full(len(batch), k), batch.index)  # the part itself, encoded
        parts.append(Part(k, batch, info, counts[:, k]))
    batches = GroupBatches(parts, batch_size=batch_size, stack_size=2, global_min=1.0, beta=0.4)
    for g in range(group):
        joined = batches.batch(g)
        shard_of, _, step = split_ids(joined.index)
        assert_fields(joined.fields, shard_of, step)
        np.testing.assert_array_equal(joined.obs[:, 0, 0, 0] + 256 * joined.obs[:, 0, 0, 1].astype(int), step)
    windows = [(k, shard.sample_sequences(3, seed, length=4, beta=0.4)[0], shard.info()) for k, shard in enumerate(shards)]
    sequences = join_sequences(windows, stack_size=2, global_min=1.0, beta=0.4)
    shard_of, _, step = split_ids(np.maximum(sequences.index, 0))
    assert_fields(sequences.fields, shard_of, step, sequences.mask)
    for shard in shards:
        shard.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Path]:
    with ray_on_loopback(namespace="mmreplay-fields-tests") as temp:
        yield temp


def test_fields_written_by_the_writers_come_back_with_their_transitions_through_every_draw(cluster: Path) -> None:
    fields = {name: (shape, dtype) for name, shape, dtype in SPECS}
    replay = ShardedReplay.create("fields", str(cluster / "fields"), num_shards=2, frame_shape=FRAME, capacity=400,
                                  stack_size=2, envs_per_shard=2, commit_interval_s=None, fields=fields)
    for k in range(2):
        writer = replay.writer(f"w{k}", shard=k, steps_per_send=7)
        for t in range(60):
            step_fields = {name: array for name, array in field_values(k, np.int64(t)).items()}
            writer.add(np.stack([numbered(t, k), numbered(t + 1, k)]), t % 3, 1.0,
                       np.stack([numbered(t + 1, k), numbered(t + 2, k)]), t == 59, False, fields=step_fields)
        writer.flush()
    batch = replay.sample(32, rng=1)
    shard, _, step = split_ids(batch.index)
    assert_fields(batch.fields, shard, step)
    for batch, _ in zip(replay.batches(16, rng=2, group=3, prefetch=2), range(5)):
        shard, _, step = split_ids(batch.index)
        assert_fields(batch.fields, shard, step)
    windows = replay.sample_sequences(6, 5, rng=3)
    shard, _, step = split_ids(np.maximum(windows.index, 0))
    assert_fields(windows.fields, shard, step, windows.mask)
    replay.close(destroy=True)


def test_a_writer_refuses_fields_that_are_not_the_replays_and_keeps_nothing_of_the_call(cluster: Path) -> None:
    replay = ShardedReplay.create("fields-bad", str(cluster / "fields-bad"), num_shards=1, frame_shape=FRAME,
                                  capacity=100, stack_size=1, envs_per_shard=2, commit_interval_s=None,
                                  fields={"tag": ((), np.int64)})
    writer = replay.writer("w", num_envs=2)
    obs, following = np.stack([numbered(0), numbered(1)]), np.stack([numbered(1), numbered(2)])
    with pytest.raises(ValueError, match=r"fields is missing; this replay's adds take fields \['tag'\]"):
        writer.add(obs, [0, 0], [0.0, 0.0], following, [False, False], [False, False])
    with pytest.raises(ValueError, match=r"fields\['tag'\] has shape \(\); expected \(2,\) for shape \(\) and 2 envs"):
        writer.add(obs, [0, 0], [0.0, 0.0], following, [False, False], [False, False], fields={"tag": 1})
    with pytest.raises(TypeError, match=r"fields\['tag'\] has dtype float64; expected values castable to int64"):
        writer.add(obs, [0, 0], [0.0, 0.0], following, [False, False], [False, False], fields={"tag": [1.5, 2.0]})
    writer.add(obs, [0, 0], [0.0, 0.0], following, [True, True], [False, False], fields={"tag": [7, 8]})
    writer.flush()
    assert len(replay) == 2
    np.testing.assert_array_equal(np.sort(replay.sample(64, rng=0).fields["tag"])[[0, -1]], [7, 8])
    with pytest.raises(ValueError, match="field names must be Python identifiers; got '1'"):
        ShardedReplay.create("fields-name", str(cluster / "fields-name"), num_shards=1, frame_shape=FRAME,
                             capacity=100, envs_per_shard=1, fields={"1": ((), np.int64)})
    replay.close(destroy=True)
