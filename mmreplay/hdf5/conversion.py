"""HDF5 datasets: export a store to HDF5 and import one back, losslessly.

Two layouts, both described in the README ("HDF5 datasets"):

* ``"mmreplay"`` (``mmreplay_layout``): one file. Frames are one HDF5 chunk each (deflate level 1,
  in every HDF5 build); episodes are stored one after another: an episode of T transitions owns
  ``stack_size + T`` consecutive frames (its first obs stack, then each transition's newest next_obs
  frame; ``stack_size - 1`` more when its last next_obs was stored whole, as given) and T consecutive
  rows of the ``transitions`` columns.
* ``"minari"`` (``minari_layout``): a Minari 0.5.4 dataset directory (``<dir>/data/main_data.hdf5`` and
  ``metadata.json``), one ``episode_{i}`` group per episode with observations of length T + 1 (single
  frames, lossless).

Both keep each transition's original *step*, so ``import_hdf5`` replays the transitions of every env
in their original order (``replay``): the imported store reads back the same transitions
(env_index included), its steps renumbered from 0. Import adds each episode's first obs as its whole
stack, and the rest of the episode frame by frame, so stacks are rebuilt exactly as they were.

Memory stays flat: frames move in chunks of ``chunk_steps`` transitions; what grows with the store is
two small integers per transition (which episode, which position) during export.

This package (``mmreplay.hdf5``) holds the only modules that import h5py.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import h5py  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt
from tqdm import tqdm

from mmreplay.disk.atomic_builds import SiblingBuild, check_new_path
from mmreplay.errors import CorruptStoreError, DamagedStoreError
from mmreplay.hdf5.checks import READ_BLOCK_BYTES, check_input, close_file
from mmreplay.hdf5.datasets import FIELD_PREFIX, FORMAT_NAMES, LAYOUTS, LayoutWriter, Source
from mmreplay.hdf5.minari_layout import DATASET_ID, MINARI_FILE, MinariSource, MinariWriter
from mmreplay.hdf5.mmreplay_layout import MmreplayLayoutSource, MmreplayLayoutWriter
from mmreplay.copying.feeder import Feeder
from mmreplay.hdf5.replay import merged
from mmreplay.store import DamagedStore, ReplayStore
from mmreplay.store.reading.episode_list import Episode
from mmreplay.validation import parse_positive_int

__all__ = ["LAYOUTS", "export_hdf5", "import_hdf5"]

PathLike = str | os.PathLike[str]


def export_hdf5(
    store: ReplayStore,
    path: PathLike,
    *,
    layout: str = "mmreplay",
    dataset_id: str | None = None,
    chunk_steps: int = 1024,
    progress: bool = False,
) -> int:
    """Write every stored transition of ``store`` to ``path`` in ``layout``.

    The file appears at ``path`` only once complete: it is built beside it and renamed, so a process
    killed at any moment leaves nothing there or the whole export (and the next export to ``path``
    removes what a killed one left beside it).

    Args:
        store: the store to export, open in any mode.
        path: where the export goes; it must not exist, its directory must.
        layout: ``"mmreplay"`` writes one HDF5 file; ``"minari"`` makes the directory ``path`` holding
            ``data/main_data.hdf5`` and ``data/metadata.json``, loadable with
            ``minari.MinariDataset(path / "data")`` or ``minari.load_dataset(dataset_id)`` when ``path``
            is ``<datasets root>/<dataset_id>``.
        dataset_id: the Minari id, ``[namespace/]name-vN`` (None: a valid id made from the name of
            ``path``); for ``layout="minari"`` only.
        chunk_steps: transitions read and written at a time.
        progress: show a progress bar on stderr.

    Returns:
        The transitions written.

    Raises:
        TypeError: ``store`` is not a ``ReplayStore``, or ``chunk_steps`` is not an int.
        ValueError: ``layout`` is not one of ``LAYOUTS``, ``dataset_id`` is not a Minari id,
            ``chunk_steps`` is below 1, or the store holds no transitions (there is nothing to export).
        FileExistsError: ``path`` exists.
        FileNotFoundError: ``path``'s directory does not exist.
        StepsEvictedError: a live writer evicted steps the export was reading.
    """
    if not isinstance(store, ReplayStore):
        raise TypeError(f"store must be a ReplayStore; got {type(store).__name__}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")
    chunk_steps = parse_positive_int(chunk_steps, "chunk_steps")
    target = Path(path)
    check_new_path(target, "an export")
    if layout == "minari":
        dataset_id = default_dataset_id(target) if dataset_id is None else dataset_id
        if not isinstance(dataset_id, str) or not DATASET_ID.match(dataset_id):
            raise ValueError(f"dataset_id must look like '[namespace/]name-v0' (Minari's rule); got {dataset_id!r}")
    if len(store) == 0:
        raise ValueError(f"{store.path}: the store holds no transitions: there is nothing to export")
    try:
        return _export(store, target, layout, dataset_id, chunk_steps, progress)
    except CorruptStoreError as error:
        raise _damage_error(store, error) from None


def _damage_error(store: ReplayStore, error: CorruptStoreError) -> CorruptStoreError:
    """``error``, met reading ``store`` for an export, as the store's first damaged step and the way out; the
    error itself where a scan of the store finds nothing damaged (a writer overtook the read)."""
    with DamagedStore(store.path) as scanned:
        damaged = scanned.scan.damaged_steps
        found = [damage.describe() for damage in (*scanned.scan.rows, *scanned.scan.frames)][:1]
    if not len(damaged):
        return error
    return DamagedStoreError(
        f"{store.path}: cannot export: transition {int(damaged[0])} is damaged ({found[0] if found else 'its stacks'}; "
        f"{len(damaged):,} damaged transitions in all); 'mmreplay salvage' copies every intact transition into a "
        "new store, which exports"
    )


def _export(store: ReplayStore, target: Path, layout: str, dataset_id: str | None, chunk_steps: int,
            progress: bool) -> int:
    """``export_hdf5`` of a store with transitions, its arguments checked."""
    episodes = store.episodes()
    final_stacks = _final_stacks(store, episodes, chunk_steps)
    final_steps = np.array([int(episode.steps[-1]) for episode in episodes], np.int64)
    # The steps the episodes cover (a live writer may commit between the two calls; what it evicts
    # meanwhile fails the export with a StepsEvictedError naming the steps).
    stored = store.stored_steps if not episodes else range(
        min(int(episode.steps[0]) for episode in episodes), max(int(episode.steps[-1]) for episode in episodes) + 1)
    episode_of = np.empty(len(stored), np.int64)
    position_of = np.empty(len(stored), np.int64)
    for number, episode in enumerate(episodes):
        episode_of[episode.steps - stored.start] = number
        position_of[episode.steps - stored.start] = np.arange(episode.length)
    with SiblingBuild(target, "exporting", "an export") as build:
        built = build.directory / ("export.h5" if layout == "mmreplay" else "dataset")
        if layout == "mmreplay":
            writer: LayoutWriter = MmreplayLayoutWriter(built, store, episodes, final_stacks)
        else:
            built.mkdir()
            writer = MinariWriter(built / "data", store, episodes, final_stacks, dataset_id or "")
        try:
            with tqdm(total=len(stored), disable=not progress, file=sys.stderr, unit="transition",
                      desc=f"export {layout}") as bar:
                for start in range(stored.start, stored.stop, chunk_steps):
                    steps = np.arange(start, min(start + chunk_steps, stored.stop), dtype=np.int64)
                    _export_chunk(writer, store, steps, episode_of[steps - stored.start],
                                  position_of[steps - stored.start], final_stacks, final_steps)
                    bar.update(len(steps))
        except BaseException:
            try:
                writer.close()  # every HDF5 object closed: an open one crashes libhdf5 at exit
            except OSError:
                pass  # the first error is the one to report
            raise
        writer.close()
        build.commit(built)
    return len(stored)


def default_dataset_id(path: Path) -> str:
    """A valid Minari id from a dataset directory's name: ``pong-random-v0`` stays, ``export`` becomes
    ``export-v0``, characters Minari refuses become ``-``."""
    name = path.name
    if DATASET_ID.match(name):
        return name
    name = re.sub(r"[^-_\w]+", "-", name).strip("-") or "dataset"
    return name if DATASET_ID.match(name) else f"{name}-v0"


def _final_stacks(store: ReplayStore, episodes: list[Episode], chunk_steps: int) -> npt.NDArray[np.bool_]:
    """Which episodes end with a detached transition: one that terminated or truncated with a next_obs
    that is not its obs shifted by one frame (stored as given; exported whole, as a final stack)."""
    final = np.zeros(len(episodes), np.bool_)
    ended = [i for i, episode in enumerate(episodes) if episode.ended_by in ("terminated", "truncated")]
    if store.stack_size == 1:
        return final
    for start in range(0, len(ended), chunk_steps):
        numbers = ended[start : start + chunk_steps]
        batch = store.read([int(episodes[i].steps[-1]) for i in numbers])
        shifted = (batch.next_obs[:, :-1] == batch.obs[:, 1:]).reshape(len(numbers), -1).all(axis=1)
        final[numbers] = ~shifted
    return final


def _export_chunk(writer: LayoutWriter, store: ReplayStore, steps: npt.NDArray[np.int64],
                  episode_of: npt.NDArray[np.int64], position_of: npt.NDArray[np.int64],
                  final_stacks: npt.NDArray[np.bool_], final_steps: npt.NDArray[np.int64]) -> None:
    batch = store.read(steps)
    for i in np.flatnonzero(position_of == 0).tolist():
        writer.frames(int(episode_of[i]), 0, batch.obs[i])
    for episode in dict.fromkeys(episode_of.tolist()):
        rows = np.flatnonzero(episode_of == episode)
        first = int(position_of[rows[0]])
        writer.frames(episode, store.stack_size + first, batch.next_obs[rows, -1])
        last = int(rows[-1])
        if final_stacks[episode] and batch.index[last] == final_steps[episode]:
            # Its whole next_obs, from where its newest frame alone went.
            writer.frames(episode, store.stack_size + int(position_of[last]), batch.next_obs[last])
        writer.columns(episode, first, {
            "action": batch.action[rows], "reward": batch.reward[rows], "terminated": batch.terminated[rows],
            "truncated": batch.truncated[rows], "step": batch.index[rows],
            **{FIELD_PREFIX + name: values[rows] for name, values in batch.fields.items()}})


def import_hdf5(
    path: PathLike,
    store_path: PathLike,
    *,
    capacity: int | None = None,
    stack_size: int | None = None,
    chunk_steps: int = 256,
    progress: bool = False,
    allow_external: bool = False,
) -> int:
    """Create a store at ``store_path`` from an HDF5 dataset.

    The store appears only when complete: it is built beside ``store_path`` and renamed (see
    ``export_hdf5``). Only ``path`` is read: every attribute and declared size is checked before anything
    is allocated from it, and frames are read at most 64 MiB at a time.

    Args:
        path: a file in the ``"mmreplay"`` layout, or a Minari dataset: its directory, its ``data``
            directory or its ``main_data.hdf5``. Minari datasets not written by mmreplay need numeric or
            bool observations (any dtype: the store gets it) of length T + 1 (one frame each) and are
            read as one env, episode after episode.
        store_path: where the store goes; it must not exist, its directory must.
        capacity: the store's capacity (None: the exporting store's, or the dataset's transitions), at
            least the transitions in the file.
        stack_size: frames per obs, for Minari datasets not written by mmreplay (None: 4); an
            ``"mmreplay"`` file's own must match it.
        chunk_steps: transitions read at a time.
        progress: show a progress bar on stderr.
        allow_external: read datasets stored in external files, external links and virtual datasets
            (refused by default); plugin filters are refused always.

    Returns:
        The transitions imported.

    Raises:
        TypeError: ``capacity``, ``stack_size`` or ``chunk_steps`` is not an int, or ``allow_external``
            not a bool.
        ValueError: a number is below 1, or ``stack_size`` differs from an ``"mmreplay"`` file's.
        FileExistsError: ``store_path`` exists.
        FileNotFoundError: ``path`` or ``store_path``'s directory does not exist.
        CorruptStoreError: ``path`` is not an HDF5 file of either layout, misses a dataset or attribute,
            holds what is refused (external data, plugin filters), or its layout cannot make a store.
    """
    capacity = None if capacity is None else parse_positive_int(capacity, "capacity")
    stack_size = None if stack_size is None else parse_positive_int(stack_size, "stack_size")
    chunk_steps = parse_positive_int(chunk_steps, "chunk_steps")
    if not isinstance(allow_external, bool):
        raise TypeError(f"allow_external must be a bool; got {type(allow_external).__name__}")
    target = Path(store_path)
    check_new_path(target, "a store")
    source = _open_source(Path(path), stack_size, allow_external)
    try:
        total = int(source.lengths.sum())
        with SiblingBuild(target, "importing", "a store") as build:
            try:
                store = ReplayStore.create(
                    build.directory / "store", frame_shape=source.frame_shape,
                    capacity=capacity or max(source.capacity, total, source.num_envs), stack_size=source.stack_size,
                    num_envs=source.num_envs, action_shape=source.action_shape, action_dtype=source.action_dtype,
                    stack_padding=source.stack_padding, frame_dtype=source.frame_dtype,
                    fields=dict(source.fields) or None)
            except (TypeError, ValueError) as error:  # the layout came from the file
                raise CorruptStoreError(f"{source.name}: its layout cannot make a store ({error})") from None
            frame_nbytes = int(np.prod(source.frame_shape)) * source.frame_dtype.itemsize
            block = max(1, min(chunk_steps, READ_BLOCK_BYTES // max(1, frame_nbytes)))
            with store, tqdm(total=total, disable=not progress, file=sys.stderr, unit="transition",
                             desc="import") as bar:
                Feeder(store).feed(merged(source, block), bar)
            build.commit(build.directory / "store")
    finally:
        source.close()
    return total


def _open_source(path: Path, stack_size: int | None, allow_external: bool) -> Source:
    if not path.exists():
        raise FileNotFoundError(f"no HDF5 dataset at {str(path)!r}")
    if path.is_dir():
        candidates = [path / "data" / MINARI_FILE, path / MINARI_FILE]
        found = [c for c in candidates if c.is_file()]
        if not found:
            raise CorruptStoreError(f"{path}: a directory without {MINARI_FILE} (or data/{MINARI_FILE}): "
                                    "not a Minari dataset")
        path = found[0]
    name = str(path)
    try:
        file = h5py.File(path, "r")
    except OSError as error:
        raise CorruptStoreError(f"{name}: not an HDF5 file ({error})") from None
    try:
        check_input(file, name, allow_external=allow_external)
        if file.attrs.get("format") == FORMAT_NAMES["mmreplay"]:
            if stack_size is not None and stack_size != int(file.attrs["stack_size"]):
                raise ValueError(f"stack_size={stack_size} differs from the file's stack_size "
                                 f"{int(file.attrs['stack_size'])}")
            return MmreplayLayoutSource(file, name)
        if any(key.startswith("episode_") for key in file):
            return MinariSource(file, name, stack_size)
        raise CorruptStoreError(f"{name}: neither an mmreplay HDF5 export (root attribute format="
                                f"{FORMAT_NAMES['mmreplay']!r}) nor a Minari dataset (episode_{{i}} groups)")
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as error:
        close_file(file, name)
        if isinstance(error, CorruptStoreError):
            raise
        raise CorruptStoreError(f"{name}: a required dataset or attribute is missing or invalid ({error})") from None
    except BaseException:
        close_file(file, name)
        raise
