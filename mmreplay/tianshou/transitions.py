"""A Tianshou ``add`` batch checked for the stores, every row of it, before anything is written.

Tianshou's ``Collector`` hands a buffer one row per ready env: ``obs`` and ``obs_next`` (a frame, or a
frame stack from ``FrameStackObservation``), ``act``, ``rew``, ``terminated``, ``truncated``, with the
env's sub-buffer in ``buffer_ids``. The stores keep arrays of a bool, integer or float dtype, one scalar
reward per transition, and, for stacks, an ``obs_next`` that is ``obs`` shifted by one frame except where
the episode ended (where it is kept as given: the true final observation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from tianshou.data import Batch

if TYPE_CHECKING:
    from mmreplay.tianshou.frame_stores import FrameLayout

# The dtype kinds a store keeps as frames and actions: bool, signed and unsigned integers, floats.
ARRAY_KINDS = "biuf"


@dataclass(frozen=True)
class StoreRows:
    """One transition per row for the stores: row ``i`` goes to sub-buffer ``envs[i]``. ``obs`` and
    ``obs_next`` are shaped as the stores take them (a frame, or ``stack_size`` frames); ``has_obs_next`` is
    False when the batch had no ``obs_next`` (then ``obs_next`` repeats ``obs`` and is never handed out);
    ``frame_null[i]`` says whether row ``i``'s obs or obs_next holds a NaN."""

    envs: npt.NDArray[np.int64]
    obs: npt.NDArray[Any]
    obs_next: npt.NDArray[Any]
    act: npt.NDArray[Any]
    rew: npt.NDArray[np.float64]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    has_obs_next: bool
    frame_null: npt.NDArray[np.bool_]
    layout: FrameLayout


def parse_rows(
    batch: Batch, buffer_ids: npt.NDArray[np.int64], *, layout: FrameLayout | None, stack_size: int, buffer_num: int
) -> StoreRows:
    """``batch``'s rows checked against ``layout`` (None before the first add: the first add fixes it).

    Raises:
        TypeError: an obs that is no array (a ``Dict`` space's ``Batch``), or of a dtype no store keeps.
        ValueError: a shape that differs from the first add's, a ``buffer_ids`` entry out of range, a
            reward that is not one finite number per row, or a stacked ``obs_next`` that is not ``obs``
            shifted by one frame in a transition that did not end its episode.
    """
    rows = len(buffer_ids)
    if buffer_ids.size and (buffer_ids.min() < 0 or buffer_ids.max() >= buffer_num):
        raise ValueError(f"buffer_ids must lie in [0, {buffer_num}) for buffer_num={buffer_num}; got {buffer_ids.tolist()}")
    obs = _frames(batch.obs, "obs", rows)
    has_obs_next = "obs_next" in batch.get_keys() and not (isinstance(batch.obs_next, Batch) and not batch.obs_next.get_keys())
    if has_obs_next:
        obs_next = _frames(batch.obs_next, "obs_next", rows)
        if obs_next.shape != obs.shape or obs_next.dtype != obs.dtype:
            raise ValueError(
                f"obs_next has shape {obs_next.shape} and dtype {obs_next.dtype}; expected obs's, {obs.shape} and {obs.dtype}"
            )
    elif stack_size > 1:
        raise ValueError(
            f"a batch without obs_next cannot be stored with stack_size={stack_size}: the final frame of an episode "
            "would be unknown; pass obs_next (Tianshou's Collector does)"
        )
    else:
        obs_next = obs
    if layout is None:
        layout = _first_layout(obs, np.asarray(batch.act), stack_size)
    obs = _as_layout(obs, "obs", layout)
    obs_next = _as_layout(obs_next, "obs_next", layout)
    act = _actions(np.asarray(batch.act), layout, rows)
    rew = _rewards(batch.rew, rows)
    terminated = _flags(batch.terminated, "terminated", rows)
    truncated = _flags(batch.truncated, "truncated", rows)
    if has_obs_next and layout.stack_size > 1:
        _check_shifted(obs, obs_next, terminated | truncated)
    store_shape = (rows, *((layout.stack_size,) if layout.stack_size > 1 else ()), *layout.frame_shape)
    if obs.dtype.kind == "f":
        frame_null = np.isnan(obs).reshape(rows, -1).any(axis=1) | np.isnan(obs_next).reshape(rows, -1).any(axis=1)
    else:
        frame_null = np.zeros(rows, np.bool_)
    return StoreRows(
        buffer_ids, obs.reshape(store_shape), obs_next.reshape(store_shape), act, rew, terminated, truncated,
        has_obs_next, frame_null, layout,
    )


def _frames(value: object, name: str, rows: int) -> npt.NDArray[Any]:
    if isinstance(value, Batch):
        raise TypeError(
            f"{name} is a Batch (a Dict or Tuple observation space); MmreplayVectorReplayBuffer stores array "
            "observations (frames, frame stacks, vectors)"
        )
    array = np.asarray(value)
    if array.dtype.kind not in ARRAY_KINDS:
        raise TypeError(f"{name} has dtype {array.dtype}; a store keeps bool, integer or float arrays")
    if array.ndim == 0 or array.shape[0] != rows:
        raise ValueError(f"{name} has shape {array.shape}; expected a leading axis of {rows}, one row per buffer id")
    return array


def _first_layout(obs: npt.NDArray[Any], act: npt.NDArray[Any], stack_size: int) -> FrameLayout:
    from mmreplay.tianshou.frame_stores import FrameLayout

    obs_shape = tuple(int(n) for n in obs.shape[1:])
    if stack_size > 1:
        if not obs_shape or obs_shape[0] != stack_size:
            raise ValueError(
                f"obs has shape {obs.shape}; expected (rows, {stack_size}, ...) for stack_size={stack_size} "
                "(a stack of frames per row, as FrameStackObservation gives it)"
            )
        frame_shape = obs_shape[1:]
    else:
        frame_shape = obs_shape
    if act.dtype.kind not in ARRAY_KINDS:
        raise TypeError(f"act has dtype {act.dtype}; a store keeps bool, integer or float actions")
    return FrameLayout(
        obs_shape=obs_shape, frame_shape=frame_shape or (1,), frame_dtype=obs.dtype.str, stack_size=stack_size,
        action_shape=tuple(int(n) for n in act.shape[1:]), action_dtype=act.dtype.str,
    )


def _as_layout(array: npt.NDArray[Any], name: str, layout: FrameLayout) -> npt.NDArray[Any]:
    if tuple(array.shape[1:]) != layout.obs_shape:
        raise ValueError(
            f"{name} has shape {array.shape[1:]} per row; expected {layout.obs_shape}, the shape of the first add"
        )
    dtype = np.dtype(layout.frame_dtype)
    if array.dtype != dtype:
        if not np.can_cast(array.dtype, dtype, casting="same_kind") or not np.array_equal(
            array.astype(dtype), array, equal_nan=dtype.kind == "f"
        ):
            raise TypeError(f"{name} has dtype {array.dtype}; the stores keep {dtype} (the dtype of the first add)")
        array = array.astype(dtype)
    return array


def _actions(act: npt.NDArray[Any], layout: FrameLayout, rows: int) -> npt.NDArray[Any]:
    expected = (rows, *layout.action_shape)
    if act.shape != expected:
        raise ValueError(f"act has shape {act.shape}; expected {expected} (the action shape of the first add)")
    dtype = np.dtype(layout.action_dtype)
    if act.dtype != dtype:
        if act.dtype.kind not in ARRAY_KINDS or not np.array_equal(act.astype(dtype), act, equal_nan=dtype.kind == "f"):
            raise TypeError(f"act has dtype {act.dtype}; the stores keep {dtype} (the dtype of the first add)")
        act = act.astype(dtype)
    return act


def _rewards(value: object, rows: int) -> npt.NDArray[np.float64]:
    if isinstance(value, Batch):
        raise TypeError("rew is a Batch; the stores keep one number per transition")
    rew = np.asarray(value, dtype=np.float64)
    if rew.shape != (rows,):
        raise ValueError(f"rew has shape {rew.shape}; expected ({rows},): one reward per transition")
    if not np.isfinite(rew).all():
        raise ValueError(f"rew must be finite; got {rew.tolist()}")
    return rew


def _flags(value: object, name: str, rows: int) -> npt.NDArray[np.bool_]:
    flags = np.asarray(value)
    if flags.shape != (rows,):
        raise ValueError(f"{name} has shape {flags.shape}; expected ({rows},): one flag per transition")
    return flags.astype(np.bool_)


def _check_shifted(obs: npt.NDArray[Any], obs_next: npt.NDArray[Any], ended: npt.NDArray[np.bool_]) -> None:
    """A stacked ``obs_next`` is ``obs`` shifted by one frame while the episode goes on (the store writes
    its newest frame only); where the episode ended it may be anything and is kept whole."""
    going_on = ~ended
    if not going_on.any():
        return
    same = (obs_next[going_on, :-1] == obs[going_on, 1:]) | (
        np.isnan(obs_next[going_on, :-1]) & np.isnan(obs[going_on, 1:]) if obs.dtype.kind == "f" else False
    )
    shifted = same.reshape(int(going_on.sum()), -1).all(axis=1)
    if not shifted.all():
        row = int(np.flatnonzero(going_on)[np.flatnonzero(~shifted)[0]])
        raise ValueError(
            f"obs_next[{row}][:-1] must equal obs[{row}][1:] (a frame stack shifted by one frame) in a transition "
            "that did not end its episode; it differs"
        )
