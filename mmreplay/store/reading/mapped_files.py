"""The files one open store maps, under the one directory that holds them: the transition table, the user
fields, the frame ring and the sampler's, with the reader over them and the lock that serializes their use.

A writer and a follower each hold one ``MappedFiles``, and the façade reads through it. It is the one place
that owns the store's directory once the store is open (every file is opened, and the header read and
replaced, under it) and knows which files this object maps: a writer's ``clear`` replaces them at the
path, and ``replaced`` tells a follower so.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numpy as np

from mmreplay.disk import header
from mmreplay.disk.files import file_signature
from mmreplay.disk.store_directory import StoreDirectory
from mmreplay.errors import ClosedStoreError, CorruptStoreError
from mmreplay.frames import encodings
from mmreplay.rows.fields import FieldTable
from mmreplay.rows.transitions import TransitionTable, row_dtype
from mmreplay.sampling.samplers import Sampler, sampler_from_config
from mmreplay.store.reading.transition_reader import TransitionReader
from mmreplay.store.reading.stored_steps import stored_steps


class MappedFiles:
    """The maps of one open store, all under ``directory``: ``frames`` (the frame ring), ``table`` (the
    transition rows), ``field_table`` (the user fields, or None), ``sampler`` (which maps its own files),
    and ``reader``, which builds batches from them. ``lock`` serializes adds, commits and reads between
    the caller and a prefetching thread. ``writable``: mapped for a writer (mode ``"r+"``)."""

    def __init__(
        self,
        directory: StoreDirectory,
        layout: header.Layout,
        commit: header.Commit,
        *,
        sampler: Sampler,
        writable: bool,
        decode_threads: int | None = None,
    ) -> None:
        self.directory = directory
        self.decode_threads = decode_threads  # the cap on a batch's decode threads (None: the usable cores)
        self.layout = layout
        self.sampler = sampler
        self.writable = writable
        self.format_version = layout.format_version
        self.closed = False
        self.lock = threading.RLock()
        self.action_dtype = np.dtype(layout.action_dtype)
        try:
            self._map(directory, layout, commit)
        except BaseException:
            directory.close()  # this object owns the directory from the call on
            raise

    def _map(self, directory: StoreDirectory, layout: header.Layout, commit: header.Commit) -> None:
        """Map every file; each is opened relative to the directory's descriptor (``store_directory``), so
        all of them belong to the directory held, whatever happens to the path meanwhile."""
        format_version, writable = self.format_version, self.writable
        self.frames = encodings.open_ring(directory, layout, commit, writable=writable)
        self.table = TransitionTable(
            directory / header.TRANSITIONS_NAME,
            dtype=row_dtype(layout.action_shape, self.action_dtype, layout.num_envs, row_slots=layout.row_slots,
                            version=format_version),
            row_slots=layout.row_slots,
            writable=writable,
            version_3=format_version == 3,
            num_envs=layout.num_envs,
        )
        self.field_table = (
            FieldTable(directory / header.FIELDS_NAME, specs=layout.fields, row_slots=layout.row_slots,
                       writable=writable)
            if layout.fields
            else None
        )
        self.reader = TransitionReader(
            self.table,
            self.frames,
            stack_size=layout.stack_size,
            action_dtype=self.action_dtype,
            field_table=self.field_table,
            zero_padding=layout.stack_padding == "zeros",
            decode_threads=self.decode_threads,
        )

    def open_sampler(self, commit: header.Commit) -> None:
        """Open (or reopen) the sampler's files as ``commit`` left them."""
        self.sampler.open(
            self.directory,
            slots=self.layout.row_slots,
            stored=stored_steps(commit.transitions_added, self.layout.capacity, commit.first_step),
            writable=self.writable,
            state=commit.sampler_state,
        )

    def check_open(self, operation: str) -> None:
        if self.closed:
            raise ClosedStoreError(f"cannot {operation}: the store at {str(self.directory)!r} is closed")

    def read_commit(self) -> header.Commit:
        """The commit the header on disk holds now; ``ClosedStoreError`` where a writer's ``clear`` replaced
        the directory (and deleted the header this object's directory held)."""
        try:
            return header.read_header(self.directory)[1]
        except (OSError, CorruptStoreError):
            if self.replaced():
                raise self.cleared_error("refresh") from None
            raise

    def cleared_error(self, operation: str) -> ClosedStoreError:
        return ClosedStoreError(
            f"cannot {operation}: the store at {str(self.directory)!r} was cleared by its writer since this "
            "reader opened it; open it again"
        )

    def write_commit(self, commit: header.Commit) -> None:
        """Replace the header with one holding ``commit`` (atomically; a writer's commit)."""
        header.write_header(self.directory, self.layout, commit)

    def header_signature(self) -> tuple[int, int, int]:
        """The header's identity and version on disk (one ``stat``): it changes with every commit."""
        return file_signature(self.directory / header.HEADER_NAME)

    def replaced(self) -> bool:
        """Whether the directory at the path is no longer the one whose files are mapped (a writer cleared
        the store): checked on the directory's descriptor, which every map was opened through."""
        return self.directory.moved()

    def sync(self) -> None:
        """Make everything written into the maps durable (a commit's first half)."""
        self.frames.sync()
        self.table.sync()
        if self.field_table is not None:
            self.field_table.sync()
        self.sampler.sync()

    def close(self, *, sampler: bool = True) -> None:
        """Release every map, even after one fails to close; then raise the first failure. ``sampler``:
        close the sampler too (not when it was handed on to the empty store of a ``clear``)."""
        self.closed = True
        closers = [self.frames.close, self.table.close, self.directory.close]
        if sampler:
            closers.append(self.sampler.close)
        if self.field_table is not None:
            closers.insert(2, self.field_table.close)
        close_all(closers)

    def missing(self, commit: header.Commit, *, limit: int) -> list[str]:
        """``ReplayStore.missing_files`` for the contents ``commit`` holds."""
        frames = self.frames
        missing = [str(path) for path in (self.table.path, frames._table_path()) if not path.is_file()]
        if stored_steps(commit.transitions_added, self.layout.capacity, commit.first_step):
            first = frames.position_of(commit.frame_tail) // frames.segment_bytes
            last = max(frames.bytes_written - 1, 0) // frames.segment_bytes
            present = {int(path.stem) for path in (self.directory / header.SEGMENTS_DIR).glob("*.seg")
                       if path.stem.isdigit() and path.is_file()}
            segment = first
            while segment <= last and len(missing) < limit:
                if segment not in present:
                    missing.append(str(frames._segment_path(segment)))
                segment += 1
        return missing[:limit]

    def bytes_on_disk(self) -> int:
        """``ReplayStore.bytes_on_disk``: the allocated blocks of every file under the directory."""
        total = 0
        for _, _, files, folder in os.fwalk(".", dir_fd=self.directory.descriptor):
            for name in files:
                try:
                    total += os.stat(name, dir_fd=folder, follow_symlinks=False).st_blocks * 512
                except FileNotFoundError:  # a live writer released a segment or replaced a file meanwhile
                    pass
        return total


def map_committed(
    opened: StoreDirectory, sampler: Sampler | None, *, writable: bool, decode_threads: int | None
) -> tuple[MappedFiles, header.Commit]:
    """The opened store's files mapped at its last commit (its header read now) with ``sampler``, or the
    store's own (``matching_sampler``), and that commit: a writer's and a follower's open. ``opened`` is
    closed when the header or the sampler is refused."""
    try:
        layout, commit = header.read_header(opened)
        chosen = matching_sampler(sampler, layout)
    except BaseException:
        opened.close()
        raise
    files = MappedFiles(opened, layout, commit, sampler=chosen, writable=writable, decode_threads=decode_threads)
    return files, commit


def matching_sampler(sampler: Sampler | None, layout: header.Layout) -> Sampler:
    """The sampler to open a store with: the store's own (``layout.sampler``) when ``sampler`` is None,
    else ``sampler``, which must be configured as the store's."""
    if sampler is None:
        return sampler_from_config(layout.sampler)
    if sampler.config() != layout.sampler:
        raise ValueError(
            f"sampler {sampler.config()} does not match the store's sampler {layout.sampler}; "
            "open without sampler= to use the store's own"
        )
    return sampler


def close_all(closers: list[Callable[[], None]]) -> None:
    """Call every closer, even after one fails; then raise the first failure."""
    first: BaseException | None = None
    for close in closers:
        try:
            close()
        except BaseException as error:  # noqa: BLE001 - re-raised below, after the others closed
            first = first or error
    if first is not None:
        raise first
