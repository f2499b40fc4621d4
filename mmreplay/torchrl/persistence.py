"""What the TorchRL storage keeps beside a store, and copies of a store for ``dumps``, ``loads`` and
``load_state_dict``.

``torchrl.json`` (inside the store's directory, replaced atomically) holds the TensorDict layout and the
*slot offset*: TorchRL addresses a transition by its slot, ``(step + slot_offset) % capacity``. A store
this storage creates has offset 0; a copy numbers its steps from 0 again, and its offset keeps every
transition at the slot it had (so a RoundRobinWriter's cursor and a sampler's indices stay valid).

A copy is built beside what it replaces and exchanged with it only once complete (``build_copy``,
``dump_copy``): a load that fails leaves the buffer's own store as it was. It goes through the public
store API only: each stored transition is read (``iterate``) and added to
a new store with the same layout, its env and episode kept (an episode whose start was evicted is added
as a fragment), frames compressed once again. Priorities (a store created with a ``PrioritizedSampler``)
are carried over to within float32 rounding: they are read back from the sum tree's leaves.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mmreplay import CorruptStoreError, PrioritizedSampler, ReplayStore, Sampler, UniformSampler
from mmreplay.disk.atomic_builds import SiblingBuild
from mmreplay.torchrl.layout import TensorDictLayout

LAYOUT_NAME = "torchrl.json"
# Which trajectory holds each lane (``mmreplay.torchrl.lanes``), saved whenever that changes: a store
# reopened with mode="a" goes on with each trajectory in its lane.
LANES_NAME = "torchrl-lanes.json"
# What ``MmreplayStorage.dumps`` writes into its directory: a copy of the store, and the lanes.
DUMPED_STORE = "store"
DUMP_NAME = "storage.json"
# Transitions read per step of a copy: one decoded batch of Atari stacks is ~7 MB.
COPY_BATCH = 256
# The most a side file may hold (a layout is a few KB; lanes ~100 bytes a trajectory).
MAX_SIDE_FILE_BYTES = 64 << 20


def write_side_file(path: Path, text: str, *, sync: bool) -> None:
    """Write ``text`` to ``path`` (a temporary name), never through a link or into a FIFO that a store
    arriving as a tarball could hold there (as the store's own files are opened)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    with os.fdopen(descriptor, "w") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise CorruptStoreError(f"{path} is not a regular file")
        file.write(text)
        if sync:
            file.flush()
            os.fsync(file.fileno())


def read_side_file(path: Path) -> str:
    """The text of ``path``: a regular file (not a link, a FIFO or a device) of at most
    ``MAX_SIDE_FILE_BYTES``, else ``CorruptStoreError`` naming it."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if os.path.islink(path):
            raise CorruptStoreError(f"{path} is a symbolic link, not a regular file") from None
        raise error
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise CorruptStoreError(f"{path} is not a regular file")
        raw = file.read(MAX_SIDE_FILE_BYTES + 1)
    if len(raw) > MAX_SIDE_FILE_BYTES:
        raise CorruptStoreError(f"{path} is larger than {MAX_SIDE_FILE_BYTES:,} bytes")
    return raw.decode()


def save_layout(directory: Path, layout: TensorDictLayout, slot_offset: int) -> None:
    """Write ``torchrl.json`` into the store's directory: a temporary file, then an atomic replace."""
    saved = json.loads(layout.to_json())
    saved["slot_offset"] = slot_offset
    temporary = directory / (LAYOUT_NAME + ".tmp")
    write_side_file(temporary, json.dumps(saved, indent=1), sync=True)
    os.replace(temporary, directory / LAYOUT_NAME)


def load_layout(directory: Path) -> tuple[TensorDictLayout, int] | None:
    """The layout and slot offset saved in the store at ``directory``, or None when it has none."""
    path = directory / LAYOUT_NAME
    if not os.path.lexists(path):
        return None
    text = read_side_file(path)
    layout = TensorDictLayout.from_json(text, str(path))
    return layout, int(json.loads(text).get("slot_offset", 0))


def save_lanes(directory: Path, lanes: dict[str, object]) -> None:
    """Write the lanes beside the store (a temporary file, then an atomic replace; not synced: lanes out
    of date after a crash only start new episodes where trajectories resume)."""
    temporary = directory / (LANES_NAME + ".tmp")
    write_side_file(temporary, json.dumps(lanes), sync=False)
    os.replace(temporary, directory / LANES_NAME)


def load_lanes(directory: Path) -> dict[str, object] | None:
    path = directory / LANES_NAME
    if not os.path.lexists(path):
        return None
    lanes: dict[str, object] = json.loads(read_side_file(path))
    return lanes


def same_kind_of_sampler(sampler: Sampler) -> Sampler:
    """A new sampler configured as ``sampler`` (a store's sampler belongs to that store)."""
    if isinstance(sampler, PrioritizedSampler):
        return PrioritizedSampler(alpha=sampler.alpha, epsilon=sampler.epsilon)
    return UniformSampler()


def create_like(source: ReplayStore, path: Path, *, commit_interval_s: float | None) -> ReplayStore:
    """An empty store at ``path`` with ``source``'s layout (frames, stack, envs, actions, fields, sampler)."""
    return ReplayStore.create(
        path,
        frame_shape=source.frame_shape,
        capacity=source.capacity,
        stack_size=source.stack_size,
        num_envs=source.num_envs,
        action_shape=source.action_shape,
        action_dtype=source.action_dtype,
        sampler=same_kind_of_sampler(source.sampler),
        frame_encoding=source.frame_encoding,
        reference_scheme=source.reference_scheme,
        fields={name: (shape, dtype) for name, (shape, dtype) in source.fields.items()},
        stack_padding=source.stack_padding,
        frame_dtype=source.frame_dtype,
        commit_interval_s=commit_interval_s,
    )


def copy_transitions(source: ReplayStore, target: ReplayStore) -> None:
    """Add every transition stored in ``source`` to ``target`` (empty, with the same layout), in step
    order, then its priorities; commits ``target``."""
    fragments = {episode.first_step for episode in source.episodes() if not episode.complete}
    num_envs = source.num_envs
    mask = np.zeros(num_envs, np.bool_)
    for batch in source.iterate(COPY_BATCH):
        buffers = _env_buffers(batch, num_envs)
        for row in range(len(batch)):
            env = int(batch.env_index[row])
            fields: dict[str, npt.ArrayLike] | None = {name: array[row] for name, array in batch.fields.items()} or None
            fragment = int(batch.index[row]) in fragments
            if num_envs == 1:
                target.add(batch.obs[row], batch.action[row], batch.reward[row], batch.next_obs[row],
                           batch.terminated[row], batch.truncated[row], fields=fields, fragment=fragment)
                continue
            for name, buffer in buffers.items():
                buffer[env] = getattr(batch, name)[row]
            env_fields: dict[str, npt.ArrayLike] | None = None if fields is None else {
                name: _in_env(np.asarray(value), env, num_envs) for name, value in fields.items()}
            mask[:] = False
            mask[env] = True
            target.add(buffers["obs"], buffers["action"], buffers["reward"], buffers["next_obs"],
                       buffers["terminated"], buffers["truncated"], env_mask=mask, fields=env_fields, fragment=fragment)
    _copy_priorities(source, target)
    target.flush()


def _env_buffers(batch: Any, num_envs: int) -> dict[str, np.ndarray]:
    """One array per argument of ``add`` with an env axis, for adds that record one env."""
    names = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
    return {name: np.zeros((num_envs, *getattr(batch, name).shape[1:]), getattr(batch, name).dtype) for name in names}


def _in_env(value: np.ndarray, env: int, num_envs: int) -> np.ndarray:
    array = np.zeros((num_envs, *value.shape), value.dtype)
    array[env] = value
    return array


def _copy_priorities(source: ReplayStore, target: ReplayStore) -> None:
    """The priority p of each stored transition, from its leaf (p + epsilon)^alpha; with alpha = 0 every
    leaf is 1 whatever p was, and the copy keeps its new transitions' priority."""
    sampler, copy = source.sampler, target.sampler
    if not isinstance(sampler, PrioritizedSampler) or not isinstance(copy, PrioritizedSampler) or not len(source):
        return
    copy.max_priority = sampler.max_priority
    if sampler.alpha == 0:
        return
    steps = np.arange(source.stored_steps.start, source.stored_steps.stop, dtype=np.int64)
    _, minimum = sampler.mass
    if not minimum > 0:  # a leaf of 0 (epsilon=0, priority 0) leaves no ratio to read the others by
        return
    # weights(beta=-1) is leaf / minimum, as float32: the priorities come back within float32 rounding.
    leaves = sampler.weights(steps, beta=-1.0).astype(np.float64) * minimum
    priorities = np.maximum(leaves ** (1.0 / sampler.alpha) - sampler.epsilon, 0.0)
    target.update_priorities(np.arange(len(steps), dtype=np.int64) + target.stored_steps.start, priorities)


def dump_copy(store: ReplayStore, layout: TensorDictLayout, slot_offset: int, target: Path, lanes: dict[str, object]) -> None:
    """Write a copy of ``store`` to ``target/store`` (built beside it, then exchanged with the previous
    dump in one step: a crash leaves the previous dump or the new one) and the lanes to
    ``target/storage.json``."""
    final = Path(os.path.realpath(target / DUMPED_STORE))
    with SiblingBuild(final, "exporting", "a dump", replace=True) as build:
        building = build.directory / DUMPED_STORE
        with create_like(store, building, commit_interval_s=None) as copy:
            copy_transitions(store, copy)
            save_layout(building, layout, (store.stored_steps.start + slot_offset) % store.capacity)
        build.commit(building)
    temporary = target / (DUMP_NAME + ".tmp")
    write_side_file(temporary, json.dumps({"lanes": lanes}), sync=False)
    os.replace(temporary, target / DUMP_NAME)


def build_copy(source: ReplayStore, path: Path, layout: TensorDictLayout, slot_offset: int, *,
               before_swap: Callable[[], Callable[[], None]]) -> Path:
    """Replace the store at ``path`` (if any) by a copy of ``source`` with ``layout`` and ``slot_offset``
    saved beside it, only once the copy is complete.

    The copy is built in a hidden directory beside ``path`` (``disk.atomic_builds``) and exchanged with
    the store there in one step: a failure or a kill before leaves the old store as it was (and the
    build directory goes, now or with the next build), one after leaves the complete copy.

    Args:
        source: The store to copy (read only).
        path: Where the copy goes (a link is followed: the copy replaces the store it points to).
        layout: The TensorDict layout saved beside the copy.
        slot_offset: The copy's slot offset.
        before_swap: Called once the copy is complete, just before the exchange (the caller closes its
            store there); it returns what to call where the exchange then fails (reopen it).

    Returns:
        The path the copy is at now (``path`` with links resolved).

    Raises:
        CorruptStoreError: A row or frame of ``source`` fails its checksum (nothing is replaced).
    """
    target = Path(os.path.realpath(path))
    with SiblingBuild(target, "loading", "a store", replace=True) as build:
        built = build.directory / "store"
        with create_like(source, built, commit_interval_s=None) as copy:
            copy_transitions(source, copy)
        save_layout(built, layout, slot_offset)
        undo = before_swap()
        try:
            build.commit(built)
        except BaseException:
            undo()
            raise
    return target


def read_dump(target: Path) -> dict[str, object]:
    """The lanes ``dump_copy`` saved in ``target`` (``FileNotFoundError`` naming it when it holds no dump)."""
    path = target / DUMP_NAME
    if not path.is_file() or not (target / DUMPED_STORE).is_dir():
        raise FileNotFoundError(f"no MmreplayStorage dump in {str(target)!r} (expected {DUMP_NAME} and {DUMPED_STORE}/)")
    lanes: dict[str, object] = json.loads(read_side_file(path))["lanes"]
    return lanes
