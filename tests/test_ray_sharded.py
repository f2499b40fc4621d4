"""``mmreplay.ray.ShardedReplay`` on a real local Ray cluster (one per module: a start takes seconds).

Frames encode their own step (``numbered``), so every sampled pixel can be checked against what was written.
"""

from __future__ import annotations

import ast
import ipaddress
import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from ray_loopback import is_loopback, listening, listening_beyond_loopback, ray_on_loopback  # before ray

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'mmreplay[ray]' to run the Ray tests")

from mmreplay import PrioritizedSampler  # noqa: E402
from mmreplay.ray import RateLimit, ShardedReplay, split_ids  # noqa: E402

FRAME = (4, 4)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Path]:
    with ray_on_loopback(namespace="mmreplay-tests") as temp:
        yield temp


def numbered(n: int, tag: int = 0) -> np.ndarray:
    frame = np.zeros(FRAME, np.uint8)
    frame[0, 0], frame[0, 1], frame[0, 2] = n % 256, n // 256 % 256, tag
    return frame


def number_of(frames: np.ndarray) -> np.ndarray:
    return frames[..., 0, 0].astype(np.int64) + 256 * frames[..., 0, 1].astype(np.int64)


def write_episode(writer, steps: int, *, tag: int = 0, start: int = 0, stack_size: int = 4) -> None:
    """One episode of ``steps`` transitions whose frame n shows n (frames start..start+steps+stack-1)."""
    for t in range(steps):
        obs = np.stack([numbered(start + t + i, tag) for i in range(stack_size)])
        next_obs = np.stack([numbered(start + t + i + 1, tag) for i in range(stack_size)])
        writer.add(obs, t % 3, float(t), next_obs, t == steps - 1, False)


def make(cluster: Path, name: str, *, num_shards: int, capacity: int, **options) -> ShardedReplay:
    return ShardedReplay.create(name, str(cluster / name), num_shards=num_shards, frame_shape=FRAME,
                                capacity=capacity, commit_interval_s=None, envs_per_shard=4, **options)


def test_every_socket_the_ray_processes_listen_on_is_on_loopback(cluster: Path) -> None:
    replay = make(cluster, "sockets", num_shards=2, capacity=100)  # shard actors: workers with servers of their own
    assert len(replay.stats()) == 2
    sockets = listening()
    commands = " ".join(socket.command for socket in sockets)
    assert "gcs_server" in commands and "raylet" in commands, f"the check does not see Ray's processes: {sockets}"
    beyond = listening_beyond_loopback()
    assert not beyond, "Ray listens beyond 127.0.0.0/8:\n" + "\n".join(map(str, beyond))
    replay.close(destroy=True)


def test_loopback_is_not_0_0_0_0_nor_the_ipv6_any_address() -> None:
    loopback = ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"]
    beyond = ["0.0.0.0", "::", "::ffff:0.0.0.0", "192.0.2.2", "10.0.0.1", "fe80::1"]
    assert [is_loopback(ipaddress.ip_address(a)) for a in loopback + beyond] == [True] * 4 + [False] * 6


REPO = Path(__file__).resolve().parents[1]
GUARD = "os.environ['RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER'] = '0'"  # as ast.unparse writes it


def ray_start(path: Path) -> tuple[bool, bool]:
    """Whether ``path`` starts Ray (``ray.init`` of a new cluster, or ``Cluster``), and whether it sets
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (or imports ``ray_loopback``, which does) before it imports ray."""
    starts, guards, imports = False, [], []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            connects = any(keyword.arg == "address" for keyword in node.keywords)  # to a cluster already up
            starts = starts or name == "Cluster" or (name == "ray.init" and not connects)
            if name == "pytest.importorskip" and ast.literal_eval(node.args[0]).split(".")[0] == "ray":
                imports.append(node.lineno)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            imports += [node.lineno] if any(module.split(".")[0] == "ray" for module in modules) else []
            guards += [node.lineno] if "ray_loopback" in modules else []
        elif isinstance(node, ast.Assign) and ast.unparse(node) == GUARD:
            guards.append(node.lineno)
    return starts, bool(guards) and (not imports or min(guards) < min(imports))


def test_every_script_benchmark_and_test_that_starts_ray_sets_loopback_before_importing_ray() -> None:
    files = [path for folder in ("scripts", "benchmarks", "tests") for path in sorted((REPO / folder).rglob("*.py"))]
    checked = {path.relative_to(REPO).as_posix(): ray_start(path) for path in files if path.name != "ray_loopback.py"}
    starting = {name for name, (starts, _) in checked.items() if starts}
    assert starting >= {"scripts/apex_pong.py", "scripts/rllib_dqn_pong.py", "benchmarks/bench_ray.py",
                        "benchmarks/lab/group_decode_pair.py", "tests/test_ray_cluster.py"}
    unguarded = sorted(name for name in starting if not checked[name][1])
    assert not unguarded, f"these start Ray with ray imported before loopback is set (tests/ray_loopback.py): {unguarded}"


def test_uniform_sampling_draws_each_shard_in_proportion_to_its_size(cluster: Path) -> None:
    replay = make(cluster, "uniform", num_shards=3, capacity=6000)
    for k, size in enumerate([200, 600, 1200]):
        writer = replay.writer(f"w{k}", shard=k, steps_per_send=200)
        write_episode(writer, size, tag=k)
        writer.flush()
    assert [info["len"] for info in replay.stats()] == [200, 600, 1200]
    assert len(replay) == 2000
    rng = np.random.default_rng(0)
    shards = np.concatenate([split_ids(replay.sample(128, rng).index)[0] for _ in range(100)])
    share = np.bincount(shards, minlength=3) / len(shards)
    # 12,800 draws: the standard error of a share of 0.1 is 0.0027
    np.testing.assert_allclose(share, [0.1, 0.3, 0.6], atol=0.015)
    replay.close(destroy=True)


def test_sampled_pixels_are_the_frames_written_and_fields_match(cluster: Path) -> None:
    replay = make(cluster, "pixels", num_shards=2, capacity=1000)
    for k in range(2):
        writer = replay.writer(f"w{k}", shard=k, steps_per_send=7)
        write_episode(writer, 50, tag=k)
        writer.flush()
    batch = replay.sample(64, rng=1, n_step=3, gamma=0.5)
    shard, epoch, step = split_ids(batch.index)
    assert set(epoch.tolist()) == {0}
    first = number_of(batch.obs[:, 0])
    np.testing.assert_array_equal(first, step)  # transition t's obs starts at frame t
    np.testing.assert_array_equal(batch.obs[:, 0, 0, 2], shard)  # each frame came from its own shard
    used = np.minimum(3, 50 - step)  # the episode ends at step 49: the window is cut there
    np.testing.assert_array_equal(number_of(batch.next_obs[:, -1]), step + used + 3)
    expected = [sum(0.5**i * (s + i) for i in range(m)) for s, m in zip(step.tolist(), used.tolist())]
    np.testing.assert_allclose(batch.reward, expected, rtol=1e-6)
    np.testing.assert_allclose(batch.discount, np.where(step + used == 50, 0.0, 0.5**used))
    replay.close(destroy=True)


def test_reference_shards_sample_the_frames_written(cluster: Path) -> None:
    """Shards of ``frame_encoding="lz4-reference"`` stores: their batches travel with the frames their blocks
    are compressed against, and every sampled pixel is the frame written (prefetched groups and sequences
    too)."""
    with pytest.raises(ValueError, match=r"frame_encoding is 'zstd'; expected None or one of \('lz4', 'lz4-reference'\)"):
        make(cluster, "bad-encoding", num_shards=2, capacity=1000, frame_encoding="zstd")
    replay = make(cluster, "reference", num_shards=2, capacity=1000, frame_encoding="lz4-reference")
    for k in range(2):
        writer = replay.writer(f"w{k}", shard=k, steps_per_send=9)
        write_episode(writer, 120, tag=k)
        writer.flush()
    batches = [replay.sample(64, rng=3, n_step=2, gamma=0.5)]
    batches += [batch for batch, _ in zip(replay.batches(32, rng=4, prefetch=2, group=4), range(6))]
    for batch in batches:
        shard, _, step = split_ids(batch.index)
        np.testing.assert_array_equal(number_of(batch.obs[:, 0]), step)
        np.testing.assert_array_equal(batch.obs[:, 0, 0, 2], shard)
        np.testing.assert_array_equal(number_of(batch.obs), step[:, None] + np.arange(4))
    windows = replay.sample_sequences(8, 5, rng=5)
    shard, _, step = split_ids(np.where(windows.mask, windows.index, 0))
    np.testing.assert_array_equal(np.where(windows.mask, number_of(windows.obs[:, :, 0]), 0),
                                  np.where(windows.mask, step, 0))
    replay.close(destroy=True)


def test_the_same_seed_gives_the_same_batch_and_direct_reads_agree(cluster: Path) -> None:
    replay = make(cluster, "seeded", num_shards=2, capacity=1000, placement="local")
    for k in range(2):
        writer = replay.writer(f"w{k}", shard=k)
        write_episode(writer, 40 + 30 * k, tag=k)
        writer.flush()
    first, again = replay.sample(32, rng=7), replay.sample(32, rng=7)
    direct = replay.sample(32, rng=7, direct_read=True)
    for batch in (again, direct):
        for name in ("obs", "next_obs", "index", "reward", "action", "weight", "discount"):
            np.testing.assert_array_equal(getattr(batch, name), getattr(first, name), err_msg=name)
    windows = replay.sample_sequences(6, 5, rng=3)
    prefetched = next(replay.sequence_batches(6, 5, rng=np.random.default_rng(3), group=1, direct_read=True))
    for batch in (replay.sample_sequences(6, 5, rng=3, direct_read=True), prefetched):
        for name in ("obs", "next_obs", "index", "mask", "reward", "action", "weight"):
            np.testing.assert_array_equal(getattr(batch, name), getattr(windows, name), err_msg=name)
    replay.close(destroy=True)


def test_a_direct_prioritized_draw_agrees_with_the_actors_weights_and_n_steps_included(cluster: Path) -> None:
    replay = make(cluster, "seeded-prioritized", num_shards=3, capacity=1000, placement="local",
                  sampler=PrioritizedSampler(alpha=0.6, epsilon=0))
    for k, size in enumerate([40, 70, 25]):
        writer = replay.writer(f"w{k}", shard=k)
        write_episode(writer, size, tag=k)
        writer.flush()
    first = replay.sample(256, rng=1)  # every shard's priorities changed, unequally, then committed
    replay.update_priorities(first.index, 1.0 + (first.index % 7) + 5.0 * (split_ids(first.index)[0] == 1))
    for k in range(3):
        replay.writer(f"w{k}", shard=k).flush()
    replay.refresh()
    for n_step in (1, 3):
        through = replay.sample(48, rng=9, beta=0.7, n_step=n_step, gamma=0.9)
        direct = replay.sample(48, rng=9, beta=0.7, n_step=n_step, gamma=0.9, direct_read=True)
        assert set(split_ids(direct.index)[0].tolist()) == {0, 1, 2}
        for name in ("obs", "next_obs", "index", "reward", "action", "weight", "discount", "terminated", "env_index"):
            np.testing.assert_array_equal(getattr(direct, name), getattr(through, name), err_msg=name)
    replay.close(destroy=True)


def test_prioritized_sampling_over_shards_matches_one_combined_store(cluster: Path) -> None:
    alpha, beta = 0.6, 0.5
    replay = make(cluster, "prioritized", num_shards=2, capacity=1000, sampler=PrioritizedSampler(alpha=alpha, epsilon=0))
    for k, size in enumerate([150, 250]):
        writer = replay.writer(f"w{k}", shard=k, steps_per_send=50)
        write_episode(writer, size, tag=k)
        writer.flush()
    # Every transition once, then priorities that make shard 0 hotter, routed by global id.
    seen: dict[int, float] = {}
    rng = np.random.default_rng(3)
    while len(seen) < 400:
        for i in replay.sample(256, rng).index.tolist():
            shard, _, step = (int(v[0]) for v in split_ids(np.array([i])))
            seen[i] = (3.0 if shard == 0 else 1.0) + (step % 5)
    ids = np.array(sorted(seen))
    replay.update_priorities(ids, np.array([seen[i] for i in ids.tolist()]))
    leaves = {i: p**alpha for i, p in seen.items()}
    total, lowest = sum(leaves.values()), min(leaves.values())
    mass0 = sum(v for i, v in leaves.items() if split_ids(np.array([i]))[0][0] == 0) / total
    infos = replay.stats()
    assert math.isclose(infos[0]["mass"] / (infos[0]["mass"] + infos[1]["mass"]), mass0, rel_tol=1e-9)
    draws = [replay.sample(512, rng, beta=beta) for _ in range(60)]
    index = np.concatenate([batch.index for batch in draws])
    weight = np.concatenate([batch.weight for batch in draws])
    expected_weight = np.array([(leaves[i] / lowest) ** -beta for i in index.tolist()])
    np.testing.assert_allclose(weight, expected_weight, rtol=1e-5)  # normalised by the global minimum
    share0 = np.mean(split_ids(index)[0] == 0)  # 30,720 draws: standard error 0.003
    assert abs(share0 - mass0) < 0.015
    replay.close(destroy=True)


def test_a_shard_killed_during_unflushed_adds_reopens_at_its_last_commit_with_a_new_epoch(cluster: Path) -> None:
    replay = make(cluster, "killed", num_shards=1, capacity=1000, sampler=PrioritizedSampler())
    writer = replay.writer("w", steps_per_send=10, max_in_flight=1)
    write_episode(writer, 100)
    writer.flush()
    old = replay.sample(16, rng=0)
    write_episode(writer, 50, start=500)  # sent (5 sends of 10), never flushed
    ray.get(replay.shard(0).queued.remote())  # every send has been written by the shard
    assert replay.stats()[0]["len"] == 150
    ray.kill(replay.shard(0), no_restart=False)
    deadline = time.monotonic() + 60
    while True:
        try:
            if ray.get(replay.shard(0).ping.remote(), timeout=10) == 1:  # the restarted incarnation answers
                break
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
            pass
        assert time.monotonic() < deadline, "the shard was not restarted"
        time.sleep(0.2)
    info = replay.stats()[0]
    assert (info["len"], info["epoch"], info["reopened"]) == (100, 1, True)
    # An update with ids of epoch 0 is dropped by the restarted shard; fresh ids apply.
    shard, epoch, steps = split_ids(old.index)
    assert ray.get(replay.shard(0).update_priorities.remote(0, steps, np.full(16, 9.0)))[0] == 0
    fresh = replay.sample(16, rng=1)
    assert set(split_ids(fresh.index)[1].tolist()) == {1}
    replay.update_priorities(fresh.index, np.full(16, 9.0))
    writer = replay.writer("w")  # the same key: the same env of the store
    write_episode(writer, 20, start=900)
    writer.flush()
    assert len(replay) == 120
    replay.close(destroy=True)


def test_losing_one_shard_leaves_the_others_sampling(cluster: Path) -> None:
    replay = make(cluster, "lossy", num_shards=3, capacity=3000, max_restarts=0)
    for k in range(3):
        writer = replay.writer(f"w{k}", shard=k)
        write_episode(writer, 60, tag=k)
        writer.flush()
    ray.kill(replay.shard(1), no_restart=True)
    batch = replay.sample(200, rng=0)
    assert set(split_ids(batch.index)[0].tolist()) == {0, 2}
    stats = replay.stats()
    assert stats[1] is None and stats[0]["len"] == stats[2]["len"] == 60
    replay.close(destroy=True)


def test_connect_finds_a_detached_replay_by_name(cluster: Path) -> None:
    replay = make(cluster, "named", num_shards=2, capacity=100)
    writer = replay.writer("w", shard=1)
    write_episode(writer, 10)
    writer.flush()
    again = ShardedReplay.connect("named")
    assert len(again) == 10 and again.num_shards == 2
    np.testing.assert_array_equal(again.sample(8, rng=2).obs, replay.sample(8, rng=2).obs)
    capped = ShardedReplay.connect("named", decode_threads=1)  # this process's cap on a batch's decode threads
    np.testing.assert_array_equal(capped.sample(8, rng=2).obs, replay.sample(8, rng=2).obs)
    with pytest.raises(ValueError, match=r"^decode_threads must be None \(the cores this process may use\) or 1 to 64; got 0$"):
        ShardedReplay.connect("named", decode_threads=0)
    replay.close(destroy=True)
    with pytest.raises(ValueError, match=r"capacity is 10: 5 per shard, fewer than envs_per_shard \(8\)"):
        ShardedReplay.create("small", str(cluster / "small"), num_shards=2, frame_shape=FRAME, capacity=10,
                             envs_per_shard=8)
    with pytest.raises(ValueError):
        ShardedReplay.connect("named")


# A learner process: it joins the cluster, creates a replay, writes one episode to each shard, prints a
# batch's ids and exits without closing anything.
_LEARNER = """
import json, sys
import numpy as np
import ray
from mmreplay.ray import ShardedReplay
address, name, root, detached = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
ray.init(address=address, namespace="mmreplay-tests", log_to_driver=False)
replay = ShardedReplay.create(name, root, num_shards=2, frame_shape=(4, 4), capacity=100, envs_per_shard=4,
                              commit_interval_s=None, detached=detached)
for k in range(2):
    writer = replay.writer(f"w{k}", shard=k)
    for t in range(10 + 5 * k):
        obs, next_obs = np.full((4, 4), t, np.uint8), np.full((4, 4), t + 1, np.uint8)
        writer.add(obs, 1, float(t), next_obs, t == 9 + 5 * k, False)
    writer.flush()
print(json.dumps(replay.sample(16, rng=5).index.tolist()))
"""


def run_learner(cluster: Path, name: str, *, detached: bool) -> list[int]:
    address = ray.get_runtime_context().gcs_address
    done = subprocess.run([sys.executable, "-c", _LEARNER, address, name, str(cluster / name), str(int(detached))],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_detached_replay_survives_the_learner_process_that_created_it(cluster: Path) -> None:
    ids = run_learner(cluster, "survivor", detached=True)  # that process has exited: its job is over
    again = ShardedReplay.connect("survivor")
    assert [info["len"] for info in again.stats()] == [10, 15]
    assert again.sample(16, rng=5).index.tolist() == ids  # the same state: the same draw
    again.close(destroy=True)
    run_learner(cluster, "ephemeral", detached=False)  # actors of the learner's job end with it
    deadline = time.monotonic() + 30
    while True:
        try:
            ShardedReplay.connect("ephemeral")
        except ValueError:
            break
        assert time.monotonic() < deadline, "a replay created with detached=False outlived its learner"
        time.sleep(0.5)


def test_a_vector_writer_records_each_env_as_its_own_episode(cluster: Path) -> None:
    replay = make(cluster, "vector", num_shards=1, capacity=100)
    writer = replay.writer("v", num_envs=2, steps_per_send=3)
    for t in range(10):
        obs = np.stack([np.stack([numbered(t + i, env) for i in range(4)]) for env in range(2)])
        next_obs = np.stack([np.stack([numbered(t + i + 1, env) for i in range(4)]) for env in range(2)])
        mask = np.array([True, t % 2 == 0])
        writer.add(obs, np.array([1, 2]), np.zeros(2, np.float32), next_obs, np.zeros(2, bool), np.zeros(2, bool),
                   env_mask=mask)
    writer.flush()
    assert len(replay) == 15
    batch = replay.sample(64, rng=0)
    np.testing.assert_array_equal(batch.obs[:, 0, 0, 2], batch.env_index)  # each env's own frames
    np.testing.assert_array_equal(number_of(batch.next_obs[:, -1]), number_of(batch.obs[:, -1]) + 1)
    replay.close(destroy=True)


def test_a_writer_keeps_the_pixels_of_arrays_its_caller_reuses(cluster: Path) -> None:
    replay = make(cluster, "reused", num_shards=1, capacity=100)
    writer = replay.writer("w", steps_per_send=50)
    obs, next_obs = np.zeros(FRAME, np.uint8), np.zeros(FRAME, np.uint8)  # one buffer each, written in place
    for t in range(10):
        obs[...] = numbered(t)
        next_obs[...] = numbered(t + 1)
        writer.add(obs, 0, 0.0, next_obs, False, False)
    writer.flush()  # the one send goes now, after every step overwrote the buffers
    batch = replay.sample(64, rng=0)
    _, _, step = split_ids(batch.index)
    np.testing.assert_array_equal(number_of(batch.obs[:, -1]), step)
    np.testing.assert_array_equal(number_of(batch.next_obs[:, -1]), step + 1)
    replay.close(destroy=True)


def test_rate_limit_holds_samples_per_insert_within_its_error_bound(cluster: Path) -> None:
    limit = RateLimit(samples_per_insert=2.0, min_size_to_sample=40, error_buffer=60)
    replay = make(cluster, "limited", num_shards=1, capacity=1000, rate_limit=limit)
    with pytest.raises(TimeoutError, match="a rate limit holds sampling back"):
        replay.sample(8, rng=0, timeout_s=0.3)  # empty: below the minimum size
    writer = replay.writer("w", steps_per_send=5, max_in_flight=2)

    def act() -> None:  # the fast side: it would insert 400 at once
        write_episode(writer, 400)
        writer.flush(timeout_s=60)

    acting = threading.Thread(target=act)
    acting.start()
    diffs, sampled = [], 0
    while sampled < 720:  # 400 inserts allow 800 - 20 samples; the writer finishes once 660 are drawn
        replay.sample(8, rng=sampled, timeout_s=30)
        sampled += 8
        info = replay.stats()[0]
        diffs.append(info["inserts"] * 2.0 - info["samples"])
    acting.join(timeout=60)
    assert not acting.is_alive()
    assert min(diffs) >= limit.min_diff and max(diffs) <= limit.max_diff
    assert max(diffs) > limit.min_diff + 8  # the writer was ahead at times: both sides were held back
    replay.close(destroy=True)


@pytest.mark.parametrize("limit", [RateLimit(2.0, 40, 60), RateLimit(0.3, 7, 2.5), RateLimit.min_size(5), RateLimit(3.0, 1, 3.0)])
def test_insertable_is_the_most_inserts_can_insert_allows_one_by_one(limit: RateLimit) -> None:
    for inserts in range(0, 120, 7):
        for samples in range(0, 400, 13):
            for count in (0, 1, 5, 32, 200):
                one_by_one = 0
                while one_by_one < count and limit.can_insert(one_by_one + 1, inserts=inserts, samples=samples):
                    one_by_one += 1
                assert limit.insertable(count, inserts=inserts, samples=samples) == one_by_one


def test_prefetched_batches_are_the_batches_sample_draws_with_the_same_rng(cluster: Path) -> None:
    replay = make(cluster, "prefetched", num_shards=2, capacity=1000)
    for k in range(2):
        writer = replay.writer(f"w{k}", shard=k)
        write_episode(writer, 30 + 20 * k, tag=k)
        writer.flush()
    expected_rng, rng = np.random.default_rng(11), np.random.default_rng(11)
    batches = replay.batches(16, prefetch=3, rng=rng, group=1, n_step=2)
    for _ in range(6):
        batch, expected = next(batches), replay.sample(16, expected_rng, n_step=2)
        for name in ("obs", "next_obs", "index", "reward", "discount"):
            np.testing.assert_array_equal(getattr(batch, name), getattr(expected, name), err_msg=name)
    grouped = replay.batches(16, prefetch=2, group=4, rng=0)
    for _ in range(10):
        batch = next(grouped)
        np.testing.assert_array_equal(number_of(batch.next_obs[:, -1]), number_of(batch.obs[:, -1]) + 1)
    replay.close(destroy=True)


@pytest.mark.parametrize("direct_read", [False, True], ids=["through-the-actors", "direct-read"])
def test_grouped_batches_hold_each_shards_rows_in_place_and_draw_the_union_uniformly(
    cluster: Path, direct_read: bool
) -> None:
    replay = make(cluster, f"grouped-{direct_read}", num_shards=3, capacity=6000, placement="local")
    for k, size in enumerate([100, 300, 600]):
        writer = replay.writer(f"w{k}", shard=k, steps_per_send=100)
        write_episode(writer, size, tag=k)
        writer.flush()
    batches = replay.batches(50, prefetch=2, group=8, rng=0, direct_read=direct_read)
    shards = []
    for _ in range(200):  # 25 groups
        batch = next(batches)
        assert batch.obs.shape == (50, 4, *FRAME) and batch.index.shape == (50,)
        shard, _, step = split_ids(batch.index)
        assert (np.diff(shard) >= 0).all()  # shard after shard, as sample joins them
        sizes = np.array([100, 300, 600])[shard]
        np.testing.assert_array_equal(number_of(batch.obs[:, 0]), step)
        np.testing.assert_array_equal(number_of(batch.next_obs[:, -1]), step + 4)
        np.testing.assert_array_equal(batch.obs[:, 0, 0, 2], shard)
        np.testing.assert_array_equal(batch.reward, step.astype(np.float32))
        np.testing.assert_array_equal(batch.terminated, step == sizes - 1)
        shards.append(shard)
    share = np.bincount(np.concatenate(shards), minlength=3) / 10_000
    # 10,000 draws: the standard error of a share of 0.1 is 0.003
    np.testing.assert_allclose(share, [0.1, 0.3, 0.6], atol=0.015)
    replay.close(destroy=True)


def test_grouped_batches_keep_a_final_obs_stored_whole_next_to_shared_stacks(cluster: Path) -> None:
    replay = make(cluster, "grouped-final", num_shards=2, capacity=1000, placement="local")
    for k in range(2):
        writer = replay.writer(f"w{k}", shard=k, steps_per_send=5)
        for episode in range(3):  # each episode ends on a final obs given whole: 4 frames numbered 900+
            start = 100 * episode
            for t in range(9):
                obs = np.stack([numbered(start + t + i, k) for i in range(4)])
                following = np.stack([numbered(start + t + i + 1, k) for i in range(4)])
                if t == 8:
                    following = np.stack([numbered(900 + i, k) for i in range(4)])
                writer.add(obs, 0, float(t), following, t == 8, False)
        writer.flush()
    for direct_read in (False, True):
        batches = replay.batches(12, prefetch=1, group=5, rng=1, direct_read=direct_read)
        ended = 0
        for _ in range(40):
            batch = next(batches)
            shard, _, step = split_ids(batch.index)
            t = step % 9
            start = 100 * (step // 9)
            np.testing.assert_array_equal(number_of(batch.obs[:, 0]), start + t)
            np.testing.assert_array_equal(batch.obs[:, 0, 0, 2], shard)
            final = batch.terminated
            assert (number_of(batch.next_obs[final]) == 900 + np.arange(4)).all()
            np.testing.assert_array_equal(number_of(batch.next_obs[~final, -1]), (start + t + 4)[~final])
            ended += int(final.sum())
        assert ended > 0
    replay.close(destroy=True)


@pytest.mark.parametrize("frame_encoding", ["lz4", "lz4-reference"])
def test_a_group_joins_the_shards_encoded_parts_row_for_row(tmp_path: Path, frame_encoding: str) -> None:
    """``GroupBatches`` (no cluster): two shards' encoded answers (through an actor or read directly), shard
    1's stacks stored whole at episode ends: batch g is shard 0's rows for g, then
    shard 1's, pixels and fields as each store sampled them, ids global, weights as drawn; reference
    stores' parts carry the frames their blocks are compressed against."""
    from mmreplay import ReplayStore
    from mmreplay.ray import global_ids
    from mmreplay.ray.assembly import GroupBatches, Part

    stores = []
    for tag in range(2):
        store = ReplayStore.create(tmp_path / f"s{tag}", frame_shape=FRAME, capacity=200, commit_interval_s=None,
                                   frame_encoding=frame_encoding)
        for t in range(40):
            obs = np.stack([numbered(t + i, tag) for i in range(4)])
            following = np.stack([numbered(t + i + 1, tag) for i in range(4)])
            ended = tag == 1 and t % 10 == 9
            if ended:
                following = np.stack([numbered(900 + i, tag) for i in range(4)])
            store.add(obs, t % 3, float(t), following, ended, False)
        stores.append(store)
    counts = [np.array([3, 5, 0, 2]), np.array([5, 3, 8, 6])]
    encoded = stores[0].sample_encoded(10, rng=1)
    apart = stores[1].sample_encoded(22, rng=2)
    assert encoded.frame_index.shape[1] == 5 and apart.frame_index.shape[1] == 8  # shared and separate stacks
    assert (encoded.frames.references is not None) == (frame_encoding == "lz4-reference")
    infos = [{"epoch": 3, "min_leaf": 1.0}, {"epoch": 4, "min_leaf": 1.0}]
    group = GroupBatches([Part(1, apart, infos[1], counts[1]), Part(0, encoded, infos[0], counts[0])],
                         batch_size=8, stack_size=4, global_min=1.0, beta=0.4)
    whole = [encoded.decode(), apart.decode()]
    first = [np.cumsum(c) - c for c in counts]
    for g in range(4):
        batch = group.batch(g)
        rows = [slice(int(first[k][g]), int(first[k][g] + counts[k][g])) for k in range(2)]
        for name in ("obs", "next_obs", "action", "reward", "terminated", "weight"):
            expected = np.concatenate([getattr(whole[k], name)[rows[k]] for k in range(2)])
            np.testing.assert_array_equal(getattr(batch, name), expected, err_msg=f"{name} of batch {g}")
        expected_ids = np.concatenate([global_ids(k, 3 + k, whole[k].index[rows[k]]) for k in range(2)])
        np.testing.assert_array_equal(batch.index, expected_ids)
    for store in stores:
        store.close()


def test_sequences_are_drawn_over_shards_within_one_episode(cluster: Path) -> None:
    replay = make(cluster, "sequences", num_shards=2, capacity=1000)
    for k in range(2):
        writer = replay.writer(f"w{k}", shard=k)
        write_episode(writer, 20, tag=k)
        writer.flush()
    batch = replay.sample_sequences(12, 5, rng=0)
    assert batch.obs.shape == (12, 5, 4, *FRAME)
    shard, _, step = split_ids(batch.index[:, 0])
    assert set(shard.tolist()) == {0, 1}
    expected_mask = np.arange(5)[None] < (20 - step)[:, None]  # windows end with their episode
    np.testing.assert_array_equal(batch.mask, expected_mask)
    first = number_of(batch.obs[:, :, 0])
    np.testing.assert_array_equal(first[batch.mask], (step[:, None] + np.arange(5))[batch.mask])
    np.testing.assert_array_equal(batch.obs[:, 0, 0, 0, 2], shard)
    replay.close(destroy=True)
