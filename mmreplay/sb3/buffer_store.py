"""The store behind an SB3 buffer: made, reopened, replaced or refused when the buffer is built
(``if_exists``), SB3's positions and envs mapped onto the store's steps, the writer lock handed between
the buffers of one process, and what a pickle keeps.

A *position* is SB3's row index (``0 <= pos < buffer_size``): one row holds one transition of each of
``n_envs`` envs. Row r's transition of env e is the store's step ``r * n_envs + e``; once the buffer is
full, position p holds the newest row r with ``r % buffer_size == p``, as SB3's ring does.
"""

from __future__ import annotations

import shutil
import sys
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mmreplay.batch import Batch
from mmreplay.errors import StoreExistsError, StoreLockedError
from mmreplay.store import ReplayStore

IF_EXISTS = ("error", "reopen", "replace")


class BufferStore:
    """The store at ``path`` as SB3's ring of ``buffer_size`` rows of ``n_envs`` transitions.

    ``transitions`` counts what the buffer holds (the store may hold more: a pickle older than the store
    adopts them when it next takes the writer lock). Steps whose episode the caller ended by writing
    SB3's ``dones`` are kept here (``cut_steps``), not in the store's rows.
    """

    def __init__(self, path: Path, store: ReplayStore, *, buffer_size: int, n_envs: int, owner: str) -> None:
        self.path = path
        self.buffer_size = buffer_size
        self.n_envs = n_envs
        self.owner = owner  # the buffer's class name, for messages
        self.cut_steps: set[int] = set()
        self.transitions = 0
        self._last_read: tuple[bytes, int, ReplayStore, Batch] | None = None
        self._attach(store)
        self.count(store.transitions_added)

    # -- the store and its writer lock -------------------------------------------------------------

    def _attach(self, store: ReplayStore) -> None:
        """Use ``store``; it is closed (which commits) with this object, also when it is dropped
        unclosed or the interpreter exits."""
        self.store = store
        self._finalizer = weakref.finalize(self, store.close)
        if store.mode == "r+":
            _WRITERS[str(self.path)] = self

    def _yield_writer(self) -> None:
        """Commit and hand the writer lock to another buffer of this process: this one reads the store
        from now on (and takes the lock back at its next add)."""
        self._finalizer()
        self._attach(ReplayStore.open(self.path, "r"))

    def writer(self) -> ReplayStore:
        """The store, opened for appending if this buffer has so far only read it."""
        if self.store.mode == "r+":
            return self.store
        holder = _WRITERS.get(str(self.path))
        if holder is not None and holder is not self and not holder.store.closed and holder.store.mode == "r+":
            holder._yield_writer()
        try:
            writer = ReplayStore.open(self.path, "r+")
        except StoreLockedError as error:
            raise StoreLockedError(f"this {self.owner} cannot add: {error}") from None
        try:
            transitions = reconcile(writer, self.transitions)
        except BaseException:
            writer.close()
            raise
        self._finalizer()
        self._attach(writer)
        self.count(transitions)
        return writer

    def recreate(self, create: Callable[[Path], ReplayStore]) -> ReplayStore:
        """Delete the (empty) store and make it again with ``create``: an inferred split of the
        observations that the first add refuted."""
        self._finalizer()
        shutil.rmtree(self.path)
        self._attach(create(self.path))
        return self.store

    def flush(self) -> None:
        self.store.flush()

    def close(self) -> None:
        self._finalizer()

    # -- counting ----------------------------------------------------------------------------------

    def count(self, transitions: int) -> None:
        """Set the transitions the buffer holds (whole rows of ``n_envs``)."""
        if transitions % self.n_envs:
            raise ValueError(
                f"the store at {str(self.path)!r} has {transitions} transitions, not whole rows of "
                f"n_envs={self.n_envs}: it was not written by an {self.owner} with {self.n_envs} envs"
            )
        self.transitions = transitions

    @property
    def full(self) -> bool:
        return self.transitions // self.n_envs >= self.buffer_size

    @property
    def pos(self) -> int:
        return (self.transitions // self.n_envs) % self.buffer_size

    # -- positions and steps -----------------------------------------------------------------------

    def steps_at(self, positions: npt.ArrayLike, env_indices: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The store's steps of the transitions at these positions and envs (a position that holds no
        transition yet maps to a step the buffer does not hold: see ``held``)."""
        position_array = np.asarray(positions, dtype=np.int64)
        env_array = np.asarray(env_indices, dtype=np.int64)
        rows_added = self.transitions // self.n_envs
        if rows_added >= self.buffer_size:
            # The newest ``buffer_size`` rows; row r sits at position r % buffer_size.
            rows = rows_added - self.buffer_size + (position_array - rows_added) % self.buffer_size
        else:
            rows = position_array
        return rows * self.n_envs + env_array

    def held(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which steps the buffer holds: added, and not yet overwritten in SB3's ring."""
        oldest = max(0, self.transitions - self.buffer_size * self.n_envs)
        return (steps >= oldest) & (steps < self.transitions)

    def read(self, steps: npt.NDArray[np.int64]) -> Batch:
        """The transitions at ``steps``; a step the buffer does not hold reads as zeros (no reward, not
        ended), as SB3's zero-filled arrays read at positions no add wrote."""
        held = self.held(steps)
        if held.all():
            return self.store.read(steps)
        return _zero_filled(self.store, steps, held)

    def read_shared(self, steps: npt.NDArray[np.int64]) -> Batch:
        """``read``, reusing the last batch when the same steps are read again before an add: SB3's
        ``HerReplayBuffer`` reads one draw's transitions through every array it indexes (each key of
        ``observations`` and ``next_observations``, ``actions``, ``dones``, ...). The batch is shared:
        callers copy what they hand out."""
        key = steps.tobytes()
        last = self._last_read
        if last is not None and last[0] == key and last[1] == self.transitions and last[2] is self.store:
            return last[3]
        batch = self.read(steps)
        self._last_read = (key, self.transitions, self.store, batch)
        return batch

    # -- episodes ended by a write to SB3's dones ----------------------------------------------------

    def ended(self, batch: Batch, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Whether each transition ended its episode: terminated, truncated or cut by the caller."""
        return batch.terminated | batch.truncated | self.cut(steps)

    def cut(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        if not self.cut_steps:
            return np.zeros(len(steps), dtype=bool)
        return np.isin(steps, np.fromiter(self.cut_steps, np.int64))

    def end_episodes_at(self, positions: npt.NDArray[np.int64], envs: npt.NDArray[np.int64]) -> None:
        """Mark these transitions as ending their episodes (what ``dones[pos] = True`` does)."""
        steps = self.steps_at(positions, envs)
        oldest = self.transitions - len(self.store)
        self.cut_steps = {step for step in self.cut_steps if step >= oldest} | set(steps.tolist())

    # -- pickling ----------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """The absolute path and the counts; pickling commits the store."""
        if not self.store.closed and self.store.mode == "r+":
            self.store.flush()
        return {key: value for key, value in self.__dict__.items() if key not in ("store", "_finalizer", "_last_read")} | {
            "path": str(self.path)
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Reopen the store (for appending, or read-only while another writer holds it); a store that
        has gone on since is adopted with a warning (see ``reconcile``)."""
        self.__dict__.update(state)
        self.path = Path(state["path"])
        self._last_read = None
        store = open_existing(self.path)
        try:
            transitions = reconcile(store, self.transitions)
        except BaseException:
            store.close()
            raise
        self._attach(store)
        self.count(transitions)


# The buffer store of this process that holds each store's writer lock, by the store's absolute path.
# Buffers over one store in one process (a deepcopy, a loaded pickle or checkpoint beside the model that
# saved it) hand the lock to the one that adds: SB3 keeps replaced buffers alive (its callbacks hold the
# locals of its rollout loop), so waiting for the holder to be collected would fail such flows.
_WRITERS: weakref.WeakValueDictionary[str, BufferStore] = weakref.WeakValueDictionary()


def open_existing(path: Path) -> ReplayStore:
    """The store at ``path``, for appending, or read-only while another writer holds it (this process's
    or another's): the buffer reads the last commit until its first add takes the lock."""
    try:
        return ReplayStore.open(path, "r+")
    except StoreLockedError:
        return ReplayStore.open(path, "r")


def open_or_create(
    path: Path, create: Callable[[Path], ReplayStore], *, if_exists: str, owner: str
) -> tuple[ReplayStore, bool]:
    """The store a new buffer uses, and whether it existed: created when ``path`` is free; else, by
    ``if_exists``, refused (``"error"``: a training run never adopts a store it did not write),
    reopened (``"reopen"``) or deleted and created again (``"replace"``). SB3's ``load`` (``DQN.load``
    building the buffer from the ``replay_buffer_kwargs`` saved in the model's zip) always reopens: the
    store is the model's own."""
    if if_exists not in IF_EXISTS:
        raise ValueError(f"if_exists must be one of {', '.join(map(repr, IF_EXISTS))}; got {if_exists!r}")
    if not (path.exists() or path.is_symlink()):
        return create(path), False
    if if_exists == "reopen" or built_by_sb3_load():
        return open_existing(path), True
    found = _describe(path)
    if if_exists == "replace":
        _delete_store(path, found)
        return create(path), False
    raise StoreExistsError(
        f"{owner}: {found}, left by an earlier run; a new buffer does not adopt a store it did not write "
        f"(a re-run would train on the earlier run's data). Choose one: a new path for each run (such as "
        f"one named after the run), if_exists='replace' to delete it and start empty, or "
        f"if_exists='reopen' to go on with its transitions (DQN.load, load_replay_buffer and pickles "
        f"reopen their own store by themselves)"
    )


def _describe(path: Path) -> str:
    """What is at ``path``, for the message that refuses or replaces it."""
    try:
        with ReplayStore.open(path, "r") as store:
            return (
                f"{str(path)!r} holds a store of {store.transitions_added:,} transitions added "
                f"({len(store):,} kept) with frames {store.frame_shape} {store.frame_dtype}, stack_size="
                f"{store.stack_size}, num_envs={store.num_envs}, capacity={store.capacity:,}"
            )
    except (OSError, ValueError) as error:
        raise FileExistsError(
            f"{str(path)!r} exists and is not a store this buffer can use ({type(error).__name__}: {error}): "
            "pass another path"
        ) from None


def _delete_store(path: Path, found: str) -> None:
    """Delete the store at ``path`` for ``if_exists='replace'``, unless a writer holds it."""
    try:
        ReplayStore.open(path, "r+").close()
    except StoreLockedError as error:
        raise StoreLockedError(
            f"if_exists='replace' cannot delete the store: {error}; close the buffer that writes it "
            "(buffer.close()) or pass another path"
        ) from None
    warnings.warn(f"if_exists='replace': deleting {found}", UserWarning, stacklevel=4)
    shutil.rmtree(path)


def built_by_sb3_load() -> bool:
    """Whether SB3's ``BaseAlgorithm.load`` is building this buffer (``DQN.load`` makes the model's
    buffer again from the ``replay_buffer_kwargs`` saved in its zip: the store is the model's own)."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    load = BaseAlgorithm.load.__func__.__code__  # type: ignore[attr-defined]
    frame = sys._getframe(1)
    for _ in range(64):  # the load is a few calls up; a deeper stack is no load's
        if frame.f_code is load:
            return True
        if frame.f_back is None:
            return False
        frame = frame.f_back
    return False


def reconcile(store: ReplayStore, pickled: int) -> int:
    """The transitions a buffer that holds ``pickled`` transitions (as pickled, or before it takes the
    writer lock) holds over ``store``'s commit: the store's, when it went on; never fewer."""
    committed = store.transitions_added
    if committed < pickled:
        raise ValueError(
            f"the store at {str(store.path)!r} has committed {committed} transitions, fewer than the "
            f"{pickled} this buffer was pickled with: it is not the store the buffer was saved from "
            "(or it lost commits), so the buffer's positions would point at other transitions"
        )
    if committed > pickled:
        warnings.warn(
            f"the store at {str(store.path)!r} has {committed} transitions, {committed - pickled} more than "
            "this buffer holds (it was pickled before they were added, or another buffer of the store "
            f"added them since): the buffer continues from the store's {committed}",
            UserWarning,
            stacklevel=4,
        )
    return committed


def _zero_filled(store: ReplayStore, steps: npt.NDArray[np.int64], held: npt.NDArray[np.bool_]) -> Batch:
    """``store.read(steps)`` with zeros (and no ended flag) for the steps not ``held``."""
    size = len(steps)
    obs = np.zeros((size, store.stack_size, *store.frame_shape), dtype=store.frame_dtype)
    next_obs = np.zeros_like(obs)
    action = np.zeros((size, *store.action_shape), dtype=store.action_dtype)
    reward = np.zeros(size, dtype=np.float32)
    terminated, truncated = np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)
    fields = {name: np.zeros((size, *shape), dtype=dtype) for name, (shape, dtype) in store.fields.items()}
    rows = np.flatnonzero(held)
    if len(rows):
        batch = store.read(steps[rows])
        obs[rows], next_obs[rows], action[rows], reward[rows] = batch.obs, batch.next_obs, batch.action, batch.reward
        terminated[rows], truncated[rows] = batch.terminated, batch.truncated
        for name, array in fields.items():
            array[rows] = batch.fields[name]
    ones = np.ones(size, dtype=np.float32)
    return Batch(
        obs=obs, action=action, reward=reward, next_obs=next_obs, terminated=terminated, truncated=truncated,
        index=steps.copy(), env_index=steps % max(store.num_envs, 1), weight=ones, discount=ones.copy(),
        user_fields=fields,
    )
