"""Making a new store's files: ``create``'s arguments checked into a layout, the empty store built in a
hidden sibling directory and renamed into place (a crash never leaves a half-made store at the path);
``clear`` builds its empty store the same way."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

from mmreplay.disk import header
from mmreplay.disk.files import fsync_directory, make_sibling_directory, remove_tree
from mmreplay.disk.store_directory import StoreDirectory
from mmreplay.disk.writer_lock import acquire_writer_lock, release_writer_lock
from mmreplay.errors import StoreExistsError
from mmreplay.frames import encodings
from mmreplay.frames.reference_scheme import ReferenceScheme
from mmreplay.rows.fields import FieldTable
from mmreplay.rows.transitions import MAX_ENVS, TransitionTable, row_dtype
from mmreplay.sampling.samplers import PrioritizedSampler, Sampler, UniformSampler
from mmreplay.validation import (
    parse_action_dtype,
    parse_field_specs,
    parse_frame_dtype,
    parse_positive_int,
    parse_shape,
)


def new_layout(
    *,
    frame_shape: tuple[int, ...],
    capacity: int,
    stack_size: int,
    num_envs: int,
    action_shape: tuple[int, ...],
    action_dtype: npt.DTypeLike,
    sampler: Sampler | None,
    frame_encoding: str | None,
    reference_scheme: ReferenceScheme | None,
    fields: dict[str, tuple[tuple[int, ...], npt.DTypeLike]] | None,
    stack_padding: str,
    frame_dtype: npt.DTypeLike,
) -> tuple[header.Layout, header.Commit, Sampler]:
    """``ReplayStore.create``'s arguments checked (an error names what was expected and what was given):
    the new store's layout, its empty commit, and its sampler (uniform unless one was given)."""
    if stack_padding not in header.STACK_PADDINGS:
        raise ValueError(f"stack_padding must be one of {header.STACK_PADDINGS}; got {stack_padding!r}")
    frame_shape = parse_shape(frame_shape, "frame_shape", allow_empty=False)
    capacity = parse_positive_int(capacity, "capacity")
    stack_size = parse_positive_int(stack_size, "stack_size")
    num_envs = parse_positive_int(num_envs, "num_envs")
    action_shape = parse_shape(action_shape, "action_shape", allow_empty=True)
    dtype = parse_action_dtype(action_dtype)
    frames_dtype = parse_frame_dtype(frame_dtype)
    field_specs = parse_field_specs(fields)
    if frame_encoding is None:
        frame_encoding = encodings.default_encoding(frame_shape, frames_dtype)
    encoding, scheme = encodings.parse_frame_encoding(frame_encoding, reference_scheme)
    sampler = UniformSampler() if sampler is None else sampler
    if not isinstance(sampler, (UniformSampler, PrioritizedSampler)):
        raise TypeError(
            "sampler must be None, mmreplay.UniformSampler() or mmreplay.PrioritizedSampler(alpha=...); "
            f"got {sampler!r} ({type(sampler).__name__})"
        )
    if encoding != "lz4" and frames_dtype != np.uint8:
        raise ValueError(f"frame_encoding={encoding!r} takes uint8 frames only; got frame_dtype={frames_dtype}")
    if num_envs > MAX_ENVS:
        raise ValueError(f"num_envs must be <= {MAX_ENVS}; got {num_envs}")
    if capacity < num_envs:
        raise ValueError(f"capacity must be >= num_envs ({num_envs}); got {capacity}")
    layout, commit = header.new_store(
        frame_shape=frame_shape,
        capacity=capacity,
        stack_size=stack_size,
        num_envs=num_envs,
        action_shape=action_shape,
        action_dtype=dtype,
        sampler=sampler.config(),
        frame_dtype=frames_dtype,
    )
    layout = replace(
        layout, frame_encoding=encoding, reference_scheme=scheme, fields=field_specs, stack_padding=stack_padding
    )
    return layout, commit, sampler


def build_store(directory: Path, layout: header.Layout, commit: header.Commit) -> IO[bytes]:
    """Build the empty store at ``directory`` (which must not exist): beside it, then renamed into place.
    Returns its writer lock, taken before the store became visible, so that no other writer can open
    it between the rename and the caller."""
    if directory.exists():
        raise StoreExistsError(f"cannot create a store at {str(directory)!r}: the path already exists")
    directory.parent.mkdir(parents=True, exist_ok=True)
    built, lock = build_beside(directory, layout, commit, "creating")
    built.close()
    building = built.path
    try:
        try:
            os.rename(building, directory)
        except OSError:
            if directory.exists():
                raise StoreExistsError(f"cannot create a store at {str(directory)!r}: the path already exists") from None
            raise
        fsync_directory(directory.parent)
    except BaseException:
        release_writer_lock(lock)
        if building.exists():
            remove_tree(building)
        raise
    return lock


def build_beside(
    directory: Path, layout: header.Layout, commit: header.Commit, purpose: str
) -> tuple[StoreDirectory, IO[bytes]]:
    """An empty store with this layout and commit in a new hidden sibling of ``directory`` (named for
    ``purpose``), its writer lock held: the sibling, open (its ``path`` the sibling's), and the lock.
    Nothing is left on an error."""
    building = make_sibling_directory(directory, purpose)
    try:
        opened = StoreDirectory.open(building)
    except BaseException:
        remove_tree(building)
        raise
    try:
        build_empty(opened, layout, commit)
        return opened, acquire_writer_lock(opened / header.LOCK_NAME)
    except BaseException:
        opened.close()
        remove_tree(building)
        raise


def build_empty(building: StoreDirectory, layout: header.Layout, commit: header.Commit) -> None:
    """The files of an empty store with this layout and empty commit, in the directory ``building``."""
    encodings.create_ring(building, layout, commit).close()
    TransitionTable.create(
        building / header.TRANSITIONS_NAME,
        dtype=row_dtype(layout.action_shape, np.dtype(layout.action_dtype), layout.num_envs, row_slots=layout.row_slots,
                        version=layout.format_version),
        row_slots=layout.row_slots,
    ).close()
    if layout.fields:
        FieldTable.create(building / header.FIELDS_NAME, specs=layout.fields, row_slots=layout.row_slots).close()
    header.write_header(building, layout, commit)
