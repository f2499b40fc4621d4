"""``MmreplayStorage``: a TorchRL storage whose transitions live in a ``ReplayStore``, each frame kept once,
lz4-compressed, on disk, and stacks rebuilt when read.

    from torchrl.data import TensorDictReplayBuffer
    from mmreplay.torchrl import MmreplayStorage
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(1_000_000, "/data/pong.mmr", stack_size=4), batch_size=32)
    rb.extend(collector_batch.reshape(-1))    # pixels, action, ("next", "pixels"), ("next", "reward"), ...
    sample = rb.sample()                       # a TensorDict of the same keys

Vocabulary bridge: TorchRL's *index* into a storage is mmreplay's *slot*, ``(step + slot_offset) %
capacity`` (see ``persistence``); ``max_size`` is the store's capacity.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from multiprocessing.context import get_spawning_popen
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from tensordict import TensorDictBase
from torchrl.data.replay_buffers.storages import Storage, TensorStorage

from mmreplay import PrioritizedSampler, ReadOnlyStoreError, ReplayStore
from mmreplay.torchrl import opening, persistence
from mmreplay.torchrl.lanes import Lanes, add_rows
from mmreplay.torchrl.layout import INDEX_KEY, Key, Rows, TensorDictLayout, key_text
from mmreplay.torchrl.tensordicts import leaves, rows_of, slots_of, to_tensordict
from mmreplay.validation import parse_positive_int

NestedKey = str | tuple[str, ...]


class MmreplayStorage(TensorStorage):
    """A TorchRL storage of transitions in the store at ``path`` (a directory the store owns).

    Writes take TorchRL's collector layout: the observation under ``pixels_key`` and ``("next",
    pixels_key)``, ``"action"``, ``("next", "reward")``, ``("next", "terminated")``, ``("next",
    "truncated")``; every other tensor (``("next", "done")``, ``("collector", "traj_ids")``, a policy's
    outputs) is kept as a field. The first write fixes the keys, shapes and dtypes (as a lazy TorchRL
    storage does); reads return a TensorDict of the same keys. TorchRL's *index* into the storage is
    mmreplay's *slot*.

    Rows are written in order at the writer's cursor, which must be the next slots (TorchRL's
    ``RoundRobinWriter``); writing at given indices (``rb[i] = ...``) is refused: a stored transition
    never changes. ``"index"`` is TorchRL's bookkeeping, not kept: reads give each transition's slot
    under it once a write carried one. Samplers: TorchRL's ``RandomSampler`` and ``SliceSampler``, its
    ``PrioritizedSampler`` where TorchRL's C++ extension loads, ``MmreplaySliceSampler`` (which reads the
    store's episodes rather than every stored transition at each batch) or ``MmreplayPrioritizedSampler``
    (the store's own sum tree).

    Args:
        max_size: the store's capacity in transitions, at least ``num_envs``.
        path: the store's directory, made absolute now.
        pixels_key: the observation's key.
        stack_size: frames per observation that reads return (None: each pixels entry is one frame).
            With ``n``, pixels of ``(n * C, H, W)`` (``CatFrames(n, dim=-3)``) are stacks of ``(C, H, W)``
            frames, each stored once; single frames (``(C, H, W)`` or ``(H, W)``) may be written too, and
            reads rebuild their stacks, which never reach across an episode start (its first frame
            repeated before it, as ``CatFrames`` pads).
        frame_shape: one frame's shape, for pixels that could be split either way.
        num_envs: trajectories written side by side (a collector over n envs gives n): each trajectory
            in progress, named by ``traj_key``, writes to an env of its own so its frames are shared
            across writes.
        traj_key: the key of each transition's trajectory id.
        mode: h5py's letters. ``"w-"`` creates the store at the first write and refuses a path that
            exists (a run never adopts a store it did not write); ``"a"`` reopens a store this class
            wrote, or creates one (a new buffer over it goes on at ``writer_state()``; each trajectory
            goes on in its lane, but one whose env has no transition left in the store starts a new
            episode there); ``"w"`` replaces a store at ``path``; ``"r"`` reads one (a dataset).
        frame_encoding: ``"lz4"`` or ``"lz4-reference"``, as ``ReplayStore.create`` takes it (None: its
            default).
        commit_interval_s: the store commits by itself this often, in seconds (None: only at
            ``flush``, ``close`` and exit).

    Raises:
        TypeError: a number is not an int, or a key is not a str or a tuple of str.
        ValueError: a number is below 1, ``max_size`` is below ``num_envs``, ``mode`` or
            ``frame_encoding`` is not one of its choices, or the store at ``path`` (``"a"``, ``"r"``) was
            not written by this class or has another layout (the message names the fields).
        StoreExistsError: ``mode="w-"`` and ``path`` exists.
        FileExistsError: ``mode="w"`` and ``path`` holds something that is not a store.
        StoreNotFoundError: ``mode="r"`` and there is no store at ``path``.
    """

    def __init__(
        self,
        max_size: int,
        path: str | os.PathLike[str],
        *,
        pixels_key: NestedKey = "pixels",
        stack_size: int | None = None,
        frame_shape: Sequence[int] | None = None,
        num_envs: int = 1,
        traj_key: NestedKey = ("collector", "traj_ids"),
        mode: str = "w-",
        frame_encoding: str | None = None,
        commit_interval_s: float | None = 5.0,
    ) -> None:
        max_size = parse_positive_int(max_size, "max_size")
        self._num_envs = parse_positive_int(num_envs, "num_envs")
        if max_size < self._num_envs:
            raise ValueError(f"max_size must be >= num_envs ({self._num_envs}); got {max_size}")
        if mode not in opening.MODES:
            raise ValueError(f"mode must be one of {opening.MODES}; got {mode!r}")
        if frame_encoding is not None and frame_encoding not in opening.FRAME_ENCODINGS:
            raise ValueError(f"frame_encoding must be None or one of {opening.FRAME_ENCODINGS}; got {frame_encoding!r}")
        self._stack_size = None if stack_size is None else parse_positive_int(stack_size, "stack_size")
        self._frame_shape = None if frame_shape is None else tuple(parse_positive_int(n, "frame_shape") for n in frame_shape)
        self._pixels_key = _parse_key(pixels_key, "pixels_key")
        self._traj_key = _parse_key(traj_key, "traj_key")
        super().__init__(storage=None, max_size=max_size, device="cpu")
        self._capacity = max_size
        self.path = Path(os.path.abspath(os.fspath(path)))
        self.mode = mode
        self._arguments = opening.StoreArguments(
            max_size=max_size, num_envs=self._num_envs, pixels_key=self._pixels_key, stack_size=self._stack_size,
            frame_shape=self._frame_shape, frame_encoding=frame_encoding, commit_interval_s=commit_interval_s,
        )
        self._store: ReplayStore | None = None
        self._layout: TensorDictLayout | None = None
        self._slot_offset = 0
        self._lanes = Lanes(self._num_envs)
        self._priorities: PrioritizedSampler | None = None
        self._checked: tuple[object, TensorDictLayout, Rows, npt.NDArray[Any] | None] | None = None
        self._trajectories: tuple[int, torch.Tensor] | None = None
        self.shared_init = False  # TorchRL's lazy storages' flag, read when a storage goes to another process
        self._open_at_construction()

    # -- the store -----------------------------------------------------------------------------------

    def _open_at_construction(self) -> None:
        opened = opening.prepare(self._arguments, self.path, self.mode)
        if opened is not None:
            self._use(opened)

    def _use(self, opened: opening.Opened) -> None:
        self._store, self._layout, self._slot_offset = opened.store, opened.layout, opened.slot_offset
        if opened.lanes is not None:
            self._lanes.load(opened.lanes)
        self.initialized = True

    def _writer(self) -> ReplayStore:
        """The store, opened for appending if this object has so far only read it (an unpickled copy)."""
        store = self._require_store("write")
        if store.mode == "r+":
            return store
        if self.mode == "r":
            raise ReadOnlyStoreError(f"MmreplayStorage(mode='r') of {str(self.path)!r} is read-only: cannot write")
        writer = ReplayStore.open(self.path, "r+", commit_interval_s=self._arguments.commit_interval_s)
        store.close()
        self._store = writer
        return writer

    def _require_store(self, operation: str) -> ReplayStore:
        if self._store is None:
            raise RuntimeError(f"cannot {operation}: MmreplayStorage at {str(self.path)!r} holds no transitions yet")
        return self._store

    def use_priorities(self, sampler: PrioritizedSampler) -> None:
        """Create the store with mmreplay's ``sampler``; ``MmreplayPrioritizedSampler`` calls this.

        Args:
            sampler: the prioritized sampler the store is created with at the first write.

        Raises:
            ValueError: the store exists and was created with another kind of sampler.
        """
        if self._store is not None and type(self._store.sampler) is not type(sampler):
            raise ValueError(
                f"the store at {str(self.path)!r} was created with {self._store.sampler!r}; "
                f"prioritized sampling needs a store created with {sampler!r}: use a new path"
            )
        self._priorities = sampler

    @property
    def store(self) -> ReplayStore:
        """The ``ReplayStore`` behind this storage.

        Returns:
            The open store.

        Raises:
            RuntimeError: before the first write (the store is created then).
        """
        return self._require_store("give its store")

    def flush(self) -> None:
        """Commit what was written (the store also commits by itself every ``commit_interval_s``)."""
        if self._store is not None and self._store.mode == "r+":
            self._store.flush()

    def close(self) -> None:
        """Commit and close the store; its directory stays (``mode='a'`` or ``'r'`` opens it again)."""
        if self._store is not None:
            self._store.close()

    # -- writing -------------------------------------------------------------------------------------

    def _max_size_along_dim0(self, *, single_data: object = None, batched_data: object = None) -> int:
        """TorchRL's writers ask this before they move their cursor: the write is checked here, all of it,
        so that a refused write leaves the writer and the store as they were."""
        data = batched_data if batched_data is not None else single_data
        if data is not None and (self._checked is None or self._checked[0] is not data):
            self._check_write(data)
        return int(self.max_size)

    def _check_write(self, data: object) -> None:
        arrays = leaves(rows_of(data))
        arrays.pop(INDEX_KEY, None)  # TorchRL's slots, not kept (see TensorDictLayout.index)
        layout = self._layout
        if layout is None:
            layout = TensorDictLayout.infer(
                arrays, pixels_key=self._pixels_key, stack_size=self._stack_size, frame_shape=self._frame_shape
            )
        rows = layout.parse(arrays)
        trajectories = arrays.get(self._traj_key)
        if trajectories is not None and (trajectories.dtype.kind not in "iu" or trajectories[0].size != 1):
            raise TypeError(f"{key_text(self._traj_key)} must hold one integer per transition; got "
                            f"{trajectories.dtype}{list(trajectories.shape[1:])}")
        if self._store is None:
            self._use(opening.create(self._arguments, self.path, layout, self._priorities))
        self._checked = (data, layout, rows, trajectories)

    def set(self, cursor: object, data: object, *, set_cursor: bool = True) -> None:
        """Write the transitions of ``data`` at ``cursor``, which must be the next slots.

        The whole write is checked before anything is written.

        Args:
            cursor: the slots TorchRL's writer chose, which must be the next ones.
            data: a TensorDict of transitions in the collector layout.
            set_cursor: TorchRL's flag; False (writing at given indices) is refused.

        Raises:
            RuntimeError: ``set_cursor`` is False: a stored transition never changes.
            ValueError: ``cursor`` is not the next slots (a new buffer over a reopened store must load
                ``writer_state()``), or ``data`` does not fit the layout the first write fixed.
            TypeError: the trajectory ids are not one integer per transition, or a value has the wrong
                dtype.
            ReadOnlyStoreError: the storage was opened with ``mode="r"``.
        """
        if not set_cursor:
            raise RuntimeError(
                "MmreplayStorage keeps each transition as it was written: writing at given indices "
                "(rb[index] = data, set_cursor=False) is refused; extend the buffer with new transitions"
            )
        if self._checked is None or self._checked[0] is not data:
            self._check_write(data)
        assert self._checked is not None
        _, _, rows, trajectories = self._checked
        self._checked = None
        store = self._writer()
        expected = self._next_slots(len(rows))
        given = np.asarray(cursor.detach().cpu().numpy() if isinstance(cursor, torch.Tensor) else cursor).reshape(-1)
        if not np.array_equal(given, expected):
            raise ValueError(
                f"MmreplayStorage appends: a write of {len(rows)} transition(s) goes to slots "
                f"{_span(expected)}; got {_span(given)}: a new buffer over a store that holds transitions "
                "(mode='a') goes on where it stopped: rb.writer.load_state_dict(storage.writer_state())"
            )
        holders = self._lanes.holders
        lanes = self._lanes.assign(trajectories, rows.ends)
        add_rows(store, rows, lanes)
        if self._layout is not None and not self._layout.index and _carries_index(data):
            self._layout = self._layout.with_index()  # a TensorDictRoundRobinWriter's: reads give the slots
            persistence.save_layout(self.path, self._layout, self._slot_offset)
        if self._lanes.holders != holders:
            persistence.save_lanes(self.path, self._lanes.state())
        self._set_last_cursor(cursor)
        self._bump_mutation_revision()

    def writer_state(self) -> dict[str, int]:
        """A ``RoundRobinWriter`` state at this storage's next slot, for ``rb.writer.load_state_dict(...)``.

        What a new buffer over a reopened store needs to append where the store stopped.

        Returns:
            ``{"_cursor": next slot, "_write_count": transitions added}``.
        """
        added = 0 if self._store is None else self._store.transitions_added
        return {"_cursor": int(self._next_slots(1)[0]), "_write_count": added}

    def _next_slots(self, count: int) -> npt.NDArray[np.int64]:
        added = 0 if self._store is None else self._store.transitions_added
        return (np.arange(count, dtype=np.int64) + added + self._slot_offset) % self._capacity

    # -- reading -------------------------------------------------------------------------------------

    def get(self, index: object) -> TensorDictBase:
        """The transitions at ``index``.

        Args:
            index: slots: an int, a slice, a sequence or tensor of ints.

        Returns:
            A TensorDict of the written keys, shaped as ``index`` (one transition for an int).

        Raises:
            RuntimeError: nothing was written yet.
        """
        store = self._require_store("read")
        assert self._layout is not None
        slots, shape = slots_of(index, len(self))
        batch = store.read(self._steps_of(slots))
        data = to_tensordict(batch, self._layout, slots)
        if shape == ():
            return data[0]
        return data if shape == (len(slots),) else data.reshape(shape)

    def _steps_of(self, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        stored = self.store.stored_steps
        return stored.start + (slots - self._slot_offset - stored.start) % self._capacity

    def slots_of_steps(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The slots (TorchRL's indices) of stored steps.

        Args:
            steps: the store's steps.

        Returns:
            int64 slots, shaped as ``steps``.
        """
        return (np.asarray(steps, np.int64) + self._slot_offset) % self._capacity

    def steps_of_slots(self, slots: object) -> npt.NDArray[np.int64]:
        """The store's steps at TorchRL's indices, as ``update_priorities`` and ``read`` take them.

        Args:
            slots: TorchRL's indices: an int, a slice, a sequence or tensor of ints.

        Returns:
            int64 steps.

        Raises:
            RuntimeError: nothing was written yet.
        """
        array, _ = slots_of(slots, len(self))
        return self._steps_of(array)

    def __len__(self) -> int:
        return 0 if self._store is None else len(self._store)

    @property
    def _total_shape(self) -> torch.Size:
        return torch.Size([self.max_size])

    @property
    def shape(self) -> torch.Size:
        """The storage's shape, as TorchRL's storages give it.

        Returns:
            ``torch.Size([len(self)])``.
        """
        return torch.Size([len(self)])

    def flatten(self) -> MmreplayStorage:
        """This storage, already flat (one dimension of transitions).

        Returns:
            ``self``.
        """
        return self

    def trajectory_ids(self) -> torch.Tensor:
        """The episode id of the transition at each slot ``[0, len)``, for slice samplers.

        The store's episodes: a new one at every reset and wherever a trajectory was cut. Kept until the
        next write.

        Returns:
            (len,) int64 episode ids.

        Raises:
            RuntimeError: nothing was written yet.
        """
        store = self._require_store("list trajectories")
        added = store.transitions_added
        if self._trajectories is None or self._trajectories[0] != added:
            ids = np.empty(len(store), np.int64)
            for episode in store.episodes():
                ids[self.slots_of_steps(episode.steps)] = episode.id
            self._trajectories = (added, torch.from_numpy(ids))
        return self._trajectories[1]

    # -- starting over and saving --------------------------------------------------------------------

    def _empty(self) -> None:
        """Remove every transition (``rb.empty()``): the store is cleared (atomically), its layout kept."""
        # clear() keeps counting steps (an index is never reused): the offset puts the next step at slot 0.
        self._slot_offset = 0
        if self._store is not None:
            self._writer().clear()
            assert self._layout is not None
            self._slot_offset = -self._store.transitions_added % self._capacity
            persistence.save_layout(self.path, self._layout, self._slot_offset)
        self._lanes.clear()
        if self._store is not None:
            persistence.save_lanes(self.path, self._lanes.state())
        self._bump_mutation_revision()

    def state_dict(self) -> dict[str, Any]:
        """What names this storage's contents, not the transitions themselves (``dumps`` writes those).

        Commits the store first.

        Returns:
            The store's path and transition count, the slot offset and the lanes.
        """
        self.flush()
        return {
            "path": str(self.path),
            "transitions_added": 0 if self._store is None else self._store.transitions_added,
            "slot_offset": self._slot_offset,
            "lanes": self._lanes.state(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Hold the contents ``state_dict`` names: this store's own, or a copy of another store's.

        Args:
            state_dict: what ``state_dict()`` returned. This store's own must not have gone on since;
                another store must still hold exactly what it held then.

        Raises:
            ValueError: ``state_dict`` is not one ``state_dict()`` returned, the store it names has gone
                on since, was not written by this class, samples otherwise, or has another ``max_size``.
        """
        if not {"path", "transitions_added", "slot_offset", "lanes"} <= set(state_dict):
            raise ValueError(
                "load_state_dict takes what MmreplayStorage.state_dict() returns (a store's path, transition count, "
                f"slot offset and lanes); got keys {sorted(state_dict)}"
            )
        path, added = Path(state_dict["path"]), int(state_dict["transitions_added"])
        if path == self.path:
            found = 0 if self._store is None else self._store.transitions_added
            if found != added:
                raise ValueError(_moved_on(path, found, added))
            self._slot_offset = int(state_dict["slot_offset"])
        else:
            with ReplayStore.open(path, "r") as source:
                if source.transitions_added != added:
                    raise ValueError(_moved_on(path, source.transitions_added, added))
                self._take_copy_of(source)
        self._lanes.load(state_dict["lanes"])
        persistence.save_lanes(self.path, self._lanes.state())
        self._bump_mutation_revision()

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Write a copy of the store into the directory ``path``; ``loads`` reads it back into any MmreplayStorage.

        Args:
            path: a directory, created if absent: the copy goes in ``store/`` with its layout and offset,
                the lanes in ``lanes.json``.

        Raises:
            RuntimeError: nothing was written yet.
        """
        target = Path(path)
        target.mkdir(parents=True, exist_ok=True)
        store = self._require_store("dumps")
        assert self._layout is not None
        self.flush()
        persistence.dump_copy(store, self._layout, self._slot_offset, target, self._lanes.state())

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Hold a copy of the store that ``dumps`` wrote into ``path``; this storage's own is replaced.

        Args:
            path: the directory ``dumps`` wrote.

        Raises:
            ValueError: the copy was not written by this class, samples otherwise, or has another
                ``max_size``.
        """
        lanes = persistence.read_dump(Path(path))
        with ReplayStore.open(Path(path) / persistence.DUMPED_STORE, "r") as source:
            self._take_copy_of(source)
        self._lanes.load(lanes)
        persistence.save_lanes(self.path, self._lanes.state())
        self._bump_mutation_revision()

    def _take_copy_of(self, source: ReplayStore) -> None:
        """Replace this storage's transitions by a copy of ``source``'s (a store MmreplayStorage wrote),
        each at the slot it has there."""
        saved = persistence.load_layout(source.path)
        if saved is None:
            raise ValueError(f"the store at {str(source.path)!r} was not written by MmreplayStorage")
        layout, offset = saved
        if self._priorities is not None and not isinstance(source.sampler, PrioritizedSampler):
            raise ValueError(
                f"the store at {str(source.path)!r} samples uniformly; this storage's buffer samples by priority"
            )
        if source.capacity != self.max_size:
            raise ValueError(f"the store at {str(source.path)!r} holds max_size={source.capacity}; this storage {self.max_size}")
        built = persistence.build_copy(source, self.path, layout, (source.stored_steps.start + offset) % self._capacity,
                                       before_swap=self._release_store)
        self._slot_offset = (source.stored_steps.start + offset) % self._capacity
        self._store = ReplayStore.open(built, "r+", commit_interval_s=self._arguments.commit_interval_s)
        self._layout = layout
        self.initialized = True

    def _release_store(self) -> Callable[[], None]:
        """Commit and close this storage's store before it is swapped out; returns what reopens it (in
        the mode it had) where the swap then fails."""
        store = self._store
        if store is None:
            return lambda: None
        mode = store.mode
        store.close()

        def reopen() -> None:
            self._store = ReplayStore.open(self.path, mode, commit_interval_s=self._arguments.commit_interval_s)

        return reopen

    def __getstate__(self) -> dict[str, Any]:
        """Pickling commits the store and keeps its path: an unpickled storage reads it, and takes the
        writer's lock at its first write (``StoreLockedError`` while another writer holds it)."""
        if get_spawning_popen() is not None and self._store is None:
            raise RuntimeError(
                f"cannot send MmreplayStorage {str(self.path)!r} to another process: it has not been initialized "
                "yet (its store is created by its first write, in one process: write to it first)"
            )
        self.flush()
        # Storage's own state, not TensorStorage's: what processes share is the store on disk (each opens
        # it), not tensors in shared memory.
        state: dict[str, Any] = Storage.__getstate__(self)
        state.pop("_len_value", None)
        state["_store"] = None
        state["_checked"] = None
        state["_trajectories"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if self.path.exists() and self._layout is not None:
            self._store = ReplayStore.open(self.path, "r")

    def __repr__(self) -> str:
        if self._store is None:
            return f"MmreplayStorage({str(self.path)!r}, mode={self.mode!r}, max_size={self.max_size:,}, <no store yet>)"
        assert self._layout is not None
        return (
            f"MmreplayStorage({str(self.path)!r}, mode={self.mode!r}, transitions={len(self):,}/{self.max_size:,}, "
            f"pixels={key_text(self._layout.pixels_key)} {list(self._layout.pixels_shape)} "
            f"({self._layout.stack_size} x {list(self._layout.frame_shape)} {self._layout.frame_dtype}), "
            f"num_envs={self._num_envs})"
        )


def _carries_index(data: object) -> bool:
    keys = getattr(data, "keys", None)
    return keys is not None and "index" in keys()


def _parse_key(key: object, name: str) -> Key:
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and key and all(isinstance(part, str) for part in key):
        return key
    raise TypeError(f"{name} must be a str or a tuple of str (a TensorDict key); got {key!r}")


def _span(slots: npt.NDArray[np.integer]) -> str:
    values = slots.tolist()
    return str(values) if len(values) <= 6 else f"[{values[0]}, {values[1]}, ..., {values[-1]}] ({len(values)})"


def _moved_on(path: Path, found: int, saved: int) -> str:
    return (
        f"the store at {str(path)!r} holds {found:,} transitions added, and the state_dict was taken at {saved:,}: "
        "a state_dict names a store, it does not hold its data; use rb.dumps(path) and rb.loads(path) for a "
        "checkpoint that stands alone"
    )

