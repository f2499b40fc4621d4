"""``ShardedReplay`` on a two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): shards
placed on given nodes, and a node removed while the shard on the other node keeps sampling."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ray_loopback import listening_beyond_loopback  # before ray: its nodes listen on loopback alone

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'mmreplay[ray]' to run the Ray tests")
from ray.cluster_utils import Cluster  # noqa: E402

from mmreplay.ray import ShardedReplay, split_ids  # noqa: E402
from mmreplay.ray.shard_actors import shard_name  # noqa: E402


@pytest.fixture
def two_nodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Path, str, Any]]:
    """A head node (this process's) and a second node, on loopback: (the cluster, a temporary directory,
    the head's node id, the second node)."""
    temp = Path(tempfile.mkdtemp(prefix="mmr-cluster-"))
    # Cluster writes the head's address under Ray's temporary directory: this test's own, not /tmp/ray.
    monkeypatch.setenv("RAY_TMPDIR", str(temp))
    (temp / "ray").mkdir()
    cluster = Cluster(initialize_head=True, connect=True,
                      head_node_args={"num_cpus": 1, "include_dashboard": False, "temp_dir": str(temp / "ray"),
                                      "node_ip_address": "127.0.0.1"})
    try:
        second = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        beyond = listening_beyond_loopback()
        assert not beyond, "the two nodes listen beyond 127.0.0.0/8:\n" + "\n".join(map(str, beyond))
        yield cluster, temp, ray.get_runtime_context().get_node_id(), second
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def two_shards(temp: Path, name: str, head: str, second: Any, steps: int = 30) -> ShardedReplay:
    """A replay with shard 0 on the head node and shard 1 on the second, ``steps`` committed in each."""
    replay = ShardedReplay.create(name, str(temp / name), num_shards=2, frame_shape=(4, 4), capacity=200,
                                  envs_per_shard=2, placement=[head, second.node_id], max_restarts=0,
                                  commit_interval_s=None)
    assert [info["node_id"] for info in replay.stats()] == [head, second.node_id]
    for k in range(2):
        writer = replay.writer(f"w{k}", shard=k)
        for t in range(steps):
            frame = np.full((4, 4), t + 100 * k, np.uint8)
            writer.add(frame, 0, 1.0, frame + 1, False, False)
        writer.flush()
    return replay


def test_removing_a_node_leaves_the_shard_on_the_other_node_sampling(two_nodes: tuple[Any, Path, str, Any]) -> None:
    cluster, temp, head, second = two_nodes
    replay = two_shards(temp, "two-nodes", head, second)
    assert len(replay) == 60
    cluster.remove_node(second)
    batch = replay.sample(64, rng=0)
    assert set(split_ids(batch.index)[0].tolist()) == {0}
    stats = replay.stats()
    assert stats[1] is None and stats[0]["len"] == 30
    replay.close(destroy=True)


def test_direct_reads_of_a_shard_on_another_node_draw_while_its_actor_is_busy(
    two_nodes: tuple[Any, Path, str, Any],
) -> None:
    _, temp, head, second = two_nodes
    replay = two_shards(temp, "busy", head, second)
    through = replay.sample(48, rng=7)
    direct = replay.sample(48, rng=7, direct_read=True)  # shard 1 through a reader on the second node
    assert set(split_ids(direct.index)[0].tolist()) == {0, 1}
    for name in ("obs", "next_obs", "index", "reward", "action", "weight"):
        np.testing.assert_array_equal(getattr(direct, name), getattr(through, name), err_msg=name)

    # Keep both shard actors busy (as a queue of adds would) until the gate file appears.
    gate = temp / "gate"

    def hold(shard: Any, gate: str) -> bool:
        import os
        import time

        deadline = time.monotonic() + 120
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        return True

    namespace = ray.get_runtime_context().namespace
    shards = [ray.get_actor(shard_name("busy", k), namespace=namespace) for k in range(2)]
    holds = [shard.__ray_call__.remote(hold, str(gate)) for shard in shards]
    drawn: list[Any] = []
    def draw() -> None:
        drawn.append(replay.sample(48, rng=8, direct_read=True))
        drawn.append(replay.sample_sequences(16, 4, rng=8, direct_read=True))

    drawer = threading.Thread(target=draw, daemon=True)
    drawer.start()
    drawer.join(timeout=60)
    try:
        assert len(drawn) == 2, "a direct draw waited for the busy shard actors"
        assert not ray.wait(holds, num_returns=2, timeout=0)[0]  # the actors were busy all along
        assert set(split_ids(drawn[0].index)[0].tolist()) == {0, 1}
        assert set(split_ids(drawn[1].index[drawn[1].mask])[0].tolist()) == {0, 1}
    finally:
        gate.touch()
    assert ray.get(holds, timeout=120) == [True, True]
    drawer.join(timeout=60)
    replay.close(destroy=True)


def test_the_ape_x_script_trains_from_shards_with_rate_limits_and_priorities() -> None:
    pytest.importorskip("ale_py", reason="ale-py is not installed")
    pytest.importorskip("torch", reason="torch is not installed")
    script = Path(__file__).resolve().parents[1] / "scripts" / "apex_pong.py"
    run = subprocess.run([sys.executable, str(script), "--actors", "2", "--shards", "2", "--updates", "24",
                          "--min-size", "200", "--samples-per-insert", "4"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["updates"] == 24
    assert sum(report["shard_sizes"]) == report["env_steps"]  # every actor step reached a shard, none twice
    assert all(size > 0 for size in report["shard_sizes"])  # each actor writes to its own shard
    assert sum(report["shard_samples"]) >= 24 * 32  # and the batches requested ahead
    # Each shard keeps samples within its share of the error buffer (4 * 2000 over 2 shards) of 4 per insert.
    for inserts, samples in zip(report["shard_inserts"], report["shard_samples"]):
        assert samples <= 4 * inserts + 4000
    # TD errors went back by global id: the shards' masses are no longer their sizes (every leaf 1 at first).
    assert report["shard_masses"] != [float(size) for size in report["shard_sizes"]]
