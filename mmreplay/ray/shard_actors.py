"""Starting a replay's actors: one ``ReplayShard`` per shard, placed as ``ShardedReplay.create`` was asked,
and the named directory actor through which ``ShardedReplay.connect`` finds them."""

from __future__ import annotations

from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mmreplay.ray.shard import ReplayShard, ShardConfig


class ReplayDirectory:
    """A named actor that holds a replay's description, so that ``connect`` finds its shards."""

    def __init__(self, description: dict[str, Any]) -> None:
        self.description = description

    def get(self) -> dict[str, Any]:
        return self.description


def shard_name(name: str, k: int) -> str:
    """The actor name of shard ``k`` of the replay ``name``."""
    return f"{name}.shard-{k:04d}"


def start_actors(
    name: str, root: str, configs: list[ShardConfig], description: dict[str, Any], *, placement: str | list[str],
    namespace: str, detached: bool, max_restarts: int,
) -> list[Any]:
    """Start the shard actors (shard k with ``configs[k]``; ``placement``: ``"spread"``, ``"local"`` (this
    node) or one node id per shard) and the directory actor named ``name``; returns the shards' handles."""
    lifetime = "detached" if detached else None
    here = ray.get_runtime_context().get_node_id()
    shards = []
    for k, config in enumerate(configs):
        if placement == "spread":
            strategy: Any = "SPREAD"
        else:
            node = here if placement == "local" else placement[k]
            strategy = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        actor = ray.remote(ReplayShard).options(
            name=shard_name(name, k), namespace=namespace, lifetime=lifetime, max_restarts=max_restarts,
            num_cpus=0, scheduling_strategy=strategy,
        )
        shards.append(actor.remote(root, k, config))
    ray.remote(ReplayDirectory).options(name=name, namespace=namespace, lifetime=lifetime, num_cpus=0).remote(description)
    return shards
