"""The transition table: a memory-mapped ring of fixed-size rows, one per stored transition.

A row holds what a transition owns besides pixels: the frame step of its next_obs frame, stored as
``frame_lead``, its lead over the transition step (its obs frames are reached through the frame table's
episode links), the env that produced it, a forward link to the
env's next transition of the same episode (written when that transition arrives; trusted only after
checking it, since a crash can leave a link to a step that was never committed), the action, the reward
and flag bits (``TERMINATED``, ``TRUNCATED``, ``EPISODE_START``, ``DETACHED``). The slot of
transition step ``t`` is ``t % row_slots``; the store keeps ``row_slots`` above ``capacity`` so that
rows a committed header still counts are never overwritten before the next commit.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

import numpy as np
import numpy.typing as npt

from mmreplay import extensions
from mmreplay.disk.files import BlockReservation, create_sparse
from mmreplay.disk.packed_fields import byte_width, read_uint, uint_field, write_uint
from mmreplay.disk.store_directory import FileLocation, map_array, open_sized
from mmreplay.errors import CorruptStoreError
from mmreplay.limits import check_mapping
from mmreplay.rows.checksums import row_checksum, row_checksums

TERMINATED = 1
TRUNCATED = 2
EPISODE_START = 4  # the first transition of its episode
# The transition ended its episode with a next_obs stack that is not its obs shifted by one frame (the
# reset observation that CleanRL and SB3 pass at termination): all stack_size frames of next_obs are
# stored, the oldest linked to obs's newest frame, so its obs ends stack_size links back (see stacking).
DETACHED = 8
# The first stored transition of a *fragment*: an episode whose earlier transitions were never recorded
# (an import whose source had lost them); it starts an episode like EPISODE_START but is not complete.
FRAGMENT_START = 16

# (next_obs frame steps, which rows are DETACHED) -> the oldest frame step of each obs stack.
FramesOf = Callable[[npt.NDArray[np.int64], npt.NDArray[np.bool_]], npt.NDArray[np.int64]]

_CHUNK = 4096  # rows per cached minimum in ``oldest_frame``


MAX_ENVS = 1 << 16  # env indices fit a u2 field
_ONE_BYTE_ENVS = 1 << 8  # format version 4: stores of at most this many envs keep env in one byte
_MAX_LEAD = (1 << 32) - 1
# Format version 5 packs the env with the flags: the flags in a word's low FLAG_BITS bits, the env above.
FLAG_BITS = 5
_FLAG_MASK = (1 << FLAG_BITS) - 1


def row_dtype(
    action_shape: tuple[int, ...], action_dtype: np.dtype, num_envs: int, *, row_slots: int, version: int
) -> np.dtype:
    """The packed little-endian row layout of format ``version`` for a given action field, number of envs and
    ring of ``row_slots`` rows.

    Version 5 stores ``next_delta`` in as few bytes as hold any link a writer makes (at most ``row_slots``
    steps: a link joins a stored transition to a newer one), and the env with the flags in one word
    (``flags_env``: the flags in its low ``FLAG_BITS`` bits, the env above; one byte for up to 8 envs).
    Versions 3 and 4 keep ``next_delta`` u4, ``env`` u1 (u2 beyond 256 envs) and ``flags`` u1 apart."""
    action = ("action", action_dtype.newbyteorder("<"), action_shape)
    if version < 5:
        return np.dtype(
            [
                ("checksum", "<u4"),  # of the bytes after next_delta at the row's step: see mmreplay.rows.checksums
                ("next_delta", "<u4"),  # steps forward to the env's next transition in this episode; 0: none yet
                # next_obs frame step minus transition step: every transition writes its next_obs frame, so
                # the lead is never negative; it grows by one per episode start (that episode's reset frame).
                ("frame_lead", "<u4"),
                ("env", "u1" if num_envs <= _ONE_BYTE_ENVS else "<u2"),
                ("reward", "<f4"),
                ("flags", "u1"),
                action,
            ]
        )
    flags_env = byte_width(((num_envs - 1) << FLAG_BITS) | _FLAG_MASK)
    return np.dtype(
        [
            ("checksum", "<u4"),
            ("next_delta", uint_field(min(4, max(2, byte_width(row_slots))))),
            ("frame_lead", "<u4"),
            ("flags_env", uint_field(flags_env)),
            ("reward", "<f4"),
            action,
        ]
    )


def unchecked_bytes(dtype: np.dtype) -> int:
    """The bytes a row's checksum leaves out: the checksum itself and ``next_delta`` (written later)."""
    assert dtype.fields is not None
    return int(dtype.fields["next_delta"][1]) + dtype["next_delta"].itemsize


def row_flags(rows: npt.NDArray[np.void]) -> npt.NDArray[np.uint8]:
    """Each row's flag bits (``TERMINATED``, ...), in either version's layout."""
    if rows.dtype.names is not None and "flags" in rows.dtype.names:
        flags: npt.NDArray[np.uint8] = rows["flags"]
        return flags
    word = rows["flags_env"]
    low = word if rows.dtype["flags_env"].subdtype is None else word[..., 0]
    return (low & _FLAG_MASK).astype(np.uint8)


def row_envs(rows: npt.NDArray[np.void]) -> npt.NDArray[np.int64]:
    """Each row's env index, in either version's layout."""
    if rows.dtype.names is not None and "env" in rows.dtype.names:
        return rows["env"].astype(np.int64)
    return read_uint(rows, "flags_env") >> FLAG_BITS


def row_next_deltas(rows: npt.NDArray[np.void]) -> npt.NDArray[np.int64]:
    """Each row's forward link (0: none yet), in either version's layout."""
    return read_uint(rows, "next_delta")


def row_layout(dtype: np.dtype, num_envs: int = MAX_ENVS) -> dict[str, int]:
    """The row as the compiled code reads and writes it, which has no offsets of its own:
    ``_lz4batch.row_layout(**row_layout(dtype, num_envs))`` checks it once and returns what the row
    functions take: the row's size, the byte offsets of checksum, next_delta, frame_lead and env, env's
    width, the offsets of reward, flags and action, action's size, the flag bits TERMINATED, TRUNCATED and
    DETACHED, next_delta's width, the shift of env in its word (5 where it shares the flags' word, format
    version 5 on; else 0) and the store's ``num_envs``: a row naming an env of ``num_envs`` or more fails
    the compiled checks as a row that fails its checksum does."""
    assert dtype.fields is not None
    offsets = {name: dtype.fields[name][1] for name in dtype.names or ()}
    packed = "flags_env" in offsets
    env, flags = ("flags_env", "flags_env") if packed else ("env", "flags")
    return {
        "size": dtype.itemsize, "checksum": offsets["checksum"], "next_delta": offsets["next_delta"],
        "frame_lead": offsets["frame_lead"], "env": offsets[env], "env_bytes": dtype[env].itemsize,
        "reward": offsets["reward"], "flags": offsets[flags], "action": offsets["action"],
        "action_bytes": dtype["action"].itemsize, "terminated": TERMINATED, "truncated": TRUNCATED,
        "detached": DETACHED, "next_delta_bytes": dtype["next_delta"].itemsize,
        "env_shift": FLAG_BITS if packed else 0, "num_envs": num_envs,
    }


class RowFields(NamedTuple):
    """The fields of rows read for a batch (``TransitionTable.read_fields``), one entry per step."""

    next_frames: npt.NDArray[np.int64]  # next_obs frame steps
    action: npt.NDArray[np.generic]
    reward: npt.NDArray[np.float32]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    env_index: npt.NDArray[np.int64]
    detached: npt.NDArray[np.bool_]  # flag DETACHED: obs is not the next_obs chain shifted by one frame


def detached_rows(rows: npt.NDArray[np.void]) -> npt.NDArray[np.bool_]:
    """Which rows carry the DETACHED flag."""
    detached: npt.NDArray[np.bool_] = (row_flags(rows) & DETACHED) != 0
    return detached


def next_frame_steps(rows: npt.NDArray[np.void], steps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The next_obs frame step of each row, read at these transition steps."""
    return steps + rows["frame_lead"].astype(np.int64)


_V3_UNCHECKED_BYTES = 8  # version 3's sum leaves out checksum and next_delta
_lz4batch = extensions.load("_lz4batch")  # its gather_rows is read's copy and checksums, compiled
_ROW_COPY_BYTES = 256  # the longest row the compiled code unpacks (_c/row_gather.h, ROW_COPY_BYTES)
_STEP_MIX = 2654435761  # of format version 3's row sum


class DamagedRowError(CorruptStoreError):
    """A stored row is damaged: it fails its checksum, or holds a value no row of the store can hold.
    ``step`` is its transition step, ``offset`` its byte offset in the table's file."""

    def __init__(self, message: str, *, step: int, offset: int = -1) -> None:
        super().__init__(message)
        self.step = step
        self.offset = offset


class RowChecksumError(DamagedRowError):
    """A row does not match its checksum."""


class RowEnvError(DamagedRowError):
    """A row matches its checksum but names an env the store does not have (``env >= num_envs``): a
    hand-made or edited file whose checksum was recomputed."""


class TransitionTable:
    """Rows addressed by transition step.

    ``version_3`` tables (of format version 3 stores) check rows against that version's position-weighted
    byte sum and are only read; every other table writes and checks ``row_checksum``'s CRC.
    """

    def __init__(
        self, path: FileLocation, *, dtype: np.dtype, row_slots: int, writable: bool, version_3: bool = False,
        num_envs: int = MAX_ENVS,
    ) -> None:
        """``num_envs``: the store's (its header's); a row naming a larger env is damaged (``RowEnvError``)."""
        if writable and version_3:
            raise ValueError("a table of format version 3 is read only (its rows carry the old checksum)")
        self._version_3 = version_3
        expected = row_slots * dtype.itemsize
        # Opened once, not following a link, and refused unless a regular file (store_directory).
        descriptor = open_sized(path, expected, writable=writable, what="transition table")
        try:
            check_mapping(expected, f"{path}: the transition table of {row_slots:,} row slots (the header's row_slots)")
            self._mapping = map_array(path, dtype, (row_slots,), writable=writable, what="transition table",
                                      descriptor=descriptor)
        except BaseException:
            os.close(descriptor)
            raise
        self.path = path
        self.row_slots = row_slots
        self.num_envs = num_envs
        self._chunk_minimums: dict[int, int] = {}
        self._weights = np.arange(1, 2 * (dtype.itemsize - _V3_UNCHECKED_BYTES), 2, dtype=np.uint64)
        self._row_size = dtype.itemsize
        self._unchecked = unchecked_bytes(dtype)  # checksum and next_delta
        self._next_delta_bytes = dtype["next_delta"].itemsize
        self._packed = "flags_env" in (dtype.names or ())  # format version 5: env and flags in one word
        self._flags_env_bytes = dtype["flags_env"].itemsize if self._packed else 0
        # The layout the compiled row functions take, checked by the extension once, here.
        self._layout = None if _lz4batch is None else _lz4batch.row_layout(**row_layout(dtype, num_envs))
        stored_action = dtype["action"]
        # A batch's action: the stored field in native byte order.
        self._action = np.dtype((stored_action.base.newbyteorder("="), stored_action.shape))
        # gather_fields copies the action's little-endian bytes: right where they are native.
        self._gather_fields = (
            _lz4batch is not None and self._row_size <= _ROW_COPY_BYTES and self._action.base == stored_action.base
        )
        # The fields between next_delta and action, packed exactly as in row_dtype (version 5: frame_lead,
        # then flags_env, then reward, written apart, since flags_env may be 3 bytes wide).
        self._middle = (
            struct.Struct("<I") if self._packed
            else struct.Struct("<I" + ("B" if dtype["env"].itemsize == 1 else "H") + "fB")
        )
        # Plain indexing, without memmap's per-call overhead.
        self._rows: npt.NDArray[np.void] = self._mapping.view(np.ndarray)
        self._bytes = self._rows.view(np.uint8).reshape(-1).data if writable else None
        self._reservation = BlockReservation(path, descriptor=descriptor) if writable else None
        if not writable:
            os.close(descriptor)
        # What _lz4batch.read_transitions takes to read rows as gather_fields does; None where it cannot.
        self.compiled_rows = (self._rows, row_slots, self._layout, version_3) if self._gather_fields else None

    @classmethod
    def create(cls, path: FileLocation, *, dtype: np.dtype, row_slots: int, num_envs: int = MAX_ENVS) -> TransitionTable:
        create_sparse(path, row_slots * dtype.itemsize)
        return cls(path, dtype=dtype, row_slots=row_slots, writable=True, num_envs=num_envs)

    def write(
        self,
        first_step: int,
        *,
        next_frames: list[int],
        envs: list[int],
        rewards: npt.NDArray[np.float32],
        flags: list[int],
        actions: npt.NDArray[np.generic],
    ) -> None:
        """Write rows for transition steps ``first_step, first_step + 1, ...``."""
        # Packed with struct, one row per env: for one or a few rows this is several times cheaper than
        # building a structured array.
        size = self._row_size
        assert self._bytes is not None
        self.reserve_rows(first_step, len(next_frames))
        if next_frames:
            self._check_lead(next_frames[-1] - (first_step + len(next_frames) - 1))  # leads never shrink
        pack, unchecked = self._middle.pack, bytes(self._next_delta_bytes)
        for i, next_frame in enumerate(next_frames):
            step = first_step + i
            if self._packed:
                body = (pack(next_frame - step) + write_uint(flags[i] | envs[i] << FLAG_BITS, self._flags_env_bytes)
                        + struct.pack("<f", float(rewards[i])) + actions[i].tobytes())
            else:
                body = pack(next_frame - step, envs[i], float(rewards[i]), flags[i]) + actions[i].tobytes()
            checksum = row_checksum(body, step)
            offset = (step % self.row_slots) * size
            self._bytes[offset : offset + size] = struct.pack("<I", checksum) + unchecked + body

    def reserve_rows(self, first_step: int, count: int) -> None:
        """Reserve the blocks of the rows of steps ``first_step`` to ``first_step + count`` (exclusive) before
        they are stored into the map (an ``OSError`` such as ENOSPC if they cannot be)."""
        assert self._reservation is not None
        self._reservation.ensure(min(first_step + count, self.row_slots) * self._row_size)

    def write_continuations(
        self,
        first_step: int,
        *,
        frame_lead: int,
        previous_steps: list[int],
        rewards: list[float],
        flags: list[int],
        actions: bytes,
    ) -> None:
        """``write`` and ``link`` for the rows of envs 0, 1, ... that each continue their env's transition
        at ``previous_steps[env]``, with next_obs frames ``frame_lead`` steps ahead (add's fast path).
        ``actions`` holds the envs' actions back to back, as the row stores them. One compiled call
        where the extension is built."""
        self._check_lead(frame_lead)
        self.reserve_rows(first_step, len(flags))
        if _lz4batch is not None:
            _lz4batch.write_rows((self._bytes, self.row_slots, self._layout, False), first_step, frame_lead, rewards,
                                 flags, actions, previous_steps)
            return
        envs = range(len(flags))
        self.write(
            first_step,
            next_frames=[first_step + env + frame_lead for env in envs],
            envs=list(envs),
            rewards=np.array(rewards, np.float32),
            flags=flags,
            actions=np.frombuffer(actions, self._rows.dtype["action"].base).reshape(len(envs), -1),
        )
        for env in envs:
            self.link(previous_steps[env], first_step + env)

    def _check_lead(self, frame_lead: int) -> None:
        """A row's frame_lead must fit its u32 field."""
        if frame_lead > _MAX_LEAD:
            raise OverflowError(
                f"{self.path}: frame steps ran more than {_MAX_LEAD} ahead of transition steps (one more per "
                "episode start); this store cannot hold more episodes"
            )

    @property
    def dtype(self) -> np.dtype:
        return self._rows.dtype

    @property
    def batch_action(self) -> np.dtype:
        """A batch's action: the stored field in native byte order, as ``(base, shape)`` (``np.empty(n,
        batch_action)`` is then ``(n, *shape)`` of the base dtype)."""
        return self._action

    def link(self, step: int, next_step: int) -> None:
        """Record that ``next_step`` continues the episode of ``step`` (same env)."""
        assert self._bytes is not None, "link needs a writable table"
        offset = (step % self.row_slots) * self._row_size + 4  # next_delta follows the checksum
        self._bytes[offset : offset + self._next_delta_bytes] = write_uint(next_step - step, self._next_delta_bytes)

    def oldest_frame(self, start: int, stop: int, *, oldest_frames_of: FramesOf) -> int:
        """The oldest frame step that any transition in steps ``[start, stop)`` uses.

        ``oldest_frames_of`` maps next_obs frame steps (and the rows' DETACHED flags) to the oldest frame
        step of each obs stack (the
        frame ring's episode links know it; the table does not). Minimums of whole chunks of rows are kept
        once computed (rows and their frames are never rewritten while their steps are stored), so a
        commit pays for at most two partial chunks and one small ``min``.
        """
        first_chunk, last_chunk = start // _CHUNK, (stop - 1) // _CHUNK
        for chunk in [c for c in self._chunk_minimums if c < first_chunk]:
            del self._chunk_minimums[chunk]
        minimum = self._oldest_in(start, min(stop, (first_chunk + 1) * _CHUNK), oldest_frames_of)
        for chunk in range(first_chunk + 1, last_chunk):
            if chunk not in self._chunk_minimums:
                whole = (chunk * _CHUNK, (chunk + 1) * _CHUNK)
                self._chunk_minimums[chunk] = self._oldest_in(*whole, oldest_frames_of)
            minimum = min(minimum, self._chunk_minimums[chunk])
        if last_chunk > first_chunk:
            minimum = min(minimum, self._oldest_in(last_chunk * _CHUNK, stop, oldest_frames_of))
        return minimum

    def _oldest_in(self, start: int, stop: int, oldest_frames_of: FramesOf) -> int:
        steps = np.arange(start, stop, dtype=np.int64)
        rows = self.read(steps)
        return int(oldest_frames_of(next_frame_steps(rows, steps), detached_rows(rows)).min())

    def columns(self, start: int, stop: int, names: tuple[str, ...]) -> dict[str, npt.NDArray[Any]]:
        """Whole columns of the rows of steps ``[start, stop)``, read a chunk at a time; ``"env"``,
        ``"flags"`` and ``"next_delta"`` as every format version gives them (``row_envs``, ...)."""
        parts: dict[str, list[npt.NDArray[Any]]] = {name: [] for name in names}
        unpacked: dict[str, Callable[[npt.NDArray[np.void]], npt.NDArray[Any]]] = {
            "env": row_envs, "flags": row_flags, "next_delta": row_next_deltas,
        }
        for chunk_start in range(start, stop, _CHUNK):
            rows = self.read(np.arange(chunk_start, min(stop, chunk_start + _CHUNK), dtype=np.int64))
            for name in names:
                parts[name].append(unpacked[name](rows) if name in unpacked else rows[name])
        return {name: np.concatenate(arrays) if arrays else np.empty(0) for name, arrays in parts.items()}

    def newest_of_each_env(self, start: int, stop: int, num_envs: int) -> dict[int, int]:
        """For each env with a transition in steps ``[start, stop)``, the step of its newest one."""
        newest: dict[int, int] = {}
        chunk_stop = stop
        while chunk_stop > start and len(newest) < num_envs:
            chunk_start = max(start, chunk_stop - _CHUNK)
            envs = row_envs(self.read(np.arange(chunk_start, chunk_stop, dtype=np.int64)))
            for env in np.unique(envs).tolist():
                if env not in newest:
                    newest[env] = chunk_start + int(np.flatnonzero(envs == env)[-1])
            chunk_stop = chunk_start
        return newest

    def read(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.void]:
        """A copy of the rows of these transition steps, each checked against its checksum and the store's
        ``num_envs`` (``DamagedRowError`` for the first that fails)."""
        if _lz4batch is not None:
            steps = np.ascontiguousarray(steps, np.int64)
            rows = np.empty(len(steps), self._rows.dtype)
            first_bad = _lz4batch.gather_rows(self._rows, self.row_slots, steps, rows, self._version_3, self._unchecked)
        else:
            rows = self._rows[steps % self.row_slots]
            bad = rows["checksum"] != self._checksums(rows, steps)
            first_bad = int(np.argmax(bad)) if bad.any() else -1
        checked = rows if first_bad < 0 else rows[:first_bad]  # the rows before the first bad checksum
        if len(checked):
            beyond = row_envs(checked) >= self.num_envs
            first_bad = int(np.argmax(beyond)) if beyond.any() else first_bad
        if first_bad >= 0:
            self._raise_checksum_error(int(steps[first_bad]))
        return rows

    def check(self, steps: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.void], npt.NDArray[np.bool_]]:
        """A copy of the rows of these steps, unchecked, and which of them are damaged (``read`` would
        refuse them): what a scan of a damaged table reads, without raising."""
        steps = np.ascontiguousarray(steps, np.int64)
        rows = self._rows[steps % self.row_slots]
        bad: npt.NDArray[np.bool_] = rows["checksum"] != self._checksums(rows, steps)
        bad |= row_envs(rows) >= self.num_envs
        return rows, bad

    def offset_of(self, step: int) -> int:
        """The byte offset of the row of ``step`` in the table's file."""
        return (step % self.row_slots) * self._row_size

    def problem(self, step: int) -> str:
        """What is wrong with the row of ``step``: its checksum, or its env (``damaged``'s reasons)."""
        row = self._rows[step % self.row_slots : step % self.row_slots + 1]
        env = int(row_envs(row)[0])
        if int(row["checksum"][0]) == int(self._checksums(row, np.array([step], np.int64))[0]) and env >= self.num_envs:
            return f"names env {env}, but the store has {self.num_envs} env(s)"
        return "fails its checksum"

    def _raise_checksum_error(self, step: int) -> NoReturn:
        problem = self.problem(step)
        kind = RowChecksumError if problem == "fails its checksum" else RowEnvError
        suffix = " (corrupt, or overwritten since it was located)" if kind is RowChecksumError else ""
        raise kind(f"{self.path}: the row of transition {step} {problem}{suffix}", step=step,
                   offset=self.offset_of(step))

    def read_fields(self, steps: npt.NDArray[np.int64]) -> RowFields:
        """``read``, unpacked into a batch's fields; one compiled call where the extension is built."""
        steps = np.ascontiguousarray(steps, np.int64)
        action = np.empty((len(steps), *self._action.shape), self._action.base)
        if self._gather_fields:
            assert _lz4batch is not None
            fields = RowFields(
                np.empty(len(steps), np.int64), action, np.empty(len(steps), np.float32),
                np.empty(len(steps), np.bool_), np.empty(len(steps), np.bool_), np.empty(len(steps), np.int64),
                np.empty(len(steps), np.bool_),
            )
            first_bad = _lz4batch.gather_fields((self._rows, self.row_slots, self._layout, self._version_3), steps,
                                                fields)
            if first_bad >= 0:
                self._raise_checksum_error(int(steps[first_bad]))
            return fields
        rows = self.read(steps)
        action[...] = rows["action"]
        return RowFields(
            next_frame_steps(rows, steps), action, rows["reward"].astype(np.float32),
            (row_flags(rows) & TERMINATED) != 0, (row_flags(rows) & TRUNCATED) != 0, row_envs(rows),
            detached_rows(rows),
        )

    def _checksums(self, rows: npt.NDArray[np.void], steps: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32]:
        """Each row's checksum of the bytes after next_delta at its step: ``row_checksum``, or in a
        version 3 table a position-weighted byte sum (byte i weighted by 2i + 1) plus the step times
        2654435761, mod 2^32."""
        data = np.ascontiguousarray(rows).view(np.uint8).reshape(len(rows), rows.dtype.itemsize)
        if not self._version_3:
            return row_checksums(data, steps, skip=self._unchecked)
        sums = data[:, _V3_UNCHECKED_BYTES:].astype(np.uint64) @ self._weights
        mixed = sums + steps.astype(np.uint64) * np.uint64(_STEP_MIX)
        return (mixed & np.uint64(0xFFFFFFFF)).astype(np.uint32)

    def sync(self) -> None:
        self._mapping.flush()

    def close(self) -> None:
        if self._bytes is not None:
            self._bytes.release()
            self._mapping.flush()
        if self._reservation is not None:
            self._reservation.close()
        self.compiled_rows = None
        del self._rows, self._mapping, self._bytes
