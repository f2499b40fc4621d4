"""``convert``: a store written again, in this mmreplay's format version, as a new store.

What changes between format versions is how frames are kept (format version 6 compresses a reference
store's frames with stock lz4 calls; versions 4 and 5 used a bespoke encoder, which this mmreplay reads in
pure Python but no longer writes). A store of an older version opens read-only; ``convert`` reads every
stored transition in the order it was added and adds it to a new store of the same layout (frames,
capacity, stacks, envs, actions, padding, fields, encoding and scheme, sampler), which rebuilds each
episode exactly as it was: every obs and next_obs stack, each final observation, fragments. Transition
steps are renumbered from 0, as an import's are.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from mmreplay.disk.atomic_builds import SiblingBuild, check_new_path
from mmreplay.copying.feeder import Feeder
from mmreplay.sampling.samplers import sampler_from_config
from mmreplay.store import ReplayStore
from mmreplay.validation import parse_positive_int

PathLike = str | os.PathLike[str]


def convert(source: PathLike, target: PathLike, *, progress: bool = False, chunk_steps: int = 256) -> int:
    """Write the store at ``source`` again, in the current format version, as a new store at ``target``.

    Args:
        source: a store of any format version this mmreplay reads (opened read-only, never changed).
        target: where the new store goes; it must not exist, its directory must. It appears there only
            once complete: it is built beside ``target`` and renamed, so a process killed at any moment
            leaves nothing there or the whole store.
        progress: show a progress bar on stderr.
        chunk_steps: transitions read at a time.

    Returns:
        The transitions written: every stored transition of ``source``, renumbered from step 0.

    Raises:
        FileExistsError: ``target`` exists.
        StoreNotFoundError: no store at ``source``.
        CorruptStoreError: a row or frame of ``source`` fails its checksum (nothing is written at
            ``target``).
    """
    chunk_steps = parse_positive_int(chunk_steps, "chunk_steps")
    destination = Path(target)
    check_new_path(destination, "a store")
    with ReplayStore.open(source, mode="r") as old:
        episodes = old.episodes()
        fragments = {episode.first_step for episode in episodes if not episode.complete}
        total = len(old)
        with SiblingBuild(destination, "converting", "a store") as build:
            new = ReplayStore.create(
                build.directory / "store", frame_shape=old.frame_shape, capacity=old.capacity,
                stack_size=old.stack_size, num_envs=old.num_envs, action_shape=old.action_shape,
                action_dtype=old.action_dtype, sampler=sampler_from_config(old.sampler.config()),
                frame_encoding=old.frame_encoding, reference_scheme=old.reference_scheme, fields=old.fields or None,
                stack_padding=old.stack_padding, frame_dtype=old.frame_dtype, commit_interval_s=None,
            )
            with new, tqdm(total=total, disable=not progress, file=sys.stderr, unit="transition",
                           desc="convert") as bar:
                Feeder(new).feed(_transitions(old, fragments, chunk_steps), bar)
            build.commit(build.directory / "store")
    return total


def _transitions(store: ReplayStore, fragments: set[int], chunk_steps: int) -> Iterator[tuple[Any, ...]]:
    """Every stored transition of ``store`` in step order, as ``Feeder`` takes them."""
    steps = store.stored_steps
    for start in range(0, len(steps), chunk_steps):
        batch = store.read(np.asarray(steps[start : start + chunk_steps], np.int64))
        for i in range(len(batch.index)):
            fields = {name: values[i] for name, values in batch.fields.items()}
            yield (int(batch.env_index[i]), batch.obs[i], batch.action[i], batch.reward[i], batch.next_obs[i],
                   bool(batch.terminated[i]), bool(batch.truncated[i]), fields, int(batch.index[i]) in fragments)
