"""The stores behind a Tianshou buffer: one store per sub-buffer, each a ring of the sub-buffer's size.

Tianshou's ``VectorReplayBuffer`` of ``buffer_num`` sub-buffers evicts per env: sub-buffer ``i`` is a ring
of ``size = ceil(total_size / buffer_num)`` slots that only env ``i`` writes. A store evicts first in,
first out; one store per sub-buffer, created with ``capacity=size`` and fed exactly one transition per
slot write, therefore drops a transition at the very add that overwrites its slot, and keeps every
transition a slot still names, however unevenly the envs add. The stores live in the buffer's directory
as ``env-000``, ``env-001``, ... and are created at the first add, when the observations' shape and dtype
are known.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mmreplay import ReplayStore, StoreExistsError
from mmreplay.tianshou.transitions import StoreRows

IF_EXISTS = ("error", "replace")


@dataclass(frozen=True)
class FrameLayout:
    """What every sub-buffer's store holds, fixed by the first add: an obs of ``obs_shape`` (one frame, or
    ``stack_size`` frames of ``frame_shape``) and ``frame_dtype``, an action of ``action_shape`` and
    ``action_dtype``. A scalar obs (``obs_shape == ()``) is kept as a frame of one element."""

    obs_shape: tuple[int, ...]
    frame_shape: tuple[int, ...]
    frame_dtype: str
    stack_size: int
    action_shape: tuple[int, ...]
    action_dtype: str


def store_name(env: int) -> str:
    return f"env-{env:03d}"


def prepare_directory(path: Path, if_exists: str) -> None:
    """Apply ``if_exists`` to the buffer's directory when the buffer is built: ``"error"`` refuses one that
    holds anything, ``"replace"`` removes the stores an earlier buffer left there (and nothing else)."""
    if if_exists not in IF_EXISTS:
        raise ValueError(f"if_exists must be one of {IF_EXISTS}; got {if_exists!r}")
    if not path.exists():
        return
    if not path.is_dir():
        raise FileExistsError(f"path {str(path)!r} exists and is not a directory: a buffer's stores need one")
    entries = sorted(entry.name for entry in path.iterdir())
    if not entries:
        return
    if if_exists == "error":
        raise StoreExistsError(
            f"path {str(path)!r} already holds {entries[:3]}: give each buffer its own directory, or pass "
            "if_exists='replace' to remove the stores an earlier buffer left there"
        )
    strangers = [name for name in entries if not (name.startswith("env-") and (path / name).is_dir())]
    if strangers:
        raise FileExistsError(
            f"if_exists='replace' removes a buffer's stores only; {str(path)!r} also holds {strangers[:3]}: not removed"
        )
    for name in entries:
        shutil.rmtree(path / name)


class FrameStores:
    """The sub-buffers' stores under ``path``: ``add`` writes one transition per given env and returns
    its step in that env's store; ``read`` rebuilds obs and obs_next by (env, step).

    ``stack_size`` frames make one obs when the env hands over frame stacks (gymnasium's
    ``FrameStackObservation``): each is then written once. ``None`` stores are made at the first add.
    """

    def __init__(
        self,
        path: Path,
        *,
        buffer_num: int,
        size: int,
        stack_size: int,
        frame_encoding: str | None,
        commit_interval_s: float | None,
    ) -> None:
        self.path = path
        self.buffer_num = buffer_num
        self.size = size
        self.stack_size = stack_size
        self.frame_encoding = frame_encoding
        self.commit_interval_s = commit_interval_s
        self.layout: FrameLayout | None = None
        self.stores: list[ReplayStore | None] = [None] * buffer_num

    # -- writing -----------------------------------------------------------------------------------

    def add(self, rows: StoreRows) -> npt.NDArray[np.int64]:
        """Write each row's transition into its env's store (rows checked by ``StoreRows``, all of them
        before this first write); the steps they got, one per row."""
        if self.layout is None:
            self.layout = rows.layout
        steps = np.empty(len(rows.envs), np.int64)
        for row, env in enumerate(rows.envs):
            store = self.writer(int(env))
            steps[row] = store.transitions_added
            store.add(
                rows.obs[row], rows.act[row], rows.rew[row], rows.obs_next[row],
                rows.terminated[row], rows.truncated[row],
            )
        return steps

    def writer(self, env: int) -> ReplayStore:
        """Env ``env``'s store, open for appending (created at its first add; reopened ``"r+"`` after a
        load, which opened it read-only)."""
        store = self.stores[env]
        if store is not None and store.mode == "r+":
            return store
        layout = self.layout
        assert layout is not None
        target = self.path / store_name(env)
        if store is None:
            self.path.mkdir(parents=True, exist_ok=True)
            store = ReplayStore.create(
                target, frame_shape=layout.frame_shape, capacity=self.size, stack_size=layout.stack_size,
                action_shape=layout.action_shape, action_dtype=layout.action_dtype, frame_dtype=layout.frame_dtype,
                frame_encoding=self.frame_encoding, commit_interval_s=self.commit_interval_s,
            )
        else:
            store.close()
            store = ReplayStore.open(target, "r+", commit_interval_s=self.commit_interval_s)
        self.stores[env] = store
        return store

    def clear(self) -> None:
        """Empty every store (its steps keep counting, so no step is ever reused)."""
        for env, store in enumerate(self.stores):
            if store is not None and len(store):
                self.writer(env).clear()

    # -- reading -----------------------------------------------------------------------------------

    def read(
        self, envs: npt.NDArray[np.int64], steps: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """obs and obs_next of the transitions (``envs[i]``, ``steps[i]``), each of shape
        ``(len(steps), *obs_shape)``; a step of -1 (a slot never written) reads as zeros."""
        layout = self.layout
        if layout is None:
            raise IndexError("the buffer holds no transition yet: nothing to read")
        shape = (len(steps), *layout.obs_shape)
        obs = np.zeros(shape, layout.frame_dtype)
        obs_next = np.zeros(shape, layout.frame_dtype)
        written = steps >= 0
        for env in np.unique(envs[written]):
            rows = np.flatnonzero(written & (envs == env))
            store = self.stores[int(env)]
            assert store is not None
            batch = store.read(steps[rows])
            obs[rows] = batch.obs.reshape(len(rows), *layout.obs_shape)
            obs_next[rows] = batch.next_obs.reshape(len(rows), *layout.obs_shape)
        return obs, obs_next

    # -- committing, closing, saving ---------------------------------------------------------------

    def flush(self) -> None:
        for store in self.stores:
            if store is not None and store.mode == "r+":
                store.flush()

    def close(self) -> None:
        for store in self.stores:
            if store is not None:
                store.close()

    def transitions_added(self) -> list[int]:
        """Each env's ``transitions_added`` (0 for a store not yet made)."""
        return [0 if store is None else store.transitions_added for store in self.stores]

    def state(self) -> dict[str, Any]:
        """What ``reopen`` needs (the stores flushed first): their directory, layout and how many
        transitions each had, to refuse a store that changed since."""
        self.flush()
        return {
            "path": str(self.path),
            "buffer_num": self.buffer_num,
            "size": self.size,
            "stack_size": self.stack_size,
            "frame_encoding": self.frame_encoding,
            "commit_interval_s": self.commit_interval_s,
            "layout": None if self.layout is None else self.layout.__dict__.copy(),
            "transitions_added": self.transitions_added(),
        }

    @classmethod
    def reopen(cls, state: dict[str, Any]) -> FrameStores:
        """The stores ``state`` names, opened read-only (an add reopens its env's store for appending),
        each checked to hold what it held when ``state`` was taken."""
        stores = cls(
            Path(state["path"]), buffer_num=int(state["buffer_num"]), size=int(state["size"]),
            stack_size=int(state["stack_size"]), frame_encoding=state["frame_encoding"],
            commit_interval_s=state["commit_interval_s"],
        )
        layout = state["layout"]
        if layout is None:
            return stores
        stores.layout = FrameLayout(**{key: tuple(value) if key.endswith("shape") else value for key, value in layout.items()})
        for env, saved in enumerate(state["transitions_added"]):
            if saved == 0:
                continue
            store = ReplayStore.open(stores.path / store_name(env), "r")
            stores.stores[env] = store
            if store.transitions_added != saved:
                stores.close()
                raise ValueError(
                    f"the store {str(store.path)!r} holds {store.transitions_added} transitions; the buffer was "
                    f"saved when it held {saved}: it changed since (a later run wrote to it), so its slots "
                    "would name other transitions"
                )
        return stores
