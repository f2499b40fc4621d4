"""Damage in a store's files, found without stopping at it: every stored row and every frame the stored
transitions need is checked, and each stored transition is intact or not.

Vocabulary: a *damaged row* is a transition row (or its user-field row) that fails its checksum or names
a value no row of the store holds (an env beyond ``num_envs``); a *damaged frame* is a frame the stored
transitions need (frame steps ``[frame_tail, frames_written)`` of the commit) that does not decode to
its checksum: its own block or table entry is damaged, or, in a reference ring, a frame it is compressed
against is. A stored transition is *intact* when its row (and field row) is, and so is every frame of its
obs and next_obs stacks: exactly the transitions a read returns, and the ones a salvage copies.

A frame's episode link (``prev_delta``) is bound into its checksum, so the links followed from an intact
frame are the ones written; the walk of a transition's stacks stops at its first damaged frame, and
never follows a link a damaged entry holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mmreplay.disk import header
from mmreplay.errors import CorruptStoreError
from mmreplay.frames.ring import FrameRing
from mmreplay.rows.transitions import DETACHED, row_flags
from mmreplay.store.reading.mapped_files import MappedFiles
from mmreplay.store.reading.stored_steps import stored_steps

CHUNK_STEPS = 4096  # rows checked a time
_CHUNK_BYTES = 8 << 20  # of frames decoded a time


@dataclass(frozen=True)
class Damage:
    """One damaged row or frame: ``what`` (``"row"``, ``"field row"`` or ``"frame"``), ``step`` (the
    transition step of a row, the frame step of a frame), ``file`` (relative to the store's directory),
    the byte ``offset`` in it and the ``problem`` in words."""

    what: str
    step: int
    file: str
    offset: int
    problem: str

    def describe(self) -> str:
        """One line: what, where and why (no absolute path: the caller names the store)."""
        kind = "row of transition" if self.what == "row" else "field row of transition" if self.what == "field row" \
            else "frame"
        return f"{kind} {self.step}: {self.file}, byte {self.offset:,}: {self.problem}"

    def as_dict(self) -> dict[str, object]:
        return {"step": self.step, "file": self.file, "offset": self.offset, "problem": self.problem}


@dataclass(frozen=True)
class DamageScan:
    """What a scan of a store's files found: the ``stored`` steps, which are ``intact`` (a bool per stored
    step), the damaged ``rows`` (rows and field rows) and ``frames``, and ``frames_checked`` (the distinct
    frames decoded). For the intact steps, ``next_frames`` and ``obs_frames`` hold the frame steps of each
    transition's newest next_obs and obs frames and ``flags`` its row's flags (undefined elsewhere)."""

    stored: range
    intact: npt.NDArray[np.bool_]
    rows: tuple[Damage, ...]
    frames: tuple[Damage, ...]
    frames_checked: int
    next_frames: npt.NDArray[np.int64]
    obs_frames: npt.NDArray[np.int64]
    flags: npt.NDArray[np.uint8]

    @property
    def clean(self) -> bool:
        return not self.rows and not self.frames and bool(self.intact.all())

    @property
    def damaged_steps(self) -> npt.NDArray[np.int64]:
        """The stored steps that are not intact, oldest first."""
        return np.flatnonzero(~self.intact).astype(np.int64) + self.stored.start

    @property
    def intact_steps(self) -> npt.NDArray[np.int64]:
        return np.flatnonzero(self.intact).astype(np.int64) + self.stored.start


def scan_damage(files: MappedFiles, commit: header.Commit, *,
                progress: Callable[[int], None] | None = None) -> DamageScan:
    """Check every stored row and every frame the stored transitions need, and which transitions are
    intact; ``progress`` is called with the count of each chunk of frames, then of rows, checked."""
    report = progress or (lambda count: None)
    ring = files.frames
    first, stop = commit.frame_tail, commit.frames_written
    bad_frames, frame_damage = _scan_frames(ring, first, stop, limit=files.reader.thread_limit, progress=report)
    stored = stored_steps(commit.transitions_added, files.layout.capacity, commit.first_step)
    intact = np.zeros(len(stored), np.bool_)
    next_frames = np.zeros(len(stored), np.int64)
    obs_frames = np.zeros(len(stored), np.int64)
    flags = np.zeros(len(stored), np.uint8)
    row_damage: list[Damage] = []
    for start in range(stored.start, stored.stop, CHUNK_STEPS):
        steps = np.arange(start, min(start + CHUNK_STEPS, stored.stop), dtype=np.int64)
        where = slice(start - stored.start, start - stored.start + len(steps))
        rows, bad = files.table.check(steps)
        row_damage.extend(Damage("row", step, header.TRANSITIONS_NAME, files.table.offset_of(step),
                                 files.table.problem(step)) for step in steps[bad].tolist())
        if files.field_table is not None:
            bad_fields = files.field_table.damaged(steps)
            row_damage.extend(Damage("field row", step, header.FIELDS_NAME, files.field_table.offset_of(step),
                                     "fails its checksum") for step in steps[bad_fields].tolist())
            bad |= bad_fields
        flags[where] = row_flags(rows)
        next_frames[where] = steps + rows["frame_lead"].astype(np.int64)
        intact[where], obs_frames[where] = _walk_stacks(
            ring, next_frames[where], (flags[where] & DETACHED) != 0, ~bad, files.layout.stack_size,
            lambda frames: _intact_frames(frames, first, bad_frames),
        )
        report(len(steps))
    row_damage.sort(key=lambda damage: (damage.step, damage.what))
    return DamageScan(stored=stored, intact=intact, rows=tuple(row_damage), frames=tuple(frame_damage),
                      frames_checked=stop - first, next_frames=next_frames, obs_frames=obs_frames, flags=flags)


def _intact_frames(frames: npt.NDArray[np.int64], first: int, bad: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Which of these frame steps lie in ``[first, first + len(bad))`` and are not ``bad``."""
    inside = (frames >= first) & (frames < first + len(bad))
    if not len(bad):
        return inside
    return inside & ~bad[np.clip(frames - first, 0, len(bad) - 1)]


def _walk_stacks(
    ring: FrameRing, next_frames: npt.NDArray[np.int64], detached: npt.NDArray[np.bool_],
    ok: npt.NDArray[np.bool_], stack_size: int, frame_ok: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.bool_]],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """Which transitions (rows ``ok``) have every frame of their stacks intact, and the frame step of each
    one's newest obs frame. A transition's frames lie ``stack_size`` links back from its next_obs frame
    (``rows.stacking``), ``2 * stack_size - 1`` for a detached one; its newest obs frame one link back, or
    ``stack_size`` for a detached one. The walk follows links of intact frames only."""
    ok = ok & frame_ok(next_frames)
    current = next_frames.copy()
    obs_newest = next_frames.copy()
    levels = np.where(detached, 2 * stack_size - 1, stack_size)
    obs_level = np.where(detached, stack_size, 1)
    for level in range(1, int(levels.max(initial=0)) + 1):
        walking = ok & (level <= levels)
        if not walking.any():
            break
        current = np.where(walking, current - ring.prev_deltas(current), current)
        ok &= ~walking | frame_ok(current)
        obs_newest = np.where(level == obs_level, current, obs_newest)
    return ok, obs_newest


def _scan_frames(
    ring: FrameRing, first: int, stop: int, *, limit: int, progress: Callable[[int], None]
) -> tuple[npt.NDArray[np.bool_], list[Damage]]:
    """Decode every frame of steps ``[first, stop)``: which fail (indexed from ``first``), and each as a
    ``Damage``. A chunk that fails is halved until each failing frame stands alone."""
    bad = np.zeros(max(stop - first, 0), np.bool_)
    chunk = max(1, min(4096, _CHUNK_BYTES // max(ring.frame_nbytes, 1)))
    out = np.empty((chunk, *ring.frame_shape), ring.frame_dtype)

    def failing(steps: npt.NDArray[np.int64]) -> list[int]:
        try:
            ring.decode_into(steps, out[: len(steps)], limit=limit)
            return []
        except CorruptStoreError:
            if len(steps) == 1:
                return [int(steps[0])]
        half = len(steps) // 2
        return failing(steps[:half]) + failing(steps[half:])

    damage = []
    for start in range(first, stop, chunk):
        steps = np.arange(start, min(start + chunk, stop), dtype=np.int64)
        for step in failing(steps):
            bad[step - first] = True
            damage.append(_frame_damage(ring, step))
        progress(len(steps))
    return bad, damage


def _frame_damage(ring: FrameRing, step: int) -> Damage:
    """A failing frame, described by where its block and entry lie and whether its own block is at fault."""
    table, entry = ring.entry_location(step)
    if ring.own_block_intact(step):
        return Damage("frame", step, table, entry, "its block is intact, but a frame it is compressed against is "
                                                    "damaged")
    segment, offset, length = ring.location(step)
    return Damage("frame", step, segment, offset, f"fails its checksum: its block ({length:,} bytes here) or its "
                                                  f"entry ({table}, byte {entry:,}) is damaged")
