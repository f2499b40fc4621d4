"""``ShardedReplay`` on a two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): shards
placed on given nodes, and a node removed while the shard on the other node keeps sampling."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from ray_loopback import listening_beyond_loopback  # before ray: its nodes listen on loopback alone

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'mmreplay[ray]' to run the Ray tests")
from ray.cluster_utils import Cluster  # noqa: E402

from mmreplay.ray import ShardedReplay, split_ids  # noqa: E402


def test_removing_a_node_leaves_the_shard_on_the_other_node_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
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
        head = ray.get_runtime_context().get_node_id()
        replay = ShardedReplay.create("two-nodes", str(temp / "replay"), num_shards=2, frame_shape=(4, 4),
                                      capacity=200, envs_per_shard=2, placement=[head, second.node_id],
                                      max_restarts=0, commit_interval_s=None)
        assert [info["node_id"] for info in replay.stats()] == [head, second.node_id]
        for k in range(2):
            writer = replay.writer(f"w{k}", shard=k)
            for t in range(30):
                frame = np.full((4, 4), t, np.uint8)
                writer.add(frame, 0, 1.0, frame + 1, False, False)
            writer.flush()
        assert len(replay) == 60
        cluster.remove_node(second)
        batch = replay.sample(64, rng=0)
        assert set(split_ids(batch.index)[0].tolist()) == {0}
        stats = replay.stats()
        assert stats[1] is None and stats[0]["len"] == 30
        replay.close(destroy=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


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
