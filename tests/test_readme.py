"""Every code block of the manual runs (README.md and every page under docs/): the Python examples are
executed, the command lines are run.

Each Python block is preceded on its page by ``<!-- example: NAME -->``; NAME picks the setup below,
which provides only what the example leaves to the reader's own loop (and the API tour's imports, ``np``
and ``ReplayStore``) (its env's observations, a policy, a
TD error), with real Atari frames and real gymnasium/ALE envs. Nothing is faked but what would need a
network: a Dopamine checkpoint (the DQN Replay Dataset is downloaded) is written here, and the TD error
of a network nobody trained is drawn at random. Each example runs in a fresh directory; a block without
a name, or with a name this file does not know, fails the test, so a new example cannot go untested.
Shell blocks are run where they are the CLI; the setup, test and benchmark commands are named in
``NOT_RUN`` with the reason (CI runs the test command itself).
"""

from __future__ import annotations

import ast
import gzip
import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from atari_data import load_stream
from manual_jax_examples import JAX_EXAMPLES, JAX_SMALL_SIZES
from ray_loopback import is_loopback, ray_on_loopback  # before ray: the module's Ray cluster listens on loopback alone

REPO = Path(__file__).resolve().parents[1]
# The manual: README.md and the pages that mkdocs.yml builds into a site.
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
MARKER = re.compile(r"<!-- example: ([\w-]+) -->")
FENCE = re.compile(r"^ {0,3}```(\S*)\s*$")


def fenced_blocks() -> list[tuple[str, str, str, str | None]]:
    """(language, code, where: ``page:line``, name from the marker line above it or None) of every
    fenced code block of the manual, in page order."""
    found = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            opening = FENCE.match(lines[i])
            if opening:
                start = i
                previous = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
                marker = MARKER.search(previous)
                i += 1
                body = []
                while i < len(lines) and lines[i].strip() != "```":
                    body.append(lines[i])
                    i += 1
                where = f"{page.relative_to(REPO)}:{start + 1}"
                found.append((opening.group(1), "\n".join(body), where, marker.group(1) if marker else None))
            i += 1
    return found


def blocks(language: str) -> list[tuple[str | None, str, str]]:
    """(name or None, code, ``page:line``) of each ``language`` block of the manual."""
    return [(name, code, where) for found, code, where, name in fenced_blocks() if found == language]


# -- what the examples leave to the reader ---------------------------------------------------------


def pong_transitions(count: int, stack_size: int = 4, episode_steps: int | None = None) -> list[tuple[Any, ...]]:
    """``count`` real Pong transitions (stacks, Python scalars) as a one-env training loop adds them;
    with ``episode_steps``, every episode is truncated after that many steps (a time limit)."""
    stream = load_stream("pong", ("frames", "episode_start", "action", "reward", "terminated"), count + 64)
    transitions, stack = [], None
    for t in range(len(stream["frames"]) - 1):
        if stream["episode_start"][t] or stack is None:
            stack = np.repeat(stream["frames"][t][None], stack_size, axis=0)
        if stream["action"][t] < 0:
            continue
        next_stack = np.concatenate([stack[1:], stream["frames"][t + 1][None]])
        truncated = episode_steps is not None and (len(transitions) + 1) % episode_steps == 0
        transitions.append((stack, int(stream["action"][t]), float(stream["reward"][t]), next_stack,
                            bool(stream["terminated"][t]), truncated))
        stack = None if truncated else next_stack
        if len(transitions) == count:
            break
    return transitions


class Countdown:
    """``while training:`` for ``steps`` iterations."""

    def __init__(self, steps: int) -> None:
        self.left = steps

    def __bool__(self) -> bool:
        self.left -= 1
        return self.left >= 0


def make_pong(max_episode_steps: int = 9) -> Callable[[], Any]:
    """A real ALE Pong env as the guide's recipes wrap it, with short episodes so that the examples
    meet episode ends and autoresets within a few steps."""
    import ale_py
    import gymnasium
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TimeLimit

    gymnasium.register_envs(ale_py)

    def make_env() -> Any:
        env = gymnasium.make("ALE/Pong-v5", frameskip=1)
        env = AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True)
        return TimeLimit(FrameStackObservation(env, 4), max_episode_steps=max_episode_steps)

    return make_env


def write_dopamine_checkpoints(directory: Path, suffixes: list[int], stack_size: int = 4) -> None:
    """Checkpoints as Dopamine's ``OutOfGraphReplayBuffer.save`` writes them (np.save into gzip files),
    standing in for the DQN Replay Dataset, which is a download: two short episodes of 84x84 frames."""
    directory.mkdir(parents=True)
    rng = np.random.default_rng(0)
    frames, actions, rewards, terminals = [], [], [], []
    for length in (6, 5):
        for _ in range(stack_size - 1):  # Dopamine's zero padding before each episode
            frames.append(np.zeros((84, 84), np.uint8)), actions.append(0), rewards.append(0.0), terminals.append(0)
        for t in range(length):
            frames.append(rng.integers(0, 255, (84, 84), dtype=np.uint8))
            actions.append(int(rng.integers(0, 6))), rewards.append(float(t % 2)), terminals.append(int(t == length - 1))
    arrays = {
        "observation": np.array(frames), "action": np.array(actions, np.int32),
        "reward": np.array(rewards, np.float32), "terminal": np.array(terminals, np.uint8),
    }
    first_episode = stack_size - 1 + 6
    for i, suffix in enumerate(suffixes):  # each later checkpoint holds one more episode of the same ring
        add_count = first_episode if i < len(suffixes) - 1 else len(frames)
        for name, array in arrays.items():
            saved = array.copy()
            saved[add_count:] = 0
            with gzip.open(directory / f"$store$_{name}_ckpt.{suffix}.gz", "wb") as file:
                np.save(file, saved, allow_pickle=False)
        cursor = add_count % len(frames)  # Dopamine's invalid_range, update_horizon 1: the slots around the cursor
        invalid = np.array([(cursor - 1 + j) % len(frames) for j in range(stack_size + 1)], np.int64)
        for name, value in (("add_count", add_count), ("invalid_range", invalid)):
            with gzip.open(directory / f"{name}_ckpt.{suffix}.gz", "wb") as file:
                np.save(file, np.array(value), allow_pickle=False)


# -- one setup per example: the names the example uses and does not define ---------------------------


def setup_quickstart(namespace: dict[str, Any]) -> None:
    namespace.update(zip(("obs", "action", "reward", "next_obs", "terminated", "truncated"), pong_transitions(1)[0]))


def check_quickstart(namespace: dict[str, Any]) -> None:
    assert namespace["batch"].obs.shape == (1, 4, 84, 84)


def setup_vector_next_step(namespace: dict[str, Any]) -> None:
    import gymnasium

    namespace.update(gymnasium=gymnasium, make_env=make_pong(), path="vector.mmr", training=Countdown(24))
    namespace["policy"] = lambda obs: np.random.default_rng(len(obs)).integers(0, 6, size=len(obs))


def check_vector_next_step(namespace: dict[str, Any]) -> None:
    store = namespace["store"]
    assert store.transitions_added == 8 * 24 - 8 * 2  # each env's 9-step episode ends twice: 2 reset entries masked
    assert {e.ended_by for e in store.episodes()} >= {"truncated", "in progress"}
    namespace["envs"].close()


def setup_vector_same_step(namespace: dict[str, Any]) -> None:
    import gymnasium
    from mmreplay import ReplayStore

    envs = gymnasium.vector.SyncVectorEnv([make_pong()] * 2, autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)
    obs, _ = envs.reset(seed=0)
    namespace.update(
        envs=envs, obs=obs, action=np.array([1, 2]),
        store=ReplayStore.create("same-step.mmr", frame_shape=(84, 84), capacity=1000, num_envs=2),
    )


def check_vector_same_step(namespace: dict[str, Any]) -> None:
    store = namespace["store"]
    assert store.transitions_added == 2 * 20
    assert [e.ended_by for e in store.episodes()].count("truncated") == 4  # 9-step episodes, 20 steps, 2 envs
    namespace["envs"].close()


def setup_prioritized(namespace: dict[str, Any]) -> None:
    rng = np.random.default_rng(0)
    namespace.update(rng=rng, transitions=pong_transitions(200), np=np)
    # A network's TD errors: random here, as the example's network is the reader's.
    namespace["td_error"] = lambda batch: rng.normal(size=len(batch)).astype(np.float32)


def check_prioritized(namespace: dict[str, Any]) -> None:
    assert namespace["batch"].weight.shape == (32,) and np.isfinite(namespace["loss"])


def setup_sb3(namespace: dict[str, Any]) -> None:
    import ale_py
    import gymnasium
    from stable_baselines3.common.env_util import make_atari_env

    gymnasium.register_envs(ale_py)  # PongNoFrameskip-v4, whichever example ran first
    namespace["env"] = make_atari_env("PongNoFrameskip-v4", n_envs=1, seed=0)
    namespace["envs"] = gymnasium.vector.SyncVectorEnv([make_pong()])
    namespace["args"] = SimpleNamespace(buffer_size=1000)
    namespace["device"] = "cpu"
    namespace["run_name"] = "PongNoFrameskip-v4__dqn_atari__1__1764201600"  # CleanRL's f"{env_id}__{exp_name}__{seed}__{time}"
    Path("runs", namespace["run_name"]).mkdir(parents=True)  # CleanRL's SummaryWriter makes it first


def check_sb3(namespace: dict[str, Any]) -> None:
    assert namespace["model"].replay_buffer is not None and namespace["rb"].buffer_size == 1000
    namespace["env"].close()
    namespace["envs"].close()


def setup_torchrl(namespace: dict[str, Any]) -> None:
    """The reader's policy and loss: a linear Q-network over Pong's 6 actions, TorchRL's DQNLoss on it."""
    pytest.importorskip("torchrl", reason="TorchRL is not installed here: test.sh's main pass installs the torchrl extra")
    import torch
    from torchrl.data import Composite, OneHot
    from torchrl.modules import QValueActor
    from torchrl.objectives import DQNLoss

    class Scale(torch.nn.Module):
        def forward(self, pixels: torch.Tensor) -> torch.Tensor:
            return pixels.to(torch.float32) / 255.0

    torch.manual_seed(0)
    network = torch.nn.Sequential(Scale(), torch.nn.Flatten(-3), torch.nn.Linear(4 * 84 * 84, 6))
    policy = QValueActor(module=network, spec=Composite(action=OneHot(6)), in_keys=["pixels"])
    namespace["policy"] = policy
    namespace["loss_module"] = DQNLoss(value_network=policy, loss_function="l2", delay_value=False)
    namespace["run_name"] = "ALE-Pong-v5__dqn__1__1764201600"


def check_torchrl(namespace: dict[str, Any]) -> None:
    import torch

    rb, sample, data = namespace["rb"], namespace["sample"], namespace["data"]
    assert len(rb) == 64 and sample["pixels"].shape == (32, 4, 84, 84) and sample["pixels"].dtype == torch.uint8
    assert sample["next", "pixels"].shape == (32, 4, 84, 84) and torch.isfinite(namespace["loss"])
    # the last batch's stacks, rebuilt from the frames stored once, are the ones the collector wrote
    last = data.reshape(-1)
    np.testing.assert_array_equal(rb[torch.arange(48, 64)]["pixels"].numpy(), last["pixels"].numpy())
    np.testing.assert_array_equal(rb[torch.arange(48, 64)]["next", "pixels"].numpy(), last["next", "pixels"].numpy())
    namespace["collector"].shutdown()
    namespace["storage"].close()


def setup_recorder(namespace: dict[str, Any]) -> None:
    pass


def check_recorder(namespace: dict[str, Any]) -> None:
    env, envs = namespace["env"], namespace["envs"]
    env.reset(seed=0)
    for _ in range(3):
        env.step(env.action_space.sample())
    envs.reset(seed=0)
    for _ in range(3):
        envs.step(envs.action_space.sample())
    assert namespace["store"].transitions_added == 3 and namespace["vector_store"].transitions_added == 3 * 8
    env.close()
    envs.close()


def setup_datasets(namespace: dict[str, Any]) -> None:
    from mmreplay import ReplayStore

    store = ReplayStore.create("pong.mmr", frame_shape=(84, 84), capacity=1000)
    for transition in pong_transitions(120):
        store.add(*transition)
    namespace["store"] = store
    write_dopamine_checkpoints(Path("dqn_replay/Pong/1/replay_logs"), [49, 50])


def check_datasets(namespace: dict[str, Any]) -> None:
    from mmreplay import ReplayStore

    with ReplayStore.open("pong-copy.mmr") as copy:
        assert copy.transitions_added == 120
    with ReplayStore.open("pong-dqn.mmr") as imported:
        assert imported.transitions_added > 0


def setup_fields(namespace: dict[str, Any]) -> None:
    obs, action, reward, next_obs, _, truncated = pong_transitions(1)[0]
    rng = np.random.default_rng(0)
    namespace.update(obs=obs, action=action, reward=reward, next_obs=next_obs, terminated=True, truncated=truncated,
                     rng=rng, h=rng.normal(size=(2, 512)).astype(np.float16), mask=rng.random(18) < 0.5)


def check_fields(namespace: dict[str, Any]) -> None:
    store = namespace["store"]
    assert len(store) == 0 and namespace["seq"].fields["state"].shape == (32, 80, 2, 512)
    [first, *_] = namespace["episodes"]
    np.testing.assert_array_equal(first.fields["legal"][0], namespace["mask"])


def setup_gpu_batches(namespace: dict[str, Any]) -> None:
    """A prioritized store of real Pong transitions and two small Q-networks, as a DQN learner has them."""
    import torch

    from mmreplay import PrioritizedSampler, ReplayStore

    store = ReplayStore.create("gpu-batches.mmr", frame_shape=(84, 84), capacity=1000, sampler=PrioritizedSampler())
    for transition in pong_transitions(60):
        store.add(*transition)
    torch.manual_seed(0)
    online = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 84 * 84, 6))
    namespace.update(store=store, steps=3, torch=torch, online=online, target_net=online)


def check_gpu_batches(namespace: dict[str, Any]) -> None:
    store, batch = namespace["store"], namespace["batch"]
    assert batch.obs.shape == (32, 4, 84, 84) and str(batch.obs.device) == "cpu"
    assert namespace["step"] == namespace["steps"] - 1
    store.close()


def setup_encoded(namespace: dict[str, Any]) -> None:
    from mmreplay import ReplayStore

    stream = load_stream("pong", ("frames",), 40)
    store = ReplayStore.create("encoded.mmr", frame_shape=(84, 84), capacity=1000, stack_size=1)
    count = 30  # one env's steps: single frames, obs t is frame t, next_obs frame t + 1
    namespace.update(
        store=store, rng=np.random.default_rng(0), pixels=stream["frames"][: count + 1],
        obs=np.arange(count), next_obs=np.arange(1, count + 1), action=np.zeros(count, np.int64),
        reward=np.zeros(count, np.float32), terminated=np.zeros(count, bool), truncated=np.zeros(count, bool),
    )


def check_encoded(namespace: dict[str, Any]) -> None:
    store, batch = namespace["store"], namespace["batch"]
    assert store.transitions_added == 30
    again = store.read(batch.index)
    np.testing.assert_array_equal(batch.obs, again.obs)


def setup_d3rlpy_offline(namespace: dict[str, Any]) -> None:
    """A run of the DQN Replay Dataset's layout (Dopamine checkpoints, written here: the dataset is a download)."""
    pytest.importorskip("d3rlpy", reason="d3rlpy is not installed here: scripts/test.sh's d3rlpy stage runs this example")
    write_dopamine_checkpoints(Path("dqn_replay/Pong/1/replay_logs"), [49, 50])


def check_d3rlpy_offline(namespace: dict[str, Any]) -> None:
    dataset, cql = namespace["dataset"], namespace["cql"]
    assert dataset.transition_count == 11 and dataset.size() == 2  # two terminated episodes of 6 and 5 steps
    assert cql.impl is not None and dataset.sample_transition_batch(4).observations.shape == (4, 4, 84, 84)


def setup_tianshou(namespace: dict[str, Any]) -> None:
    """The page's Collector takes a Tianshou algorithm built elsewhere: a random policy over Pong's actions
    stands in for it, and ``run_name`` names the run."""
    pytest.importorskip("tianshou", reason="Tianshou is not installed here: pip install '.[tianshou]'")
    import gymnasium as gym
    from tianshou.algorithm.algorithm_base import RandomActionPolicy

    namespace["algorithm"] = RandomActionPolicy(gym.spaces.Discrete(6))
    namespace["run_name"] = "pong"


def check_tianshou(namespace: dict[str, Any]) -> None:
    collector, buffer = namespace["collector"], namespace["buffer"]
    collector.reset()
    collector.collect(n_step=16, random=True)  # the actions of the env's own action space
    assert len(buffer) == 16 and buffer[np.arange(16)].obs_next.shape == (16, 4, 84, 84)
    namespace["envs"].close()
    for store in buffer.stores:
        store.close()


# The Ray examples run on a local Ray cluster started once for this module (``ray_cluster``), at small
# sizes: each ``(page text, replacement)`` must be found in the example, so that an edit of the page
# that the test no longer matches fails here instead of running unbounded.
SMALL_SIZES = {
    "ray-sharded": [
        # the module's cluster is up (the page's start runs on its own in the loopback test below)
        ('ray.init(_node_ip_address="127.0.0.1", _temp_dir=tempfile.mkdtemp(prefix="ray-"), include_dashboard=False)',
         "pass"),
        ('"/data/replay"', "root"),
        ("num_shards=4", "num_shards=2"),
        ("capacity=4_000_000", "capacity=4_000"),
        ("min_size_to_sample=20_000", "min_size_to_sample=1"),
        ("for batch in replay.batches(32, prefetch=4, rng=rng): ...", "for batch in replay.batches(32, prefetch=4, rng=rng): break"),
    ],
    "rllib-buffer": [('"capacity": 1_000_000', '"capacity": 1_000')],
    "torchrl": [("1_000_000", "1_000"), ("total_frames=10_000_000", "total_frames=64")],
    "tianshou": [("1_000_000, 8", "64, 2"), ("range(8)", "range(2)")],
    "d3rlpy-offline": [("n_steps=1_000_000, n_steps_per_epoch=10_000", "n_steps=4, n_steps_per_epoch=4, show_progress=False")],
    # the same pipeline without a GPU: device="cpu" (no pinning, no copy)
    "gpu-batches": [('device="cuda"', 'device="cpu"')],
}


def setup_ray_sharded(namespace: dict[str, Any]) -> None:
    """One real Pong transition for a writer, and what the example's later lines use."""
    from mmreplay import PrioritizedSampler

    frames = load_stream("pong", ("frames",), 2)["frames"]
    namespace.update(
        PrioritizedSampler=PrioritizedSampler, root=str(Path.cwd() / "replay"), key="actor-0", obs=frames[0],
        action=3, reward=1.0, next_obs=frames[1], terminated=False, truncated=False, rng=np.random.default_rng(0),
        td_errors=np.full(32, 0.5),
    )


def check_ray_sharded(namespace: dict[str, Any]) -> None:
    batch, frames = namespace["batch"], load_stream("pong", ("frames",), 2)["frames"]
    assert batch.obs.shape == (32, 4, 84, 84)  # the one transition, drawn 32 times
    assert (batch.obs == frames[0]).all() and (batch.next_obs[:, -1] == frames[1]).all()
    assert (batch.action == 3).all() and (batch.reward == 1.0).all()
    assert sorted(path.name for path in (Path.cwd() / "replay").iterdir()) == ["shard-0000", "shard-0001"]


def setup_rllib_buffer(namespace: dict[str, Any]) -> None:
    from ray.rllib.algorithms.dqn import DQNConfig

    namespace["DQNConfig"] = DQNConfig


def check_rllib_buffer(namespace: dict[str, Any]) -> None:
    """RLlib builds the buffer from the config as DQN does (``from_config`` of its dotted type)."""
    from ray.rllib.utils.from_config import from_config
    from ray.rllib.utils.replay_buffers import ReplayBuffer
    from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import PrioritizedEpisodeReplayBuffer

    from mmreplay.rllib import MmreplayEpisodeReplayBuffer

    buffer = from_config(ReplayBuffer, dict(namespace["config"].replay_buffer_config))
    assert isinstance(buffer, MmreplayEpisodeReplayBuffer) and isinstance(buffer, PrioritizedEpisodeReplayBuffer)
    assert buffer.path == Path("dqn.mmr")


def setup_reference_encoding(namespace: dict[str, Any]) -> None:
    from mmreplay import ReplayStore

    namespace["ReplayStore"] = ReplayStore


def check_reference_encoding(namespace: dict[str, Any]) -> None:
    assert namespace["store"].frame_encoding == "lz4-reference"


def setup_any_dtype(namespace: dict[str, Any]) -> None:
    """One real CartPole-v1 step (float32 states), as a training loop has it."""
    import gymnasium

    env = gymnasium.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    action = env.action_space.sample()
    next_obs, reward, terminated, truncated, _ = env.step(action)
    namespace.update(obs=obs, action=action, reward=reward, next_obs=next_obs, terminated=terminated,
                     truncated=truncated, rng=np.random.default_rng(0))


def check_any_dtype(namespace: dict[str, Any]) -> None:
    batch = namespace["batch"]
    assert batch.obs.dtype == np.float32 and batch.obs.shape == (50, 1, 4)
    np.testing.assert_array_equal(batch.next_obs[0, 0], namespace["next_obs"])


EXAMPLES: dict[str, tuple[Callable[[dict[str, Any]], None], Callable[[dict[str, Any]], None]]] = {
    "quickstart": (setup_quickstart, check_quickstart),
    "vector-next-step": (setup_vector_next_step, check_vector_next_step),
    "vector-same-step": (setup_vector_same_step, check_vector_same_step),
    "prioritized": (setup_prioritized, check_prioritized),
    "sb3": (setup_sb3, check_sb3),
    "torchrl": (setup_torchrl, check_torchrl),
    "recorder": (setup_recorder, check_recorder),
    "datasets": (setup_datasets, check_datasets),
    "fields": (setup_fields, check_fields),
    "reference-encoding": (setup_reference_encoding, check_reference_encoding),
    "any-dtype": (setup_any_dtype, check_any_dtype),
    "encoded": (setup_encoded, check_encoded),
    "gpu-batches": (setup_gpu_batches, check_gpu_batches),
    "ray-sharded": (setup_ray_sharded, check_ray_sharded),
    "rllib-buffer": (setup_rllib_buffer, check_rllib_buffer),
    "d3rlpy-offline": (setup_d3rlpy_offline, check_d3rlpy_offline),
    "tianshou": (setup_tianshou, check_tianshou),
}
# The JAX and EnvPool guide's examples (their setups in manual_jax_examples.py).
EXAMPLES.update(JAX_EXAMPLES)
SMALL_SIZES.update(JAX_SMALL_SIZES)
# The examples that run on the module's Ray cluster.
RAY_EXAMPLES = {"ray-sharded", "rllib-buffer"}
# Examples that are one step of a loop: run this many times over the same names.
REPEATS = {"vector-same-step": 20}


@pytest.fixture
def in_tmp_dir(tmp_path: Path) -> Iterator[Path]:
    previous = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(previous)


def close_stores(namespace: dict[str, Any]) -> None:
    from mmreplay import ReplayStore

    for value in namespace.values():
        if isinstance(value, ReplayStore) and not value.closed:
            value.close()


PYTHON_BLOCKS = blocks("python")


def test_every_code_block_of_the_manual_is_python_or_bash_so_that_none_escapes_these_tests() -> None:
    others = [(language, where) for language, _, where, _ in fenced_blocks() if language not in ("python", "bash")]
    assert not others, f"code blocks these tests neither run nor check (write python or bash): {others}"


def test_every_python_block_of_the_manual_is_named_and_known() -> None:
    unnamed = [where for name, _, where in PYTHON_BLOCKS if name is None]
    unknown = [(name, where) for name, _, where in PYTHON_BLOCKS if name is not None and name not in EXAMPLES]
    assert not unnamed, f"python blocks at {unnamed} have no <!-- example: NAME --> line above"
    assert not unknown, f"the manual names examples tests/test_readme.py does not know: {unknown}"
    assert {name for name, _, _ in PYTHON_BLOCKS} == set(EXAMPLES), "an example of EXAMPLES is on no page"


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster for this module's Ray examples (bound to loopback, its own temporary directory),
    stopped when the module's tests are done."""
    pytest.importorskip("ray", reason="Ray is not installed here: the Ray examples run in test.sh's Ray venv pass")
    with ray_on_loopback(namespace="mmreplay-readme"):
        yield


@pytest.mark.parametrize(("name", "code", "where"), PYTHON_BLOCKS, ids=[f"{name}@{where}" for name, _, where in PYTHON_BLOCKS])
def test_the_manual_python_example_runs(
    name: str | None, code: str, where: str, in_tmp_dir: Path, request: pytest.FixtureRequest
) -> None:
    if name not in EXAMPLES:
        pytest.fail(f"the python block at {where} is not named or not known (see the test above)")
    setup, check = EXAMPLES[name]
    from mmreplay import ReplayStore

    if name in SMALL_SIZES:
        if name in RAY_EXAMPLES:
            request.getfixturevalue("ray_cluster")
        for text, replacement in SMALL_SIZES[name]:
            assert text in code, f"{where} ({name}) no longer holds {text!r}: update SMALL_SIZES"
            code = code.replace(text, replacement)
    # The API tour's imports are in scope, as for a reader who follows the guide from the top.
    namespace: dict[str, Any] = {"__name__": "readme_example", "np": np, "ReplayStore": ReplayStore}
    setup(namespace)
    compiled = compile(code, where, "exec")
    try:
        for _ in range(REPEATS.get(name, 1)):
            exec(compiled, namespace)
        check(namespace)
    finally:
        close_stores(namespace)


# The manual's Ray starts, each run in a Python of its own, where nothing set the environment before them:
# its lines up to ray.init, then this check of what the processes of that Python's tree listen on.
RAY_STARTS = [(name, code, where) for name, code, where in PYTHON_BLOCKS if "ray.init(" in code]
_LISTENING = """
import json, sys
sys.path.insert(0, {tests!r})
from ray_loopback import listening  # too late to change this Ray: it is up
try:
    print(json.dumps([[str(socket.address), socket.port, socket.command] for socket in listening()]))
finally:
    ray.shutdown()
"""


@pytest.mark.parametrize(("name", "code", "where"), RAY_STARTS, ids=[f"{name}@{where}" for name, _, where in RAY_STARTS])
def test_the_manual_starts_ray_on_loopback_alone(name: str, code: str, where: str) -> None:
    pytest.importorskip("ray", reason="Ray is not installed here: the Ray examples run in test.sh's Ray venv pass")
    statements = ast.parse(code).body
    end = next(statement.end_lineno for statement in statements if "ray.init(" in ast.unparse(statement))
    start = "\n".join(code.splitlines()[:end])
    temp = tempfile.mkdtemp(prefix="mmr-doc-")  # short: Ray's socket paths under it have a length limit
    env = {key: value for key, value in os.environ.items() if key != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    try:  # past the timeout the child is killed, and Ray's processes with it (they die with their parent)
        run = subprocess.run([sys.executable, "-c", start + _LISTENING.format(tests=str(REPO / "tests"))],
                             capture_output=True, text=True, timeout=180, env={**env, "TMPDIR": temp})
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert run.returncode == 0, run.stderr[-3000:]
    sockets = json.loads(run.stdout.strip().splitlines()[-1])
    assert any("gcs_server" in command for _, _, command in sockets), f"{where}: no Ray server seen: {sockets}"
    beyond = [socket for socket in sockets if not is_loopback(ipaddress.ip_address(socket[0]))]
    assert not beyond, f"{where} ({name}) starts Ray listening beyond 127.0.0.0/8: {beyond}"


# -- shell blocks ------------------------------------------------------------------------------------

# The setup, test and benchmark commands: run by CI itself (scripts/test.sh, the README's test command),
# or too long for a test (the demo records 40,000 steps; the benchmark report takes an hour).
NOT_RUN = {
    "bash scripts/demo.sh": "the demo: installs its extras and records 40,000 Pong steps (about a minute)",
    "bash scripts/test.sh": "the test command itself: CI runs it",
    "bash scripts/setup.sh": "installs extras into .venv (and then type-checks or builds the manual): CI runs both",
    "bash scripts/check_package.sh": "builds and checks the sdist and wheels (minutes, pip access): CI runs it",
    "pip install": "installs into the reader's own environment: scripts/check_package.sh builds and installs both",
    "cd mmreplay": "the clone's directory, before pip install",
    ".venv/bin/python benchmarks/report.py": "the benchmark report: about an hour",
    ".venv/bin/mmreplay": "the CLI on the demo's store: the same commands run below on a store made here",
    "python -m venv .venv-d3rlpy": "d3rlpy's own environment: scripts/test.sh's d3rlpy stage makes it",
    ".venv-d3rlpy/bin/pip install": "installs d3rlpy's own environment: scripts/test.sh's d3rlpy stage does",
    "python benchmarks/cleanrl_dqn.py": "CleanRL's DQN twice, in a venv with CleanRL's pins and its checkout (minutes)",
    "python scripts/sbx_dqn_swap.py": "SBX's DQN twice, in a venv where sbx-rl installs (minutes)",
}


def shell_commands() -> list[tuple[str, str]]:
    """Every command line of the manual's bash blocks, with its block's ``page:line``."""
    commands = []
    for _, code, where in blocks("bash"):
        for command in code.splitlines():
            command = command.split("  #")[0].strip()
            if command:
                commands.append((command, where))
    return commands


def test_every_shell_command_of_the_manual_is_run_here_or_named_with_a_reason() -> None:
    for command, where in shell_commands():
        assert command.startswith("mmreplay ") or any(command.startswith(prefix) for prefix in NOT_RUN), (
            f"{where}: {command!r} is neither run by test_the_manual_cli_commands_run nor in NOT_RUN"
        )


def test_the_manual_cli_commands_run(in_tmp_dir: Path) -> None:
    """Every ``mmreplay ...`` line of the manual, optional ``[...]`` parts included, on real files made here."""
    from mmreplay import ReplayStore

    with ReplayStore.create("pong.mmr", frame_shape=(84, 84), capacity=1000) as store:
        for transition in pong_transitions(300, episode_steps=40):
            store.add(*transition)
    write_dopamine_checkpoints(Path("replay_logs"), [49, 50])
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    ran = 0
    for command, where in shell_commands():
        if not command.startswith("mmreplay "):
            continue
        words = [word for word in shlex.split(command.replace("[", "").replace("]", ""))]
        result = subprocess.run([sys.executable, "-m", "mmreplay", *words[1:]], capture_output=True, text=True,
                                env=env, timeout=300)
        assert result.returncode == 0, f"{where}: {command!r} exited {result.returncode}: {result.stderr}"
        ran += 1
    assert ran >= 5
