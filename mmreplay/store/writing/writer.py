"""A store open for appending (mode ``"r+"``): the one object through which transitions enter a store.

``add`` enters here once and goes down: its fast path (each env continues its episode with one new frame,
written by one compiled call per file), or its general path (checked arguments, a plan of the frames each
env writes, then the write); ``add_encoded`` writes runs of steps that continue an episode at once and
every other step by the general path. Every add compresses and writes its frames on the calling thread
before it returns (a vector add's frames may be shared with the pool's helpers, joined before it returns).
The writer holds each env's episode in progress, its commits and room (``Committer``), autocommit's
schedule and the writer lock; it never calls back into the façade.

A writer belongs to the process that opened it. A forked child (an env worker, a data loader started with
``fork``) inherits a copy of it, with the parent's counts as they were at the fork: ``forked`` closes that
copy without writing anything (no commit at its exit, no lock taken), and its commit paths check the
process themselves, so that a stale copy can never replace the header of the store the parent goes on
writing.

An add is interrupted (a KeyboardInterrupt between any two of its lines, or any error) either before it
counts or after: its frames, rows, links and episodes are written first, then ``transitions_added`` is set
in one assignment (the add counts from there), and then the sampler is told. Interrupted before, the links
it made and the episodes it advanced are put back (``_undo``; the frames and rows it wrote are beyond the
count, overwritten by the next add) and the frames' reference groups restart; after, the sampler is told
all the same (``_count_added``). Either way the next add, flush and close go on as if the add had not
happened, or had completed.
"""

from __future__ import annotations

import os
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np
import numpy.typing as npt

from mmreplay.disk import directory_swap, header
from mmreplay.disk.files import remove_tree
from mmreplay.disk.store_directory import StoreDirectory
from mmreplay.disk.writer_lock import acquire_writer_lock, release_writer_lock
from mmreplay.errors import ClosedStoreError, FormatVersionError
from mmreplay.frames import encodings
from mmreplay.frames.encodings import FrameEncoder
from mmreplay.frames.threads import compress_threads
from mmreplay.frames.wire import EncodedFrames
from mmreplay.rows.transitions import TERMINATED, TRUNCATED
from mmreplay.sampling.samplers import Sampler
from mmreplay.store.writing import autocommit, creation, encoded_adds, priority_updates
from mmreplay.store.writing.add_arguments import (
    AddArguments,
    AddShapes,
    SingleFrames,
    parse_add,
    parse_env_mask,
    parse_fields,
    parse_single_frames,
    records_every_env,
)
from mmreplay.store.writing.add_plans import AddPlan, plan_add, plan_run
from mmreplay.store.writing.cut_warnings import CutWarnings
from mmreplay.store.writing.forked_writers import fork_error
from mmreplay.store.writing.autocommit import CommitSchedule, Committable
from mmreplay.store.writing.committer import Committer
from mmreplay.store.writing.env_episodes import (
    SavedEpisode,
    advance_all,
    continuations,
    load_env_episodes,
    load_env_frames,
    restore_episodes,
    save_episodes,
)
from mmreplay.store.reading.mapped_files import MappedFiles, close_all, map_committed
from mmreplay.store.reading.stored_steps import stored_steps

T = TypeVar("T")


class Writer:
    """The store's writer: adds, commits and the writer lock over one ``MappedFiles``.

    Made by ``Writer.open`` (or ``cleared``); ``ReplayStore`` holds one as its collaborator in mode
    ``"r+"``. ``transitions_added`` counts what was written (committed or not).
    """

    mode = "r+"
    sees_frames_move = False  # no commit but its own replaces what this object reads

    def __init__(
        self, files: MappedFiles, commit: header.Commit, *, lock: IO[bytes], schedule: CommitSchedule
    ) -> None:
        layout = files.layout
        self.files = files
        self._layout = layout
        self._lock = files.lock
        self._frames, self._table, self._field_table = files.frames, files.table, files.field_table
        self._sampler = files.sampler
        self._writer_lock: IO[bytes] | None = lock
        self._schedule = schedule
        self.pid = os.getpid()  # the process the writer belongs to (``forked``)
        self.replaced_by: Writer | None = None  # the empty store's writer, once ``cleared`` exchanged them
        self.add_shapes = AddShapes.of(
            frame_shape=layout.frame_shape,
            stack_size=layout.stack_size,
            num_envs=layout.num_envs,
            action_shape=layout.action_shape,
            action_dtype=files.action_dtype,
            frame_dtype=np.dtype(layout.frame_dtype),
        )
        self._encoder = encodings.encoder_for(layout, files.directory)
        # ``add`` may take its fast path (``_add_single_frames``): a writer whose frames a compiled call
        # writes (plain lz4, or reference frames with the extension's groups), still open. The tests turn it
        # off to compare the general path's files with the fast path's; ``fast_adds`` counts the adds it took.
        self.fast_add = self._encoder.fast_path
        self.fast_adds = 0
        # The threads a vector add's new frames compress on (threads.compress_threads: from 4 usable cores).
        self.append_threads = compress_threads(layout.num_envs, self._frames.frame_nbytes, files.reader.thread_limit)
        # A sampler that applies priorities and the store's checks of them in one call (PrioritizedSampler).
        self._checked_update = priority_updates.checked_update_of(self._sampler)
        self.transitions_added = commit.transitions_added
        self._cuts = CutWarnings()  # the envs an add's cut was said for
        self._committer = Committer(files, commit, schedule)
        self._frames.remove_other_generations()
        self._episodes, self._env_frames_pending = load_env_episodes(
            self._table, files.reader, self._stored(), num_envs=layout.num_envs, stack_size=layout.stack_size
        )
        files.open_sampler(commit)
        schedule.committed(self.transitions_added)

    @classmethod
    def open(
        cls, directory: Path, *, sampler: Sampler | None, schedule: CommitSchedule, lock: IO[bytes] | None = None,
        decode_threads: int | None = None,
    ) -> Writer:
        """Open the store at ``directory`` for appending; ``lock``: the writer lock, already held (by
        ``create``), else taken here (``StoreLockedError`` while another writer holds it). The path is
        resolved once, here; every file is opened relative to the directory's descriptor.
        ``decode_threads``: the cap on the threads a batch decodes (and an add compresses) on."""
        try:
            opened = header.open_store_directory(directory)
        except BaseException:
            if lock is not None:
                release_writer_lock(lock)
            raise
        try:
            layout, commit, version = header.read_versioned_header(opened)
            if version not in header.WRITABLE_VERSIONS:
                raise FormatVersionError(
                    f"{opened.path / header.HEADER_NAME}: format version {version} opens read-only (mode 'r'): "
                    f"its rows carry version {version}'s checksum; to append, convert it into a new store "
                    f"first (mmreplay convert {opened.path} NEW)"
                )
            if layout.frame_encoding == encodings.REFERENCE and version < header.REFERENCE_WRITABLE_VERSION:
                raise FormatVersionError(
                    f"{opened.path / header.HEADER_NAME}: format version {version}'s reference frames open "
                    f"read-only (mode 'r'); to append, convert the store to format version "
                    f"{header.FORMAT_VERSION} first (mmreplay convert {opened.path} NEW)"
                )
            if lock is None:
                lock = acquire_writer_lock(opened / header.LOCK_NAME)
        except BaseException:
            opened.close()
            if lock is not None:
                release_writer_lock(lock)
            raise
        try:
            # A writer that died may have left newer, uncommitted files: reread under the lock.
            files, commit = map_committed(opened, sampler, writable=True, decode_threads=decode_threads)
            try:
                return cls(files, commit, lock=lock, schedule=schedule)
            except BaseException:
                files.close()
                raise
        except BaseException:
            release_writer_lock(lock)
            raise

    # -- the collaborator's side of the façade -----------------------------------------------------

    @property
    def committed(self) -> header.Commit:
        """The commit the header on disk holds."""
        return self._committer.committed

    def follow(self) -> None:
        """A writer is the newest commit: nothing to follow."""

    def refresh(self) -> bool:
        return False

    def consistent(self, read: Callable[[], T]) -> T:
        """Run a read: nothing replaces what a writer reads but its own adds, under the same lock."""
        with self._lock:
            return read()

    def open_envs(self) -> set[int]:
        """The envs whose episode is in progress (its newest transition neither terminated nor truncated)."""
        return {env for env, episode in enumerate(self._episodes) if episode.open}

    def check_writable(self, operation: str) -> None:
        self.files.check_open(operation)

    def close_at_exit(self, store: Committable) -> None:
        """Have ``store`` (the façade over this writer) committed and closed at a normal interpreter exit."""
        autocommit.close_at_exit(store)

    def flush(self) -> None:
        """Commit everything added so far."""
        self.check_process("flush")
        with self._lock:
            self._committer.commit(self.transitions_added)

    def forked(self) -> None:
        """This process is a fork of the one that opened the writer: close this copy without writing.

        Nothing is committed and no lock is taken (a thread of the parent may have held one at the fork,
        and the child does not have that thread); the maps and descriptors go with the process. The
        writer lock stays the parent's (``writer_lock`` pointed the child's descriptor at /dev/null).
        """
        self.fast_add = False
        self.files.closed = True
        self._writer_lock = None

    def fork_error(self, operation: str) -> ClosedStoreError:
        """The error of ``operation`` in a forked child of the process that opened the writer."""
        return fork_error(str(self.files.directory.path), self.pid, operation)

    def check_process(self, operation: str) -> None:
        """Raise ``ClosedStoreError`` naming the fork (after ``forked``) where this process is not the one that
        opened the writer."""
        if os.getpid() != self.pid:
            self.forked()
            raise self.fork_error(operation)

    def close(self) -> None:
        """Commit, then release the files and the writer lock (both, even when the commit fails); in a
        forked child, only ``forked``."""
        if os.getpid() != self.pid:
            self.forked()
            return
        try:
            self.flush()
        finally:
            self.fast_add = False
            close_all([self.files.close, self._release_writer_lock])

    def cleared(self) -> Writer:
        """``ReplayStore.clear``: the empty store with the same layout (and sampler) built beside the
        directory, its writer made whole (every file mapped, every block reserved), and only then the two
        directories exchanged in one step; this writer's files (the old store's) are then released and
        deleted, and the writer of the empty store is returned.

        The directory exchanged is the one this writer holds, at its real path (a store opened through a
        link is cleared where the link points; the link stays). Everything that can fail (a full disk, a
        refused exchange) happens before or at the exchange: then the empty store is deleted and this
        writer goes on with the old one, untouched."""
        layout, directory = self._layout, self.files.directory.path
        # Committed first: the sampler is handed to the empty store's files, and handed back (reopened
        # at the last commit, which is then everything) if that fails.
        self.flush()
        _, empty = header.new_store(
            frame_shape=layout.frame_shape, capacity=layout.capacity, stack_size=layout.stack_size,
            num_envs=layout.num_envs, action_shape=layout.action_shape,
            action_dtype=np.dtype(layout.action_dtype), sampler=layout.sampler,
        )
        # A new epoch: nothing stored, and the counts go on from the old store's (all committed just
        # now), so no step (``batch.index``) and no frame step is ever given twice; a step before
        # ``first_step`` is known to have been removed by this clear.
        frames = self._frames
        commit = replace(
            empty, transitions_added=self.transitions_added, first_step=self.transitions_added,
            frames_written=frames.frames_written, frame_tail=frames.frames_written,
            bytes_written=frames.bytes_written,
        )
        building, lock = creation.build_beside(directory, layout, commit, "clearing")
        built = building.path
        files: MappedFiles | None = None
        try:
            files = MappedFiles(building, layout, commit, sampler=self._sampler, writable=True,
                                decode_threads=self.files.decode_threads)
            writer = Writer(files, commit, lock=lock, schedule=self._schedule)
            directory_swap.exchange(directory, built)
            self._retire(writer, building, directory, built)
        except BaseException:
            if self.files.replaced():  # exchanged, the error after it (an interrupt): the clear completes
                self._retire(writer, building, directory, built)
                raise
            if files is not None:
                files.close(sampler=False)
            self._sampler_reopen()
            release_writer_lock(lock)
            building.close()
            remove_tree(built)
            raise
        return writer

    def _retire(self, writer: Writer, building: StoreDirectory, directory: Path, built: Path) -> None:
        """After ``cleared``'s exchange: the path holds the empty store (``writer``'s, ``replaced_by`` from
        here on, also where this is interrupted) and ``built`` the old one, whose files are released
        (an error closing them cannot harm the new store) and deleted."""
        self.replaced_by, building.path, self.fast_add = writer, directory, False
        try:
            close_all([lambda: self.files.close(sampler=False), self._release_writer_lock])
        except Exception:  # noqa: BLE001 - deleted next; a second close (after an interrupt) may fail too
            pass
        finally:
            remove_tree(built)

    @property
    def lock_file(self) -> IO[bytes] | None:
        """The open file that holds the writer lock (None once it is released)."""
        return self._writer_lock

    def _sampler_reopen(self) -> None:
        """Point the sampler back at this writer's files after a failed ``cleared`` opened it on others."""
        self.files.open_sampler(self._committer.committed)

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
        env_mask: npt.ArrayLike | None,
        fields: dict[str, npt.ArrayLike] | None,
        fragment: bool,
    ) -> None:
        """``ReplayStore.add`` (``fragment`` checked). The arguments are checked once: by the fast path's
        parse (``parse_single_frames``) where the add may take the fast path, else (or where they decline
        it) by ``parse_add``; an add the fast path declines goes on to the general path as parsed."""
        values = None
        if fields is not None or self._field_table is not None:
            self.check_writable("add")
            recorded = None if env_mask is None else parse_env_mask(env_mask, self.add_shapes.num_envs)
            values = parse_fields(fields, self._layout.fields, self.add_shapes, recorded)
        parsed = None
        if (
            not fragment
            and self.fast_add
            and self._env_frames_pending is None
            and records_every_env(env_mask, self.add_shapes.num_envs)
        ):
            parsed = parse_single_frames(
                self.add_shapes, obs, action, reward, next_obs, terminated, truncated,
                terminated_bit=TERMINATED, truncated_bit=TRUNCATED,
            )
            if parsed is not None and self._add_single_frames(parsed, values):
                self.fast_adds += 1
                if self._schedule.due(self.transitions_added):
                    self.flush()
                return
        self.check_writable("add")
        if parsed is None:
            arguments = parse_add(obs, action, reward, next_obs, terminated, truncated, env_mask, self.add_shapes)
        else:
            arguments = parsed.arguments(self.add_shapes, terminated_bit=TERMINATED, truncated_bit=TRUNCATED)
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
        env_index: int,
        fields: dict[str, npt.ArrayLike] | None = None,
    ) -> None:
        """``ReplayStore.add_encoded``: the send checked whole (its user fields too), then written run by run."""
        self.check_writable("add_encoded")
        if self._frames.frame_dtype != np.uint8:
            raise ValueError(
                f"add_encoded takes uint8 frames; this store's frame_dtype is {self._frames.frame_dtype}: use add"
            )
        send = encoded_adds.parse_encoded_send(
            frames, obs, action, reward, next_obs, terminated, truncated, env_index=env_index, shapes=self.add_shapes
        )
        if fields is not None or self._field_table is not None:
            values = parse_fields(fields, self._layout.fields, self.add_shapes.as_envs(len(send)), None)
            send = replace(send, fields=values)
        own = self._encoder
        num_envs = self._layout.num_envs
        if own.records_references:  # frames compressed against earlier ones: encoded again, step by step
            for t in range(len(send)):
                self._add_parsed(send.step(t, num_envs), own, values=send.step_fields(t, num_envs))
        else:
            self._add_send(send, encoded_adds.ReceivedEncoder(own, send))
        if self._schedule.due(self.transitions_added):
            self.flush()

    def update_priorities(self, index: npt.ArrayLike, priority: npt.ArrayLike) -> None:
        """``ReplayStore.update_priorities`` (``priority_updates``)."""
        self.check_writable("update_priorities")
        priority_updates.update_priorities(
            self._sampler, self._checked_update, self._lock, index, priority, added=self.transitions_added,
            first_step=self._committer.committed.first_step,
        )

    def _add_send(self, send: encoded_adds.EncodedSend, encoder: FrameEncoder) -> None:
        """A plain store's ``add_encoded``: each run of steps that continue the env's episode with one new
        frame apiece is written at once (``_add_run``), any other step by ``add``'s general path. The
        files end up as T general-path adds leave them: a run stops where one of those adds would have
        committed first (no room left, or ``commit_every`` reached)."""
        if self._env_frames_pending is not None:
            self._load_env_frames()
        steps, t = send.steps, 0
        committer = self._committer
        while t < len(send):
            room = min(
                committer.row_limit - self.transitions_added, committer.frame_limit - self._frames.frames_written
            )
            oldest_stored = self._stored().start
            if (
                room > 0
                and not steps.detached[t]
                and self._episodes[send.env].continued_by(steps.obs[t].tobytes(), steps.stacked,
                                                         oldest_stored_step=oldest_stored)
            ):
                room = int(min(room, max(1, self._schedule.steps_until_due(self.transitions_added))))
                stop = min(send.continuing_until(t), t + room)
                self._add_run(send, t, stop)
                if self._schedule.due(self.transitions_added):
                    self.flush()
                t = stop
            else:
                num_envs = self._layout.num_envs
                self._add_parsed(send.step(t, num_envs), encoder, values=send.step_fields(t, num_envs))
                t += 1

    def _add_run(self, send: encoded_adds.EncodedSend, start: int, stop: int) -> None:
        """Steps ``[start, stop)`` of a send, each continuing the env's episode with one new frame, in one
        write (``plan_run``), for a run that fits before the next commit (the caller checked)."""
        plan = plan_run(send, start, stop, self._episodes[send.env], first_step=self.transitions_added,
                        next_frame_step=self._frames.frames_written)
        with self._lock:
            self._write(plan)

    def _add_parsed(
        self,
        arguments: AddArguments,
        encoder: FrameEncoder,
        *,
        values: dict[str, npt.NDArray[Any]] | None = None,
        fragment: bool = False,
    ) -> None:
        """``add``'s general path for checked arguments; ``encoder`` compresses the new frames (the store's
        own, or one that hands back frames that arrived compressed: ``encoded_adds.ReceivedEncoder``);
        ``values`` are the user fields (checked), ``fragment`` as ``add``'s."""
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
                self._committer.make_room(
                    self.transitions_added, new_rows=len(envs), new_frames=len(envs) * 2 * layout.stack_size
                )
            encoder.frame_tail = self._committer.committed.frame_tail
        encoder.checkpoint()
        try:
            plan = plan_add(
                arguments,
                self._episodes,
                next_frame_step=self._frames.frames_written,
                oldest_stored_step=self._stored().start,
                encoder=encoder,
                fields=values,
                fragment=fragment,
            )
            first_step = self.transitions_added
            with self._lock:
                self._write(plan)
        except BaseException:
            encoder.rollback()  # no frame may be encoded against one that was not written
            raise
        self._cuts.warn(plan, first_step)
        if self._schedule.due(self.transitions_added):
            self.flush()

    def _add_single_frames(self, parsed: SingleFrames, fields: dict[str, npt.NDArray[Any]] | None) -> bool:
        """``add``'s fast path, for the add a training loop makes at nearly every step (``parsed``, with the
        checked user ``fields``): each env continues its episode with one new frame (given alone, or as
        the newest of a stack), and no commit is due. It writes exactly what the general path writes
        (test_fast_add checks the files byte for byte), in a third to a half of the time; False, with
        nothing written, when any of that does not hold."""
        first_step, first_frame = self.transitions_added, self._frames.frames_written
        if not self._fits(first_step, len(parsed.flags)):
            return False
        links = continuations(
            self._episodes, parsed.obs, stacked=parsed.stacked, first_frame=first_frame,
            oldest_stored_step=first_step - self._layout.capacity,
        )
        if links is None:
            return False
        previous_steps, prev_deltas = links
        self._write_continuing(
            first_step, first_frame, previous_steps, prev_deltas, parsed.new_frames, parsed.next_obs, parsed.reward,
            parsed.flags, parsed.action, fields,
        )
        return True

    def _fits(self, first_step: int, count: int) -> bool:
        """Whether ``count`` envs' continuing transitions from ``first_step`` fit before the next commit must
        make room: a reference store's general path makes room for each env's largest add (2 * stack_size
        frames) before encoding, and the fast path asks for the same, so that both commit at the same adds."""
        frames = count * 2 * self._layout.stack_size if self._encoder.records_references else count
        return self._committer.fits(first_step, new_rows=count, new_frames=frames)

    def _write_continuing(
        self, first_step: int, first_frame: int, previous_steps: list[int], prev_deltas: list[int],
        new_frames: npt.NDArray[Any], frames: list[bytes], rewards: list[float], flags: list[int], actions: bytes,
        fields: dict[str, npt.NDArray[Any]] | None,
    ) -> None:
        """The fast path's write of envs 0, 1, ... each continuing its episode (the transition at
        ``previous_steps[env]``) with one new frame (``new_frames``, one contiguous array; ``frames``, each
        env's as bytes) from ``first_step`` and ``first_frame`` on: user fields, frames, rows, episodes. A
        reference store's frames continue their envs' groups; an add that fails restarts them (no frame is
        ever compressed against one that was not written)."""
        encoder = self._encoder
        with self._lock:
            self._table.reserve_rows(first_step, len(flags))  # a full disk refuses the add before any write
            saved = save_episodes(self._episodes)
            try:
                if fields:
                    self._field_table.write(first_step, fields)  # type: ignore[union-attr]
                self._frames.append_frames(new_frames, prev_deltas, threads=self.append_threads, groups=encoder.groups,
                                           frame_tail=self._committer.committed.frame_tail)
                self._table.write_continuations(
                    first_step, frame_lead=first_frame - first_step, previous_steps=previous_steps,
                    rewards=rewards, flags=flags, actions=actions,
                )
                advance_all(self._episodes, frames, flags, first_frame=first_frame, first_step=first_step)
                self._count_added(first_step, len(flags))
            except BaseException:
                if self.transitions_added == first_step:
                    encoder.rollback(range(len(prev_deltas)))  # no frame is compressed against one not counted
                    self._undo(previous_steps, saved)
                raise

    def _write(self, plan: AddPlan) -> None:
        """Write a planned add from the next transition step on (committing first where it needs room):
        user fields, frames, rows, the links from the rows it continues, each env's episode, and then the
        count (an add interrupted before it counts is undone: the module docstring)."""
        first_step, count = self.transitions_added, len(plan.envs)
        self._committer.make_room(first_step, new_rows=count, new_frames=len(plan.payloads))
        saved = save_episodes(self._episodes, plan.envs)
        try:
            if plan.fields:
                self._field_table.write(first_step, plan.fields)  # type: ignore[union-attr]
            ref_deltas = plan.ref_deltas if self._encoder.records_references else None
            self._frames.append(plan.payloads, plan.prev_deltas, ref_deltas)
            self._table.write(
                first_step, next_frames=plan.next_frames, envs=plan.envs, rewards=plan.rewards, flags=plan.flags,
                actions=plan.actions,
            )
            for i, env in enumerate(plan.envs):
                previous, start, frames = plan.previous_steps[i], plan.starts[i], plan.records[i]
                if previous is not None:
                    self._table.link(previous, first_step + i)
                if start is not None:
                    self._episodes[env].start(*start)
                if frames is not None:
                    self._episodes[env].record(frames, plan.next_frames[i], step=first_step + i,
                                               ended=bool(plan.flags[i] & (TERMINATED | TRUNCATED)))
            self._count_added(first_step, count)
        except BaseException:
            if self.transitions_added == first_step:
                self._undo(plan.previous_steps, saved)
            raise

    def _count_added(self, first_step: int, count: int) -> None:
        """Count the transitions just written from ``first_step`` on (one assignment: the add counts from
        there), and tell the sampler which came in and which they evicted, also when interrupted after
        the count (its calls set what they set again: the second time changes nothing)."""
        added = first_step + count
        try:
            self.transitions_added = added
            self._tell_sampler(first_step, added)
        except BaseException:
            if self.transitions_added == added:
                self._tell_sampler(first_step, added)
            raise

    def _tell_sampler(self, first_step: int, added: int) -> None:
        """Tell the sampler of the steps ``[first_step, added)`` and of those they evicted."""
        self._sampler.added(range(first_step, added))
        capacity, first = self._layout.capacity, self._committer.committed.first_step
        if added - capacity > first:
            self._sampler.evicted(range(max(first, first_step - capacity), added - capacity))

    def _undo(self, previous_steps: list[int] | list[int | None], saved: list[SavedEpisode]) -> None:
        """Undo an add interrupted before it counted: the links it made from the rows it continues (each
        its env's newest, linked to nothing before) and the episodes it advanced."""
        for previous in previous_steps:
            if previous is not None:
                self._table.link(previous, previous)  # a delta of 0: no next transition
        restore_episodes(saved)

    def _stored(self) -> range:
        return stored_steps(self.transitions_added, self._layout.capacity, self._committer.committed.first_step)

    def _load_env_frames(self) -> None:
        """Decode each env's newest next_obs, which the first add compares obs with (``load_env_frames``)."""
        assert self._env_frames_pending is not None
        load_env_frames(self.files.reader, self._episodes, self._env_frames_pending)
        self._env_frames_pending = None

    def _release_writer_lock(self) -> None:
        if self._writer_lock is not None:
            release_writer_lock(self._writer_lock)
            self._writer_lock = None
