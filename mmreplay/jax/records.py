"""``JaxBatch``: a ``Batch`` as jax arrays, a pytree that ``jax.jit`` takes whole."""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np
import numpy.typing as npt


class JaxBatch(NamedTuple):
    """The fields of a ``Batch`` (the same names, the same values) as ``jax.Array``, each with a leading batch
    axis, user fields by name in ``fields``; a ``NamedTuple``, so a pytree (``jax.tree_util`` and ``jax.jit``
    take it whole).

    ``obs`` and ``next_obs`` are separate, compact arrays. ``index`` is the exception: it stays a numpy
    int64 array on the host, as exact as the store's steps, which outgrow int32 (JAX's integer width
    unless ``jax_enable_x64`` is set) in long runs; it is what ``store.update_priorities`` takes back.
    The other fields have the dtypes JAX gives the store's (without ``jax_enable_x64``: 64-bit integers and
    floats as 32-bit ones, as ``jax.device_put`` makes them).
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    next_obs: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    index: npt.NDArray[np.int64]  # on the host: what update_priorities takes
    env_index: jax.Array
    weight: jax.Array
    discount: jax.Array
    fields: dict[str, jax.Array]

    def __repr__(self) -> str:
        parts = [f"{name}={_describe(value)}" for name, value in zip(self._fields, self) if name != "fields"]
        parts += [f"fields.{name}={_describe(value)}" for name, value in self.fields.items()]
        return f"JaxBatch({', '.join(parts)})"


def _describe(value: jax.Array | np.ndarray) -> str:
    where = "host" if isinstance(value, np.ndarray) else ",".join(sorted(str(d) for d in value.devices()))
    return f"{value.dtype}{list(value.shape)} {where}"
