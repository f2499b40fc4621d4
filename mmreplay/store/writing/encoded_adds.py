"""``add_encoded``'s checks and plans: a send of T steps of one env whose frames arrived compressed
(``frames.wire.EncodedFrames``), checked whole before anything is written, and the encoder that hands the
received blocks back to the store instead of compressing the same pixels again.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from mmreplay.frames.encodings import FrameEncoder
from mmreplay.frames.wire import EncodedFrames, frame_indices
from mmreplay.store.writing.add_arguments import AddArguments, AddShapes, parse_add

T = TypeVar("T", bound=np.generic)


class ReceivedEncoder:
    """A plain store's frame encoder that hands back the blocks that arrived in ``send`` for a frame's
    pixels instead of compressing them again (any other frame is compressed by the store's own encoder)."""

    records_references = False
    fast_path = False  # the received blocks are written by the general path, frame by frame
    groups = None

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
    fields: dict[str, npt.NDArray[Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.obs_index)

    def step(self, t: int, num_envs: int) -> AddArguments:
        """Step t alone, as ``add``'s general path takes it: an add of a store of ``num_envs`` envs that
        records only this send's env."""
        steps, row = self.steps, slice(t, t + 1)
        one = AddArguments(steps.obs[row], steps.action[row], steps.reward[row], steps.next_obs[row],
                           steps.terminated[row], steps.truncated[row], steps.stacked, [0], steps.detached[row])
        return _for_env(one, self.env, num_envs)

    def step_fields(self, t: int, num_envs: int) -> dict[str, npt.NDArray[Any]] | None:
        """Step t's user fields as ``add``'s general path takes them for ``step(t, num_envs)``: each
        (num_envs, *shape), this send's env's row read (None: the store has none)."""
        if not self.fields:
            return None
        return {name: _spread(values[t : t + 1], num_envs) for name, values in self.fields.items()}

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
    if frames.references is not None and bool((frames.references >= 0).any()):
        raise ValueError(
            f"frames has {int((frames.references >= 0).sum())} blocks compressed against other frames (an encoded "
            "batch of an 'lz4-reference' store); add_encoded takes blocks that decode alone, as encode_frames "
            "makes them: decode the batch and add its frames"
        )
    # What is checked is what is written: the blocks are decoded and written from this one copy, never
    # from the caller's buffer again (which it may reuse, or another thread change, meanwhile).
    frames = EncodedFrames(bytes(frames.data), frames.lengths.copy(), frames.checksums.copy(), frames.seeds.copy(),
                           frames.frame_shape)
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
    if steps == 0:
        raise ValueError(f"obs has shape {obs_index.shape}; expected at least one step (a send of T >= 1 steps)")
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
    return frame_indices(array, name, frame_count)


def _for_env(arguments: AddArguments, env: int, num_envs: int) -> AddArguments:
    """One env's checked add, as the store's add of ``num_envs`` envs that records only ``env``: every
    field is broadcast (a view, nothing copied) over the env axis, and only ``env`` is read."""

    if num_envs == 1:
        return arguments._replace(envs=[env])

    def spread(array: npt.NDArray[T]) -> npt.NDArray[T]:
        return _spread(array, num_envs)

    return AddArguments(
        spread(arguments.obs), spread(arguments.action), spread(arguments.reward), spread(arguments.next_obs),
        spread(arguments.terminated), spread(arguments.truncated), arguments.stacked, [env],
        spread(arguments.detached),
    )


def _spread(array: npt.NDArray[T], num_envs: int) -> npt.NDArray[T]:
    """One row (1, ...) seen as ``num_envs`` rows, a view: np.broadcast_to's, made directly."""
    if num_envs == 1:
        return array
    # Made directly: broadcast_to costs ~20 us a call, a third of an add.
    array = np.ascontiguousarray(array)
    return np.ndarray((num_envs, *array.shape[1:]), array.dtype, buffer=array, strides=(0, *array.strides[1:]))
