"""The public store: ``ReplayStore.create`` / ``open``, ``add``, ``sample``, ``read``, ``flush``, ``close``.

Vocabulary: a *transition* is (obs, action, reward, next_obs, terminated, truncated) from one env; its
*step* numbers it among all transitions ever added (a vector add numbers env 0 first). Stored transitions are always the contiguous steps ``[oldest, transitions_added)``:
eviction is first in, first out. Frames are written once; obs and next_obs stacks are rebuilt from the
frame ring's episode links when read.

Commit protocol: frames and rows are written into memory-mapped files at once (so ``sample`` sees them),
and ``flush`` makes them durable and then replaces the header, which is the only thing that makes them
count after a crash. Ring slots that the committed header still counts are never reused before the next
commit: when an add would need one, the store commits first (an automatic flush).
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

import numpy as np
import numpy.typing as npt

from mmreplay.batch import Batch, SequenceBatch
from mmreplay.disk import directory_swap, header
from mmreplay.disk.files import file_signature
from mmreplay.disk.writer_lock import acquire_writer_lock
from mmreplay.errors import (
    ClosedStoreError,
    CorruptStoreError,
    FormatVersionError,
    ReadOnlyStoreError,
    StepsEvictedError,
)
from mmreplay.frames import encodings
from mmreplay.frames.encodings import FrameEncoder
from mmreplay.frames.reference_codec import ReferenceScheme
from mmreplay.frames.ring import FrameChecksumError, MissingSegmentError
from mmreplay.frames.wire import EncodedFrames
from mmreplay.rows import stacking
from mmreplay.rows.episode_windows import follow_episodes
from mmreplay.rows.fields import FieldChecksumError, FieldTable
from mmreplay.rows.transitions import TERMINATED, TRUNCATED, RowChecksumError, TransitionTable, row_dtype
from mmreplay.sampling.samplers import Sampler, sampler_from_config
from mmreplay.store import autocommit, creation, encoded_adds, passes
from mmreplay.store.add_arguments import (
    AddArguments,
    AddShapes,
    parse_add,
    parse_env_mask,
    parse_fields,
    parse_single_frames,
    records_every_env,
)
from mmreplay.store.autocommit import CommitSchedule
from mmreplay.store.encoded_batches import EncodedBatch, EncodedSequenceBatch, EncodingReader
from mmreplay.store.env_episodes import (
    FramePlan,
    advance_all,
    continuations,
    load_env_episodes,
    load_env_frames,
    plan_frames,
)
from mmreplay.store.episode_list import Episode, split_episodes
from mmreplay.store.prefetch import Prefetcher, recycling
from mmreplay.store.reading import SharedOutError, TransitionReader
from mmreplay.validation import (
    check_out,
    parse_mode,
    parse_number,
    parse_positive_int,
    parse_priorities,
    parse_rng,
    parse_steps,
)

PathLike = str | os.PathLike[str]
T = TypeVar("T")

_READ_ATTEMPTS = 4  # a reader behind the writer retries this often before calling data corrupt


def _span_text(steps: list[int]) -> str:
    """``5``, or ``5..9`` for the smallest and largest of several steps."""
    return str(steps[0]) if len(steps) == 1 else f"{steps[0]}..{steps[-1]}"


class ReplayStore:
    """A replay store in a directory: frames kept once, lz4-compressed, in a memory-mapped ring on disk.

    Open it like a file: ``ReplayStore.create(path, ...)`` makes a new store (mode ``"r+"``),
    ``ReplayStore.open(path, mode)`` opens one read-only (``"r"``) or for appending (``"r+"``), and
    ``with`` closes it (which commits).
    """

    def __init__(
        self,
        directory: Path,
        layout: header.Layout,
        commit: header.Commit,
        *,
        mode: str,
        sampler: Sampler,
        lock: IO[bytes] | None,
        schedule: CommitSchedule,
        format_version: int = header.FORMAT_VERSION,
    ) -> None:
        self._constructed = False  # until the end: a store whose opening failed is never committed
        self._format_version = format_version
        self._directory = directory
        self._layout = layout
        self._commit = commit
        self._mode = mode
        self._sampler = sampler
        self._writer_lock = lock
        # Serializes adds, commits and reads between the caller and a prefetching thread.
        self._lock = threading.RLock()
        self._prefetchers: weakref.WeakSet[Prefetcher[Any]] = weakref.WeakSet()
        self._action_dtype = np.dtype(layout.action_dtype)
        self._add_shapes = AddShapes.of(
            frame_shape=layout.frame_shape,
            stack_size=layout.stack_size,
            num_envs=layout.num_envs,
            action_shape=layout.action_shape,
            action_dtype=self._action_dtype,
            frame_dtype=np.dtype(layout.frame_dtype),
        )
        self._transitions_added = commit.transitions_added
        self._frames = encodings.open_ring(directory, layout, commit, writable=mode == "r+")
        self._encoder = encodings.encoder_for(layout, directory)
        self._table = TransitionTable(
            directory / header.TRANSITIONS_NAME,
            dtype=row_dtype(layout.action_shape, self._action_dtype, layout.num_envs),
            row_slots=layout.row_slots,
            writable=mode == "r+",
            version_3=format_version == 3,
        )
        self._field_table = (
            FieldTable(
                directory / header.FIELDS_NAME, specs=layout.fields, row_slots=layout.row_slots, writable=mode == "r+"
            )
            if layout.fields
            else None
        )
        # Which files this object maps: a ``clear`` by the writer replaces them (see ``refresh``).
        self._table_inode = os.stat(directory / header.TRANSITIONS_NAME).st_ino
        self._reader = TransitionReader(
            self._table,
            self._frames,
            stack_size=layout.stack_size,
            action_dtype=self._action_dtype,
            field_table=self._field_table,
            zero_padding=layout.stack_padding == "zeros",
        )
        self._closed = False
        # ``add`` may take its fast path (``_add_single_frames``): a writer of plain lz4 frames, still open.
        self._fast_add = mode == "r+" and not self._encoder.records_references
        self._set_room_limits()
        self._header_signature: tuple[int, int, int] | None = file_signature(directory / header.HEADER_NAME)
        self._read_signature = self._header_signature  # of the header refresh read last
        if mode == "r+":
            self._frames.remove_other_generations()
        self._load_env_state()
        sampler.open(
            directory,
            slots=layout.row_slots,
            stored=self._stored(),
            writable=mode == "r+",
            state=commit.sampler_state,
        )
        self._schedule = schedule
        if mode == "r+":
            schedule.committed(self._transitions_added)
            autocommit.close_at_exit(self)
        self._constructed = True

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
        sampler: Sampler | None = None,
        frame_encoding: str = "lz4",
        reference_scheme: ReferenceScheme | None = None,
        commit_every: int | None = None,
        commit_interval_s: float | None = 5.0,
        fields: dict[str, tuple[tuple[int, ...], npt.DTypeLike]] | None = None,
        stack_padding: str = "first",
        frame_dtype: npt.DTypeLike = np.uint8,
    ) -> ReplayStore:
        """Create an empty store at ``path`` (a directory the store owns) and open it for appending.

        ``capacity`` counts transitions; when full, the oldest transition is evicted. ``frame_shape`` is
        one frame (e.g. ``(84, 84)``); obs stacks hold ``stack_size`` frames. ``frame_encoding`` is
        ``"lz4"`` (each frame alone) or ``"lz4-reference"`` (each frame against an earlier frame of its
        env, arranged by ``reference_scheme``, by default groups of 256 frames with branching 4: on
        Atari 2.4x (Pong) to 5.9x (MsPacman) fewer bytes per transition, 1.1x to 1.7x slower adds, and
        samples 1.2x (MsPacman) to 2.9x (Pong) slower; see ``mmreplay.frames.encodings`` and the README).
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
        values). ``"lz4-reference"`` takes uint8 only.
        """
        schedule = CommitSchedule(commit_every=commit_every, commit_interval_s=commit_interval_s)
        layout, commit, sampler = creation.new_layout(
            frame_shape=frame_shape, capacity=capacity, stack_size=stack_size, num_envs=num_envs,
            action_shape=action_shape, action_dtype=action_dtype, sampler=sampler, frame_encoding=frame_encoding,
            reference_scheme=reference_scheme, fields=fields, stack_padding=stack_padding, frame_dtype=frame_dtype,
        )
        directory = Path(path)
        lock = creation.build_store(directory, layout, commit)
        return cls._open(directory, "r+", sampler=sampler, schedule=schedule, lock=lock)

    @classmethod
    def open(
        cls,
        path: PathLike,
        mode: str = "r",
        *,
        sampler: Sampler | None = None,
        commit_every: int | None = None,
        commit_interval_s: float | None = 5.0,
    ) -> ReplayStore:
        """Open an existing store read-only (``"r"``) or to read and append (``"r+"``).

        A writer commits by itself (as ``flush`` does) after an add once ``commit_every`` transitions
        (None: no count) or ``commit_interval_s`` seconds (None: no clock) have passed since its last
        commit, and when it is closed, garbage-collected or the interpreter exits normally: a crash loses
        at most the adds of the last interval.
        """
        schedule = CommitSchedule(commit_every=commit_every, commit_interval_s=commit_interval_s)
        return cls._open(path, mode, sampler=sampler, schedule=schedule)

    @classmethod
    def _open(
        cls, path: PathLike, mode: str, *, sampler: Sampler | None, schedule: CommitSchedule,
        lock: IO[bytes] | None = None,
    ) -> ReplayStore:
        """Open the store at ``path``; ``lock``: the writer lock, already held (by ``create``).

        A reader retries when the header changed while it opened (a descheduled reader finds the files its
        header names reused or replaced by a live writer's later commits): only an error under a header
        that stayed the same is corruption."""
        mode = parse_mode(mode)
        if mode == "r+":
            return cls._open_once(path, mode, sampler=sampler, schedule=schedule, lock=lock)
        header_path = Path(path) / header.HEADER_NAME
        for _ in range(_READ_ATTEMPTS - 1):
            signature = file_signature(header_path)
            try:
                return cls._open_once(path, mode, sampler=sampler, schedule=schedule, lock=None)
            except CorruptStoreError:
                if file_signature(header_path) == signature:
                    raise
        return cls._open_once(path, mode, sampler=sampler, schedule=schedule, lock=None)

    @classmethod
    def _open_once(
        cls, path: PathLike, mode: str, *, sampler: Sampler | None, schedule: CommitSchedule,
        lock: IO[bytes] | None,
    ) -> ReplayStore:
        directory = Path(path)
        layout, commit, version = header.read_versioned_header(directory)
        if mode == "r+" and version != header.FORMAT_VERSION:
            raise FormatVersionError(
                f"{directory / header.HEADER_NAME}: format version {version} opens read-only (mode 'r'): its "
                f"rows carry version {version}'s checksum; to append, export it and import it into a new store"
            )
        if lock is None and mode == "r+":
            lock = acquire_writer_lock(directory / header.LOCK_NAME)
        try:
            if lock is not None:
                # A writer that died may have left newer, uncommitted files: reread under the lock.
                layout, commit = header.read_header(directory)
            if sampler is None:
                sampler = sampler_from_config(layout.sampler)
            elif sampler.config() != layout.sampler:
                raise ValueError(
                    f"sampler {sampler.config()} does not match the store's sampler {layout.sampler}; "
                    "open without sampler= to use the store's own"
                )
            return cls(
                directory, layout, commit, mode=mode, sampler=sampler, lock=lock, schedule=schedule,
                format_version=version,
            )
        except BaseException:
            if lock is not None:
                lock.close()
            raise

    # -- properties ------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._directory

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def format_version(self) -> int:
        """The on-disk format version this store was written in (an older one opens read-only)."""
        return self._format_version

    @property
    def frame_shape(self) -> tuple[int, ...]:
        return self._layout.frame_shape

    @property
    def frame_dtype(self) -> np.dtype:
        """The frames' dtype (uint8 unless ``create`` was given another); obs and next_obs have it."""
        return self._frames.frame_dtype

    @property
    def capacity(self) -> int:
        return self._layout.capacity

    @property
    def stack_size(self) -> int:
        return self._layout.stack_size

    @property
    def num_envs(self) -> int:
        return self._layout.num_envs

    @property
    def action_shape(self) -> tuple[int, ...]:
        return self._layout.action_shape

    @property
    def action_dtype(self) -> np.dtype:
        return self._action_dtype

    @property
    def sampler(self) -> Sampler:
        return self._sampler

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """The user fields, name -> (shape, dtype), in declaration order (empty for a store without any)."""
        return {name: (shape, np.dtype(dtype).newbyteorder("=")) for name, shape, dtype in self._layout.fields}

    @property
    def stack_padding(self) -> str:
        """What an obs stack at an episode start holds before its first frame: ``"first"`` (that frame
        repeated) or ``"zeros"`` (all-zero frames); fixed at create time."""
        return self._layout.stack_padding

    @property
    def frame_encoding(self) -> str:
        """How frames are compressed: ``"lz4"`` or ``"lz4-reference"`` (fixed at create time)."""
        return self._layout.frame_encoding

    @property
    def reference_scheme(self) -> ReferenceScheme | None:
        """The scheme of a ``"lz4-reference"`` store (which frames each is compressed against); else None."""
        return encodings.scheme_of(self._layout, self._directory)

    @property
    def transitions_added(self) -> int:
        """Transitions ever added (never decreases); ``len(store) == min(transitions_added, capacity)``.

        A reader (mode ``"r"``) reports the writer's newest commit: it checks the header first, as
        ``sample`` does."""
        self._follow_writer()
        return self._transitions_added

    @property
    def stored_steps(self) -> range:
        """The steps of the stored transitions, oldest first (a reader's: of the newest commit)."""
        self._follow_writer()
        return self._stored()

    def __len__(self) -> int:
        self._follow_writer()
        return min(self._transitions_added, self.capacity)

    def _stored(self) -> range:
        """``stored_steps`` as this object holds them now, without looking for a newer commit."""
        return range(max(0, self._transitions_added - self.capacity), self._transitions_added)

    def _follow_writer(self) -> None:
        """In a reader, pick up the writer's newest commit when the header changed (one ``stat``)."""
        if (
            self._mode == "r"
            and not self._closed
            and file_signature(self._directory / header.HEADER_NAME) != self._header_signature
        ):
            self.refresh()

    def __repr__(self) -> str:
        if self._closed:
            return f"<Closed ReplayStore {str(self._directory)!r}>"
        return (
            f"<ReplayStore {str(self._directory)!r} mode={self._mode!r} "
            f"transitions={len(self):,}/{self.capacity:,} frame_shape={self.frame_shape} "
            f"stack_size={self.stack_size} num_envs={self.num_envs}"
            + ("" if self.frame_dtype == np.uint8 else f" frame_dtype={self.frame_dtype}")
            + ("" if self.frame_encoding == "lz4" else f" frame_encoding={self.frame_encoding!r}")
            + ("" if not self._layout.fields else f" fields={[name for name, _, _ in self._layout.fields]}")
            + ">"
        )

    def bytes_on_disk(self) -> int:
        """Bytes the store's files occupy on disk (allocated blocks, so sparse files count what is written)."""
        total = 0
        for root, _, files in os.walk(self._directory):
            for name in files:
                try:
                    total += os.stat(os.path.join(root, name)).st_blocks * 512
                except FileNotFoundError:  # a live writer released a segment or replaced a file meanwhile
                    pass
        return total

    def missing_files(self, limit: int = 1000) -> list[str]:
        """The files the committed contents need that are not there (the transition table, the frame
        table, each segment file holding a stored frame), at most ``limit`` of them; empty for a sound
        store. Reads no frame, and walks only the segment files that exist (a header may claim any size)."""
        self._check_open("check its files")
        missing = [str(path) for path in (self._table.path, self._frames._table_path()) if not Path(path).is_file()]
        if len(self):
            first = self._frames.position_of(self._commit.frame_tail) // self._frames.segment_bytes
            last = max(self._frames.bytes_written - 1, 0) // self._frames.segment_bytes
            present = {int(path.stem) for path in (self._directory / header.SEGMENTS_DIR).glob("*.seg")
                       if path.stem.isdigit()}
            segment = first
            while segment <= last and len(missing) < limit:
                if segment not in present:
                    missing.append(str(self._frames._segment_path(segment)))
                segment += 1
        return missing[:limit]

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
        values = None
        if fields is not None or self._field_table is not None:
            self._check_writable("add")
            recorded = None if env_mask is None else parse_env_mask(env_mask, self._add_shapes.num_envs)
            values = parse_fields(fields, self._layout.fields, self._add_shapes, recorded)
        if (
            not fragment
            and self._fast_add
            and self._env_frames_pending is None
            and records_every_env(env_mask, self._add_shapes.num_envs)
            and (
                self._add_single_frames(obs, action, reward, next_obs, terminated, truncated)
                if values is None
                else self._add_single_frames(obs, action, reward, next_obs, terminated, truncated, fields=values)
            )
        ):
            if self._schedule.due(self._transitions_added):
                self.flush()
            return
        self._check_writable("add")
        arguments = parse_add(obs, action, reward, next_obs, terminated, truncated, env_mask, self._add_shapes)
        self._add_parsed(arguments, self._encoder, values=values, fragment=bool(fragment))

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
        self._check_writable("add_encoded")
        if self.frame_dtype != np.uint8:
            raise ValueError(f"add_encoded takes uint8 frames; this store's frame_dtype is {self.frame_dtype}: use add")
        if self._field_table is not None:
            raise ValueError(
                f"add_encoded takes no user fields; this store has fields {list(self.fields)}: use add(..., fields=)"
            )
        send = encoded_adds.parse_encoded_send(
            frames, obs, action, reward, next_obs, terminated, truncated, env_index=env_index, shapes=self._add_shapes
        )
        own = self._encoder
        if own.records_references:  # frames compressed against earlier ones: encoded again, step by step
            for t in range(len(send)):
                self._add_parsed(send.step(t, self.num_envs), own)
        else:
            self._add_send(send, encoded_adds.ReceivedEncoder(own, send))
        if self._schedule.due(self._transitions_added):
            self.flush()

    def _add_send(self, send: encoded_adds.EncodedSend, encoder: FrameEncoder) -> None:
        """A plain store's ``add_encoded``: each run of steps that continue the env's episode with one new
        frame apiece is written at once (``_add_run``), any other step by ``add``'s general path. The
        files end up as T general-path adds leave them: a run stops where one of those adds would have
        committed first (no room left, or ``commit_every`` reached)."""
        if self._env_frames_pending is not None:
            self._load_env_frames()
        steps, t = send.steps, 0
        while t < len(send):
            room = min(self._row_limit - self._transitions_added, self._frame_limit - self._frames.frames_written)
            oldest_stored = max(0, self._transitions_added - self._layout.capacity)
            if (
                room > 0
                and not steps.detached[t]
                and self._episodes[send.env].continued_by(steps.obs[t].tobytes(), steps.stacked,
                                                         oldest_stored_step=oldest_stored)
            ):
                room = int(min(room, max(1, self._schedule.steps_until_due(self._transitions_added))))
                stop = min(send.continuing_until(t), t + room)
                self._add_run(send, t, stop)
                if self._schedule.due(self._transitions_added):
                    self.flush()
                t = stop
            else:
                self._add_parsed(send.step(t, self.num_envs), encoder)
                t += 1

    def _add_run(self, send: encoded_adds.EncodedSend, start: int, stop: int) -> None:
        """Steps ``[start, stop)`` of a send, each continuing the env's episode with one new frame, in one
        write: the frames, rows and links that ``stop - start`` general-path adds write, for a run that
        fits before the next commit (the caller checked). Only the run's last step may end the episode."""
        env, count, steps = send.env, stop - start, send.steps
        episode = self._episodes[env]
        first_step, first_frame = self._transitions_added, self._frames.frames_written
        terminated, truncated = steps.terminated[start:stop], steps.truncated[start:stop]
        with self._lock:
            self._frames.append(send.new_blocks(start, stop), [first_frame - episode.frame_steps[-1]] + [1] * (count - 1))
            self._table.write(
                first_step,
                next_frames=list(range(first_frame, first_frame + count)),
                envs=[env] * count,
                rewards=steps.reward[start:stop],
                flags=(TERMINATED * terminated | TRUNCATED * truncated).tolist(),
                actions=steps.action[start:stop],
            )
            self._count_added(first_step, count)
            self._table.link(episode.last_step, first_step)
            for step in range(first_step + 1, first_step + count):
                self._table.link(step - 1, step)
            for i in range(max(0, count - self.stack_size), count):  # the episode keeps its newest stack
                episode.advance(steps.next_obs[start + i, -1].tobytes(), first_frame + i, step=first_step + i,
                                ended=bool(terminated[i] or truncated[i]))

    def _add_parsed(
        self,
        arguments: AddArguments,
        encoder: FrameEncoder,
        *,
        values: dict[str, npt.NDArray[Any]] | None = None,
        fragment: bool = False,
    ) -> None:
        """``add``'s general path for checked arguments; ``encoder`` compresses the new frames (the store's
        own, or one that hands back frames that arrived compressed: ``encoded.add_encoded``); ``values``
        are the user fields (checked), ``fragment`` as ``add``'s."""
        layout = self._layout
        envs = arguments.envs
        if not envs:
            return
        if self._env_frames_pending is not None:
            self._load_env_frames()
        if encoder.records_references:
            # Commit (if one is due) before encoding: a commit moves the frame tail, and a frame must
            # not be encoded against a reference that the commit releases. An env writes at most
            # 2 * stack_size frames: an episode's obs stack and a detached next_obs stack.
            with self._lock:
                self._make_room(new_rows=len(envs), new_frames=len(envs) * 2 * layout.stack_size)
            encoder.frame_tail = self._commit.frame_tail
        encoder.checkpoint()
        try:
            plan = plan_frames(
                arguments,
                envs,
                self._episodes,
                next_frame_step=self._frames.frames_written,
                oldest_stored_step=max(0, self._transitions_added - layout.capacity),
                encoder=encoder,
                fragment=fragment,
            )
            with self._lock:
                self._write(arguments, plan, values)
        except BaseException:
            encoder.rollback()  # no frame may be encoded against one that was not written
            raise
        if self._schedule.due(self._transitions_added):
            self.flush()

    def _add_single_frames(self, *transition: object, fields: dict[str, npt.NDArray[Any]] | None = None) -> bool:
        """``add``'s fast path, given ``add``'s six transition arguments, for the add a training loop makes
        at nearly every step: each env continues its episode with one new frame (given alone, or as the
        newest of a stack), and no commit is due. It writes exactly what the general path writes
        (test_fast_add checks the files byte for byte), in a third to a half of the time; False, with
        nothing written, when any of that does not hold."""
        parsed = parse_single_frames(self._add_shapes, *transition, terminated_bit=TERMINATED, truncated_bit=TRUNCATED)
        if parsed is None:
            return False
        count = len(parsed.flags)
        first_step = self._transitions_added
        first_frame = self._frames.frames_written
        if first_step + count > self._row_limit or first_frame + count > self._frame_limit:
            return False
        oldest_stored = first_step - self._layout.capacity
        links = continuations(
            self._episodes, parsed.obs, stacked=parsed.stacked, first_frame=first_frame, oldest_stored_step=oldest_stored
        )
        if links is None:
            return False
        previous_steps, prev_deltas = links
        with self._lock:
            if fields:
                self._field_table.write(first_step, fields)  # type: ignore[union-attr]
            self._frames.append_frames(parsed.new_frames, prev_deltas)
            self._table.write_continuations(
                first_step, frame_lead=first_frame - first_step, previous_steps=previous_steps,
                rewards=parsed.reward, flags=parsed.flags, actions=parsed.action,
            )
            advance_all(self._episodes, parsed.next_obs, parsed.flags, first_frame=first_frame, first_step=first_step)
            self._count_added(first_step, count)
        return True

    def _write(self, arguments: AddArguments, plan: FramePlan, fields: dict[str, npt.NDArray[Any]] | None) -> None:
        envs = arguments.envs
        first_step = self._transitions_added
        new_frames = self._frames.frames_written + len(plan.payloads)
        if first_step + len(envs) > self._row_limit or new_frames > self._frame_limit:
            self._make_room(new_rows=len(envs), new_frames=len(plan.payloads))
        if fields:
            self._field_table.write(first_step, {name: array[envs] for name, array in fields.items()})  # type: ignore[union-attr]
        ref_deltas = plan.ref_deltas if self._encoder.records_references else None
        self._frames.append(plan.payloads, plan.prev_deltas, ref_deltas)
        every_env = len(envs) == len(arguments.reward)
        self._table.write(
            first_step,
            next_frames=plan.next_frames,
            envs=envs,
            rewards=arguments.reward if every_env else arguments.reward[envs],
            flags=plan.flags,
            actions=arguments.action if every_env else arguments.action[envs],
        )
        self._count_added(first_step, len(envs))
        for i, env in enumerate(envs):
            episode = self._episodes[env]
            previous = plan.previous_steps[i]
            if previous is not None:
                self._table.link(previous, first_step + i)
            start = plan.starts[i]
            if start is not None:
                episode.start(*start)
            if arguments.detached[env]:
                frames = [frame.tobytes() for frame in arguments.next_obs[env]]
                episode.detach(frames, plan.next_frames[i], step=first_step + i)
                continue
            episode.advance(
                arguments.next_obs[env, -1].tobytes(),
                plan.next_frames[i],
                step=first_step + i,
                ended=bool(arguments.terminated[env] or arguments.truncated[env]),
            )

    def _count_added(self, first_step: int, count: int) -> None:
        """Count the transitions just written from ``first_step`` on, and tell the sampler which came in
        and which they evicted."""
        self._transitions_added = added = first_step + count
        self._sampler.added(range(first_step, added))
        capacity = self._layout.capacity
        if added > capacity:
            self._sampler.evicted(range(max(0, first_step - capacity), added - capacity))

    def _make_room(self, *, new_rows: int, new_frames: int) -> None:
        """Commit (and grow the frame table) before an add would reuse a slot the committed header counts."""
        committed_rows = max(0, self._commit.transitions_added - self.capacity)
        rows_fit = self._transitions_added + new_rows - committed_rows <= self._layout.row_slots
        frames_fit = (
            self._frames.frames_written + new_frames - self._commit.frame_tail <= self._frames.frame_slots
        )
        if rows_fit and frames_fit:
            return
        self.flush()
        needed = self._frames.frames_written + new_frames - self._commit.frame_tail
        if needed > self._frames.frame_slots:
            old_generation = self._frames.generation
            self._frames.grow(max(needed, self._frames.frame_slots * 3 // 2), self._commit.frame_tail)
            self._write_commit(
                replace(
                    self._commit,
                    frame_table_generation=self._frames.generation,
                    frame_slots=self._frames.frame_slots,
                )
            )
            self._frames.remove_generation(old_generation)

    # -- committing ------------------------------------------------------------------------------

    def flush(self) -> None:
        """Make everything added so far durable, then commit it: after a crash it is all still there."""
        self._check_open("flush")
        if self._mode != "r+":
            return
        with self._lock:
            self._frames.sync()
            self._table.sync()
            if self._field_table is not None:
                self._field_table.sync()
            self._sampler.sync()
            # A sampler written before Sampler.settle existed has nothing to settle.
            settle: Callable[[bool], None] = getattr(self._sampler, "settle", lambda committed: None)
            commit: header.Commit | None = None
            try:
                frame_tail = self._frame_tail()
                commit = header.Commit(
                    transitions_added=self._transitions_added,
                    frames_written=self._frames.frames_written,
                    bytes_written=self._frames.bytes_written,
                    frame_tail=frame_tail,
                    frame_table_generation=self._frames.generation,
                    frame_slots=self._frames.frame_slots,
                    sampler_state=self._sampler.state(),
                )
                self._write_commit(commit)
            except BaseException:
                # Priorities commit with the header or not at all; the header may have been replaced
                # before the error (its directory's fsync failed).
                settle(commit is not None and self._header_holds(commit))
                raise
            settle(True)
            self._frames.release_segments_before(self._frames.position_of(frame_tail))
            self._schedule.committed(self._transitions_added)

    def _header_holds(self, commit: header.Commit) -> bool:
        """Whether the header on disk is ``commit`` (after a failed write: did the rename happen?)."""
        try:
            return header.read_header(self._directory)[1] == commit
        except (OSError, ValueError):
            return False

    def _write_commit(self, commit: header.Commit) -> None:
        header.write_header(self._directory, self._layout, commit)
        self._commit = commit
        self._set_room_limits()

    def _set_room_limits(self) -> None:
        """The adds may go on without a commit while transitions_added stays within ``_row_limit`` and
        frames_written within ``_frame_limit``: no ring slot that the committed header counts is reused
        (``_make_room`` commits first otherwise)."""
        self._row_limit = self._layout.row_slots + max(0, self._commit.transitions_added - self.capacity)
        self._frame_limit = self._frames.frame_slots + self._commit.frame_tail

    def _frame_tail(self) -> int:
        """The oldest frame step that a stored transition still needs."""
        stored = self._stored()
        if not stored:
            return self._frames.frames_written
        oldest = self._table.oldest_frame(stored.start, stored.stop, oldest_frames_of=self._oldest_obs_frames)
        # Reference-encoded frames also need the frames they are compressed against.
        return self._frames.keep_from(oldest)

    def _oldest_obs_frames(
        self, next_frames: npt.NDArray[np.int64], detached: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.int64]:
        """The oldest frame step of each obs stack: ``stack_size`` links back from its next_obs frame
        (``2 * stack_size - 1`` for a detached transition: all its next_obs frames follow its obs)."""
        frames = self._frames.stacks(next_frames, self._layout.stack_size)
        return stacking.obs_frames(frames, detached, self._frames.stacks)[:, 0]

    def close(self) -> None:
        """Commit (in ``"r+"``) and release the files. Closing twice is allowed."""
        if self._closed:
            return
        for prefetcher in list(self._prefetchers):
            prefetcher.close()
        try:
            if self._mode == "r+":
                self.flush()
        finally:
            self._closed = True
            self._fast_add = False
            autocommit.forget(self)
            closers = [self._frames.close, self._table.close, self._sampler.close, self._release_writer_lock]
            if self._field_table is not None:
                closers.insert(2, self._field_table.close)
            _close_all(closers)

    def __del__(self) -> None:
        """A dropped store commits (``"r+"``) and releases its files, as ``close`` does."""
        if not getattr(self, "_constructed", False) or self._closed:
            return
        try:
            self.close()
        except Exception as error:  # noqa: BLE001 - nothing may be raised from __del__
            import warnings

            warnings.warn(f"mmreplay: could not commit {self._directory} when it was dropped: {error}", stacklevel=1)

    def _release_writer_lock(self) -> None:
        if self._writer_lock is not None:
            self._writer_lock.close()
            self._writer_lock = None

    def __enter__(self) -> ReplayStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

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
        return self._sample(batch_size, rng, beta=beta, n_step=n_step, gamma=gamma, out=out, replace_shared_out=False)

    def _sample(
        self,
        batch_size: int,
        rng: np.random.Generator | int | None,
        *,
        beta: float = 0.4,
        n_step: int = 1,
        gamma: float = 0.99,
        out: Batch | None,
        replace_shared_out: bool,
        reader: TransitionReader | None = None,
    ) -> Batch:
        """``sample``; with ``replace_shared_out``, a batch that ``out`` cannot hold (``SharedOutError``)
        comes back in new arrays, obs and next_obs separate, rather than raising (``batches(reuse=True)``,
        which then refills that batch)."""
        self._check_open("sample")
        if out is not None:
            check_out(out, Batch)
        # What a training loop passes at every call (Python ints and floats in range) is taken as it
        # stands: the parse_* calls cost ~0.6 us, a twentieth of sampling a batch of small frames. Any
        # other value goes through them, accepted or refused as always.
        if type(batch_size) is not int or batch_size < 1:
            batch_size = parse_positive_int(batch_size, "batch_size")
        if type(n_step) is not int or n_step < 1:
            n_step = parse_positive_int(n_step, "n_step")
        if type(beta) is not float or not 0.0 <= beta:  # parse_number takes inf too, and refuses nan
            beta = parse_number(beta, "beta", low=0.0)
        if type(gamma) is not float or not 0.0 <= gamma <= 1.0:
            gamma = parse_number(gamma, "gamma", low=0.0, high=1.0)
        generator = rng if type(rng) is np.random.Generator else parse_rng(rng)
        reading = self._reader if reader is None else reader

        def draw_and_read() -> Batch:
            with self._lock:
                steps = self._draw(batch_size, generator)
                reading.prefetch(steps)
                weight = self._sampler.weights(steps, beta=beta)
                if n_step == 1:
                    discount = np.empty(batch_size, np.float32)
                    discount.fill(gamma)  # np.full costs twice as much for a batch
                    try:
                        return reading.transitions(steps, weight=weight, discount=discount, out=out)
                    except SharedOutError:
                        if not replace_shared_out:
                            raise
                        return reading.transitions(steps, weight=weight, discount=discount)
                return reading.n_step(
                    steps, n_step=n_step, gamma=gamma, weight=weight, newest_exclusive=self._transitions_added, out=out
                )

        return self._consistent(draw_and_read)

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
        returns with the same arguments and rng. Plain (``"lz4"``) stores only: a reference-encoded
        frame needs its references to decode."""
        reader = self._encoding_reader("sample_encoded")
        batch = self._sample(
            batch_size, rng, beta=beta, n_step=n_step, gamma=gamma, out=None, replace_shared_out=False, reader=reader
        )
        return reader.encoded(batch)

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
        and rng, byte for byte. Plain (``"lz4"``) uint8 stores without user fields, as ``sample_encoded``."""
        self._check_open("sample_sequences_encoded")
        reader = self._encoding_reader("sample_sequences_encoded")
        batch = self._sample_sequences("sample_sequences_encoded", batch_size, length, rng, beta=beta, out=None,
                                       reader=reader)
        return reader.encoded_sequences(batch)

    def _encoding_reader(self, operation: str) -> EncodingReader:
        """A reader that gathers a batch's stored blocks for ``operation`` (named in its errors)."""
        if self.frame_encoding != "lz4":
            raise ValueError(
                f"{operation} needs a store of frame_encoding='lz4'; this one is {self.frame_encoding!r}, "
                "whose frames decode only against their references: use sample"
            )
        if self._layout.stack_padding != "first" or self._field_table is not None:
            raise ValueError(
                f"{operation} needs a store with stack_padding='first' and no user fields (an encoded batch "
                f"carries neither zero padding nor fields); this one has stack_padding={self.stack_padding!r} "
                f"and fields {list(self.fields)}: use sample"
            )
        if self.frame_dtype != np.uint8:
            raise ValueError(f"{operation} gives uint8 frames; this store's frame_dtype is {self.frame_dtype}: use sample")
        reader = EncodingReader(
            self._table, self._frames, stack_size=self._layout.stack_size, action_dtype=self._action_dtype
        )
        reader.verify = self._mode != "r+"  # only a reader that may be behind the writer sees frames move
        return reader

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
        return self._sample_sequences("sample_sequences", batch_size, length, rng, beta=beta, out=out)

    def _sample_sequences(
        self,
        operation: str,
        batch_size: int,
        length: int,
        rng: np.random.Generator | int | None,
        *,
        beta: float,
        out: SequenceBatch | None,
        reader: TransitionReader | None = None,
    ) -> SequenceBatch:
        """``sample_sequences``, read by ``reader`` (the store's own by default; ``sample_sequences_encoded``
        passes one that gathers the stored blocks)."""
        self._check_open(operation)
        check_out(out, SequenceBatch)
        batch_size = parse_positive_int(batch_size, "batch_size")
        length = parse_positive_int(length, "length")
        beta = parse_number(beta, "beta", low=0.0)
        generator = parse_rng(rng)
        reading = self._reader if reader is None else reader

        def draw_and_read() -> SequenceBatch:
            with self._lock:
                steps = self._draw(batch_size, generator)
                weight = self._sampler.weights(steps, beta=beta)
                window, mask = follow_episodes(
                    steps,
                    length,
                    rows_of=self._table.read,
                    newest_exclusive=self._transitions_added,
                    stacks=self._frames.stacks,
                    stack_size=self._layout.stack_size,
                    table_path=self._table.path,
                )
                return reading.sequences(window, mask, weight, out)

        return self._consistent(draw_and_read)

    def batches(
        self,
        batch_size: int,
        *,
        prefetch: int = 2,
        rng: np.random.Generator | int | None = None,
        reuse: bool = False,
        **sample_kwargs: Any,
    ) -> Prefetcher[Batch]:
        """An endless iterator of ``sample(batch_size, rng, **sample_kwargs)`` batches, prepared ahead in a
        background thread (decoding releases the GIL) while the caller trains.

        It yields exactly what successive ``sample`` calls with the same generator would, in order;
        errors in the thread are raised in the caller; ``close()`` (or garbage collection, or closing
        the store) stops it. With ``reuse=True`` the batches are refilled in place (``sample``'s
        ``out``), ``prefetch + 2`` of them in turn: a batch stays valid until the next ``next()``
        (copy what must outlive it).
        """
        self._check_open("batches")
        batch_size = parse_positive_int(batch_size, "batch_size")
        prefetch = parse_positive_int(prefetch, "prefetch")
        generator = parse_rng(rng)
        if "out" in sample_kwargs:
            raise TypeError("batches() takes no out: reuse=True refills its own batches in place")
        self.sample(1, np.random.default_rng(0), **sample_kwargs)  # invalid arguments fail here, not later
        if reuse:
            # The caller holds one batch, ``prefetch`` wait in the queue and the thread fills one more:
            # the batch filled prefetch + 2 calls ago has been released by the caller's next().
            produce = recycling(
                lambda out: self._sample(batch_size, generator, out=out, replace_shared_out=True, **sample_kwargs),
                buffers=prefetch + 2,
            )
        else:
            produce = functools.partial(self.sample, batch_size, generator, **sample_kwargs)
        prefetcher = Prefetcher(produce, depth=prefetch)
        self._prefetchers.add(prefetcher)
        return prefetcher

    def update_priorities(self, index: npt.ArrayLike, priority: npt.ArrayLike) -> None:
        """Set the priorities of sampled transitions (``batch.index``); steps evicted since are ignored,
        and with repeated steps the last value wins."""
        self._check_writable("update_priorities")
        steps = parse_steps(index, "index")
        priorities = parse_priorities(priority, like=steps)
        never = (steps < 0) | (steps >= self._transitions_added)
        if never.any():
            raise ValueError(
                f"index {int(steps[never][0])} was never added; transitions added so far: {self._transitions_added}"
            )
        with self._lock:
            self._sampler.update_priorities(steps, priorities)

    def refresh(self) -> bool:
        """Pick up the writer's newest commit (mode ``"r"``; ``sample`` and ``read`` also do it when the
        header changed). Returns whether the store changed."""
        self._check_open("refresh")
        if self._mode == "r+":
            return False
        with self._lock:
            for _ in range(_READ_ATTEMPTS - 1):
                try:
                    return self._follow_header()
                except CorruptStoreError:
                    # A reader that was descheduled between reading the header and the files it names finds
                    # them reused or replaced by the writer's later commits: only a header that stayed the
                    # same makes that corruption.
                    if file_signature(self._directory / header.HEADER_NAME) == self._read_signature:
                        raise
            return self._follow_header()

    def _follow_header(self) -> bool:
        """``refresh``, once: follow the header as it is now."""
        signature = file_signature(self._directory / header.HEADER_NAME)
        self._read_signature = signature
        _, commit = header.read_header(self._directory)
        if os.stat(self._directory / header.TRANSITIONS_NAME).st_ino != self._table_inode:
            raise ClosedStoreError(
                f"cannot refresh: the store at {str(self._directory)!r} was cleared by its writer since this "
                "reader opened it; open it again"
            )
        self._header_signature = signature
        if commit == self._commit:
            return False
        previous = self._commit
        try:
            self._commit = commit
            self._transitions_added = commit.transitions_added
            self._frames.reload(
                generation=commit.frame_table_generation,
                frame_slots=commit.frame_slots,
                frames_written=commit.frames_written,
                bytes_written=commit.bytes_written,
            )
            self._sampler.open(
                self._directory,
                slots=self._layout.row_slots,
                stored=self._stored(),
                writable=False,
                state=commit.sampler_state,
            )
            self._load_env_state()  # which episodes are still in progress, for ``episodes()``
        except BaseException:
            # Half-followed (a corrupt frame table or priorities file): forget the header, so that
            # every later read tries again and raises the same error rather than reading stale state.
            self._commit, self._header_signature = previous, None
            raise
        return True

    def _consistent(self, read: Callable[[], T]) -> T:
        """Run a read; a reader whose data was replaced under it by the writer refreshes and retries.

        The writer only reuses ring slots and deletes segments that its newest commit no longer counts,
        so a checksum failure in a reader that is behind means "overwritten since": refresh and read
        again. A failure that persists with nothing newer committed is real corruption and is raised.
        """
        if self._mode == "r+":
            return read()
        if file_signature(self._directory / header.HEADER_NAME) != self._header_signature:
            self.refresh()
        for _ in range(_READ_ATTEMPTS - 1):
            try:
                return read()
            except (RowChecksumError, FieldChecksumError, FrameChecksumError, MissingSegmentError):
                if not self.refresh():
                    raise
        return read()

    def _draw(self, batch_size: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        stored = self._stored()
        if not stored:
            raise ValueError("cannot sample from an empty store: add transitions first")
        return self._sampler.sample(batch_size, stored=stored, rng=rng)

    def read(self, steps: npt.ArrayLike) -> Batch:
        """The stored transitions with these steps, in the given order."""
        self._check_open("read")
        array = parse_steps(steps, "steps")
        ones = np.ones(len(array), np.float32)

        def check_and_read() -> Batch:
            with self._lock:
                stored = self._stored()
                outside = (array < stored.start) | (array >= stored.stop)
                if outside.any():
                    message = (
                        f"step {int(array[outside][0])} is not stored; stored steps are [{stored.start}, {stored.stop})"
                    )
                    if ((array >= 0) & (array < stored.stop))[outside].all():
                        evicted = np.unique(array[outside]).tolist()
                        raise StepsEvictedError(
                            f"{message}: step(s) {_span_text(evicted)} were evicted (the writer wrapped past them)",
                            steps=evicted,
                        )
                    raise IndexError(message)
                return self._reader.transitions(array, weight=ones, discount=ones.copy())

        return self._consistent(check_and_read)

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
        self._check_open("iterate")
        return passes.ordered_pass(self, batch_size, start=start, stop=stop)

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
        self._check_open("sample_episodes")
        return passes.sample_episodes(self, n, rng, weighting=weighting)

    def episodes(self) -> list[Episode]:
        """The stored episodes, oldest first: env, steps, return, how each ended, whether it is complete."""
        self._check_open("list episodes")

        def list_episodes() -> list[Episode]:
            with self._lock:
                stored = self._stored()
                columns = self._table.columns(stored.start, stored.stop, ("env", "flags", "reward"))
                open_envs = {env for env, episode in enumerate(self._episodes) if episode.open}
                return split_episodes(
                    np.arange(stored.start, stored.stop, dtype=np.int64),
                    columns["env"],
                    columns["flags"],
                    columns["reward"],
                    open_envs=open_envs,
                )

        return self._consistent(list_episodes)

    # -- starting over ---------------------------------------------------------------------------

    def clear(self) -> None:
        """Remove every transition: the store becomes an empty store with the same layout (and sampler),
        its steps numbered from 0 again.

        Atomic: the empty store is built beside the directory and exchanged with it in one step, so a
        crash leaves either the old store or the empty one at the path (at worst with the other left in a
        hidden sibling directory ``.NAME.clearing-XXXXXXXX``, which may be deleted). Readers open on the
        old store raise ``ClosedStoreError`` at their next refresh: open them again.
        """
        self._check_writable("clear")
        for prefetcher in list(self._prefetchers):
            prefetcher.close()
        with self._lock:
            layout = self._layout
            _, commit = header.new_store(
                frame_shape=layout.frame_shape, capacity=layout.capacity, stack_size=layout.stack_size,
                num_envs=layout.num_envs, action_shape=layout.action_shape,
                action_dtype=np.dtype(layout.action_dtype), sampler=layout.sampler,
            )
            building, lock = creation.build_beside(self._directory, layout, commit, "clearing")
            try:
                directory_swap.exchange(self._directory, building)
            except BaseException:
                lock.close()
                shutil.rmtree(building, ignore_errors=True)
                raise
            # The old store's files now live at ``building``: release them, then delete them.
            self._closed = True
            closers = [self._frames.close, self._table.close, self._sampler.close, self._release_writer_lock]
            if self._field_table is not None:
                closers.append(self._field_table.close)
            try:
                _close_all(closers)
            finally:
                shutil.rmtree(building, ignore_errors=True)
                ReplayStore.__init__(
                    self, self._directory, layout, commit, mode="r+", sampler=self._sampler, lock=lock,
                    schedule=self._schedule,
                )

    # -- state -----------------------------------------------------------------------------------

    def _load_env_state(self) -> None:
        """Each env's episode in progress, from its newest stored transition (its frames decoded at the
        first add: ``episodes.load_env_frames``)."""
        self._episodes, self._env_frames_pending = load_env_episodes(
            self._table, self._reader, self._stored(), num_envs=self.num_envs, stack_size=self.stack_size
        )

    def _load_env_frames(self) -> None:
        assert self._env_frames_pending is not None
        load_env_frames(self._reader, self._episodes, self._env_frames_pending)
        self._env_frames_pending = None

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise ClosedStoreError(f"cannot {operation}: the store at {str(self._directory)!r} is closed")

    def _check_writable(self, operation: str) -> None:
        self._check_open(operation)
        if self._mode != "r+":
            raise ReadOnlyStoreError(
                f"cannot {operation}: the store at {str(self._directory)!r} is open read-only (mode 'r'); "
                "open it with mode 'r+' to append"
            )


def _close_all(closers: list[Callable[[], None]]) -> None:
    """Call every closer, even after one fails; then raise the first failure."""
    first: BaseException | None = None
    for close in closers:
        try:
            close()
        except BaseException as error:  # noqa: BLE001 - re-raised below, after the others closed
            first = first or error
    if first is not None:
        raise first
