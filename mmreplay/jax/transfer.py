"""``to_jax``: one ``Batch`` as a ``JaxBatch`` on a device, its frames sent once, in one compact array."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import jax
import numpy as np

from mmreplay import Batch
from mmreplay.jax.devices import parse_device
from mmreplay.jax.host_frames import shared_frames
from mmreplay.jax.records import JaxBatch


def to_jax(batch: Batch, device: jax.Device | str | None = None, *, copy: bool = True) -> JaxBatch:
    """``batch`` as jax arrays on ``device``: the same fields and values, ``obs`` and ``next_obs`` compact.

    The frames behind ``obs`` and ``next_obs`` travel as the one compact array they view
    (``mmreplay.jax.host_frames``): on a GPU, ``stack_size + 1`` frames a row rather than the
    ``2 * stack_size`` of two stacks, and no host copy to make them compact; both stacks are cut from it
    on the device. Every other field travels as it is, all of them in one compiled call.

    Args:
        batch: a ``Batch`` from ``store.sample``, ``read`` or a ``batches()`` iterator.
        device: where the arrays go (``mmreplay.jax.devices.parse_device``); None: JAX's default device.
        copy: True sends copies of the host arrays (one copy each, on the host), so the batch may be
            refilled at once (``sample``'s ``out``, ``batches(reuse=True)``). False sends the batch's own
            arrays, which a CPU device may share where JAX can (arrays aligned to 64 bytes): the batch must
            then stay as it is while the jax arrays are in use.

    Returns:
        The ``JaxBatch``.

    Raises:
        TypeError: ``batch`` is not a ``Batch``, or ``device`` or ``copy`` is of the wrong kind.
        ValueError: ``device`` names no device here.
    """
    if not isinstance(batch, Batch):
        raise TypeError(f"batch must be an mmreplay Batch (store.sample's record); got {type(batch).__name__}")
    if not isinstance(copy, bool):
        raise TypeError(f"copy must be a bool; got {type(copy).__name__}")
    target = parse_device(device)
    shared = shared_frames(batch.obs, batch.next_obs)
    stack_size = batch.obs.shape[1] if batch.obs.ndim > 1 else 0
    frames: Any  # the one array of frames, or the pair of stacks
    columns: tuple[int, int, int] | None
    if shared is None:
        frames, columns = (np.ascontiguousarray(batch.obs), np.ascontiguousarray(batch.next_obs)), None
    else:
        frames, columns = shared.frames, (shared.obs_column, shared.next_obs_column, stack_size)
    rest = (batch.action, batch.reward, batch.terminated, batch.truncated, batch.env_index, batch.weight,
            batch.discount, dict(batch.fields))
    if copy:  # fresh host arrays, which JAX may keep as they are: the batch's own may be refilled at once
        frames, rest = jax.tree_util.tree_map(np.array, (frames, rest))
    with jax.default_device(target) if target is not None else contextlib.nullcontext():
        obs, next_obs, rest = _assemble(frames, columns, rest)
    action, reward, terminated, truncated, env_index, weight, discount, fields = rest
    return JaxBatch(
        obs=obs, action=action, reward=reward, next_obs=next_obs, terminated=terminated, truncated=truncated,
        index=np.array(batch.index, np.int64), env_index=env_index, weight=weight, discount=discount, fields=fields,
    )


@functools.partial(jax.jit, static_argnums=1)
def _assemble(frames: Any, columns: tuple[int, int, int] | None, rest: Any) -> tuple[jax.Array, jax.Array, Any]:
    """The batch's arrays on the device in one call (a call a field would cost as much again on a busy
    CPU): the obs and next_obs stacks cut from the frames (``columns``: where each starts, and the stack
    size; None: ``frames`` is the pair of stacks already), the other fields as they came."""
    if columns is None:
        obs, next_obs = frames
        return obs, next_obs, rest
    obs_column, next_obs_column, stack_size = columns
    return frames[:, obs_column : obs_column + stack_size], frames[:, next_obs_column : next_obs_column + stack_size], rest
