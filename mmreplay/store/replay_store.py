"""The public store: ``ReplayStore.create`` / ``open``, ``add``, ``sample``, ``read``, ``flush``, ``close``.

Vocabulary: a *transition* is (obs, action, reward, next_obs, terminated, truncated) from one env; its
*step* numbers it among all transitions ever added (a vector add numbers env 0 first). Stored transitions
are always the contiguous steps ``[oldest, transitions_added)``: eviction is first in, first out. Frames
are written once; obs and next_obs stacks are rebuilt from the frame ring's episode links when read.

``ReplayStore`` is a façade over one collaborator chosen when the store opens (``role.Role``): a
``Writer`` in mode ``"r+"`` (the add paths, commits, room, autocommit and the writer lock) or a
``Follower`` in mode ``"r"`` (following the writer's commits). The façade opens, reads and samples through
the collaborator's ``MappedFiles`` (its samples through a ``BatchSource``, which it hands the feeds of
``batches()``), and hands the collaborator every write; calls go down, never back up.

Threads: the calls of the threads that share one store object run one at a time, under the façade's
lock (an add reads the step it writes and each env's episode under it, a read never meets half an add,
and a ``clear`` or ``close`` never pulls the files from under another thread's call). Processes: a
writer belongs to the process that opened it; in a forked child its copy is closed without writing
anything (``Writer.forked``), and a reader goes on reading under locks of its own. The process is checked
before the lock is taken: a thread of the parent may have held it at the fork.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import numpy.typing as npt

from mmreplay.batch import Batch, SequenceBatch
from mmreplay.errors import ClosedStoreError
from mmreplay.frames.page_cache import ReadAdvice
from mmreplay.frames.reference_scheme import ReferenceScheme
from mmreplay.frames.wire import EncodedFrames
from mmreplay.gpu.tensor_batches import TensorBatch, TensorSequenceBatch
from mmreplay.sampling.samplers import PrioritizedSampler, UniformSampler, limited_sampler
from mmreplay.store import passes, reads
from mmreplay.frames.ring import FrameChecksumError
from mmreplay.frames.segment_maps import MissingSegmentError
from mmreplay.rows.fields import FieldChecksumError
from mmreplay.rows.transitions import DamagedRowError
from mmreplay.store.batch_source import BatchSource
from mmreplay.store.damaged_store import damaged_store_error
from mmreplay.store.disk_bytes import DiskBytes
from mmreplay.store.feeds import batch_streams
from mmreplay.store.feeds.device_batches import DeviceBatches
from mmreplay.store.feeds.prefetch import Prefetcher
from mmreplay.store.follower import Follower
from mmreplay.store.reading.encoded_batches import EncodedBatch, EncodedSequenceBatch
from mmreplay.store.reading.episode_list import EpisodeList
from mmreplay.store.reading.stored_steps import stored_steps
from mmreplay.store.role import Role
from mmreplay.store.store_layout import StoreLayout
from mmreplay.store.writing import autocommit, creation
from mmreplay.store.writing.autocommit import CommitSchedule
from mmreplay.store.writing.writer import Writer
from mmreplay.validation import (
    parse_decode_threads,
    parse_mode,
    parse_positive_int,
    parse_rng,
)

if TYPE_CHECKING:
    import torch

PathLike = str | os.PathLike[str]


class ReplayStore(StoreLayout):
    """A replay store in a directory: frames kept once, lz4-compressed, in a memory-mapped ring on disk.

    Open it like a file: ``ReplayStore.create(path, ...)`` makes a new store (mode ``"r+"``),
    ``ReplayStore.open(path, mode)`` opens one read-only (``"r"``) or for appending (``"r+"``), and
    ``with`` closes it (which commits). A *transition* is (obs, action, reward, next_obs, terminated,
    truncated) from one env; its *step* numbers it among all transitions ever added (a vector add numbers
    env 0 first). The stored transitions are always the contiguous steps ``stored_steps``: eviction is
    first in, first out.

    Args:
        role: the writer (mode ``"r+"``) or the follower (mode ``"r"``) the store reads and writes
            through; ``create`` and ``open`` make it.
    """

    def __init__(self, role: Role) -> None:
        """A store over its collaborator, a ``Writer`` or a ``Follower`` (``create`` and ``open`` make one)."""
        self._lock = threading.RLock()  # one call at a time (the module docstring's Threads)
        self._pid = os.getpid()  # the process that opened the store (``_entered``)
        self._prefetchers: weakref.WeakSet[Prefetcher[Any]] = weakref.WeakSet()
        self._adopt(role)
        role.close_at_exit(self)

    def _adopt(self, role: Role) -> None:
        """Read through ``role``'s files from now on (at opening, and after ``clear``)."""
        self._role = role
        if hasattr(self, "_source"):
            self._source.adopt(role)  # the feeds hold it: they read the new files too
        else:
            self._source = BatchSource(role)
        self._files = role.files
        self._layout = role.files.layout
        self._reader = role.files.reader

    def _entered(self, operation: str) -> threading.RLock:
        """The lock ``operation`` runs under, once this process is known to be the one that opened the
        store (else ``_after_fork`` first)."""
        if self._pid != os.getpid():
            self._after_fork(operation)
        return self._lock

    def _after_fork(self, operation: str) -> None:
        """This process is a fork of the one that opened the store: the collaborator is told
        (``Role.forked``); a writer's copy is closed and ``operation`` refused, naming the fork; a reader
        goes on under new locks (the parent's may have been held by a thread the child does not have)."""
        role = self._role
        role.forked()
        if isinstance(role, Writer):
            raise role.fork_error(operation)
        self._lock = threading.RLock()
        self._pid = os.getpid()

    # -- construction ----------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: PathLike,
        *,
        frame_shape: tuple[int, ...],
        capacity: int,
        stack_size: int = 4,
        num_envs: int = 1,
        action_shape: tuple[int, ...] = (),
        action_dtype: npt.DTypeLike = np.int64,
        sampler: UniformSampler | PrioritizedSampler | None = None,
        frame_encoding: str | None = None,
        reference_scheme: ReferenceScheme | None = None,
        commit_every: int | None = None,
        commit_interval_s: float | None = 5.0,
        fields: dict[str, tuple[tuple[int, ...], npt.DTypeLike]] | None = None,
        stack_padding: str = "first",
        frame_dtype: npt.DTypeLike = np.uint8,
        decode_threads: int | None = None,
        max_times_sampled: int | None = None,
    ) -> ReplayStore:
        """Create an empty store at ``path`` (a directory the store owns) and open it for appending.

        The first three arguments are what a user decides: one frame's shape, how many transitions to
        keep, and how many frames an obs stacks. The others have defaults that fit Atari-like image RL.

        Args:
            path: the store's directory; it must not exist, its parent must.
            frame_shape: one frame, such as ``(84, 84)``.
            capacity: the most transitions kept; when full, the oldest is evicted. At least ``num_envs``.
            stack_size: frames per obs.
            num_envs: envs whose transitions each ``add`` takes, side by side.
            action_shape: one action's shape (``()``: a scalar).
            action_dtype: the actions' numpy dtype.
            sampler: ``UniformSampler()`` (None) or a ``PrioritizedSampler``.
            frame_encoding: ``"lz4"`` (each frame alone) or ``"lz4-reference"`` (each frame against an
                earlier frame of its env, arranged by ``reference_scheme``; uint8 only). None:
                ``"lz4-reference"`` for uint8 frames of 64 bytes or more (8x8 and up: images), ``"lz4"``
                for others (on smaller frames a reference saves a few bytes a transition and doubles a
                batch's decode). The benchmarks page has what each costs and saves.
            reference_scheme: the groups of a ``"lz4-reference"`` store (None: groups of 32 frames,
                branching 2).
            commit_every: see ``open``.
            commit_interval_s: see ``open``.
            fields: user fields stored beside each transition, ``{"name": (shape, dtype)}`` (a fixed
                shape; a numeric or bool dtype), such as a recurrent state or a legal-action mask: every
                ``add`` then takes them (``add(..., fields=)``) and every batch gives them
                (``batch.fields``).
            stack_padding: what an obs stack at an episode start holds before the episode's first frame:
                ``"first"`` that frame repeated (gymnasium's ``FrameStackObservation``), ``"zeros"``
                all-zero frames (Dopamine and batch_rl); ``sample``, ``read``, n-step windows, sequences
                and exports all return it so.
            frame_dtype: any numpy bool, integer or float dtype (CartPole's float32 state, a robot's joint
                angles). Frames are stored bit-exact (NaN payloads included), little-endian: a big-endian
                dtype is taken as its little-endian equal, and big-endian frames are converted.
            decode_threads: see ``open``.
            max_times_sampled: as Reverb's table option: a transition drawn that many times (by this
                process's draws: ``sample``, ``sample_sequences`` and their encoded forms) leaves the
                sampling set; a draw from a store whose every transition is exhausted raises as one
                from an empty store does. None or 0: no limit. Saved with the sampler in the header;
                the counts are kept in memory (a reopened uniform store draws every transition anew,
                a prioritized one keeps its exhausted transitions' leaves at 0).

        Returns:
            The new store, open in mode ``"r+"``.

        Raises:
            TypeError: an argument is of the wrong kind (such as a sampler that is neither built-in one,
                or a ``reference_scheme`` that is no ``ReferenceScheme``).
            ValueError: an argument's value is out of range or inconsistent with another (such as a
                ``capacity`` below ``num_envs``, or ``"lz4-reference"`` with frames that are not uint8);
                the message names it, what was expected and what was received.
            StoreExistsError: ``path`` exists.
            StoreLimitError: the store would need more memory, address space or disk than the process
                can get.
        """
        decode_threads = parse_decode_threads(decode_threads)
        schedule = CommitSchedule(commit_every=commit_every, commit_interval_s=commit_interval_s)
        sampler = limited_sampler(sampler, max_times_sampled)
        layout, commit, sampler = creation.new_layout(
            frame_shape=frame_shape, capacity=capacity, stack_size=stack_size, num_envs=num_envs,
            action_shape=action_shape, action_dtype=action_dtype, sampler=sampler, frame_encoding=frame_encoding,
            reference_scheme=reference_scheme, fields=fields, stack_padding=stack_padding, frame_dtype=frame_dtype,
        )
        directory = Path(os.path.realpath(path))  # resolved once: a later chdir moves nothing
        lock = creation.build_store(directory, layout, commit)
        return cls(Writer.open(directory, sampler=sampler, schedule=schedule, lock=lock, decode_threads=decode_threads))

    @classmethod
    def open(
        cls,
        path: PathLike,
        mode: str = "r",
        *,
        sampler: UniformSampler | PrioritizedSampler | None = None,
        commit_every: int | None = None,
        commit_interval_s: float | None = 5.0,
        decode_threads: int | None = None,
    ) -> ReplayStore:
        """Open an existing store read-only (``"r"``) or to read and append (``"r+"``).

        A writer commits by itself (as ``flush`` does) after an add once ``commit_every`` transitions or
        ``commit_interval_s`` seconds have passed since its last commit, and when it is closed,
        garbage-collected or the interpreter exits normally: a crash loses at most the adds of the last
        interval.

        Args:
            path: the store's directory.
            mode: ``"r"`` (read-only, following the writer's commits) or ``"r+"`` (read and append; one
                writer at a time).
            sampler: a sampler configured as the store's (None: the store's own).
            commit_every: commit after this many transitions (None: no count).
            commit_interval_s: commit after this many seconds (None: no clock).
            decode_threads: the most threads a batch (``sample``, ``sample_sequences``, ``read``,
                ``iterate``) decodes on, 1 to 64 (None: no cap). A batch uses as many as its size asks
                (one below 512 KiB of pixels, two from it, one more per 64 KiB), at most the cores this
                process may use (its CPU affinity and cgroup CPU quota, read now); a writer's adds
                compress the frames of one call on them too, from 4 usable cores.

        Returns:
            The open store.

        Raises:
            ValueError: ``mode`` is not ``"r"`` or ``"r+"``, a number is out of range, or ``sampler`` is
                not configured as the store's.
            TypeError: a number is not an int (or, for ``commit_interval_s``, a float).
            StoreNotFoundError: ``path`` holds no store.
            StoreLockedError: ``"r+"`` while another process holds the store open for writing.
            FormatVersionError: the store's format version is not one this code reads (or, for ``"r+"``,
                writes: ``mmreplay convert`` rewrites it); the message has both versions.
            DamagedStoreError: rows or frames the open reads are damaged; the message names them and the way
                out (``mmreplay verify`` lists every damaged row and frame, ``mmreplay.salvage`` copies every
                intact transition into a new store).
            CorruptStoreError: a file of the store fails its checksum, is truncated or is not a store
                file.
            StoreLimitError: the store would need more memory or address space than the process can get.
        """
        decode_threads = parse_decode_threads(decode_threads)
        schedule = CommitSchedule(commit_every=commit_every, commit_interval_s=commit_interval_s)
        writable = parse_mode(mode) == "r+"
        try:
            if writable:
                return cls(Writer.open(Path(path), sampler=sampler, schedule=schedule, decode_threads=decode_threads))
            return cls(Follower.open(Path(path), sampler=sampler, decode_threads=decode_threads))
        except (DamagedRowError, FieldChecksumError, FrameChecksumError, MissingSegmentError) as error:
            raise damaged_store_error(path, error) from None

    # -- properties ------------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        """The mode the store was opened in.

        Returns:
            ``"r"`` or ``"r+"``.
        """
        return self._role.mode

    @property
    def closed(self) -> bool:
        """Whether the store is closed: by ``close``, or, for a writer, by a fork (in the child).

        Returns:
            True once closed.
        """
        return self._files.closed or (self._pid != os.getpid() and isinstance(self._role, Writer))

    @property
    def transitions_added(self) -> int:
        """Transitions ever added, which never decreases, not even at ``clear``.

        A reader (mode ``"r"``) reports the writer's newest commit: it checks the header first, as
        ``sample`` does.

        Returns:
            The count; ``len(store)`` is at most ``capacity`` of them.
        """
        with self._entered("count transitions"):
            self._role.follow()
            return self._role.transitions_added

    @property
    def stored_steps(self) -> range:
        """The steps of the stored transitions, oldest first (a reader's: of the newest commit).

        Returns:
            A contiguous range of steps.
        """
        with self._entered("list stored steps"):
            self._role.follow()
            return stored_steps(self._role.transitions_added, self._layout.capacity, self._role.committed.first_step)

    def __len__(self) -> int:
        return len(self.stored_steps)

    def __repr__(self) -> str:
        if self.closed:
            return f"<Closed ReplayStore {str(self.path)!r}>"
        return (
            f"<ReplayStore {str(self.path)!r} mode={self.mode!r} "
            f"transitions={len(self):,}/{self.capacity:,} frame_shape={self.frame_shape} "
            f"stack_size={self.stack_size} num_envs={self.num_envs}"
            + ("" if self.frame_dtype == np.uint8 else f" frame_dtype={self.frame_dtype}")
            + ("" if self.frame_encoding == "lz4" else f" frame_encoding={self.frame_encoding!r}")
            + ("" if not self._layout.fields else f" fields={[name for name, _, _ in self._layout.fields]}")
            + ">"
        )

    @property
    def bytes_on_disk(self) -> int:
        """Bytes the store's files occupy on disk: allocated blocks, so sparse files count what is written.

        An ``int``; calling it, as when it was a method (``store.bytes_on_disk()``), still gives the count,
        with a ``DeprecationWarning``.

        Returns:
            The total in bytes.
        """
        return DiskBytes(self._files.bytes_on_disk())

    def page_cache_advice(self) -> ReadAdvice:
        """How this process reads the store's segment files through the page cache, and why.

        Segment files that take more than half of the memory the process may use (the lower of the
        machine's ``MemAvailable`` and its memory cgroup's limit minus usage) are mapped with
        ``MADV_RANDOM``, so that a sampled frame reads its own pages, not the disk's read-ahead window
        around them. The figures are read again each time a segment is mapped; this reads them now.

        Returns:
            The record: ``policy`` (``"random"`` or ``"read-around"``), ``segment_files_bytes``,
            ``memory`` (the bytes and their source) and ``reason`` in words.

        Raises:
            ClosedStoreError: The store is closed.
        """
        self._files.check_open("tell its page-cache policy")
        return self._files.frames.read_advice()

    def missing_files(self, limit: int = 1000) -> list[str]:
        """The files the committed contents need that are not there, without reading a frame.

        The transition table, the frame table and each segment file holding a stored frame; only the
        segment files that exist are walked (a header may claim any size).

        Args:
            limit: the most paths to list.

        Returns:
            Their paths, empty for a sound store.

        Raises:
            ClosedStoreError: the store is closed.
        """
        with self._entered("check its files"):
            self._files.check_open("check its files")
            return self._files.missing(self._role.committed, limit=limit)

    # -- adding ----------------------------------------------------------------------------------

    def add(
        self,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        terminated: npt.ArrayLike,
        truncated: npt.ArrayLike,
        *,
        env_mask: npt.ArrayLike | None = None,
        fields: dict[str, npt.ArrayLike] | None = None,
        fragment: bool = False,
    ) -> None:
        """Record one transition per env; with ``num_envs > 1`` every argument has a leading env axis.

        While an env's episode continues, ``obs`` equals its previous ``next_obs`` and only the new frame
        is written; an ``obs`` that does not continue it starts a new episode. Every argument is checked
        before anything is written.

        Args:
            obs: (stack_size, *frame_shape) of ``frame_dtype`` (a frame alone when ``stack_size`` is 1).
            action: of ``action_shape``, castable to ``action_dtype``.
            reward: one number.
            next_obs: the true next observation, the final one when the episode ended. A stacked
                ``next_obs`` must be ``obs`` shifted by one frame, except in a transition that terminated
                or truncated: there any stack (such as the reset observation) is stored whole, as given.
            terminated: the task ended: do not bootstrap.
            truncated: cut by a time limit or the caller: bootstrap from ``next_obs``.
            env_mask: bool, one per env: only the envs marked True are recorded. The others' entries are
                not transitions (gymnasium's next-step autoreset returns such an entry for an env the step
                after its episode ended), so only their shapes and dtypes are checked.
            fields: one array per user field of a store created with ``fields=``, each with the env axis
                in front when ``num_envs > 1``, castable to the field's dtype without overflow (bool from
                bool only).
            fragment: an obs which starts a new episode is not that episode's first (its earlier
                transitions were never recorded), so ``episodes()`` lists it with ``complete=False``.

        Raises:
            TypeError: an argument is of the wrong kind or dtype (such as a ``fragment`` that is no bool).
            ValueError: an argument's shape or value is wrong (such as a stacked ``next_obs`` that is not
                ``obs`` shifted in a transition that did not end, or a missing, extra or mis-shaped
                field); the message names it, what was expected and what was received.
            ReadOnlyStoreError: the store is open with mode ``"r"``.
            ClosedStoreError: the store is closed.
        """
        if not isinstance(fragment, (bool, np.bool_)):
            raise TypeError(f"fragment must be a bool; got {type(fragment).__name__}")
        with self._entered("add"):
            self._role.add(
                obs, action, reward, next_obs, terminated, truncated, env_mask=env_mask, fields=fields,
                fragment=fragment,
            )

    def add_encoded(
        self,
        frames: EncodedFrames,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        terminated: npt.ArrayLike,
        truncated: npt.ArrayLike,
        *,
        env_index: int = 0,
        fields: dict[str, npt.ArrayLike] | None = None,
    ) -> None:
        """Record T consecutive transitions of one env whose frames arrive compressed (``encode_frames``).

        Each step follows ``add``'s rules for env ``env_index``, and the store ends up holding exactly what
        T calls of ``add`` with the decoded pixels would have written. Every frame is checked against its
        checksum and every step validated before the first write. A plain (``"lz4"``) store writes the
        blocks as they came.

        Args:
            frames: the encoded frames the steps index.
            obs: indices into ``frames``: (T,) for single frames or (T, stack_size) for stacks.
            action: (T, *action_shape).
            reward: (T,).
            next_obs: indices into ``frames``, shaped as ``obs``.
            terminated: (T,) bool.
            truncated: (T,) bool.
            env_index: the env the steps belong to.
            fields: the store's user fields, each (T, *shape): step t's values at t, as ``add(...,
                fields=)`` takes one step's (None: the store has none).

        Raises:
            CorruptStoreError: a frame fails its checksum.
            TypeError: an argument is of the wrong kind or dtype.
            ValueError: an argument's shape or value is wrong, the store's frames are not uint8, or
                ``fields`` does not hold exactly the store's user fields.
            ReadOnlyStoreError: the store is open with mode ``"r"``.
        """
        with self._entered("add_encoded"):
            self._role.add_encoded(frames, obs, action, reward, next_obs, terminated, truncated, env_index=env_index,
                                   fields=fields)

    def update_priorities(self, index: npt.ArrayLike, priority: npt.ArrayLike) -> None:
        """Set the priorities of sampled transitions; steps evicted since are ignored.

        Args:
            index: the steps, as a batch's ``index`` gives them.
            priority: one finite priority >= 0 per step, or one for all; with repeated steps the last
                value wins.

        Raises:
            TypeError: the store samples uniformly, or ``index`` is not integer.
            ValueError: a step was never added, or a priority is not finite and >= 0.
            ClosedStoreError: a step was drawn before ``clear()``, or the store is closed.
            ReadOnlyStoreError: the store is open with mode ``"r"``.
        """
        with self._entered("update_priorities"):
            self._role.update_priorities(index, priority)

    # -- committing and following ----------------------------------------------------------------

    def flush(self) -> None:
        """Make everything added so far durable, then commit it: after a crash it is all still there.

        Raises:
            ClosedStoreError: the store is closed.
        """
        with self._entered("flush"):
            self._files.check_open("flush")
            self._role.flush()

    def refresh(self) -> bool:
        """Pick up the writer's newest commit, in mode ``"r"``.

        ``sample`` and ``read`` also do it when the header changed.

        Returns:
            Whether the store changed.

        Raises:
            ClosedStoreError: the store is closed, or a writer's ``clear`` replaced its directory (open
                it again).
        """
        with self._entered("refresh"):
            self._files.check_open("refresh")
            return self._role.refresh()

    def close(self) -> None:
        """Commit (in ``"r+"``) and release the files; closing twice is allowed.

        In a forked child of the process that opened a writer, the child's copy is closed without writing
        anything.
        """
        if self._pid != os.getpid() and isinstance(self._role, Writer):
            self._role.forked()
            return
        with self._entered("close"):
            if self._files.closed:
                return
            self._stop_prefetchers()
            try:
                self._role.close()
            finally:
                autocommit.forget(self)

    def __del__(self, _finalizing: Any = sys.is_finalizing, _warn: Any = warnings.warn) -> None:
        """A dropped store commits (``"r+"``) and releases its files, as ``close`` does; not once the
        interpreter is tearing itself down (its exit commit, ``autocommit``, came first, and the OS
        releases the maps), when the modules this needs may be gone: the two it does need are bound here."""
        if _finalizing() or not hasattr(self, "_role"):
            return
        try:
            self.close()
        except Exception as error:  # noqa: BLE001 - nothing may be raised from __del__
            _warn(f"mmreplay: could not commit {self.path} when it was dropped: {error}", stacklevel=1)

    def __enter__(self) -> ReplayStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _stop_prefetchers(self, reason: BaseException | None = None) -> None:
        """Stop every ``batches()`` iterator; ``reason``: what each raises at its next ``next()`` (else it
        ends)."""
        for prefetcher in list(self._prefetchers):
            prefetcher.close(reason)

    # -- reading ---------------------------------------------------------------------------------

    def sample(
        self,
        batch_size: int,
        rng: np.random.Generator | int | None = None,
        *,
        beta: float = 0.4,
        n_step: int = 1,
        gamma: float = 0.99,
        out: Batch | None = None,
    ) -> Batch:
        """Draw ``batch_size`` stored transitions by the store's sampler (uniform by default).

        The same contents and seed give the same batch, also after close and reopen.

        Args:
            batch_size: how many transitions, drawn with replacement.
            rng: a ``np.random.Generator`` (advanced by the call: pass the same one every call), an int
                seed (a new generator each call: the same int gives the same batch again), or None
                (fresh OS entropy).
            beta: the exponent of a prioritized sampler's importance weights (ignored by a uniform one).
            n_step: with more than 1, ``reward`` is the discounted sum of up to ``n_step`` rewards of the
                same episode, and ``next_obs`` and the flags are those of the last of them.
            gamma: the discount of n-step rewards; ``discount`` is gamma^m for the m reward steps used,
                and 0 where the last of them terminated.
            out: a batch that an earlier call with the same ``batch_size`` and ``n_step`` returned,
                refilled in place and returned: no new arrays. Its previous contents are gone, also where
                the call raises.

        Returns:
            The batch; with a prioritized sampler ``weight`` holds the importance weights for ``beta``.

        Raises:
            ValueError: the store is empty, an argument is out of range, or ``out`` cannot hold the draw
                (a batch whose obs and next_obs share frames cannot hold a transition whose next_obs was
                stored as given).
            TypeError: an argument is of the wrong kind.
            ClosedStoreError: the store is closed, or was cleared since the draw's epoch began.
        """
        with self._entered("sample"):
            return self._source.sample(batch_size, rng, beta=beta, n_step=n_step, gamma=gamma, out=out)

    def sample_encoded(
        self,
        batch_size: int,
        rng: np.random.Generator | int | None = None,
        *,
        beta: float = 0.4,
        n_step: int = 1,
        gamma: float = 0.99,
    ) -> EncodedBatch:
        """``sample``'s draw with its frames left compressed, to send to another process.

        ``encoded.decode()`` is the ``Batch`` that ``sample`` returns with the same arguments and rng. A
        ``"lz4-reference"`` store's batch also carries, once each, the frames its blocks are compressed
        against (``EncodedFrames.references``). The guide's scale page has its sizes.

        Args:
            batch_size: as in ``sample``.
            rng: as in ``sample``.
            beta: as in ``sample``.
            n_step: as in ``sample``.
            gamma: as in ``sample``.

        Returns:
            The stored blocks of the batch's distinct frames, which of them make each obs and next_obs,
            and the rows' user fields (``fields``).

        Raises:
            ValueError: as ``sample`` raises it, or the store's frames cannot travel encoded (frames that
                are not uint8, or ``stack_padding="zeros"``).
            ClosedStoreError: the store is closed, or was cleared since the draw's epoch began.
        """
        with self._entered("sample_encoded"):
            return self._source.sample_encoded(batch_size, rng, beta=beta, n_step=n_step, gamma=gamma)

    def sample_sequences_encoded(
        self,
        batch_size: int,
        length: int,
        rng: np.random.Generator | int | None = None,
        *,
        beta: float = 0.4,
    ) -> EncodedSequenceBatch:
        """``sample_sequences``'s draw with its frames left compressed, for uint8 stores.

        Args:
            batch_size: as in ``sample_sequences``.
            length: as in ``sample_sequences``.
            rng: as in ``sample``.
            beta: as in ``sample``.

        Returns:
            Windows whose ``decode()`` is the ``SequenceBatch`` that ``sample_sequences`` returns with the
            same arguments and rng, byte for byte.

        Raises:
            ValueError: as ``sample_sequences`` raises it, or the store's frames cannot travel encoded
                (as ``sample_encoded``).
            ClosedStoreError: the store is closed, or was cleared since the draw's epoch began.
        """
        with self._entered("sample_sequences_encoded"):
            return self._source.sample_sequences_encoded(batch_size, length, rng, beta=beta)

    def sample_sequences(
        self,
        batch_size: int,
        length: int,
        rng: np.random.Generator | int | None = None,
        *,
        beta: float = 0.4,
        out: SequenceBatch | None = None,
    ) -> SequenceBatch:
        """Draw windows of ``length`` consecutive transitions of one env and episode, for recurrent agents.

        A window may start at any stored transition; with a prioritized sampler it is drawn by the
        priority of its first transition.

        Args:
            batch_size: how many windows.
            length: transitions per window.
            rng: as in ``sample``.
            beta: the exponent of a prioritized sampler's importance weights (ignored by a uniform one).
            out: as in ``sample``, a batch an earlier call with the same sizes returned, refilled in place.

        Returns:
            Fields of (batch_size, length, ...) shape; ``mask`` is False (and the fields zero) past the
            episode's end or past the env's newest transition.

        Raises:
            ValueError: the store is empty, or an argument is out of range.
            ClosedStoreError: the store is closed, or was cleared since the draw's epoch began.
        """
        with self._entered("sample_sequences"):
            return self._source.sample_sequences(batch_size, length, rng, beta=beta, out=out)

    @overload
    def batches(self, batch_size: int, *, prefetch: int = ..., rng: np.random.Generator | int | None = ...,
                reuse: bool = ..., device: None = ..., length: None = ..., **sample_kwargs: Any) -> Prefetcher[Batch]: ...
    @overload
    def batches(self, batch_size: int, *, prefetch: int = ..., rng: np.random.Generator | int | None = ...,
                reuse: bool = ..., device: None = ..., length: int, **sample_kwargs: Any) -> Prefetcher[SequenceBatch]: ...
    @overload
    def batches(self, batch_size: int, *, prefetch: int = ..., rng: np.random.Generator | int | None = ...,
                reuse: bool = ..., device: str | torch.device, decode: str = ..., length: None = ...,
                group: int | None = ..., **sample_kwargs: Any) -> DeviceBatches[TensorBatch]: ...
    @overload
    def batches(self, batch_size: int, *, prefetch: int = ..., rng: np.random.Generator | int | None = ...,
                reuse: bool = ..., device: str | torch.device, decode: str = ..., length: int,
                group: int | None = ..., **sample_kwargs: Any) -> DeviceBatches[TensorSequenceBatch]: ...

    def batches(
        self,
        batch_size: int,
        *,
        prefetch: int = 2,
        rng: np.random.Generator | int | None = None,
        reuse: bool = False,
        device: str | torch.device | None = None,
        decode: str = "host",
        length: int | None = None,
        group: int | None = None,
        **sample_kwargs: Any,
    ) -> Prefetcher[Batch] | Prefetcher[SequenceBatch] | DeviceBatches[Any]:
        """An endless iterator of ``sample`` batches prepared ahead in a background thread while the caller trains.

        It yields exactly what successive ``sample`` calls with the same generator would, in order
        (decoding releases the GIL); errors in the thread are raised in the caller; ``close()`` (or
        garbage collection, or closing the store) stops it.

        Args:
            batch_size: as in ``sample``.
            prefetch: batches prepared ahead.
            rng: as in ``sample``; one generator, advanced batch after batch.
            reuse: refill the batches in place (``sample``'s ``out``), ``prefetch + 2`` of them in turn: a
                batch stays valid until the next ``next()`` (copy what must outlive it).
            device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a ``torch.device``: the batches come as torch
                tensors there, ready on the stream current at ``next()``, refilled in place (None: numpy
                batches).
            decode: ``"host"``, or ``"device"`` to decode the stored lz4 blocks on the GPU (nvCOMP).
            length: windows of ``sample_sequences(batch_size, length, ...)`` instead (None: transitions).
            group: with ``device``, batches the thread draws (each as ``sample`` draws it, in order) and
                decodes in one read, so that its Python runs once per that many batches; an error in a
                read is raised in place of its first batch. None: for a ``UniformSampler``, as many as fit
                1,024 rows, 1 to 8; 1 for any other sampler (a prioritized batch drawn ahead does not see
                the priorities updated since) and for ``decode="device"``.
            **sample_kwargs: ``sample``'s (or ``sample_sequences``') other keywords: ``beta``,
                ``n_step``, ``gamma``.

        Returns:
            A ``Prefetcher`` of ``Batch`` (``SequenceBatch`` with ``length``), or with ``device`` a
            ``DeviceBatches`` of ``TensorBatch`` (``TensorSequenceBatch``).

        Raises:
            TypeError: ``sample_kwargs`` holds ``out`` (``reuse=True`` refills the iterator's own
                batches), or an argument is of the wrong kind.
            ValueError: a number is below 1, or ``device`` or ``decode`` is not one of its choices.
            ClosedStoreError: the store is closed; ``next()`` raises it once the store is cleared.
        """
        with self._entered("batches"):
            self._files.check_open("batches")
        batch_size = parse_positive_int(batch_size, "batch_size")
        prefetch = parse_positive_int(prefetch, "prefetch")
        length = None if length is None else parse_positive_int(length, "length")
        generator = parse_rng(rng)
        if "out" in sample_kwargs:
            raise TypeError("batches() takes no out: reuse=True refills its own batches in place")
        stream, prefetcher = batch_streams.open_batches(
            self, self._source, batch_size, prefetch=prefetch, generator=generator, reuse=reuse, device=device, decode=decode,
            length=length, sample_kwargs=sample_kwargs, group=group,
        )
        self._prefetchers.add(prefetcher)
        return stream

    def read(self, steps: npt.ArrayLike) -> Batch:
        """The stored transitions with these steps, in the given order.

        Args:
            steps: stored steps, any order, repeats allowed.

        Returns:
            The batch, ``index`` the steps (``weight`` and ``discount`` 1).

        Raises:
            TypeError: ``steps`` is not a 1-D array of ints.
            StepsEvictedError: a step was evicted (the writer wrapped past it); the error names them.
            IndexError: a step is not stored otherwise (never added, or removed by ``clear()``).
            ClosedStoreError: the store is closed.
        """
        with self._entered("read"):
            self._files.check_open("read")
            return reads.read_steps(self._role, self._reader, steps)

    def iterate(self, batch_size: int, *, start: int | None = None, stop: int | None = None) -> Iterator[Batch]:
        """Every stored transition of steps ``[start, stop)`` exactly once, in step order: an ordered pass.

        The pass covers the transitions stored when it is called: what a writer appends later is not in
        it, and what it holds is what that commit held (stored rows never change). Memory stays that of
        one batch.

        Args:
            batch_size: transitions per batch (the last one shorter).
            start: the first step (None: ``stored_steps.start``); within ``stored_steps``.
            stop: the step after the last (None: ``stored_steps.stop``); within ``stored_steps``.

        Returns:
            An iterator of batches as ``read`` gives them. A writer that evicts a step before the pass reaches it makes
            the next batch raise ``StepsEvictedError`` (an ``IndexError``) naming the steps lost (a
            capacity larger than what is added during a pass avoids it); a ``clear()`` since the pass
            began makes it raise ``ClosedStoreError``.

        Raises:
            TypeError: ``start`` or ``stop`` is not an int.
            ValueError: ``batch_size`` is below 1, or ``start`` and ``stop`` are not within
                ``stored_steps``, in order.
            ClosedStoreError: the store is closed.
        """
        with self._entered("iterate"):
            self._files.check_open("iterate")
        return passes.ordered_pass(self, batch_size, start=start, stop=stop, epoch=lambda: self._files)

    def sample_episodes(
        self, n: int, rng: np.random.Generator | int | None = None, *, weighting: str = "uniform"
    ) -> list[Batch]:
        """Draw ``n`` whole episodes with replacement, each as one ``Batch`` of its transitions in step order.

        Drawn from the stored episodes whose transitions are all stored and which have ended (terminated,
        truncated, or cut by a new episode of their env).

        Args:
            n: how many episodes.
            rng: as in ``sample``.
            weighting: ``"uniform"`` draws every such episode with the same probability (Minari's
                ``sample_episodes``); ``"length"`` draws each with probability proportional to its number
                of transitions (the episode of a uniformly drawn transition).

        Returns:
            ``n`` batches, each ``read`` of an episode's steps.

        Raises:
            TypeError: ``n`` is not an int.
            ValueError: ``n`` is below 1, ``weighting`` is not one of the two, or no stored episode is
                complete and ended.
            ClosedStoreError: the store is closed.
        """
        with self._entered("sample_episodes"):
            self._files.check_open("sample_episodes")
            return passes.sample_episodes(self, n, rng, weighting=weighting)

    def episodes(self) -> EpisodeList:
        """The stored episodes, oldest first.

        Returns:
            The episode list: each episode's id (its first step), env, steps, return, how it ended and
            whether it is complete; ``by_id(id)`` finds one.

        Raises:
            ClosedStoreError: the store is closed.
        """
        with self._entered("list episodes"):
            self._files.check_open("list episodes")
            return reads.list_episodes(self._role)

    # -- starting over ---------------------------------------------------------------------------

    def clear(self) -> None:
        """Remove every transition: the store becomes an empty store with the same layout and sampler.

        The store enters a new *epoch*: steps keep counting (``transitions_added`` stays, ``stored_steps``
        is empty and starts there), so a step (``batch.index``) is never reused. What was drawn before is
        refused after, in this process as in a reader's: ``update_priorities`` with an index from before
        (``ClosedStoreError``), ``read`` of such a step (``IndexError``), a pass of ``iterate`` or a
        ``batches()`` iterator begun before (``ClosedStoreError``).

        Atomic: the empty store is built beside the directory and exchanged with it in one step, so a
        crash leaves either the old store or the empty one at the path (at worst with the other left in a
        hidden sibling directory ``.NAME.clearing-XXXXXXXX``, which may be deleted), and a failure before
        the exchange (a full disk) leaves the old store and this writer as they were. Readers open on the
        old store raise ``ClosedStoreError`` at their next refresh: open them again.

        Raises:
            ReadOnlyStoreError: the store is open with mode ``"r"``.
            ClosedStoreError: the store is closed.
            OSError: the empty store could not be built (such as a full disk); nothing changed.
        """
        with self._entered("clear"):
            self._role.check_writable("clear")
            # Batches drawn before the clear name transitions that are gone: their iterators say so.
            self._stop_prefetchers(ClosedStoreError(
                "batches() was stopped by clear(): its batches were drawn from the store before it; call batches() "
                "again"
            ))
            role = self._role
            with self._files.lock:
                try:
                    self._adopt(role.cleared())
                except BaseException:
                    # Interrupted after the exchange: the empty store is the store now, whatever came after.
                    if isinstance(role, Writer) and role.replaced_by is not None:
                        self._adopt(role.replaced_by)
                    raise
