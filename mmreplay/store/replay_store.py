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
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import numpy.typing as npt

from mmreplay.batch import Batch, SequenceBatch
from mmreplay.errors import ClosedStoreError
from mmreplay.frames.reference_scheme import ReferenceScheme
from mmreplay.frames.wire import EncodedFrames
from mmreplay.gpu.tensor_batches import TensorBatch, TensorSequenceBatch
from mmreplay.sampling.samplers import PrioritizedSampler, UniformSampler
from mmreplay.store import passes, reads
from mmreplay.store.batch_source import BatchSource
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
    ``with`` closes it (which commits).
    """

    def __init__(self, role: Role) -> None:
        """A store over its collaborator, a ``Writer`` or a ``Follower`` (``create`` and ``open`` make one)."""
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
    ) -> ReplayStore:
        """Create an empty store at ``path`` (a directory the store owns) and open it for appending.

        ``capacity`` counts transitions; when full, the oldest transition is evicted. ``frame_shape`` is
        one frame (e.g. ``(84, 84)``); obs stacks hold ``stack_size`` frames. ``frame_encoding`` is
        ``"lz4"`` (each frame alone) or ``"lz4-reference"`` (each frame against an earlier frame of its
        env, arranged by ``reference_scheme``), and by default (None) ``"lz4-reference"`` for uint8 frames
        of 64 bytes or more (8x8 and up: images), ``"lz4"`` for others (on smaller frames a reference saves
        a few bytes a transition and doubles a batch's decode). ``"lz4-reference"``, by default groups of
        256 frames with branching 2: on Atari 3x (Pong) to 6.5x (MsPacman) fewer bytes per transition; on
        2 cores, adds at 0.9x of plain's rate on Pong (0.7x-0.9x from 8 envs) and 0.9x-1.5x on Breakout and
        MsPacman, samples at 1x-2.2x (see ``mmreplay.frames.encodings`` and the manual's benchmarks).
        ``commit_every`` and ``commit_interval_s``: see ``open``. ``fields`` declares user fields stored
        beside each transition, ``{"name": (shape, dtype)}`` (a fixed shape; a numeric or bool dtype), such
        as a recurrent state or a legal-action mask: every ``add`` then takes them (``add(..., fields=)``)
        and every batch gives them (``batch.fields``). ``stack_padding`` says what an obs stack at an
        episode start holds before the episode's first frame: ``"first"`` that frame repeated (gymnasium's
        ``FrameStackObservation``), ``"zeros"`` all-zero frames (Dopamine and batch_rl); ``sample``,
        ``read``, n-step windows, sequences and exports all return it so.
        ``frame_dtype`` is any numpy bool, integer or float dtype (CartPole's float32 state, a robot's
        joint angles); frames are stored bit-exact (NaN payloads included), little-endian: a big-endian
        ``frame_dtype`` is taken as its little-endian equal, and big-endian frames are converted (the same
        values). ``"lz4-reference"`` takes uint8 only. ``decode_threads``: see ``open``.
        """
        decode_threads = parse_decode_threads(decode_threads)
        schedule = CommitSchedule(commit_every=commit_every, commit_interval_s=commit_interval_s)
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

        A writer commits by itself (as ``flush`` does) after an add once ``commit_every`` transitions
        (None: no count) or ``commit_interval_s`` seconds (None: no clock) have passed since its last
        commit, and when it is closed, garbage-collected or the interpreter exits normally: a crash loses
        at most the adds of the last interval.

        A batch (``sample``, ``sample_sequences``, ``read``, ``iterate``) decodes on as many threads as its
        size asks (``mmreplay.frames.threads``: one below 512 KiB of pixels, two from it, one more per 64
        KiB), at most the cores this process may use (its CPU affinity and cgroup CPU quota, read now) and
        at most ``decode_threads`` (None: no cap; 1 to 64); a writer's adds compress the frames of one call
        on them too, from 4 usable cores.
        """
        decode_threads = parse_decode_threads(decode_threads)
        schedule = CommitSchedule(commit_every=commit_every, commit_interval_s=commit_interval_s)
        if parse_mode(mode) == "r+":
            return cls(Writer.open(Path(path), sampler=sampler, schedule=schedule, decode_threads=decode_threads))
        return cls(Follower.open(Path(path), sampler=sampler, decode_threads=decode_threads))

    # -- properties ------------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return self._role.mode

    @property
    def closed(self) -> bool:
        return self._files.closed

    @property
    def transitions_added(self) -> int:
        """Transitions ever added (never decreases); ``len(store) == min(transitions_added, capacity)``.

        A reader (mode ``"r"``) reports the writer's newest commit: it checks the header first, as
        ``sample`` does."""
        self._role.follow()
        return self._role.transitions_added

    @property
    def stored_steps(self) -> range:
        """The steps of the stored transitions, oldest first (a reader's: of the newest commit)."""
        self._role.follow()
        return stored_steps(self._role.transitions_added, self._layout.capacity, self._role.committed.first_step)

    def __len__(self) -> int:
        self._role.follow()
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
        """Bytes the store's files occupy on disk (allocated blocks, so sparse files count what is written).

        An ``int``; calling it, as when it was a method (``store.bytes_on_disk()``), still gives the count,
        with a ``DeprecationWarning``."""
        return DiskBytes(self._files.bytes_on_disk())

    def missing_files(self, limit: int = 1000) -> list[str]:
        """The files the committed contents need that are not there (the transition table, the frame
        table, each segment file holding a stored frame), at most ``limit`` of them; empty for a sound
        store. Reads no frame, and walks only the segment files that exist (a header may claim any size)."""
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
        """Record one transition per env (with ``num_envs > 1`` every argument has a leading env axis).

        ``next_obs`` is the true next observation (the final one when the episode ended). While an env's
        episode continues, ``obs`` equals its previous ``next_obs`` and only the new frame is written. A
        stacked ``next_obs`` must be ``obs`` shifted by one frame, except in a transition that terminated
        or truncated: there any stack (such as the reset observation) is stored whole, as given.
        ``env_mask`` (bool, one per env) records only the envs marked True: the others' entries are not
        transitions (gymnasium's next-step autoreset returns such an entry for an env the step after its
        episode ended: its reset obs, which is no shifted stack), so only their shapes and dtypes are
        checked, not their values. ``fragment=True`` says that an obs which starts a new episode is not
        that episode's first: its earlier transitions were never recorded (an import from a source that
        lost them), so ``episodes()`` lists it with ``complete=False``.

        ``fields`` (a store created with ``fields=``): one array per user field, each with the env axis in
        front when ``num_envs > 1``, castable to the field's dtype without overflow (bool from bool only);
        a missing, extra, mis-shaped or mis-typed field is refused before anything is written.
        """
        if not isinstance(fragment, (bool, np.bool_)):
            raise TypeError(f"fragment must be a bool; got {type(fragment).__name__}")
        self._role.add(
            obs, action, reward, next_obs, terminated, truncated, env_mask=env_mask, fields=fields, fragment=fragment
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
    ) -> None:
        """Record T consecutive transitions of one env whose frames arrive compressed (``encode_frames``).

        ``obs`` and ``next_obs`` are indices into ``frames``: (T,) for single frames or (T, stack_size)
        for stacks; ``action``, ``reward``, ``terminated`` and ``truncated`` have a leading axis of T.
        Each step follows ``add``'s rules for env ``env_index``, and the store ends up holding exactly
        what T calls of ``add`` with the decoded pixels would have written. Every frame is checked
        against its checksum and every step validated before the first write (``CorruptStoreError``,
        ``TypeError``, ``ValueError``). A plain (``"lz4"``) store writes the blocks as they came.
        """
        self._role.add_encoded(
            frames, obs, action, reward, next_obs, terminated, truncated, env_index=env_index
        )

    def update_priorities(self, index: npt.ArrayLike, priority: npt.ArrayLike) -> None:
        """Set the priorities of sampled transitions (``batch.index``); steps evicted since are ignored,
        and with repeated steps the last value wins."""
        self._role.update_priorities(index, priority)

    # -- committing and following ----------------------------------------------------------------

    def flush(self) -> None:
        """Make everything added so far durable, then commit it: after a crash it is all still there."""
        self._files.check_open("flush")
        self._role.flush()

    def refresh(self) -> bool:
        """Pick up the writer's newest commit (mode ``"r"``; ``sample`` and ``read`` also do it when the
        header changed). Returns whether the store changed."""
        self._files.check_open("refresh")
        return self._role.refresh()

    def close(self) -> None:
        """Commit (in ``"r+"``) and release the files. Closing twice is allowed."""
        if self.closed:
            return
        self._stop_prefetchers()
        try:
            self._role.close()
        finally:
            autocommit.forget(self)

    def __del__(self) -> None:
        """A dropped store commits (``"r+"``) and releases its files, as ``close`` does."""
        if not hasattr(self, "_role") or self.closed:
            return
        try:
            self.close()
        except Exception as error:  # noqa: BLE001 - nothing may be raised from __del__
            import warnings

            warnings.warn(f"mmreplay: could not commit {self.path} when it was dropped: {error}", stacklevel=1)

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
        """``batch_size`` stored transitions drawn by the store's sampler (uniform by default).

        With a prioritized sampler, ``batch.weight`` holds the importance weights for ``beta``. With
        ``n_step > 1``, ``reward`` is the discounted sum of up to ``n_step`` rewards of the same episode,
        ``next_obs`` and the flags are those of the last of them. ``discount`` is gamma^m for the m
        reward steps used (m = 1 without n_step), and 0 where the last of them terminated. ``rng``: a
        ``np.random.Generator`` (advanced by the call: pass the same one every call), an int seed (a new
        generator each call: the same int gives the same batch again), or None (fresh OS entropy).
        The same contents and seed give the same batch, also after close and reopen.

        ``out``, a batch that an earlier call with the same ``batch_size`` and ``n_step`` returned, is
        refilled in place and returned: no new arrays (their allocation and first-touch page faults cost
        as much as decoding a batch). Its previous contents are gone, also where the call raises. A
        batch whose obs and next_obs share frames (one without a transition whose next_obs was stored
        as given) cannot hold one that has such a transition: ``ValueError`` then.
        """
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
        """``sample``'s draw with its frames left compressed: an ``EncodedBatch`` (the stored blocks of the
        batch's distinct frames, and which make each obs and next_obs), ~25x smaller than the decoded
        batch on Atari, to send to another process. ``encoded.decode()`` is the ``Batch`` that ``sample``
        returns with the same arguments and rng. A ``"lz4-reference"`` store's batch also carries, once
        each, the frames its blocks are compressed against (``EncodedFrames.references``)."""
        return self._source.sample_encoded(batch_size, rng, beta=beta, n_step=n_step, gamma=gamma)

    def sample_sequences_encoded(
        self,
        batch_size: int,
        length: int,
        rng: np.random.Generator | int | None = None,
        *,
        beta: float = 0.4,
    ) -> EncodedSequenceBatch:
        """``sample_sequences``'s draw with its frames left compressed: an ``EncodedSequenceBatch`` whose
        ``decode()`` is the ``SequenceBatch`` that ``sample_sequences`` returns with the same arguments
        and rng, byte for byte. uint8 stores without user fields, as ``sample_encoded``."""
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
        """Windows of ``length`` consecutive transitions of one env and episode, for recurrent agents.

        Fields have a (batch_size, length, ...) shape; ``mask`` is False (and the fields zero) past the
        episode's end or past the env's newest transition. A window may start at any stored transition;
        with a prioritized sampler it is drawn by the priority of its first transition. ``out``: as in
        ``sample``, a batch an earlier call with the same sizes returned, refilled in place.
        """
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
        """An endless iterator of ``sample(batch_size, rng, **sample_kwargs)`` batches, prepared ahead in a
        background thread (decoding releases the GIL) while the caller trains; with ``length``, windows of
        ``sample_sequences(batch_size, length, rng, **sample_kwargs)``.

        It yields exactly what successive ``sample`` calls with the same generator would, in order;
        errors in the thread are raised in the caller; ``close()`` (or garbage collection, or closing
        the store) stops it. With ``reuse=True`` the batches are refilled in place (``sample``'s
        ``out``), ``prefetch + 2`` of them in turn: a batch stays valid until the next ``next()``
        (copy what must outlive it).

        With ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``, a ``torch.device``) they come as torch tensors
        there, ready on the stream current at ``next()``, refilled in place; ``decode="device"`` decodes the
        stored lz4 blocks on the GPU (nvCOMP). The thread draws a ``group`` of batches (each as
        ``sample`` draws it, in order; ``ShardedReplay.batches``' ``group`` likewise) and decodes them in one
        read, so that its Python, which holds the GIL an eager learner waits for, runs once per that many
        batches; an error in a read is raised in place of its first batch. By default (None), for a ``UniformSampler``, as many as fit 1,024 rows, 1 to 8 (8
        for batches of 32); 1 for any other sampler (a prioritized batch drawn ahead does not see the
        priorities updated since) and for ``decode="device"``. See ``mmreplay.store.feeds.device_batches``.
        """
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
        """The stored transitions with these steps, in the given order."""
        self._files.check_open("read")
        return reads.read_steps(self._role, self._reader, steps)

    def iterate(self, batch_size: int, *, start: int | None = None, stop: int | None = None) -> Iterator[Batch]:
        """Every stored transition of steps ``[start, stop)`` exactly once, in step order, in batches of
        ``batch_size`` (the last one shorter) as ``read`` gives them: an ordered pass, epoch by epoch.

        The pass covers the transitions stored when it is called (``start`` and ``stop`` default to
        ``stored_steps``' ends and must lie within them): what a writer appends later is not in it, and
        what it holds is what that commit held (stored rows never change). Memory stays that of one
        batch. A writer that evicts a step before the pass reaches it makes the next batch raise
        ``StepsEvictedError`` (an ``IndexError``) naming the steps lost (a capacity larger than what is
        added during a pass avoids it).
        """
        self._files.check_open("iterate")
        return passes.ordered_pass(self, batch_size, start=start, stop=stop, epoch=lambda: self._files)

    def sample_episodes(
        self, n: int, rng: np.random.Generator | int | None = None, *, weighting: str = "uniform"
    ) -> list[Batch]:
        """``n`` whole episodes drawn with replacement from the stored episodes whose transitions are all
        stored and which have ended (terminated, truncated, or cut by a new episode of their env), each
        as one ``Batch`` of its transitions in step order (``read`` of its steps).

        ``weighting="uniform"`` draws every such episode with the same probability (Minari's
        ``sample_episodes``); ``"length"`` draws each with probability proportional to its number of
        transitions (the episode of a uniformly drawn transition). ``rng``: as in ``sample``.
        """
        self._files.check_open("sample_episodes")
        return passes.sample_episodes(self, n, rng, weighting=weighting)

    def episodes(self) -> EpisodeList:
        """The stored episodes, oldest first: id (the first step), env, steps, return, how each ended, whether
        it is complete; ``by_id(id)`` finds one."""
        self._files.check_open("list episodes")
        return reads.list_episodes(self._role)

    # -- starting over ---------------------------------------------------------------------------

    def clear(self) -> None:
        """Remove every transition: the store becomes an empty store with the same layout (and sampler),
        in a new *epoch*: steps keep counting (``transitions_added`` stays, ``stored_steps`` is empty and
        starts there), so a step (``batch.index``) is never reused. What was drawn before is refused after:
        ``update_priorities`` with an index from before (``ClosedStoreError``, "drawn before clear()"),
        ``read`` of such a step (``IndexError``, "removed by clear()"), a pass of ``iterate`` or a
        ``batches()`` iterator begun before (``ClosedStoreError``), in this process as in a reader's.

        Atomic: the empty store is built beside the directory (its writer whole, every block reserved)
        and exchanged with it in one step, so a crash leaves either the old store or the empty one at the
        path (at worst with the other left in a hidden sibling directory ``.NAME.clearing-XXXXXXXX``, which
        may be deleted), and a failure before the exchange (a full disk) leaves the old store and this
        writer as they were. Readers open on the old store raise ``ClosedStoreError`` at their next
        refresh: open them again.
        """
        self._role.check_writable("clear")
        # Batches drawn before the clear name transitions that are gone: their iterators say so.
        self._stop_prefetchers(ClosedStoreError(
            "batches() was stopped by clear(): its batches were drawn from the store before it; call batches() again"
        ))
        with self._files.lock:
            self._adopt(self._role.cleared())
