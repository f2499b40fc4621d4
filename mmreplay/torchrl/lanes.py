"""Which of the store's envs each trajectory of a TorchRL batch is written to.

TorchRL hands a storage flat batches: a collector over n envs gives each env's steps one after another,
and names each trajectory (``("collector", "traj_ids")``). The store keeps each env's episode going by
itself (an obs that continues the env's previous next_obs shares its frames; any other starts a new
episode, so stacks never cross episodes), so each trajectory in progress gets one of the store's envs, a
*lane*, for as long as it goes on. A trajectory that ends frees its lane; when every lane is held, a new
trajectory takes the lane used longest ago (that lane's trajectory, if it comes back, starts a new
episode: its stacks restart there, as at a reset). Without trajectory ids every row goes to lane 0.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mmreplay import ReplayStore
from mmreplay.torchrl.layout import Rows


class Lanes:
    """The trajectory that holds each of ``count`` lanes, and when each was last used."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._holder: list[int | None] = [None] * count
        self._used = [0] * count
        self._clock = 0

    @property
    def holders(self) -> tuple[int | None, ...]:
        """The trajectory that holds each lane (None: free)."""
        return tuple(self._holder)

    def assign(self, trajectories: npt.NDArray[np.integer] | None, ends: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
        """The lane of each row of a batch, in order: ``trajectories`` holds each row's trajectory id (or is
        None), ``ends`` whether the row ends its trajectory. One step per run of equal ids, not per row."""
        lanes = np.zeros(len(ends), np.int64)
        if trajectories is None or self.count == 1 or not len(ends):
            return lanes
        ids = trajectories.reshape(len(ends))
        starts = np.concatenate([[0], np.flatnonzero(ids[1:] != ids[:-1]) + 1]).tolist()
        stops = starts[1:] + [len(ids)]
        for start, stop in zip(starts, stops):
            trajectory = int(ids[start])
            lane = self._lane_of(trajectory)
            lanes[start:stop] = lane
            self._clock += 1
            self._used[lane] = self._clock
            if ends[stop - 1]:
                self._holder[lane] = None
        return lanes

    def _lane_of(self, trajectory: int) -> int:
        if trajectory in self._holder:
            return self._holder.index(trajectory)
        free = [lane for lane, holder in enumerate(self._holder) if holder is None]
        # A free lane used longest ago first (its env's episode has ended), else the held one used longest ago.
        candidates = free or list(range(self.count))
        lane = min(candidates, key=lambda candidate: self._used[candidate])
        self._holder[lane] = trajectory
        return lane

    def state(self) -> dict[str, object]:
        return {"holder": list(self._holder), "used": list(self._used), "clock": self._clock}

    def load(self, state: dict[str, object]) -> None:
        """Take the lanes of ``state()`` (of a storage with as many lanes)."""
        holder, used = state["holder"], state["used"]
        if not (isinstance(holder, list) and isinstance(used, list) and len(holder) == len(used) == self.count):
            raise ValueError(f"the saved lanes are for another number of envs; expected {self.count}")
        self._holder = [None if h is None else int(h) for h in holder]
        self._used = [int(u) for u in used]
        self._clock = int(state["clock"])  # type: ignore[call-overload]

    def clear(self) -> None:
        self._holder = [None] * self.count
        self._used = [0] * self.count
        self._clock = 0


def add_rows(store: ReplayStore, rows: Rows, lanes: npt.NDArray[np.int64]) -> None:
    """Record ``rows`` in order, a row of lane e as the store's env e: one ``add`` per transition (the
    store records one step per env and call, and a batch holds consecutive steps of one env)."""
    fields: dict[str, npt.ArrayLike] = dict(rows.fields)
    if store.num_envs == 1:
        for i in range(len(rows)):
            store.add(rows.obs[i], rows.action[i], rows.reward[i], rows.next_obs[i], rows.terminated[i],
                      rows.truncated[i], fields={name: array[i] for name, array in rows.fields.items()} if fields else None)
        return
    envs = store.num_envs
    columns = (rows.obs, rows.action, rows.reward, rows.next_obs, rows.terminated, rows.truncated)
    # Arrays with an env axis, of which each add records one env (the others' entries are not read).
    buffers = [np.zeros((envs, *column.shape[1:]), column.dtype) for column in columns]
    field_buffers = {name: np.zeros((envs, *array.shape[1:]), array.dtype) for name, array in rows.fields.items()}
    given: dict[str, npt.ArrayLike] = dict(field_buffers)
    mask = np.zeros(envs, np.bool_)
    for i, lane in enumerate(lanes.tolist()):
        for buffer, column in zip(buffers, columns):
            buffer[lane] = column[i]
        for name, array in rows.fields.items():
            field_buffers[name][lane] = array[i]
        mask[:] = False
        mask[lane] = True
        store.add(*buffers, env_mask=mask, fields=given or None)
