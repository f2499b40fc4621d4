"""How an ``MmreplayStorage`` finds its store: the path's mode (h5py's letters), a store reopened and
checked against the storage's arguments, or one created at the first write.

``"w-"`` refuses a path that exists: a training run never adopts a store it did not write (a rerun in
the same directory, another game's store). ``"w"`` replaces a store (and only a store) at the path, ``"a"``
goes on with one this storage class wrote (or creates one), ``"r"`` reads one.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from mmreplay import (
    PrioritizedSampler,
    ReplayStore,
    StoreExistsError,
    StoreNotFoundError,
)
from mmreplay.torchrl import persistence
from mmreplay.torchrl.layout import Key, TensorDictLayout

MODES = ("w-", "w", "a", "r")
# ReplayStore.create's frame encodings (the store checks them again when it creates the store).
FRAME_ENCODINGS = ("lz4", "lz4-reference")


@dataclass(frozen=True)
class StoreArguments:
    """What an ``MmreplayStorage`` was constructed with that decides its store (``None``: from the data)."""

    max_size: int
    num_envs: int
    pixels_key: Key
    stack_size: int | None
    frame_shape: tuple[int, ...] | None
    frame_encoding: str | None  # None: ReplayStore.create's default
    commit_interval_s: float | None


@dataclass(frozen=True)
class Opened:
    """A store in use, with its TensorDict layout, slot offset and saved lanes (None: none saved)."""

    store: ReplayStore
    layout: TensorDictLayout
    slot_offset: int
    lanes: dict[str, object] | None


def prepare(arguments: StoreArguments, path: Path, mode: str) -> Opened | None:
    """Apply ``mode`` to ``path`` at construction: the store to use, or None (created at the first write)."""
    exists = path.exists()
    if mode == "w-" and exists:
        raise StoreExistsError(
            f"MmreplayStorage(mode='w-') creates a new store, and {str(path)!r} already exists: give each run its "
            "own path, pass mode='a' to go on with a store this storage wrote, or mode='w' to replace it"
        )
    if mode == "w" and exists:
        try:
            ReplayStore.open(path, "r").close()
        except StoreNotFoundError:
            raise FileExistsError(
                f"MmreplayStorage(mode='w') replaces a store; {str(path)!r} exists and is not one: not removed"
            ) from None
        shutil.rmtree(path)
    if mode == "r" and not exists:
        raise StoreNotFoundError(f"MmreplayStorage(mode='r') reads a store; there is none at {str(path)!r}")
    if mode in ("a", "r") and exists:
        store = ReplayStore.open(path, "r+" if mode == "a" else "r", commit_interval_s=arguments.commit_interval_s)
        try:
            return _checked(arguments, store)
        except BaseException:
            store.close()
            raise
    return None


def _checked(arguments: StoreArguments, store: ReplayStore) -> Opened:
    """``store`` with the layout saved beside it, when this class wrote it with these arguments."""
    saved = persistence.load_layout(store.path)
    if saved is None:
        raise ValueError(
            f"the store at {str(store.path)!r} was not written by MmreplayStorage (it has no "
            f"{persistence.LAYOUT_NAME}); read it with mmreplay.ReplayStore.open"
        )
    layout, offset = saved
    wanted: dict[str, tuple[object, object]] = {
        "max_size": (arguments.max_size, store.capacity),
        "num_envs": (arguments.num_envs, store.num_envs),
        "pixels_key": (arguments.pixels_key, layout.pixels_key),
    }
    if arguments.stack_size is not None:
        wanted["stack_size"] = (arguments.stack_size, layout.stack_size)
    if arguments.frame_shape is not None:
        wanted["frame_shape"] = (arguments.frame_shape, layout.frame_shape)
    differ = [f"{name}={given!r} (the store's: {found!r})" for name, (given, found) in wanted.items() if given != found]
    if differ:
        raise ValueError(f"the store at {str(store.path)!r} has another layout: {', '.join(differ)}")
    return Opened(store, layout, offset, persistence.load_lanes(store.path))


def create(arguments: StoreArguments, path: Path, layout: TensorDictLayout, priorities: PrioritizedSampler | None) -> Opened:
    """A new store at ``path`` for ``layout`` (the first write's), its layout saved beside it."""
    action_shape, action_dtype = layout.action_spec()
    store = ReplayStore.create(
        path,
        frame_shape=layout.frame_shape,
        capacity=arguments.max_size,
        stack_size=layout.stack_size,
        num_envs=arguments.num_envs,
        action_shape=action_shape,
        action_dtype=action_dtype,
        sampler=None if priorities is None else persistence.same_kind_of_sampler(priorities),
        frame_encoding=arguments.frame_encoding,
        fields=layout.store_fields() or None,
        frame_dtype=layout.frame_dtype,
        commit_interval_s=arguments.commit_interval_s,
    )
    persistence.save_layout(path, layout, 0)
    return Opened(store, layout, 0, None)
