"""Stores of format versions 4 and 5 with reference frames, which this mmreplay reads (pure Python,
read-only) and converts but no longer writes: kept as small files (``data/legacy-stores.tar.gz``,
written by mmreplay 907af33, the last to write them) with the adds that made them, which ``adds``
replays exactly, so a test can compare what a store reads back with what it was given.

Each store holds frames that move like a game's (a bright block sliding over a fixed background, a few
noisy pixels) across episodes that terminate, truncate, and end with a next_obs that is not the obs
shifted (stored whole); the capacity is below the adds, so the oldest episode lost its start.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ARCHIVE = Path(__file__).resolve().parent / "data" / "legacy-stores.tar.gz"
FRAME_SHAPE = (24, 32)
STACK_SIZE = 3
# name: (format version, envs, capacity, adds, seed)
STORES = {"v5-two-envs": (5, 2, 150, 240, 5), "v4-one-env": (4, 1, 80, 120, 4)}


def frame(rng: np.random.Generator, t: int, env: int) -> np.ndarray:
    """A frame of env at time t: a fixed background, a block at a position moving with t, a few noisy pixels."""
    image = np.full(FRAME_SHAPE, 40 + 30 * env, np.uint8)
    image[::6] = 90
    row, column = (t * 2 + 5 * env) % (FRAME_SHAPE[0] - 4), (t * 3) % (FRAME_SHAPE[1] - 6)
    image[row : row + 4, column : column + 6] = 200
    noise = rng.integers(0, image.size, 3)
    image.reshape(-1)[noise] = rng.integers(0, 256, 3, dtype=np.uint8)
    return image


def adds(name: str) -> Iterator[dict[str, Any]]:
    """The add calls (keyword arguments of ``ReplayStore.add``) that made store ``name``, in order."""
    _, envs, _, count, seed = STORES[name]
    rng = np.random.default_rng(seed)
    stacks = [None] * envs
    times = [0] * envs
    for i in range(count):
        env = i % envs
        if stacks[env] is None:
            first = frame(rng, times[env], env)
            stacks[env] = np.stack([first] * STACK_SIZE)
        obs = stacks[env]
        times[env] += 1
        newest = frame(rng, times[env], env)
        ended = rng.random() < 0.05
        cut = not ended and rng.random() < 0.03
        if (ended or cut) and rng.random() < 0.5:  # a next_obs that is not the obs shifted: stored whole
            next_obs = np.stack([frame(rng, times[env] + k, env) for k in range(STACK_SIZE)])
        else:
            next_obs = np.concatenate([obs[1:], newest[None]])
        yield {"env": env, "obs": obs, "action": int(rng.integers(0, 6)), "reward": float(rng.integers(-1, 2)),
               "next_obs": next_obs, "terminated": bool(ended), "truncated": bool(cut)}
        stacks[env] = None if ended or cut else next_obs


def vector_add(store: Any, call: dict[str, Any]) -> None:
    """One of ``adds``' calls on a store of ``num_envs`` envs (the other envs masked out)."""
    envs, env = store.num_envs, call["env"]
    if envs == 1:
        store.add(call["obs"], call["action"], call["reward"], call["next_obs"], call["terminated"], call["truncated"])
        return
    obs = np.zeros((envs, STACK_SIZE, *FRAME_SHAPE), np.uint8)
    next_obs = np.zeros_like(obs)
    obs[env], next_obs[env] = call["obs"], call["next_obs"]
    mask = np.arange(envs) == env
    store.add(obs, np.full(envs, call["action"]), np.full(envs, call["reward"], np.float32), next_obs,
              np.full(envs, call["terminated"]), np.full(envs, call["truncated"]), env_mask=mask)


def extract(directory: Path) -> dict[str, Path]:
    """The archive's stores, extracted into ``directory``: name -> path."""
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(directory, filter="data")
    return {name: directory / f"{name}.mmr" for name in STORES}
