"""How a TensorDict of transitions maps onto a store: which key holds the frames, which ones the store's
action, reward and flag columns take, and which become user fields.

The layout is fixed by the first write, as TorchRL's lazy storages fix theirs, and saved beside the
store's files (``torchrl.json``). It deals in numpy arrays keyed by TensorDict keys (tuples of strings),
never in torch: the storage converts at its edges.

Vocabulary bridge. TorchRL's *pixels* entry of a transition is mmreplay's obs and ``("next", "pixels")``
its next_obs; a *stack* is what ``CatFrames(N, dim=-3)`` makes: ``stack_size`` frames of ``(C, H, W)``
concatenated along the channels into ``(stack_size * C, H, W)``, oldest first. Frames of any other rank
stack along a new first axis, ``(stack_size, *frame_shape)``. ``("next", "done")`` is a field: TorchRL's
terminated and truncated are the store's own flags.

Every other key is kept in a user field of the store, one field per dtype (``td_int64``, ``td_bool``, ...)
holding the keys of that dtype side by side, each flattened at its ``offset``: a collector's batch has a
dozen small keys, and the store checks and writes a field per ``add`` (ten fields cost 2.2x the time of
three dtype fields per add on Pong, measured with /tmp scripts; the bytes are the same).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

Key = tuple[str, ...]

# Where an entry of the TensorDict is kept. A key with no column of its own is a user field.
FRAMES, NEXT_FRAMES, ACTION, REWARD, TERMINATED, TRUNCATED, FIELD = (
    "frames", "next_frames", "action", "reward", "terminated", "truncated", "field"
)
ACTION_KEY: Key = ("action",)
REWARD_KEY: Key = ("next", "reward")
TERMINATED_KEY: Key = ("next", "terminated")
TRUNCATED_KEY: Key = ("next", "truncated")
DONE_KEY: Key = ("next", "done")
# TorchRL's own bookkeeping: TensorDictRoundRobinWriter writes each transition's slot there just before the
# storage's set. The storage keeps no "index" of its own; reads give the slot under it (see ``index``).
INDEX_KEY: Key = ("index",)
LAYOUT_VERSION = 1


def key_text(key: Key) -> str:
    """A key as TorchRL users write it: ``'pixels'`` or ``('next', 'pixels')``."""
    return repr(key[0]) if len(key) == 1 else repr(key)


def keys_text(keys: list[Key]) -> str:
    """Keys as TorchRL users write them, in a list: ``['obs', ('next', 'obs')]``."""
    return "[" + ", ".join(key_text(key) for key in keys) + "]"


def stack_shape(frame_shape: tuple[int, ...], stack_size: int) -> tuple[int, ...]:
    """The shape of ``stack_size`` frames as TorchRL holds them: concatenated along the channels for
    ``(C, H, W)`` frames (``CatFrames(dim=-3)``), along a new first axis otherwise."""
    if stack_size == 1:
        return frame_shape
    if len(frame_shape) == 3:
        return (stack_size * frame_shape[0], *frame_shape[1:])
    return (stack_size, *frame_shape)


@dataclass(frozen=True)
class Entry:
    """One leaf of the TensorDict: its key, its shape per transition, its numpy dtype (as a string) and
    where the store keeps it: a column, or (column ``"field"``) the store's field ``field`` from
    ``offset``, flattened."""

    key: Key
    shape: tuple[int, ...]
    dtype: str
    column: str
    field: str | None = None
    offset: int = 0

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Rows:
    """A batch of n transitions checked against a layout, as the store's ``add`` takes them: ``obs`` and
    ``next_obs`` single frames ``(n, *frame_shape)`` or stacks ``(n, stack_size, *frame_shape)``;
    ``ends`` marks the transitions that end their trajectory (terminated, truncated or done)."""

    obs: npt.NDArray[Any]
    next_obs: npt.NDArray[Any]
    action: npt.NDArray[Any]
    reward: npt.NDArray[np.float32]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    fields: dict[str, npt.NDArray[Any]]
    ends: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return len(self.reward)


@dataclass(frozen=True)
class TensorDictLayout:
    """The mapping of a TensorDict's keys onto one store. ``pixels_shape`` is the pixels of one transition
    as ``get`` returns them (a stack of ``stack_size`` frames of ``frame_shape``); a write may give them
    so or as single frames. ``entries`` are in the TensorDict's own key order. ``index``: whether writes
    carried TorchRL's ``"index"`` (reads then give each transition's slot under it, as a TensorStorage
    written by a TensorDictRoundRobinWriter holds it)."""

    pixels_key: Key
    frame_shape: tuple[int, ...]
    stack_size: int
    entries: tuple[Entry, ...]
    index: bool = False

    @property
    def pixels_shape(self) -> tuple[int, ...]:
        return stack_shape(self.frame_shape, self.stack_size)

    @property
    def frame_dtype(self) -> np.dtype[Any]:
        return np.dtype(self._entry(FRAMES).dtype)

    def _entry(self, column: str) -> Entry:
        return next(entry for entry in self.entries if entry.column == column)

    def column_entry(self, column: str) -> Entry | None:
        """The entry the store's ``column`` holds, or None when no key of the TensorDict fills it."""
        return next((entry for entry in self.entries if entry.column == column), None)

    # -- the store this layout makes -----------------------------------------------------------------

    def store_fields(self) -> dict[str, tuple[tuple[int, ...], npt.DTypeLike]]:
        """The store's user fields: one per dtype, as long as its keys' values side by side."""
        fields: dict[str, tuple[tuple[int, ...], npt.DTypeLike]] = {}
        for entry in self.entries:
            if entry.field is not None:
                fields[entry.field] = ((entry.offset + entry.size,), entry.dtype)
        return fields

    def field_entries(self) -> dict[str, list[Entry]]:
        grouped: dict[str, list[Entry]] = {}
        for entry in self.entries:
            if entry.field is not None:
                grouped.setdefault(entry.field, []).append(entry)
        return grouped

    def action_spec(self) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """The store's action shape and dtype: the ``"action"`` entry's, or a scalar uint8 never returned."""
        entry = self.column_entry(ACTION)
        return ((), np.dtype(np.uint8)) if entry is None else (entry.shape, np.dtype(entry.dtype))

    # -- building it from the first write ------------------------------------------------------------

    @classmethod
    def infer(
        cls,
        arrays: dict[Key, npt.NDArray[Any]],
        *,
        pixels_key: Key,
        stack_size: int | None,
        frame_shape: tuple[int, ...] | None,
    ) -> TensorDictLayout:
        """The layout of a first write (``arrays``: each leaf with the batch axis in front). Raises
        ``ValueError`` naming the key when the data has no transition layout this storage can keep."""
        next_key = ("next", *pixels_key)
        missing = [key_text(key) for key in (pixels_key, next_key) if key not in arrays]
        if missing:
            raise ValueError(
                f"MmreplayStorage keeps transitions with the observation under {key_text(pixels_key)} and "
                f"{key_text(next_key)} (TorchRL's collector layout; pixels_key= names another key); the data "
                f"has no {' or '.join(missing)}; its keys are {keys_text(sorted(arrays))}"
            )
        pixels, next_pixels = arrays[pixels_key], arrays[next_key]
        if (pixels.shape, pixels.dtype) != (next_pixels.shape, next_pixels.dtype):
            raise ValueError(
                f"{key_text(next_key)} is {next_pixels.dtype}{list(next_pixels.shape[1:])} per transition; "
                f"expected {pixels.dtype}{list(pixels.shape[1:])} like {key_text(pixels_key)}"
            )
        frames, stack = split_frames(tuple(pixels.shape[1:]), stack_size, frame_shape, pixels_key)
        entries = []
        filled: dict[str, int] = {}  # each field's length so far
        for key, array in arrays.items():
            entry = _entry(key, array, pixels_key=pixels_key, arrays=arrays)
            if entry.column == FIELD:
                name = f"td_{np.dtype(entry.dtype).name}"
                entry = replace(entry, field=name, offset=filled.get(name, 0))
                filled[name] = entry.offset + entry.size
            entries.append(entry)
        return cls(pixels_key=pixels_key, frame_shape=frames, stack_size=stack, entries=tuple(entries))

    # -- checking a write ----------------------------------------------------------------------------

    def parse(self, arrays: dict[Key, npt.NDArray[Any]]) -> Rows:
        """A write's arrays checked against this layout, all of them, before anything is written:
        ``ValueError`` or ``TypeError`` naming the key (and the row) that does not fit."""
        known = {entry.key for entry in self.entries}
        extra, missing = [k for k in arrays if k not in known], [e.key for e in self.entries if e.key not in arrays]
        if extra or missing:
            raise ValueError(
                "the data's keys differ from the storage's (fixed by its first write): "
                + "; ".join(part for part in (
                    f"missing {keys_text(missing)}" if missing else "",
                    f"new {keys_text(extra)}" if extra else "") if part)
            )
        count = len(next(iter(arrays.values())))
        for entry in self.entries:
            if entry.column not in (FRAMES, NEXT_FRAMES):
                _check(arrays[entry.key], entry.key, entry.shape, np.dtype(entry.dtype))
        obs = self._frames(arrays[self.pixels_key], self.pixels_key)
        next_key = ("next", *self.pixels_key)
        next_obs = self._frames(arrays[next_key], next_key)
        terminated = self._flag(TERMINATED, arrays, count)
        truncated = self._flag(TRUNCATED, arrays, count)
        reward = self._reward(arrays, count)
        ends = terminated | truncated
        done = next((arrays[e.key] for e in self.entries if e.key == DONE_KEY and e.column == FIELD), None)
        if done is not None and done.dtype == np.bool_:
            ends = ends | done.reshape(count, -1).any(axis=1)
        if obs.ndim != next_obs.ndim:
            raise ValueError(
                f"{key_text(self.pixels_key)} and {key_text(next_key)} must both be single frames "
                f"{list(self.frame_shape)} or both stacks {list(self.pixels_shape)}; got "
                f"{list(arrays[self.pixels_key].shape[1:])} and {list(arrays[next_key].shape[1:])}"
            )
        if obs.ndim == len(self.frame_shape) + 2:
            self._check_shifted(obs, next_obs, terminated | truncated)
        action_entry = self.column_entry(ACTION)
        action_shape, action_dtype = self.action_spec()
        action = (
            np.zeros((count, *action_shape), action_dtype)
            if action_entry is None
            else arrays[ACTION_KEY].reshape(count, *action_shape)
        )
        fields = {
            name: np.concatenate([arrays[e.key].reshape(count, e.size) for e in entries], axis=1)
            for name, entries in self.field_entries().items()
        }
        return Rows(obs, next_obs, action, reward, terminated, truncated, fields, ends)

    def _frames(self, array: npt.NDArray[Any], key: Key) -> npt.NDArray[Any]:
        """Pixels as the store takes them: (n, *frame_shape) or (n, stack_size, *frame_shape)."""
        shape, count = tuple(array.shape[1:]), len(array)
        if array.dtype != self.frame_dtype:
            raise TypeError(f"{key_text(key)} has dtype {array.dtype}; expected {self.frame_dtype}")
        if shape == self.frame_shape:
            return array
        if shape == self.pixels_shape:
            return array.reshape(count, self.stack_size, *self.frame_shape)
        raise ValueError(
            f"{key_text(key)} has shape {list(shape)} per transition; expected one frame "
            f"{list(self.frame_shape)} or a stack of {self.stack_size} {list(self.pixels_shape)}"
        )

    def _flag(self, column: str, arrays: dict[Key, npt.NDArray[Any]], count: int) -> npt.NDArray[np.bool_]:
        entry = self.column_entry(column)
        return np.zeros(count, np.bool_) if entry is None else arrays[entry.key].reshape(count)

    def _reward(self, arrays: dict[Key, npt.NDArray[Any]], count: int) -> npt.NDArray[np.float32]:
        entry = self.column_entry(REWARD)
        if entry is None:
            return np.zeros(count, np.float32)
        reward = arrays[entry.key].reshape(count)
        bad = np.flatnonzero(~np.isfinite(reward))
        if len(bad):
            raise ValueError(f"{key_text(entry.key)} must be finite; row {int(bad[0])} holds {reward[bad[0]]}")
        return reward

    def _check_shifted(self, obs: npt.NDArray[Any], next_obs: npt.NDArray[Any], ended: npt.NDArray[np.bool_]) -> None:
        """A stacked transition that goes on must have next_obs = obs shifted by one frame (the store
        refuses it otherwise); checked here for the whole write, so that a refused write writes nothing."""
        going_on = np.flatnonzero(~ended)
        if not len(going_on) or self.stack_size == 1:
            return
        older, newer = next_obs[going_on, :-1], obs[going_on, 1:]
        if obs.dtype.kind == "f":  # the store compares bytes: NaN equals NaN, -0.0 differs from 0.0
            older, newer = np.ascontiguousarray(older).view(np.uint8), np.ascontiguousarray(newer).view(np.uint8)
        same = (older == newer).reshape(len(going_on), -1).all(axis=1)
        if not same.all():
            row = int(going_on[np.flatnonzero(~same)[0]])
            next_key = ("next", *self.pixels_key)
            raise ValueError(
                f"row {row}: {key_text(next_key)} is not {key_text(self.pixels_key)} shifted by one frame, in a "
                f"transition that neither terminated nor truncated; the storage reads pixels of "
                f"{list(self.pixels_shape)} as {self.stack_size} frames of {list(self.frame_shape)} "
                f"(stack_size={self.stack_size}); if each is one frame, pass frame_shape={self.pixels_shape}"
            )

    # -- saving it -----------------------------------------------------------------------------------

    def to_json(self) -> str:
        return json.dumps({
            "version": LAYOUT_VERSION,
            "pixels_key": list(self.pixels_key),
            "frame_shape": list(self.frame_shape),
            "stack_size": self.stack_size,
            "index": self.index,
            "entries": [
                {"key": list(e.key), "shape": list(e.shape), "dtype": e.dtype, "column": e.column, "field": e.field,
                 "offset": e.offset}
                for e in self.entries
            ],
        }, indent=1)

    @classmethod
    def from_json(cls, text: str, source: str) -> TensorDictLayout:
        """The layout saved in ``text`` (read from ``source``, which an error names)."""
        try:
            saved = json.loads(text)
            if saved["version"] != LAYOUT_VERSION:
                raise ValueError(f"layout version {saved['version']}; this code reads {LAYOUT_VERSION}")
            entries = tuple(
                Entry(tuple(e["key"]), tuple(e["shape"]), str(e["dtype"]), str(e["column"]), e["field"], int(e["offset"]))
                for e in saved["entries"]
            )
            return cls(tuple(saved["pixels_key"]), tuple(saved["frame_shape"]), int(saved["stack_size"]), entries,
                       bool(saved["index"]))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{source}: not a TorchRL layout this code reads ({error})") from None

    def with_index(self) -> TensorDictLayout:
        return replace(self, index=True)


def split_frames(
    pixels: tuple[int, ...], stack_size: int | None, frame_shape: tuple[int, ...] | None, key: Key
) -> tuple[tuple[int, ...], int]:
    """(frame_shape, stack_size) for pixels of shape ``pixels`` per transition.

    ``stack_size=None``: each pixels entry is one frame. Otherwise, without ``frame_shape``, pixels of
    ``(C, H, W)`` whose C is a multiple of ``stack_size`` are stacks of ``(C // stack_size, H, W)`` frames
    (``CatFrames(stack_size, dim=-3)``), any other pixels are single frames. ``frame_shape`` settles it
    for pixels that could be either (an RGB frame with ``stack_size=3``)."""
    if frame_shape is not None:
        size = 1 if stack_size is None else stack_size
        if pixels not in (frame_shape, stack_shape(frame_shape, size)):
            raise ValueError(
                f"{key_text(key)} has shape {list(pixels)} per transition; expected frame_shape "
                f"{list(frame_shape)} or a stack of {size} of them {list(stack_shape(frame_shape, size))}"
            )
        return frame_shape, size
    if stack_size is None or stack_size == 1:
        return pixels, 1
    if len(pixels) == 3 and pixels[0] % stack_size == 0:
        return (pixels[0] // stack_size, *pixels[1:]), stack_size
    return pixels, stack_size


def _entry(key: Key, array: npt.NDArray[Any], *, pixels_key: Key, arrays: dict[Key, npt.NDArray[Any]]) -> Entry:
    """Where one key of the first write goes: the frames, a store column it fits exactly, or a field."""
    shape, dtype = tuple(array.shape[1:]), array.dtype
    if dtype.kind not in "biuf" or dtype.fields is not None:
        raise TypeError(f"{key_text(key)} has dtype {dtype}; MmreplayStorage keeps bool, integer and float tensors")
    if any(n == 0 for n in shape):
        raise ValueError(f"{key_text(key)} has shape {list(shape)} per transition; a zero-size axis cannot be stored")
    dtype_text = dtype.newbyteorder("<").str if dtype.byteorder == ">" else dtype.str
    scalar = math.prod(shape) == 1
    if key == pixels_key:
        return Entry(key, shape, dtype_text, FRAMES)
    if key == ("next", *pixels_key):
        return Entry(key, shape, dtype_text, NEXT_FRAMES)
    if key == ACTION_KEY:
        return Entry(key, shape, dtype_text, ACTION)
    if key == REWARD_KEY and scalar and dtype == np.float32:
        return Entry(key, shape, dtype_text, REWARD)
    if key == TERMINATED_KEY and scalar and dtype == np.bool_:
        return Entry(key, shape, dtype_text, TERMINATED)
    if key == DONE_KEY and TERMINATED_KEY not in arrays and scalar and dtype == np.bool_:
        return Entry(key, shape, dtype_text, TERMINATED)  # no terminated key: done is what ended the task
    if key == TRUNCATED_KEY and scalar and dtype == np.bool_:
        return Entry(key, shape, dtype_text, TRUNCATED)
    return Entry(key, shape, dtype_text, FIELD)


def _check(array: npt.NDArray[Any], key: Key, shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
    if array.dtype != dtype:
        raise TypeError(f"{key_text(key)} has dtype {array.dtype}; expected {dtype} (fixed by the first write)")
    if tuple(array.shape[1:]) != shape:
        raise ValueError(
            f"{key_text(key)} has shape {list(array.shape[1:])} per transition; expected {list(shape)} "
            "(fixed by the first write)"
        )
