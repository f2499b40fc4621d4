"""``JaxBatch``: a ``Batch`` as jax arrays, a pytree that ``jax.jit`` takes whole."""

from __future__ import annotations

from dataclasses import dataclass, fields

import jax
import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, repr=False)
class JaxBatch:
    """The fields of a ``Batch`` (the same names, the same values) as ``jax.Array``, a pytree ``jax.jit`` takes whole.

    Each has a leading batch axis; user fields are in ``fields`` by name. It is a dataclass registered with
    ``jax.tree_util``: ``jax.jit`` and ``jax.tree_util`` take it whole, its arrays the leaves.

    ``obs`` and ``next_obs`` are separate, compact arrays. ``index`` is the exception: it stays a numpy
    int64 array on the host, as exact as the store's steps, which outgrow int32 (JAX's integer width
    unless ``jax_enable_x64`` is set) in long runs; it is what ``store.update_priorities`` takes back.
    The other fields have the dtypes JAX gives the store's (without ``jax_enable_x64``: 64-bit integers and
    floats as 32-bit ones, as ``jax.device_put`` makes them).

    Attributes:
        obs: the obs stacks, ``(B, stack_size, *frame_shape)``.
        action: the actions.
        reward: the rewards (n-step returns when sampled with ``n_step``).
        next_obs: the next obs stacks.
        terminated: whether each transition ended its episode in a terminal state.
        truncated: whether each was cut by a time limit.
        index: the sampled steps, a numpy int64 array on the host.
        env_index: the env of each transition.
        weight: the importance weights (ones for uniform sampling).
        discount: the discount to apply to the bootstrap value.
        fields: the store's user fields by name.
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

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def __repr__(self) -> str:
        parts = [f"{item.name}={_describe(getattr(self, item.name))}" for item in fields(self) if item.name != "fields"]
        parts += [f"fields.{name}={_describe(value)}" for name, value in self.fields.items()]
        return f"JaxBatch({', '.join(parts)})"


# Every field is data (a leaf, or a dict of leaves); nothing is static, so a new batch never recompiles.
jax.tree_util.register_dataclass(
    JaxBatch, data_fields=[item.name for item in fields(JaxBatch)], meta_fields=[]
)


def _describe(value: jax.Array | np.ndarray) -> str:
    where = "host" if isinstance(value, np.ndarray) else ",".join(sorted(str(d) for d in value.devices()))
    return f"{value.dtype}{list(value.shape)} {where}"
