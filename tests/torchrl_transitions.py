"""Batches in TorchRL's collector layout whose frames encode their own trajectory and step, and the plain
model of what a storage must give back for them (tests/test_torchrl*.py).

A frame is ``(1, 2, 2)`` uint8: ``[trajectory % 251, step % 251, step // 251, 7]``, so every frame of a
run is distinct and a wrong frame names where it came from. An env's trajectory ends (terminated or
truncated, by a schedule the test chooses) and the next one starts at step 0 with a new trajectory id, as
TorchRL's collectors number them. Pixels are what ``CatFrames(stack_size, dim=-3)`` gives: the episode's
first frame repeated before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from tensordict import TensorDict


def frame(trajectory: int, step: int) -> np.ndarray:
    return np.array([trajectory % 251, step % 251, step // 251, 7], np.uint8).reshape(1, 2, 2)


def stack(trajectory: int, step: int, stack_size: int) -> np.ndarray:
    """The CatFrames stack at ``step`` of a trajectory: its frames ``step - stack_size + 1 .. step``, the
    first frame repeated before step 0."""
    return np.concatenate([frame(trajectory, max(0, s)) for s in range(step - stack_size + 1, step + 1)])


@dataclass
class EnvState:
    trajectory: int
    step: int = 0


@dataclass
class FakeCollector:
    """``envs`` envs stepped side by side; ``ends[i]`` (terminated, truncated) for the i-th transition an
    env makes, cycling. ``next_batch(steps)`` gives ``steps`` transitions of each env, env after env (what
    ``collector_batch.reshape(-1)`` gives), and appends the same rows to ``rows``: (trajectory, step,
    terminated, truncated) per transition, in order."""

    envs: int
    stack_size: int
    stacked: bool
    ends: list[tuple[bool, bool]]
    rows: list[tuple[int, int, bool, bool]] = field(default_factory=list)
    _envs: list[EnvState] = field(default_factory=list)
    _next_trajectory: int = 0
    _made: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        for _ in range(self.envs):
            self._envs.append(EnvState(self._new_trajectory()))
            self._made.append(0)

    def _new_trajectory(self) -> int:
        self._next_trajectory += 1
        return self._next_trajectory - 1

    def pixels(self, trajectory: int, step: int) -> np.ndarray:
        return stack(trajectory, step, self.stack_size) if self.stacked else frame(trajectory, step)

    def next_batch(self, steps: int) -> TensorDict:
        columns: dict[str, list[object]] = {name: [] for name in
                                            ("pixels", "next_pixels", "action", "reward", "terminated", "truncated", "traj")}
        for env, state in enumerate(self._envs):
            for _ in range(steps):
                terminated, truncated = self.ends[self._made[env] % len(self.ends)]
                self._made[env] += 1
                columns["pixels"].append(self.pixels(state.trajectory, state.step))
                columns["next_pixels"].append(self.pixels(state.trajectory, state.step + 1))
                columns["action"].append(state.step % 5)
                columns["reward"].append(float(state.step) / 4)
                columns["terminated"].append(terminated)
                columns["truncated"].append(truncated)
                columns["traj"].append(state.trajectory)
                self.rows.append((state.trajectory, state.step, terminated, truncated))
                if terminated or truncated:
                    state.trajectory, state.step = self._new_trajectory(), 0
                else:
                    state.step += 1
        return _tensordict(columns)


def _tensordict(columns: dict[str, list[object]]) -> TensorDict:
    count = len(columns["action"])
    terminated = torch.tensor(columns["terminated"], dtype=torch.bool).reshape(count, 1)
    truncated = torch.tensor(columns["truncated"], dtype=torch.bool).reshape(count, 1)
    return TensorDict(
        {
            "pixels": torch.from_numpy(np.stack(columns["pixels"])),  # type: ignore[arg-type]
            "action": torch.tensor(columns["action"], dtype=torch.int64),
            "next": {
                "pixels": torch.from_numpy(np.stack(columns["next_pixels"])),  # type: ignore[arg-type]
                "reward": torch.tensor(columns["reward"], dtype=torch.float32).reshape(count, 1),
                "terminated": terminated,
                "truncated": truncated,
                "done": terminated | truncated,
            },
            "collector": {"traj_ids": torch.tensor(columns["traj"], dtype=torch.int64)},
        },
        batch_size=[count],
    )


def expected(rows: list[tuple[int, int, bool, bool]], stack_size: int) -> dict[str, np.ndarray]:
    """What a storage with ``stack_size`` must read back for ``rows`` (stacks, whatever was written)."""
    return {
        "pixels": np.stack([stack(t, s, stack_size) for t, s, _, _ in rows]),
        "next_pixels": np.stack([stack(t, s + 1, stack_size) for t, s, _, _ in rows]),
        "action": np.array([s % 5 for _, s, _, _ in rows], np.int64),
        "reward": np.array([s / 4 for _, s, _, _ in rows], np.float32).reshape(-1, 1),
        "terminated": np.array([te for _, _, te, _ in rows]).reshape(-1, 1),
        "truncated": np.array([tr for _, _, _, tr in rows]).reshape(-1, 1),
        "traj": np.array([t for t, _, _, _ in rows], np.int64),
    }
