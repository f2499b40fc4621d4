"""Encoded batches: what ``sample`` and ``sample_sequences`` return with their pixels left as the stored
lz4 blocks (``ReplayStore.sample_encoded``, ``sample_sequences_encoded``), and their decoding.

An *encoded batch* holds the distinct frames a batch needs (``EncodedFrames``, each block with the CRC
and seed it has on disk) and, for each transition, which of them make its obs and next_obs; the other
fields are the decoded batch's. ``decode`` gives exactly the batch that the store's own sampling
returns for the same draw, decoded by the same compiled decoder, each block checked end to end.
``EncodingReader`` is the store's reader with its decode replaced by a gathering of blocks, so that a
draw locates its frames exactly as ``sample`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import InitVar, dataclass, fields

import numpy as np
import numpy.typing as npt

from mmreplay.batch import Batch, SequenceBatch
from mmreplay.frames.reference_ring import ReferenceFrameRing
from mmreplay.frames.ring import FrameChecksumError
from mmreplay.frames.wire import EncodedFrames, frame_indices
from mmreplay.store.reading.mapped_files import MappedFiles
from mmreplay.store.reading.transition_reader import TransitionReader


@dataclass(frozen=True, repr=False)
class EncodedBatch:
    """A ``Batch`` whose pixels are still the stored blocks, as ``ReplayStore.sample_encoded`` returns it.

    ``decode()`` gives the ``Batch`` that ``sample`` returns for the same draw.

    Attributes:
        frames: the distinct frames the batch needs, encoded.
        frame_index: (B, columns) int64, which of ``frames``, in order, make each transition's frames:
            ``obs`` is its first ``stack_size`` columns and ``next_obs`` its last ``stack_size`` (they
            overlap when there are ``stack_size + 1`` columns, as in ``sample``'s own batches).
        stack_size: frames per obs.
        action: as in ``Batch``.
        reward: as in ``Batch``.
        terminated: as in ``Batch``.
        truncated: as in ``Batch``.
        index: as in ``Batch``.
        env_index: as in ``Batch``.
        weight: as in ``Batch``.
        discount: as in ``Batch``.
        user_fields: the rows' user fields (``create(fields=...)``) by name, read as ``fields``, as in
            ``Batch``.
    """

    frames: EncodedFrames
    frame_index: npt.NDArray[np.int64]
    stack_size: int
    action: npt.NDArray[np.generic]
    reward: npt.NDArray[np.float32]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    index: npt.NDArray[np.int64]
    env_index: npt.NDArray[np.int64]
    weight: npt.NDArray[np.float32]
    discount: npt.NDArray[np.float32]
    user_fields: InitVar[dict[str, npt.NDArray[np.generic]] | None] = None

    def __post_init__(self, user_fields: dict[str, npt.NDArray[np.generic]] | None) -> None:
        object.__setattr__(self, "user_fields", {} if user_fields is None else dict(user_fields))

    @property
    def fields(self) -> dict[str, npt.NDArray[np.generic]]:
        """The user fields by name, each with the batch axis in front, as ``Batch.fields``.

        Returns:
            The user fields' arrays by name (empty for a store without any).
        """
        return _user_fields(self)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def nbytes(self) -> int:
        """Bytes of every array and block: what sending this batch costs.

        Returns:
            The total in bytes.
        """
        return _nbytes(self)

    def decode(self, *, decode_threads: int | None = None) -> Batch:
        """The batch with its pixels, as ``decode_batch`` decodes it.

        Args:
            decode_threads: the most threads the decode may use (None: the cores this process may use).

        Returns:
            The ``Batch`` that ``sample`` returns for the same draw.

        Raises:
            CorruptStoreError: a block fails the checksum it had on disk (see ``decode_batch``).
        """
        return decode_batch(self, decode_threads=decode_threads)

    def __repr__(self) -> str:
        return (
            f"EncodedBatch(transitions={len(self)}, frames={len(self.frames)}, "
            f"frame_index=int64{list(self.frame_index.shape)}, nbytes={self.nbytes:,})"
        )


def _nbytes(batch: EncodedBatch | EncodedSequenceBatch) -> int:
    """The bytes of an encoded batch's blocks and arrays (user fields included)."""
    arrays = [getattr(batch, item.name) for item in fields(batch) if item.name not in ("frames", "stack_size")]
    arrays += list(batch.fields.values())
    return batch.frames.nbytes + int(sum(array.nbytes for array in arrays))


def _user_fields(batch: EncodedBatch | EncodedSequenceBatch) -> dict[str, npt.NDArray[np.generic]]:
    """An encoded batch's user fields: kept in its ``__dict__`` (so they travel in its pickle) by
    ``__post_init__``; an instance unpickled from an older version has none."""
    user: dict[str, npt.NDArray[np.generic]] = batch.__dict__.get("user_fields") or {}
    return user


def _checked_fields(
    encoded: EncodedBatch | EncodedSequenceBatch, lead: tuple[int, ...]
) -> dict[str, npt.NDArray[np.generic]]:
    """An encoded batch's user fields, each checked to have the batch's leading axes ``lead`` (a batch
    that arrived from elsewhere was unpickled, not constructed: it is checked where it is decoded)."""
    user = encoded.fields
    if not isinstance(user, dict):
        raise TypeError(f"user_fields must be a dict of name -> array; got {type(user).__name__}")
    for name, array in user.items():
        if not isinstance(array, np.ndarray) or array.shape[: len(lead)] != lead:
            shape = getattr(array, "shape", type(array).__name__)
            raise ValueError(f"user_fields[{name!r}] has shape {shape}; expected leading axes {lead}, as index")
    return user


def decode_batch(encoded: EncodedBatch, *, decode_threads: int | None = None) -> Batch:
    """Decode an ``EncodedBatch`` into the ``Batch`` that ``sample`` returns for the same draw.

    Each transition's frames are decoded straight into place by the compiled decoder, every block checked
    against the checksum it had on disk.

    Args:
        encoded: the batch, as ``sample_encoded`` made it (or unpickled from another process).
        decode_threads: the learner's side of ``decode_threads=``: the batch decodes on the cores this
            process may use, at most that many (None: no cap).

    Returns:
        The decoded batch.

    Raises:
        TypeError: ``encoded`` is not an ``EncodedBatch``, its ``frames`` are not ``EncodedFrames``, its
            ``frame_index`` is not integer, or ``decode_threads`` is not None or an int.
        ValueError: ``frame_index`` is not (transitions, columns) indices into ``frames``, ``stack_size``
            is not 1 to its columns, or ``decode_threads`` is not 1 to 64.
        CorruptStoreError: a block fails the checksum it had on disk, or does not decode to one frame.
    """
    if not isinstance(encoded, EncodedBatch):
        raise TypeError(f"encoded must be an EncodedBatch; got {type(encoded).__name__}")
    index = _frame_index(encoded, "(transitions, columns)")
    rows, columns = index.shape
    pixels = encoded.frames.decode(index.reshape(-1), decode_threads=decode_threads).reshape(
        rows, columns, *encoded.frames.frame_shape
    )
    size = encoded.stack_size
    return Batch(
        obs=pixels[:, :size],
        action=encoded.action,
        reward=encoded.reward,
        next_obs=pixels[:, -size:],
        terminated=encoded.terminated,
        truncated=encoded.truncated,
        index=encoded.index,
        env_index=encoded.env_index,
        weight=encoded.weight,
        discount=encoded.discount,
        user_fields=_checked_fields(encoded, (rows,)),
    )


@dataclass(frozen=True, repr=False)
class EncodedSequenceBatch:
    """A ``SequenceBatch`` whose pixels are still the stored blocks, as ``sample_sequences_encoded`` returns it.

    ``decode()`` gives the ``SequenceBatch`` that ``sample_sequences`` returns for the same draw (zero
    past each window's end).

    Attributes:
        frames: the distinct frames the windows need, encoded.
        frame_index: (B, length, columns) int64, which of ``frames`` make each position's obs (its first
            ``stack_size`` columns) and next_obs (its last ``stack_size``).
        stack_size: frames per obs.
        action: as in ``SequenceBatch``.
        reward: as in ``SequenceBatch``.
        terminated: as in ``SequenceBatch``.
        truncated: as in ``SequenceBatch``.
        mask: as in ``SequenceBatch``.
        index: as in ``SequenceBatch``.
        env_index: as in ``SequenceBatch``.
        weight: as in ``SequenceBatch``.
        user_fields: the windows' user fields by name, read as ``fields``, as in ``SequenceBatch``.
    """

    frames: EncodedFrames
    frame_index: npt.NDArray[np.int64]
    stack_size: int
    action: npt.NDArray[np.generic]
    reward: npt.NDArray[np.float32]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    mask: npt.NDArray[np.bool_]
    index: npt.NDArray[np.int64]
    env_index: npt.NDArray[np.int64]
    weight: npt.NDArray[np.float32]
    user_fields: InitVar[dict[str, npt.NDArray[np.generic]] | None] = None

    def __post_init__(self, user_fields: dict[str, npt.NDArray[np.generic]] | None) -> None:
        object.__setattr__(self, "user_fields", {} if user_fields is None else dict(user_fields))

    @property
    def fields(self) -> dict[str, npt.NDArray[np.generic]]:
        """The user fields by name, each shaped (B, length, ...), as ``SequenceBatch.fields``.

        Returns:
            The user fields' arrays by name (empty for a store without any).
        """
        return _user_fields(self)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def nbytes(self) -> int:
        """Bytes of every array and block: what sending this batch costs.

        Returns:
            The total in bytes.
        """
        return _nbytes(self)

    def decode(self, *, decode_threads: int | None = None) -> SequenceBatch:
        """The windows with their pixels, as ``decode_sequences`` decodes them.

        Args:
            decode_threads: the most threads the decode may use (None: the cores this process may use).

        Returns:
            The ``SequenceBatch`` that ``sample_sequences`` returns for the same draw.

        Raises:
            CorruptStoreError: a block fails the checksum it had on disk (see ``decode_sequences``).
        """
        return decode_sequences(self, decode_threads=decode_threads)

    def __repr__(self) -> str:
        return (
            f"EncodedSequenceBatch(windows={len(self)}, frames={len(self.frames)}, "
            f"frame_index=int64{list(self.frame_index.shape)}, nbytes={self.nbytes:,})"
        )


def decode_sequences(encoded: EncodedSequenceBatch, *, decode_threads: int | None = None) -> SequenceBatch:
    """Decode an ``EncodedSequenceBatch`` into the ``SequenceBatch`` that ``sample_sequences`` returns.

    The windows decode in one call of the compiled decoder, every block checked against its checksum;
    positions past a window's end are zero.

    Args:
        encoded: the windows, as ``sample_sequences_encoded`` made them.
        decode_threads: the most threads the decode may use, as in ``decode_batch`` (None: no cap).

    Returns:
        The decoded windows.

    Raises:
        TypeError: ``encoded`` is not an ``EncodedSequenceBatch``, its ``frames`` are not
            ``EncodedFrames``, its ``frame_index`` is not integer, or ``decode_threads`` is not None or
            an int.
        ValueError: ``frame_index`` is not (windows, length, columns) indices into ``frames``,
            ``stack_size`` is not 1 to its columns, ``mask``'s shape is not frame_index's first two axes,
            or ``decode_threads`` is not 1 to 64.
        CorruptStoreError: a block fails the checksum it had on disk, or does not decode to one frame.
    """
    if not isinstance(encoded, EncodedSequenceBatch):
        raise TypeError(f"encoded must be an EncodedSequenceBatch; got {type(encoded).__name__}")
    index = _frame_index(encoded, "(windows, length, columns)")
    shape = index.shape
    if np.shape(encoded.mask) != shape[:2]:
        raise ValueError(f"mask has shape {np.shape(encoded.mask)}; expected {shape[:2]}, as frame_index's first two axes")
    pixels = encoded.frames.decode(index.reshape(-1), decode_threads=decode_threads).reshape(
        *shape, *encoded.frames.frame_shape
    )
    pixels[~encoded.mask] = 0  # past a window's end, as sample_sequences zeroes it
    size = encoded.stack_size
    return SequenceBatch(
        obs=pixels[:, :, :size],
        action=encoded.action,
        reward=encoded.reward,
        next_obs=pixels[:, :, -size:],
        terminated=encoded.terminated,
        truncated=encoded.truncated,
        mask=encoded.mask,
        index=encoded.index,
        env_index=encoded.env_index,
        weight=encoded.weight,
        user_fields=_checked_fields(encoded, shape[:2]),
    )


def _frame_index(encoded: EncodedBatch | EncodedSequenceBatch, expected: str) -> npt.NDArray[np.int64]:
    """An encoded batch's ``frame_index`` checked against its frames and ``stack_size`` (a batch that
    arrived from elsewhere was unpickled, not constructed: it is checked where it is decoded)."""
    if not isinstance(encoded.frames, EncodedFrames):
        raise TypeError(f"frames must be EncodedFrames; got {type(encoded.frames).__name__}")
    index = frame_indices(encoded.frame_index, "frame_index", len(encoded.frames))
    size = encoded.stack_size
    if index.ndim != expected.count(",") + 1 or index.shape[-1] < 1:
        raise ValueError(f"frame_index has shape {index.shape}; expected {expected}")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not 1 <= size <= index.shape[-1]:
        raise ValueError(f"stack_size is {size!r}; expected an int in [1, {index.shape[-1]}] (frame_index's columns)")
    return index


class EncodingReader(TransitionReader):
    """A ``TransitionReader`` that gathers the stored blocks of a batch's frames instead of decoding
    them: it locates frames exactly as the store's reader does, so ``encoded(batch)`` of what it read
    is what ``sample`` (``encoded_sequences``: ``sample_sequences``) would have decoded. One reader
    serves one batch.

    ``verify``: check each block against its checksum as it is gathered. A reader that may be behind
    the writer (a read-only store) must, so that a frame overwritten since it was located raises
    ``FrameChecksumError`` and the store reads again; in the writer's own process nothing moves under
    a read, and ``decode`` checks every block end to end anyway (one compiled pass instead of a Python
    call per frame here)."""

    _captured: EncodedFrames | None = None
    _frame_index: npt.NDArray[np.int64] | None = None
    verify: bool = True

    def _decode(
        self,
        frames: npt.NDArray[np.int64],
        steps: npt.NDArray[np.int64],
        pixels: npt.NDArray[np.generic] | None = None,
        *,
        padded: bool = True,  # the store is not zero-padded (sample_encoded refuses those): nothing to zero
    ) -> npt.NDArray[np.uint8]:
        distinct, inverse = np.unique(frames.reshape(-1), return_inverse=True)
        if isinstance(self.frames, ReferenceFrameRing):  # and the frames their blocks are compressed against
            self._captured, listed = self._referenced_blocks(self.frames, distinct, steps, frames)
            self._frame_index = np.searchsorted(listed, frames).astype(np.int64)
        else:
            self._captured = self._blocks(distinct, steps, frames)
            self._frame_index = inverse.reshape(frames.shape).astype(np.int64, copy=False)
        # No pixels: a zero-strided stand-in (one byte of memory) with the shape the batch's obs and
        # next_obs slice; writeable, since sequences zero the positions past a window's end in it.
        shape = (*frames.shape, *self.frame_shape)
        return np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape, (0,) * len(shape), writeable=True)

    def _blocks(
        self, frame_steps: npt.NDArray[np.int64], steps: npt.NDArray[np.int64], frames: npt.NDArray[np.int64],
        *, needing: Callable[[int], int] | None = None,
    ) -> EncodedFrames:
        """The stored blocks of these frames, checked against their checksums here if ``verify`` (a
        reader behind the writer then retries, as ``sample`` does). ``needing(frame_step)``: a frame of
        the batch that needs that frame (itself by default), for the error."""
        data, lengths, checksums, seeds, bad = self.frames.blocks(frame_steps, verify=self.verify)
        if bad >= 0:
            frame_step = int(frame_steps[bad])
            shown = frame_step if needing is None else needing(frame_step)
            transition = steps[(frames == shown).any(axis=1)]
            read_for = f"transition {int(transition[0])}" if transition.size else "this batch"  # table moved meanwhile
            raise FrameChecksumError(f"frame {frame_step} fails its checksum (read for {read_for})", frame_step=frame_step)
        return EncodedFrames(data, lengths, checksums, seeds, tuple(self.frame_shape))

    def _referenced_blocks(
        self, ring: ReferenceFrameRing, distinct: npt.NDArray[np.int64], steps: npt.NDArray[np.int64],
        frames: npt.NDArray[np.int64],
    ) -> tuple[EncodedFrames, npt.NDArray[np.int64]]:
        """The stored blocks of a reference ring's frames ``distinct`` and of every frame they are
        compressed against, in frame order (a reference before the frames that need it), each with
        its reference's index among them; and their frame steps. The chains are followed in one compiled
        call where the extension is built (``ReferenceFrameRing.closure``), else level by level here (one
        table read each), which also names the frame at fault in a damaged chain."""
        closure = ring.closure(distinct)
        if closure is not None:
            every, references = closure
            blocks = self._blocks(every, steps, frames, needing=lambda step: _needing(ring, distinct, step))
            encoded = EncodedFrames(blocks.data, blocks.lengths, blocks.checksums, blocks.seeds, blocks.frame_shape,
                                    references=references, format_version=ring.version)
            return encoded, every
        chain, needing = distinct.copy(), distinct.copy()  # each listed frame, and a batch frame needing it
        listed = [chain]
        for _ in range(ring.scheme.depth + 1):
            deltas = ring.ref_deltas(chain)
            dependent = deltas > 0
            if not dependent.any():
                break
            chain, needing = chain[dependent] - deltas[dependent], needing[dependent]
            if int(chain.min()) < 0:
                at = int(np.argmin(chain))
                raise FrameChecksumError(f"frame {int(needing[at])} needs a reference before frame step 0: the frame "
                                         "table is corrupt, or the frame was overwritten since it was located",
                                         frame_step=int(needing[at]))
            listed.append(chain)
        else:
            raise FrameChecksumError(f"a frame of the batch is more than {ring.scheme.depth} references deep (the "
                                     "scheme's depth): the frame table is corrupt, or the frame was overwritten since "
                                     "it was located", frame_step=int(distinct[0]))
        every = np.unique(np.concatenate(listed))
        blocks = self._blocks(every, steps, frames, needing=lambda step: _needing(ring, distinct, step))
        deltas = ring.ref_deltas(every)
        references = np.where(deltas > 0, np.searchsorted(every, every - deltas), -1)
        if bool((every[np.maximum(references, 0)] != every - deltas)[deltas > 0].any()):
            raise FrameChecksumError("a frame's reference changed while the batch was read: the frame was "
                                     "overwritten since it was located", frame_step=int(every[0]))
        encoded = EncodedFrames(blocks.data, blocks.lengths, blocks.checksums, blocks.seeds, blocks.frame_shape,
                                references=references, format_version=ring.version)
        return encoded, every

    def encoded(self, batch: Batch) -> EncodedBatch:
        """The encoded form of ``batch``, which this reader has just read."""
        assert self._captured is not None and self._frame_index is not None, "encoded() follows a read"
        return EncodedBatch(
            frames=self._captured,
            frame_index=self._frame_index,
            stack_size=self.stack_size,
            action=batch.action,
            reward=batch.reward,
            terminated=batch.terminated,
            truncated=batch.truncated,
            index=batch.index,
            env_index=batch.env_index,
            weight=batch.weight,
            discount=batch.discount,
            user_fields=batch.fields,
        )

    def encoded_sequences(self, batch: SequenceBatch) -> EncodedSequenceBatch:
        """The encoded form of ``batch``, windows which this reader has just read."""
        assert self._captured is not None and self._frame_index is not None, "encoded_sequences() follows a read"
        return EncodedSequenceBatch(
            frames=self._captured,
            frame_index=self._frame_index.reshape(*batch.index.shape, -1),
            stack_size=self.stack_size,
            action=batch.action,
            reward=batch.reward,
            terminated=batch.terminated,
            truncated=batch.truncated,
            mask=batch.mask,
            index=batch.index,
            env_index=batch.env_index,
            weight=batch.weight,
            user_fields=batch.fields,
        )


def _needing(ring: ReferenceFrameRing, distinct: npt.NDArray[np.int64], frame_step: int) -> int:
    """A frame of ``distinct`` whose chain of references reaches ``frame_step`` (itself if listed), for an
    error about ``frame_step``; ``frame_step`` where none does (the table changed meanwhile)."""
    chain = distinct.copy()
    for _ in range(ring.scheme.depth + 1):
        hit = np.flatnonzero(chain == frame_step)
        if hit.size:
            return int(distinct[hit[0]])
        deltas = ring.ref_deltas(np.maximum(chain, 0))
        chain = np.where(deltas > 0, chain - deltas, chain)
    return frame_step


def encoding_reader(files: MappedFiles, operation: str, *, verify: bool) -> EncodingReader:
    """A reader of ``files`` that gathers a batch's stored blocks for ``operation`` (named in its errors):
    uint8 stores with stack_padding ``"first"`` only (of either frame encoding: a reference store's batch
    carries the frames its blocks are compressed against as well), their user fields read as ``sample``
    reads them. ``verify``: as ``EncodingReader.verify``."""
    layout = files.layout
    if layout.stack_padding != "first":
        raise ValueError(
            f"{operation} needs a store with stack_padding='first' (an encoded batch carries no zero padding); "
            f"this one has stack_padding={layout.stack_padding!r}: use sample"
        )
    if files.frames.frame_dtype != np.uint8:
        raise ValueError(
            f"{operation} gives uint8 frames; this store's frame_dtype is {files.frames.frame_dtype}: use sample"
        )
    reader = EncodingReader(files.table, files.frames, stack_size=layout.stack_size, action_dtype=files.action_dtype,
                            field_table=files.field_table)
    reader.verify = verify
    return reader
