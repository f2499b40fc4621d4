"""``to_jax``: one ``Batch`` as a ``JaxBatch`` on a device, its frames sent once, in one compact array."""

from __future__ import annotations

import functools

import jax
import numpy as np
import numpy.typing as npt

from mmreplay import Batch
from mmreplay.jax.devices import parse_device
from mmreplay.jax.host_frames import shared_frames
from mmreplay.jax.records import JaxBatch


def to_jax(batch: Batch, device: jax.Device | str | None = None, *, copy: bool = True) -> JaxBatch:
    """``batch`` as jax arrays on ``device``: the same fields and values, ``obs`` and ``next_obs`` compact.

    The frames behind ``obs`` and ``next_obs`` travel as the one compact array they view
    (``mmreplay.jax.host_frames``): on a GPU, ``stack_size + 1`` frames a row rather than the
    ``2 * stack_size`` of two stacks, and no host copy to make them compact first; both stacks are then
    cut from it on the device in one compiled call. Every other field travels as it is.

    Args:
        batch: a ``Batch`` from ``store.sample``, ``read`` or a ``batches()`` iterator.
        device: where the arrays go (``mmreplay.jax.devices.parse_device``); None: JAX's default device.
        copy: True copies the host arrays as they are sent, so the batch may be refilled at once
            (``sample``'s ``out``, ``batches(reuse=True)``). False lets a CPU device share the batch's memory
            where JAX can (arrays aligned to 64 bytes), without a copy: the batch must then stay as it is
            while the jax arrays are in use.

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
    may_alias = None if not copy else False

    def put(array: npt.NDArray[np.generic]) -> jax.Array:
        sent: jax.Array = jax.device_put(array, target, may_alias=may_alias)
        return sent

    shared = shared_frames(batch.obs, batch.next_obs)
    if shared is None:
        obs, next_obs = put(np.ascontiguousarray(batch.obs)), put(np.ascontiguousarray(batch.next_obs))
    else:
        stack_size = batch.obs.shape[1]
        obs, next_obs = _stacks(put(shared.frames), shared.obs_column, shared.next_obs_column, stack_size)
    return JaxBatch(
        obs=obs, action=put(batch.action), reward=put(batch.reward), next_obs=next_obs,
        terminated=put(batch.terminated), truncated=put(batch.truncated), index=np.array(batch.index, np.int64),
        env_index=put(batch.env_index), weight=put(batch.weight), discount=put(batch.discount),
        fields={name: put(array) for name, array in batch.fields.items()},
    )


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _stacks(frames: jax.Array, obs_column: int, next_obs_column: int, stack_size: int) -> tuple[jax.Array, jax.Array]:
    """The obs and next_obs stacks cut from a batch's frames on their device, in one call."""
    return frames[:, obs_column : obs_column + stack_size], frames[:, next_obs_column : next_obs_column + stack_size]
