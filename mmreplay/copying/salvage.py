"""``salvage``: every intact transition of a damaged store, written into a new store.

A flipped byte or a bad sector damages a row or a frame; the rest of the store is still good. ``salvage``
scans the source (``mmreplay.store.DamagedStore``: every stored row and every frame the stored
transitions need), then adds every intact transition (its row, field row and the frames of its whole obs
and next_obs stacks all intact) to a new store of the same layout, in the order they were added, as
``convert`` does: bit-exact, with their fields. A transition whose episode lost the transition before it
starts a fragment (listed with ``complete=False``): the new store never joins two parts of an episode
across what was dropped, unless the two stacks that meet there are equal frame for frame (then the add
cannot tell them apart from a continuation, and nothing read back differs). Steps are renumbered from 0,
priorities start afresh (the sampler's configuration is kept), and the new store is built beside its
target and renamed into place: a process killed at any moment leaves nothing there or the whole store.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from mmreplay.copying.feeder import Feeder
from mmreplay.disk.atomic_builds import SiblingBuild, check_new_path
from mmreplay.sampling.samplers import sampler_from_config
from mmreplay.store import DamagedStore, ReplayStore
from mmreplay.validation import parse_positive_int

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class SalvageSummary:
    """What ``salvage`` wrote: ``kept`` of the source's ``transitions`` (stored ones), ``dropped`` (not
    intact), the damaged rows and frames it found, and the first dropped step (None: none dropped)."""

    transitions: int
    kept: int
    dropped: int
    damaged_rows: int
    damaged_frames: int
    first_dropped_step: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def salvage(source: PathLike, target: PathLike, *, progress: bool = False, chunk_steps: int = 256) -> SalvageSummary:
    """Write every intact transition of the store at ``source`` into a new store at ``target``.

    Args:
        source: a store, damaged or not (opened read-only, never changed); its header must be readable.
        target: where the new store goes; it must not exist, its directory must. It appears only once
            complete (built beside ``target`` and renamed).
        progress: show progress bars on stderr (the scan, then the copy).
        chunk_steps: transitions read at a time.

    Returns:
        A ``SalvageSummary``: transitions kept and dropped, damaged rows and frames.

    Raises:
        FileExistsError: ``target`` exists.
        StoreNotFoundError: no store at ``source``.
        CorruptStoreError: the header of ``source`` cannot be read (nothing is written at ``target``).
    """
    chunk_steps = parse_positive_int(chunk_steps, "chunk_steps")
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool; got {type(progress).__name__}")
    destination = Path(target)
    check_new_path(destination, "a store")
    with tqdm(disable=not progress, file=sys.stderr, unit="frame+row", desc="scan") as bar:
        old = DamagedStore(source, progress=bar.update)
    with old:
        scan = old.scan
        kept = scan.intact_steps
        with SiblingBuild(destination, "salvaging", "a store") as build:
            new = ReplayStore.create(
                build.directory / "store", frame_shape=old.frame_shape, capacity=old.capacity,
                stack_size=old.stack_size, num_envs=old.num_envs, action_shape=old.action_shape,
                action_dtype=old.action_dtype, sampler=sampler_from_config(old.sampler.config()),
                frame_encoding=old.frame_encoding, reference_scheme=old.reference_scheme, fields=old.fields or None,
                stack_padding=old.stack_padding, frame_dtype=old.frame_dtype, commit_interval_s=None,
            )
            with new, tqdm(total=len(kept), disable=not progress, file=sys.stderr, unit="transition",
                           desc="salvage") as bar:
                Feeder(new).feed(_transitions(old, kept, chunk_steps), bar)
            build.commit(build.directory / "store")
    dropped = scan.damaged_steps
    return SalvageSummary(transitions=len(scan.stored), kept=len(kept), dropped=len(dropped),
                          damaged_rows=len(scan.rows), damaged_frames=len(scan.frames),
                          first_dropped_step=int(dropped[0]) if len(dropped) else None)


def _transitions(store: DamagedStore, steps: np.ndarray, chunk_steps: int) -> Iterator[tuple[Any, ...]]:
    """The intact transitions of ``steps`` in step order, as ``Feeder`` takes them."""
    for start in range(0, len(steps), chunk_steps):
        chunk = steps[start : start + chunk_steps]
        batch = store.read(chunk)
        fragments = store.fragment_starts(chunk)
        for i in range(len(chunk)):
            fields = {name: values[i] for name, values in batch.fields.items()}
            yield (int(batch.env_index[i]), batch.obs[i], batch.action[i], batch.reward[i], batch.next_obs[i],
                   bool(batch.terminated[i]), bool(batch.truncated[i]), fields, bool(fragments[i]))
