"""A writer's commits, and the room its adds have before the next one.

Commit protocol: frames and rows are written into memory-mapped files at once (so ``sample`` sees them);
a commit makes them durable and then replaces the header, which is the only thing that makes them count
after a crash. Room: ring slots that the committed header still counts are never reused before the next
commit, so an add that would need one commits first (an automatic flush).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from mmreplay.disk import header
from mmreplay.rows import stacking
from mmreplay.store.writing.autocommit import CommitSchedule
from mmreplay.store.reading.mapped_files import MappedFiles
from mmreplay.store.reading.stored_steps import stored_steps


class Committer:
    """Writes a writer's commits (``commit``) and keeps its room: adds may go on without a commit while
    transitions_added stays within ``row_limit`` and frames_written within ``frame_limit``.

    ``committed`` is the header on disk; ``schedule`` is told of every commit.
    """

    def __init__(self, files: MappedFiles, committed: header.Commit, schedule: CommitSchedule) -> None:
        self._files = files
        self._frames = files.frames
        self._schedule = schedule
        self.committed = committed
        self.row_limit = self.frame_limit = 0
        self._set_room_limits()

    def commit(self, transitions_added: int) -> None:
        """Make everything added so far (``transitions_added`` transitions) durable, then commit it."""
        files, frames = self._files, self._frames
        with files.lock:
            files.sync()
            # A sampler written before Sampler.settle existed has nothing to settle.
            settle: Callable[[bool], None] = getattr(files.sampler, "settle", lambda committed: None)
            commit: header.Commit | None = None
            try:
                frame_tail = self._frame_tail(transitions_added)
                commit = header.Commit(
                    transitions_added=transitions_added,
                    frames_written=frames.frames_written,
                    bytes_written=frames.bytes_written,
                    frame_tail=frame_tail,
                    frame_table_generation=frames.generation,
                    frame_slots=frames.frame_slots,
                    sampler_state=files.sampler.state(),
                    first_step=self.committed.first_step,
                )
                self._write(commit)
            except BaseException:
                # Priorities commit with the header or not at all; the header may have been replaced
                # before the error (its directory's fsync failed).
                settle(commit is not None and self._header_holds(commit))
                raise
            settle(True)
            frames.release_segments_before(frames.position_of(frame_tail))
            self._schedule.committed(transitions_added)

    def fits(self, transitions_added: int, *, new_rows: int, new_frames: int) -> bool:
        """Whether an add of ``new_rows`` rows and ``new_frames`` frames reuses no slot the committed header
        counts (``row_limit``, ``frame_limit``)."""
        frames_end = self._frames.frames_written + new_frames
        return transitions_added + new_rows <= self.row_limit and frames_end <= self.frame_limit

    def make_room(self, transitions_added: int, *, new_rows: int, new_frames: int) -> None:
        """Commit (and grow the frame table) before an add of ``new_rows`` rows and ``new_frames`` frames
        would reuse a slot the committed header counts."""
        if self.fits(transitions_added, new_rows=new_rows, new_frames=new_frames):
            return
        frames = self._frames
        self.commit(transitions_added)
        needed = frames.frames_written + new_frames - self.committed.frame_tail
        if needed > frames.frame_slots:
            old_generation = frames.generation
            frames.grow(max(needed, frames.frame_slots * 3 // 2), self.committed.frame_tail)
            self._write(
                replace(self.committed, frame_table_generation=frames.generation, frame_slots=frames.frame_slots)
            )
            frames.remove_generation(old_generation)

    def _header_holds(self, commit: header.Commit) -> bool:
        """Whether the header on disk is ``commit`` (after a failed write: did the rename happen?)."""
        try:
            return self._files.read_commit() == commit
        except (OSError, ValueError):
            return False

    def _write(self, commit: header.Commit) -> None:
        self._files.write_commit(commit)
        self.committed = commit
        self._set_room_limits()

    def _set_room_limits(self) -> None:
        """No ring slot that the committed header counts may be reused: rows up to ``row_slots`` past the
        oldest committed transition, frames up to ``frame_slots`` past the committed frame tail."""
        layout = self._files.layout
        self.row_limit = layout.row_slots + self._stored(self.committed.transitions_added).start
        self.frame_limit = self._frames.frame_slots + self.committed.frame_tail

    def _stored(self, transitions_added: int) -> range:
        """The steps stored after ``transitions_added`` adds (in the epoch of the last ``clear()``)."""
        return stored_steps(transitions_added, self._files.layout.capacity, self.committed.first_step)

    def _frame_tail(self, transitions_added: int) -> int:
        """The oldest frame step that a stored transition still needs."""
        stored = self._stored(transitions_added)
        if not stored:
            return self._frames.frames_written
        oldest = self._files.table.oldest_frame(stored.start, stored.stop, oldest_frames_of=self._oldest_obs_frames)
        # Reference-encoded frames also need the frames they are compressed against.
        return self._frames.keep_from(oldest)

    def _oldest_obs_frames(
        self, next_frames: npt.NDArray[np.int64], detached: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.int64]:
        """The oldest frame step of each obs stack: ``stack_size`` links back from its next_obs frame
        (``2 * stack_size - 1`` for a detached transition: all its next_obs frames follow its obs)."""
        frames = self._frames.stacks(next_frames, self._files.layout.stack_size)
        return stacking.obs_frames(frames, detached, self._frames.stacks)[:, 0]
