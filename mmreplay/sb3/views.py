"""SB3's public buffer arrays (``observations``, ``next_observations``, ``actions``, ``rewards``,
``dones``, ``timeouts``) as lazy views of the store: SB3 users, SB3's tests and SB3's own
``HerReplayBuffer`` index them as numpy arrays shaped ``(buffer_size, n_envs, *item_shape)``, and each
index reads just the selected transitions from the store.

The views read what SB3's arrays would hold: the transition at each position and env, and zeros at
positions no add wrote. They are read-only (a transition is written by ``add``), except the two flags
SB3 itself writes: ``dones[pos] = True`` ends the newest episodes (SB3's ``learn`` with
``optimize_memory_usage``, ``HerReplayBuffer.truncate_last_trajectory``), and ``timeouts[pos] = True``
lets them bootstrap (the same truncation by the caller). See ``DoneFlags``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from mmreplay.batch import Batch
from mmreplay.sb3.buffer_store import BufferStore

# What a view reads from a batch of transitions: (batch, steps) -> (len, *item_shape).
Take = Callable[[Batch, npt.NDArray[np.int64]], npt.NDArray[Any]]


class StoredArray:
    """A read-only array of ``(buffer_size, n_envs, *item_shape)`` read from the store on indexing.

    ``view[key]`` returns what ``numpy`` would return for the same key on SB3's array (ints, slices,
    integer and bool arrays over the first two axes, then slices over the item's); ``numpy.asarray(view)``
    reads every position. Any other key (an Ellipsis, a new axis) reads every position, then indexes.
    """

    def __init__(self, rows: BufferStore, *, name: str, item_shape: tuple[int, ...], dtype: npt.DTypeLike, take: Take) -> None:
        self._rows = rows
        self.name = name
        self.dtype = np.dtype(dtype)
        self.shape = (rows.buffer_size, rows.n_envs, *item_shape)
        self.ndim = len(self.shape)
        self._take = take

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self) -> Iterator[npt.NDArray[Any]]:
        for position in range(self.shape[0]):
            yield self[position]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.dtype}{list(self.shape)}: a view of {str(self._rows.path)!r}>"

    def __getitem__(self, key: Any) -> Any:
        selected = self._select(key)
        if selected is None:
            return np.asarray(self)[key]
        flat, rest = selected
        values = self._read(flat)
        if rest:
            values = values[(slice(None),) * flat.ndim + rest]
        return values[()] if values.ndim == 0 else values  # a numpy scalar, as numpy gives one

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> npt.NDArray[Any]:
        values = self._read(np.arange(self.shape[0] * self.shape[1]).reshape(self.shape[:2]))
        return values if dtype is None else values.astype(dtype)

    def __setitem__(self, key: Any, value: npt.ArrayLike) -> None:
        raise TypeError(
            f"{self.name} is a read-only view of the store at {str(self._rows.path)!r}: transitions are "
            "written by add() (and kept once, on disk); read it by indexing or numpy.asarray"
        )

    def _select(self, key: Any) -> tuple[npt.NDArray[np.int64], tuple[Any, ...]] | None:
        """The flat (position * n_envs + env) indices ``key`` selects over the first two axes, shaped
        as numpy shapes that selection, and the rest of the key (slices of the item); None for a key
        this fast path does not take."""
        parts = key if isinstance(key, tuple) else (key,)
        lead, rest = parts[:2], parts[2:]
        if any(part is Ellipsis or part is None for part in parts) or not all(isinstance(part, slice) for part in rest):
            return None
        rows, envs = self.shape[:2]
        if len(lead) == 2 and _is_integer_index(lead[0]) and _is_integer_index(lead[1]):
            # SB3's own reads (``array[batch_inds, env_indices]``): no index grid of the whole buffer.
            positions, env_indices = np.broadcast_arrays(np.asarray(lead[0], dtype=np.int64), np.asarray(lead[1], dtype=np.int64))
            for values, size, axis in ((positions, rows, 0), (env_indices, envs, 1)):
                outside = (values < -size) | (values >= size)
                if outside.any():
                    raise IndexError(f"index {int(values[outside].flat[0])} is out of bounds for axis {axis} with size {size}")
            return (positions % rows) * envs + env_indices % envs, tuple(rest)
        grid = np.arange(rows * envs, dtype=np.int64).reshape(rows, envs)
        return np.asarray(grid[lead]), tuple(rest)

    def _read(self, flat: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        positions, envs = np.divmod(flat.reshape(-1), self.shape[1])
        steps = self._rows.steps_at(positions, envs)
        values = self._take(self._rows.read_shared(steps), steps)
        # A copy: the batch read is shared with the next view that reads the same steps.
        return np.array(values, dtype=self.dtype).reshape(flat.shape + self.shape[2:])

    def _selected_steps(self, key: Any) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The flat indices and steps a flag write selects (over positions and envs only)."""
        selected = self._select(key)
        if selected is None or selected[1]:
            raise IndexError(f"{self.name}: a write takes positions and envs (ints, slices or arrays); got {key!r}")
        flat = selected[0]
        positions, envs = np.divmod(flat.reshape(-1), self.shape[1])
        return flat, self._rows.steps_at(positions, envs)


class DoneFlags(StoredArray):
    """SB3's ``dones``: (buffer_size, n_envs) float32, 1.0 where the transition ended its episode
    (terminated, truncated, or ended by a write here).

    Assigning a true value ends those transitions' episodes: SB3's ``learn`` does ``dones[pos] = True``
    for the newest row (its memory-saving buffer has no next observation for it), and
    ``HerReplayBuffer.truncate_last_trajectory`` for each unfinished episode. The buffer keeps the true
    next observation, so it records a truncation by the caller: samples bootstrap from it under
    ``handle_timeout_termination=True`` and count it as done otherwise; n-step windows stop there. A
    flag the store holds cannot be cleared, and a position that holds no transition cannot be set.
    """

    def __init__(self, rows: BufferStore) -> None:
        super().__init__(rows, name="dones", item_shape=(), dtype=np.float32, take=rows.ended)

    def __setitem__(self, key: Any, value: npt.ArrayLike) -> None:
        flat, steps = self._selected_steps(key)
        after = np.broadcast_to(np.asarray(value).astype(bool), flat.shape).reshape(-1)
        before = self._rows.ended(self._rows.read(steps), steps)
        _check_flag_write(self.name, self._rows, flat, steps, before, after, cleared="not done")
        _cut(self._rows, flat.reshape(-1), after & ~before)


class TimeoutFlags(StoredArray):
    """SB3's ``timeouts``: (buffer_size, n_envs) float32, 1.0 where a time limit (or the caller, through
    ``dones``) truncated the transition's episode, recorded only with ``handle_timeout_termination``
    (zeros otherwise, as SB3's). SB3 samples ``dones * (1 - timeouts)``: terminated only.

    Assigning a true value truncates those transitions' episodes as ``dones`` does (``HerReplayBuffer``
    sets both for an unfinished episode); a terminated transition cannot be made a timeout, and a
    flag the store holds cannot be cleared.
    """

    def __init__(self, rows: BufferStore, *, handle_timeout_termination: bool) -> None:
        def take(batch: Batch, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
            if not handle_timeout_termination:
                return np.zeros(len(steps), dtype=bool)
            return batch.truncated | rows.cut(steps)

        super().__init__(rows, name="timeouts", item_shape=(), dtype=np.float32, take=take)
        self._handle_timeout_termination = handle_timeout_termination

    def __setitem__(self, key: Any, value: npt.ArrayLike) -> None:
        flat, steps = self._selected_steps(key)
        after = np.broadcast_to(np.asarray(value).astype(bool), flat.shape).reshape(-1)
        batch = self._rows.read(steps)
        before = self._take(batch, steps)
        if after.any() and not self._handle_timeout_termination:
            raise ValueError("timeouts: recorded only with handle_timeout_termination=True (SB3's too)")
        terminated = batch.terminated & after & ~before
        if terminated.any():
            raise ValueError(f"timeouts: step {int(steps[terminated][0])} terminated; it cannot be made a timeout")
        _check_flag_write(self.name, self._rows, flat, steps, before, after, cleared="not a timeout")
        _cut(self._rows, flat.reshape(-1), after & ~before)


def _is_integer_index(part: Any) -> bool:
    if isinstance(part, (int, np.integer)) and not isinstance(part, bool):
        return True
    return isinstance(part, np.ndarray) and part.dtype.kind in "iu"


def action_view(rows: BufferStore, *, action_dim: int, dtype: npt.DTypeLike) -> StoredArray:
    """SB3's ``actions``, (buffer_size, n_envs, action_dim) in the stored action dtype."""
    return StoredArray(rows, name="actions", item_shape=(action_dim,), dtype=dtype, take=lambda batch, steps: batch.action)


def reward_view(rows: BufferStore) -> StoredArray:
    """SB3's ``rewards``, (buffer_size, n_envs) float32."""
    return StoredArray(rows, name="rewards", item_shape=(), dtype=np.float32, take=lambda batch, steps: batch.reward)


def _check_flag_write(
    name: str,
    rows: BufferStore,
    flat: npt.NDArray[np.int64],
    steps: npt.NDArray[np.int64],
    before: npt.NDArray[np.bool_],
    after: npt.NDArray[np.bool_],
    *,
    cleared: str,
) -> None:
    """Refuse a flag write that sets a position holding no transition, or clears a flag."""
    empty = ~rows.held(steps)
    if (after & empty).any():
        position = int(flat.reshape(-1)[after & empty][0]) // rows.n_envs
        raise ValueError(f"{name}: position {position} holds no transition yet (pos={rows.pos})")
    if (before & ~after).any():
        raise ValueError(f"{name}: a transition that ended its episode in the store cannot be marked as {cleared}")


def _cut(rows: BufferStore, flat: npt.NDArray[np.int64], new: npt.NDArray[np.bool_]) -> None:
    if new.any():
        positions, envs = np.divmod(flat[new], rows.n_envs)
        rows.end_episodes_at(positions, envs)
