"""Frames that travel compressed: into a store (``add_encoded``) and out of it (``sample_encoded``).

Vocabulary: an *encoded frame* is one frame as the store keeps it, an lz4 block made by the store's own
codec (``encode_frames``), with its CRC-32. ``EncodedFrames`` holds several back to back. An
*encoded batch* (``EncodedBatch``) is what ``sample`` would return with its pixels left as the stored
blocks of the frames it needs, plus, for each transition, which of those blocks make its obs and
next_obs. A batch of 32 Pong transitions (stack 4) is ~42 KB encoded against 1.1 MB decoded: what
crosses a network or a process boundary should be the encoded form, decoded where it is used
(``EncodedBatch.decode``, by the compiled decoder that ``sample`` uses; the batches are in
``encoded_batches``). ``BlockRefs`` names frames among the blocks of several ``EncodedFrames``
(``EncodedFrames.blocks``), so that ``decode_blocks`` decodes the frames of a batch drawn from several
stores (shards) in one call, straight into place.

Both directions are checked: frames that arrive are decoded against their checksums before anything
is written (the pixels are needed anyway: the store compares each obs with its env's last next_obs),
and an encoded batch carries each frame's stored checksum and seed, so its ``decode`` checks the bytes
end to end, from the store's disk to the learner.
"""

from __future__ import annotations

import functools
import itertools
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from mmreplay import codec
from mmreplay.errors import CorruptStoreError
from mmreplay.frame_encoding import FrameEncoder
from mmreplay.validation import AddArguments, AddShapes, parse_add

T = TypeVar("T", bound=np.generic)


@dataclass(frozen=True, repr=False)
class EncodedFrames:
    """Frames compressed by the store's codec: ``data`` holds the lz4 blocks back to back, frame i's
    ``lengths[i]`` bytes from ``sum(lengths[:i])``, with ``checksums[i]`` its CRC-32 seeded with
    ``seeds[i]`` (0 for frames from ``encode_frames``; a stored frame's own seed in an ``EncodedBatch``).

    Pickled with protocol 5 (Ray's, and ``multiprocessing``'s), ``data`` travels out of band: Ray copies
    it once into its object store and the receiver maps it there, so ``data`` is then a read-only
    ``memoryview`` of those bytes instead of ``bytes`` (a copy of a megabyte less on each side)."""

    data: bytes | memoryview
    lengths: npt.NDArray[np.int64]
    checksums: npt.NDArray[np.uint32]
    seeds: npt.NDArray[np.uint32]
    frame_shape: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def nbytes(self) -> int:
        """Bytes of blocks, lengths, checksums and seeds: what sending these frames costs."""
        return len(self.data) + self.lengths.nbytes + self.checksums.nbytes + self.seeds.nbytes

    def blocks(self, order: npt.NDArray[np.int64]) -> BlockRefs:
        """Where frames ``order`` (indices into these frames, any shape, repeats allowed) lie in ``data``:
        each one's start, length, checksum and seed, shaped as ``order``."""
        starts = np.zeros(len(self) + 1, np.int64)
        np.cumsum(self.lengths, out=starts[1:])
        return BlockRefs(np.zeros(order.shape, np.int64), starts[order], self.lengths[order], self.checksums[order],
                         self.seeds[order].astype(np.int64))

    def decode(self, order: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.uint8]:
        """The frames' pixels, (n, *frame_shape) uint8, in ``order`` (indices into these frames, repeats
        allowed; by default each once), each checked against its checksum: ``CorruptStoreError`` if one
        fails or does not decode to exactly one frame."""
        if order is None:
            order = np.arange(len(self), dtype=np.int64)
        pixels = np.empty((len(order), *self.frame_shape), np.uint8)
        decode_blocks([self], self.blocks(order), pixels, numbers=order)
        return pixels

    def __repr__(self) -> str:
        return f"EncodedFrames(frames={len(self)}, frame_shape={self.frame_shape}, nbytes={self.nbytes:,})"

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        data: object = pickle.PickleBuffer(self.data) if protocol >= 5 else bytes(self.data)
        return _rebuild_frames, (data, self.lengths, self.checksums, self.seeds, self.frame_shape)


def _rebuild_frames(
    data: object, lengths: npt.NDArray[np.int64], checksums: npt.NDArray[np.uint32], seeds: npt.NDArray[np.uint32],
    frame_shape: tuple[int, ...],
) -> EncodedFrames:
    """An unpickled ``EncodedFrames``: ``data`` is bytes (in band) or the buffer its receiver handed over
    (out of band), viewed as bytes without a copy."""
    blocks = data if isinstance(data, bytes) else memoryview(data).cast("B")  # type: ignore[arg-type]
    return EncodedFrames(blocks, lengths, checksums, seeds, frame_shape)


@dataclass(frozen=True)
class BlockRefs:
    """Frames among the blocks of several ``EncodedFrames`` (the *sources*): frame i is the block of
    ``lengths[i]`` bytes at ``starts[i]`` of source ``sources[i]``, with its checksum and CRC seed. Arrays
    of any one shape (rows of a batch by their frames); ``take`` and ``join`` rearrange them, so that
    the frames of a batch drawn from several shards decode in one compiled call (``decode_blocks``)."""

    sources: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    checksums: npt.NDArray[np.uint32]
    seeds: npt.NDArray[np.int64]

    def take(self, rows: npt.NDArray[np.int64] | slice) -> BlockRefs:
        """These references' rows ``rows`` (along the first axis)."""
        return BlockRefs(self.sources[rows], self.starts[rows], self.lengths[rows], self.checksums[rows], self.seeds[rows])

    def from_source(self, source: int) -> BlockRefs:
        """The same references, all into source ``source``."""
        return BlockRefs(np.full(self.sources.shape, source, np.int64), self.starts, self.lengths, self.checksums,
                         self.seeds)

    @staticmethod
    def join(parts: Sequence[BlockRefs], order: npt.NDArray[np.int64] | None = None) -> BlockRefs:
        """The parts' rows one after the other, then in ``order`` (row i is the joined rows' ``order[i]``)."""
        arrays = [np.concatenate([getattr(part, name) for part in parts]) for name in
                  ("sources", "starts", "lengths", "checksums", "seeds")]
        joined = BlockRefs(*arrays)
        return joined if order is None else joined.take(order)


def decode_blocks(
    sources: Sequence[EncodedFrames], refs: BlockRefs, out: npt.NDArray[np.uint8], *,
    numbers: npt.NDArray[np.int64] | None = None,
) -> None:
    """Decode the referenced frames into ``out`` ((refs' size, *frame_shape) uint8, C-contiguous) in one
    call of the compiled decoder, each checked against its checksum: ``CorruptStoreError`` if one fails
    or does not decode to exactly one frame, naming it by ``numbers`` (by default its position)."""
    count = refs.starts.size
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.ndim < 2 or out.shape[0] != count:
        raise ValueError(
            f"out must be a uint8 array of shape ({count}, *frame_shape), a frame for each of refs' {count} "
            f"references; got {type(out).__name__} {getattr(out, 'dtype', '')} of shape {getattr(out, 'shape', None)}"
        )
    if count == 0:
        return
    bad = codec.decode_batch(
        refs.sources.reshape(-1), refs.starts.reshape(-1), refs.lengths.reshape(-1), refs.checksums.reshape(-1),
        refs.seeds.reshape(-1), out.reshape(count, -1), views=[memoryview(source.data) for source in sources],
    )
    if bad >= 0:
        raise CorruptStoreError(
            f"encoded frame {bad if numbers is None else int(numbers.reshape(-1)[bad])} fails its checksum or does "
            f"not decode to one frame of shape {out.shape[1:]}: it was damaged on disk or on the way, or made by "
            "another codec than encode_frames"
        )


def encode_frames(frames: npt.ArrayLike) -> EncodedFrames:
    """Compress frames (uint8, (n, *frame_shape)) with the store's codec, one lz4 block each: the same
    bytes that ``ReplayStore.add`` writes for them, so a store given them by ``add_encoded`` holds
    exactly what ``add`` would have written."""
    array = np.asarray(frames)
    if array.dtype != np.uint8:
        raise TypeError(f"frames must be uint8; got {array.dtype}")
    if array.ndim < 2:
        raise ValueError(f"frames has shape {array.shape}; expected (n, *frame_shape)")
    array = np.ascontiguousarray(array)
    payloads = [codec.compress(frame) for frame in array]
    return EncodedFrames(
        data=b"".join(payloads),
        lengths=np.array([len(payload) for payload in payloads], np.int64),
        checksums=np.array([codec.checksum(payload, 0) for payload in payloads], np.uint32),
        seeds=np.zeros(len(payloads), np.uint32),
        frame_shape=tuple(array.shape[1:]),
    )


def encode_stacks(stacks: npt.ArrayLike) -> tuple[EncodedFrames, npt.NDArray[np.int64]]:
    """Consecutive observation stacks (n, stack_size, *frame_shape) of one env as their distinct frames,
    encoded, and each stack as indices into them, (n, stack_size): a stack that is the one before
    shifted by one frame adds only its newest frame. ``add_encoded(frames, index[:-1], ...,
    index[1:], ...)`` then records the n - 1 transitions between them."""
    array = np.asarray(stacks)
    if array.dtype != np.uint8 or array.ndim < 3:
        raise ValueError(f"stacks must be uint8 (n, stack_size, *frame_shape); got {array.dtype} {array.shape}")
    size = array.shape[1]
    index = np.empty(array.shape[:2], np.int64)
    chosen: list[npt.NDArray[np.uint8]] = []
    for t in range(len(array)):
        if t and size > 1 and np.array_equal(array[t, :-1], array[t - 1, 1:]):
            index[t, :-1] = index[t - 1, 1:]
            index[t, -1] = len(chosen)
            chosen.append(array[t, -1])
        else:
            index[t] = np.arange(len(chosen), len(chosen) + size)
            chosen.extend(array[t])
    return encode_frames(np.stack(chosen)), index


# -- adding --------------------------------------------------------------------------------------


class ReceivedEncoder:
    """A plain store's frame encoder that hands back the blocks that arrived in ``send`` for a frame's
    pixels instead of compressing them again (any other frame is compressed by the store's own encoder)."""

    records_references = False

    def __init__(self, own: FrameEncoder, send: EncodedSend) -> None:
        self._own = own
        self._send = send
        self.frame_tail = own.frame_tail

    def encode(self, env: int, frame_step: int, frame: npt.NDArray[np.uint8], *, restart: bool) -> tuple[bytes, int]:
        payload = self._send.received.get(frame.tobytes())
        return (payload, 0) if payload is not None else self._own.encode(env, frame_step, frame, restart=restart)

    def checkpoint(self) -> None:
        self._own.checkpoint()

    def rollback(self) -> None:
        self._own.rollback()


@dataclass(frozen=True)
class EncodedSend:
    """A checked ``add_encoded`` call: T consecutive steps of env ``env``.

    ``steps`` holds the T steps as ``parse_add`` checked them, one row each (as if they were T envs of
    one add), with their decoded pixels; ``frames`` are the blocks that arrived, ``pixels`` the same
    decoded; ``obs_index`` and ``next_index`` are the frame indices the caller gave ((T,) for single
    frames, (T, stack_size) for stacks)."""

    steps: AddArguments
    env: int
    frames: EncodedFrames
    pixels: npt.NDArray[np.uint8]
    obs_index: npt.NDArray[np.int64]
    next_index: npt.NDArray[np.int64]
    joins: npt.NDArray[np.bool_]  # (T,): step t continues step t - 1 with one new frame (``step_joins``)

    def __len__(self) -> int:
        return len(self.obs_index)

    def step(self, t: int, num_envs: int) -> AddArguments:
        """Step t alone, as ``add``'s general path takes it: an add of a store of ``num_envs`` envs that
        records only this send's env."""
        steps, row = self.steps, slice(t, t + 1)
        one = AddArguments(steps.obs[row], steps.action[row], steps.reward[row], steps.next_obs[row],
                           steps.terminated[row], steps.truncated[row], steps.stacked, [0], steps.detached[row])
        return _for_env(one, self.env, num_envs)

    def continuing_until(self, start: int) -> int:
        """The end of the run of steps from ``start`` on in which each step continues the one before it
        with one new frame (``joins``); ``start`` itself is the caller's to check against the env's episode."""
        breaks = np.flatnonzero(~self.joins[start + 1 :])
        return len(self) if len(breaks) == 0 else start + 1 + int(breaks[0])

    def new_blocks(self, start: int, stop: int) -> list[bytes]:
        """The blocks that arrived for the new frames (next_obs's newest) of steps ``[start, stop)``."""
        newest = self.next_index[start:stop, -1] if self.next_index.ndim == 2 else self.next_index[start:stop]
        return [self._block(i) for i in newest.tolist()]

    @functools.cached_property
    def received(self) -> dict[bytes, bytes]:
        """Each frame's block by its pixels (for ``ReceivedEncoder``: ``add``'s general path meets frames
        as pixels)."""
        return {self.pixels[i].tobytes(): self._block(i) for i in range(len(self.frames))}

    def _block(self, i: int) -> bytes:
        return bytes(self.frames.data[self._starts[i] : self._starts[i + 1]])

    @functools.cached_property
    def _starts(self) -> list[int]:
        return [0, *itertools.accumulate(self.frames.lengths.tolist())]


def parse_encoded_send(
    frames: object,
    obs: object,
    action: object,
    reward: object,
    next_obs: object,
    terminated: object,
    truncated: object,
    *,
    env_index: object,
    shapes: AddShapes,
) -> EncodedSend:
    """Check an ``add_encoded`` call and decode its frames, for env ``env_index`` of a store of
    ``shapes.num_envs`` envs.

    ``obs`` and ``next_obs`` are integer arrays (T,) (single frames) or (T, stack_size) (stacks, newest
    last) of indices into ``frames``; the other arguments have a leading axis of T steps. Everything is
    checked (each step as ``add`` checks it, in one ``parse_add`` call over the T steps) before the
    caller writes anything; a refused step is named in the error.
    """
    if not isinstance(frames, EncodedFrames):
        raise TypeError(f"frames must be EncodedFrames (from mmreplay.encode_frames); got {type(frames).__name__}")
    if frames.frame_shape != shapes.frame_shape:
        raise ValueError(f"frames have frame_shape {frames.frame_shape}; expected {shapes.frame_shape}")
    if isinstance(env_index, bool) or not isinstance(env_index, (int, np.integer)):
        raise TypeError(f"env_index must be an int; got {type(env_index).__name__}")
    env = int(env_index)
    if not 0 <= env < shapes.num_envs:
        raise ValueError(f"env_index is {env}; expected 0 <= env_index < {shapes.num_envs} (num_envs)")
    obs_index, next_index = _parse_frame_index(obs, "obs", len(frames), shapes), _parse_frame_index(
        next_obs, "next_obs", len(frames), shapes
    )
    steps = len(obs_index)
    if next_index.shape != obs_index.shape:
        raise ValueError(f"next_obs has shape {next_index.shape}; expected {obs_index.shape}, as obs")
    columns = {"action": action, "reward": reward, "terminated": terminated, "truncated": truncated}
    arrays = {name: np.asarray(value) for name, value in columns.items()}
    for name, array in arrays.items():
        if array.ndim == 0 or len(array) != steps:
            raise ValueError(f"{name} has shape {array.shape}; expected a leading axis of {steps} steps, as obs")
    pixels = frames.decode()
    values = (pixels[obs_index], arrays["action"], arrays["reward"], pixels[next_index], arrays["terminated"],
              arrays["truncated"])
    try:
        checked = parse_add(*values, None, shapes.as_envs(steps))  # the T steps at once, as T envs of one add
    except (TypeError, ValueError, OverflowError):
        _raise_for_step(values, shapes)  # the same check step by step, to name the step it refuses
        raise
    return EncodedSend(checked, env, frames, pixels, obs_index, next_index, step_joins(checked, obs_index, next_index))


def step_joins(
    steps: AddArguments, obs_index: npt.NDArray[np.int64], next_index: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """Whether each step t continues step t - 1 with one new frame, as ``add`` would see it: t - 1
    neither terminated nor truncated, t's obs is t - 1's next_obs (the same frame indices, or else the
    same pixels) and t's next_obs is its obs shifted (not stored whole). Step 0 is False: whether it
    continues depends on the env's episode in the store."""
    joins = np.zeros(len(obs_index), np.bool_)
    if len(obs_index) < 2:
        return joins
    ended = steps.terminated[:-1] | steps.truncated[:-1]
    same = (obs_index[1:] == next_index[:-1]).reshape(len(obs_index) - 1, -1).all(axis=1)
    for t in np.flatnonzero(~same & ~ended).tolist():  # other indices may still hold the same pixels
        same[t] = steps.obs[t + 1].tobytes() == steps.next_obs[t].tobytes()
    joins[1:] = same & ~ended & ~steps.detached[1:]
    return joins


def _raise_for_step(values: tuple[npt.NDArray[Any], ...], shapes: AddShapes) -> None:
    """Check the steps one by one, as one env's adds, and raise the first step's error, naming the step."""
    one_env = AddShapes.of(frame_shape=shapes.frame_shape, stack_size=shapes.stack_size, num_envs=1,
                           action_shape=shapes.action_shape, action_dtype=shapes.action_dtype,
                           frame_dtype=shapes.frame_dtype)
    for t in range(len(values[0])):
        obs, action, reward, next_obs, terminated, truncated = (value[t] for value in values)
        try:
            parse_add(obs, action, reward, next_obs, terminated, truncated, None, one_env)
        except (TypeError, ValueError, OverflowError) as error:
            raise type(error)(f"step {t} of the send: {error}") from error


def _parse_frame_index(index: object, name: str, frame_count: int, shapes: AddShapes) -> npt.NDArray[np.int64]:
    array = np.asarray(index)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integer indices into frames; got {array.dtype}")
    if array.ndim == 2 and array.shape[1] != shapes.stack_size:
        raise ValueError(f"{name} has shape {array.shape}; expected (steps,) or (steps, {shapes.stack_size})")
    if array.ndim not in (1, 2):
        raise ValueError(f"{name} has shape {array.shape}; expected (steps,) or (steps, {shapes.stack_size})")
    if array.size and (array.min() < 0 or array.max() >= frame_count):
        raise ValueError(f"{name} holds {int(array.max() if array.max() >= frame_count else array.min())}; "
                         f"expected indices 0 <= i < {frame_count} (len(frames))")
    return array.astype(np.int64, copy=False)


def _for_env(arguments: AddArguments, env: int, num_envs: int) -> AddArguments:
    """One env's checked add, as the store's add of ``num_envs`` envs that records only ``env``: every
    field is broadcast (a view, nothing copied) over the env axis, and only ``env`` is read."""

    if num_envs == 1:
        return arguments._replace(envs=[env])

    def spread(array: npt.NDArray[T]) -> npt.NDArray[T]:
        # np.broadcast_to's view, made directly (broadcast_to costs ~20 us a call, a third of an add).
        array = np.ascontiguousarray(array)
        return np.ndarray((num_envs, *array.shape[1:]), array.dtype, buffer=array, strides=(0, *array.strides[1:]))

    return AddArguments(
        spread(arguments.obs), spread(arguments.action), spread(arguments.reward), spread(arguments.next_obs),
        spread(arguments.terminated), spread(arguments.truncated), arguments.stacked, [env],
        spread(arguments.detached),
    )
