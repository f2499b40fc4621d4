"""A store open read-only (mode ``"r"``), following a live writer's commits.

A follower holds the commit it read last and the files that commit names. When the header changes it
follows it (``refresh``: the frame ring and the sampler reloaded, each env's episode in progress reread).
The writer only reuses ring slots and deletes segments that its newest commit no longer counts, so a
follower that was descheduled between reading the header and reading the files it names may find them
overwritten: a read that fails its checksums is retried after a refresh, and only a failure under a
header that stayed the same is corruption.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from mmreplay.disk import header
from mmreplay.disk.files import file_signature
from mmreplay.errors import ClosedStoreError, CorruptStoreError, ReadOnlyStoreError
from mmreplay.frames.ring import FrameChecksumError
from mmreplay.frames.segment_maps import MissingSegmentError
from mmreplay.rows.fields import FieldChecksumError
from mmreplay.rows.transitions import RowChecksumError
from mmreplay.sampling.samplers import Sampler
from mmreplay.store.writing.autocommit import Committable
from mmreplay.store.writing.env_episodes import EnvEpisode, load_env_episodes
from mmreplay.store.reading.mapped_files import MappedFiles, map_committed
from mmreplay.store.reading.stored_steps import stored_steps

T = TypeVar("T")

_READ_ATTEMPTS = 4  # a follower behind the writer retries this often before calling data corrupt


class Follower:
    """A reader of a store that a writer may be appending to: ``ReplayStore``'s collaborator in mode
    ``"r"``. ``committed`` and ``transitions_added`` are the newest commit it followed; every write is
    refused (``ReadOnlyStoreError``), and ``flush`` has nothing to do."""

    mode = "r"
    sees_frames_move = True  # the writer may reuse what an older commit named

    def __init__(self, files: MappedFiles, commit: header.Commit) -> None:
        self.files = files
        self.committed = commit
        self.transitions_added = commit.transitions_added
        self._header_signature: tuple[int, int, int] | None = files.header_signature()
        self._read_signature = self._header_signature  # of the header ``refresh`` read last
        self._episodes = self._load_episodes()
        files.open_sampler(commit)

    @classmethod
    def open(cls, directory: Path, *, sampler: Sampler | None, decode_threads: int | None = None) -> Follower:
        """Open the store at ``directory`` read-only, retrying when the header changed while it opened (a
        descheduled follower finds the files its header names reused or replaced by a live writer's later
        commits): only an error under a header that stayed the same is corruption."""
        real = Path(os.path.realpath(directory))  # resolved once: a later chdir moves nothing
        header_path = real / header.HEADER_NAME
        for _ in range(_READ_ATTEMPTS - 1):
            signature = file_signature(header_path)
            try:
                follower = cls._open_once(real, sampler, decode_threads)
            except (CorruptStoreError, OSError, ClosedStoreError):
                if file_signature(header_path) == signature:
                    raise
                continue
            if not follower.files.replaced():
                return follower
            # A writer's clear() exchanged the directory while this one opened: open the new one.
            follower.close()
        return cls._open_once(real, sampler, decode_threads)

    @classmethod
    def _open_once(cls, directory: Path, sampler: Sampler | None, decode_threads: int | None) -> Follower:
        opened = header.open_store_directory(directory)
        files, commit = map_committed(opened, sampler, writable=False, decode_threads=decode_threads)
        try:
            return cls(files, commit)
        except BaseException:
            files.close()
            raise

    # -- following the writer --------------------------------------------------------------------

    def follow(self) -> None:
        """Pick up the writer's newest commit when the header changed (one ``stat``)."""
        if not self.files.closed and self.files.header_signature() != self._header_signature:
            self.refresh()

    def refresh(self) -> bool:
        """Follow the header as it is now; whether the store changed."""
        with self.files.lock:
            for _ in range(_READ_ATTEMPTS - 1):
                try:
                    return self._follow_header()
                except CorruptStoreError:
                    # A follower that was descheduled between reading the header and the files it names
                    # finds them reused or replaced by the writer's later commits: only a header that
                    # stayed the same makes that corruption.
                    if self.files.header_signature() == self._read_signature:
                        raise
            return self._follow_header()

    def consistent(self, read: Callable[[], T]) -> T:
        """Run a read; one whose data was replaced under it by the writer refreshes and retries.

        A checksum failure in a follower that is behind means "overwritten since": refresh and read
        again. A failure that persists with nothing newer committed is real corruption and is raised.
        """
        if self.files.header_signature() != self._header_signature:
            self.refresh()
        for _ in range(_READ_ATTEMPTS - 1):
            try:
                return read()
            except (RowChecksumError, FieldChecksumError, FrameChecksumError, MissingSegmentError):
                if not self.refresh():
                    raise
        return read()

    def _follow_header(self) -> bool:
        """``refresh``, once."""
        files = self.files
        signature = files.header_signature()
        self._read_signature = signature
        if files.replaced():  # checked on the directory every map came from, before its header is read
            raise files.cleared_error("refresh")
        commit = files.read_commit()
        self._header_signature = signature
        if commit == self.committed:
            return False
        previous = self.committed
        try:
            self.committed = commit
            self.transitions_added = commit.transitions_added
            files.frames.reload(
                generation=commit.frame_table_generation,
                frame_slots=commit.frame_slots,
                frames_written=commit.frames_written,
                bytes_written=commit.bytes_written,
            )
            files.open_sampler(commit)
            self._episodes = self._load_episodes()  # which episodes are still in progress, for ``episodes()``
        except BaseException:
            # Half-followed (a corrupt frame table or priorities file): forget the header, so that
            # every later read tries again and raises the same error rather than reading stale state.
            self.committed, self._header_signature = previous, None
            raise
        return True

    def _load_episodes(self) -> list[EnvEpisode]:
        layout = self.files.layout
        episodes, _ = load_env_episodes(
            self.files.table, self.files.reader,
            stored_steps(self.transitions_added, layout.capacity, self.committed.first_step),
            num_envs=layout.num_envs, stack_size=layout.stack_size,
        )
        return episodes

    def open_envs(self) -> set[int]:
        """The envs whose episode was in progress at the commit followed."""
        return {env for env, episode in enumerate(self._episodes) if episode.open}

    # -- what a follower refuses or skips ----------------------------------------------------------

    def check_writable(self, operation: str) -> NoReturn:
        self.files.check_open(operation)
        raise ReadOnlyStoreError(
            f"cannot {operation}: the store at {str(self.files.directory)!r} is open read-only (mode 'r'); "
            "open it with mode 'r+' to append"
        )

    def add(self, *arguments: object, **keywords: object) -> NoReturn:
        self.check_writable("add")

    def add_encoded(self, *arguments: object, **keywords: object) -> NoReturn:
        self.check_writable("add_encoded")

    def update_priorities(self, *arguments: object) -> NoReturn:
        self.check_writable("update_priorities")

    def cleared(self) -> NoReturn:
        self.check_writable("clear")

    def flush(self) -> None:
        """Nothing to commit: a follower writes nothing."""

    def close_at_exit(self, store: Committable) -> None:
        """Nothing to commit at exit."""

    def forked(self) -> None:
        """This process is a fork of the one that opened the follower: a reader belongs to no process and
        goes on reading, under a lock of its own (a thread of the parent may have held the parent's at the
        fork, and the child does not have that thread)."""
        self.files.lock = threading.RLock()

    def close(self) -> None:
        self.files.close()
