"""The records ``ReplayStore.batches(..., device=...)`` yields: ``Batch`` and ``SequenceBatch`` as tensors.

A *device batch* holds the same fields as the numpy record ``sample`` (``sample_sequences``) returns for
the same draw, with the same values, as torch tensors on the requested device, ready to use on the
stream that was current when the iterator handed it over. ``obs`` and ``next_obs`` are views of one
tensor of ``stack_size + 1`` frames a row where the batch allows (as in ``Batch``), so only the distinct
frames travel. ``index`` is the exception: a CPU tensor, since it is the key ``update_priorities`` takes
and a learner rarely needs it on the device.

A device batch lives in memory the iterator reuses: it is valid until the iterator's next ``next()``
(``clone()`` what must outlive it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def _describe(tensor: torch.Tensor) -> str:
    dtype = str(tensor.dtype).removeprefix("torch.")
    return f"{dtype}{list(tensor.shape)} {tensor.device}"


@dataclass(frozen=True, repr=False)
class TensorBatch:
    """A ``Batch`` as torch tensors on the requested device, as ``ReplayStore.batches(..., device=...)`` yields it.

    It holds the values that ``sample`` returns for the same draw, ready to use on the stream that was
    current when the iterator handed it over. ``obs`` and ``next_obs`` are views of one tensor of
    ``stack_size + 1`` frames a row where the batch allows (as in ``Batch``), so only the distinct frames
    travel. It lives in memory the iterator reuses: it is valid until the iterator's next ``next()``
    (``clone()`` what must outlive it).

    Attributes:
        obs: as in ``Batch``, on the device.
        action: as in ``Batch``, on the device.
        reward: as in ``Batch``, on the device.
        next_obs: as in ``Batch``, on the device.
        terminated: as in ``Batch``, on the device.
        truncated: as in ``Batch``, on the device.
        index: the steps, a CPU tensor: the key ``update_priorities`` takes, which a learner rarely needs
            on the device.
        env_index: as in ``Batch``, on the device.
        weight: as in ``Batch``, on the device.
        discount: as in ``Batch``, on the device.
        fields: the user fields by name, on the device.
    """

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    index: torch.Tensor  # on the CPU: what update_priorities takes
    env_index: torch.Tensor
    weight: torch.Tensor
    discount: torch.Tensor
    fields: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def __repr__(self) -> str:
        return _repr(self, ("obs", "action", "reward", "next_obs", "terminated", "truncated", "index", "env_index",
                            "weight", "discount"))


@dataclass(frozen=True, repr=False)
class TensorSequenceBatch:
    """A ``SequenceBatch`` as torch tensors, as ``batches(..., device=..., length=...)`` yields it.

    Valid until the iterator's next ``next()``, as a ``TensorBatch``.

    Attributes:
        obs: (B, length, stack_size, *frame_shape) on the device, zero where ``mask`` is False.
        action: (B, length, ...) on the device.
        reward: (B, length) on the device.
        next_obs: (B, length, stack_size, *frame_shape) on the device.
        terminated: (B, length) on the device.
        truncated: (B, length) on the device.
        mask: (B, length) on the device: False past a window's end.
        index: (B, length) steps on the CPU, -1 past a window's end.
        env_index: (B,) per window, on the device.
        weight: (B,) per window, on the device.
        fields: the user fields by name, (B, length, *shape), on the device.
    """

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    mask: torch.Tensor
    index: torch.Tensor  # on the CPU; -1 past a window's end
    env_index: torch.Tensor
    weight: torch.Tensor
    fields: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def __repr__(self) -> str:
        return _repr(self, ("obs", "action", "reward", "next_obs", "terminated", "truncated", "mask", "index",
                            "env_index", "weight"))


def _repr(batch: TensorBatch | TensorSequenceBatch, names: tuple[str, ...]) -> str:
    parts = [f"{name}={_describe(getattr(batch, name))}" for name in names]
    parts += [f"fields[{name!r}]={_describe(tensor)}" for name, tensor in batch.fields.items()]
    return f"{type(batch).__name__}({', '.join(parts)})"
