"""The records that ``sample``, ``read`` and ``sample_sequences`` return."""

from __future__ import annotations

from dataclasses import InitVar, dataclass, fields
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import torch


class _Record:
    """Shared behaviour of the batch records: a readable repr and conversion to torch tensors."""

    def to_torch(
        self, device: torch.device | str | int | None = None, *, pin_memory: bool = False
    ) -> dict[str, torch.Tensor]:
        """The record's arrays as torch tensors, torch imported only here.

        On the CPU no pixels are copied: ``obs`` and ``next_obs`` share the batch's memory.

        Args:
            device: where the tensors go (None: stay on the CPU).
            pin_memory: copy into page-locked memory first, for faster transfers to a GPU ``device``.

        Returns:
            One flat dict of tensors by field name, user fields as ``"fields.<name>"`` keys (as
            ``torch.save`` and a ``TensorDict`` take it).
        """
        import torch

        tensors: dict[str, torch.Tensor] = {}
        for name, array in self._arrays():
            tensor = torch.from_numpy(array)
            if pin_memory:
                tensor = tensor.pin_memory()
            if device is not None:
                tensor = tensor.to(device, non_blocking=pin_memory)
            tensors[name] = tensor
        return tensors

    def _arrays(self) -> list[tuple[str, np.ndarray]]:
        """Every array of the record by name, user fields as ``"fields.<name>"``."""
        arrays = [(item.name, getattr(self, item.name)) for item in fields(self)]  # type: ignore[arg-type]
        return arrays + [(f"fields.{name}", array) for name, array in self.fields.items()]

    @property
    def fields(self) -> dict[str, npt.NDArray[np.generic]]:
        """The user fields (``ReplayStore.create(fields=...)``) by name, each with the record's leading axes.

        Empty for a store without any. Not a dataclass field, so ``dataclasses.fields`` of a record lists
        its arrays only (the constructor takes them as ``user_fields``).

        Returns:
            The user fields' arrays by name.
        """
        user: dict[str, npt.NDArray[np.generic]] = getattr(self, "user_fields")
        return user

    def _keep_user_fields(self, user_fields: dict[str, npt.NDArray[np.generic]] | None) -> None:
        object.__setattr__(self, "user_fields", {} if user_fields is None else dict(user_fields))

    def __repr__(self) -> str:
        parts = [f"{name}={_describe(array)}" for name, array in self._arrays()]
        return f"{type(self).__name__}({', '.join(parts)})"


@dataclass(frozen=True, repr=False)
class Batch(_Record):
    """A batch of transitions, each field with a leading batch axis.

    ``obs`` and ``next_obs`` are views of one array and share ``stack_size - 1`` frames, but in a batch
    that holds a transition whose final next_obs was stored as given (not obs shifted), and in n-step
    batches, they share none.

    Attributes:
        obs: (B, stack_size, *frame_shape) of the store's ``frame_dtype`` (uint8 by default).
        action: (B, *action_shape) of the store's ``action_dtype``.
        reward: (B,) float32; an n-step batch's discounted sum of its window's rewards.
        next_obs: (B, stack_size, *frame_shape), the obs to bootstrap from.
        terminated: (B,) bool: the task ended, do not bootstrap.
        truncated: (B,) bool: cut by a time limit or the caller.
        index: (B,) int64, each transition's step (its position among all transitions ever added, never
            reused); pass it back to ``update_priorities``.
        env_index: (B,) int64, which env produced each transition.
        weight: (B,) float32 importance weights (1 under uniform sampling).
        discount: (B,) float32, the factor for bootstrapping from ``next_obs``: gamma^m after m reward
            steps (1 from ``read``), times 0 when the last of them terminated, so that
            ``reward + discount * Q(next_obs)`` is the target (as dm_env, Acme and TF-Agents read it).
        user_fields: the user fields (``create(fields=...)``) by name, each with the batch axis in front,
            read as ``batch.fields``; n-step windows give their first transition's.
    """

    obs: npt.NDArray[np.generic]  # of the store's frame_dtype (uint8 by default)
    action: npt.NDArray[np.generic]
    reward: npt.NDArray[np.float32]
    next_obs: npt.NDArray[np.generic]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    index: npt.NDArray[np.int64]
    env_index: npt.NDArray[np.int64]
    weight: npt.NDArray[np.float32]
    discount: npt.NDArray[np.float32]
    # User fields (``create(fields=...)``) by name, each with the batch axis in front, read as
    # ``batch.fields``; n-step windows give their first transition's.
    user_fields: InitVar[dict[str, npt.NDArray[np.generic]] | None] = None

    def __post_init__(self, user_fields: dict[str, npt.NDArray[np.generic]] | None) -> None:
        self._keep_user_fields(user_fields)

    @classmethod
    def _assemble(
        cls,
        obs: npt.NDArray[np.generic],
        action: npt.NDArray[np.generic],
        reward: npt.NDArray[np.float32],
        next_obs: npt.NDArray[np.generic],
        terminated: npt.NDArray[np.bool_],
        truncated: npt.NDArray[np.bool_],
        index: npt.NDArray[np.int64],
        env_index: npt.NDArray[np.int64],
        weight: npt.NDArray[np.float32],
        discount: npt.NDArray[np.float32],
        user_fields: dict[str, npt.NDArray[np.generic]],
    ) -> Batch:
        """``Batch(...)`` for the read path: the same record, its attributes set at once rather than one
        ``object.__setattr__`` at a time as a frozen dataclass's ``__init__`` does (0.5 against 1.7 us, a
        tenth of sampling a batch of small frames). ``user_fields`` is kept as given (a new dict)."""
        batch = object.__new__(cls)
        batch.__dict__.update(
            obs=obs, action=action, reward=reward, next_obs=next_obs, terminated=terminated, truncated=truncated,
            index=index, env_index=env_index, weight=weight, discount=discount, user_fields=user_fields,
        )
        return batch

    def __len__(self) -> int:
        return len(self.index)


@dataclass(frozen=True, repr=False)
class SequenceBatch(_Record):
    """Windows of consecutive transitions of one env and episode, fields shaped (B, length, ...).

    Attributes:
        obs: (B, length, stack_size, *frame_shape) of the store's ``frame_dtype``.
        action: (B, length, *action_shape).
        reward: (B, length) float32.
        next_obs: (B, length, stack_size, *frame_shape).
        terminated: (B, length) bool.
        truncated: (B, length) bool.
        mask: (B, length) bool, False past the episode's end or the env's newest transition; there the
            fields are zero and ``index`` is -1.
        index: (B, length) int64 steps, -1 where ``mask`` is False.
        env_index: (B,) int64, each window's env.
        weight: (B,) float32, each window's importance weight.
        user_fields: the user fields by name, (B, length, *shape), zero where ``mask`` is False; read as
            ``batch.fields``.
    """

    obs: npt.NDArray[np.generic]
    action: npt.NDArray[np.generic]
    reward: npt.NDArray[np.float32]
    next_obs: npt.NDArray[np.generic]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    mask: npt.NDArray[np.bool_]
    index: npt.NDArray[np.int64]
    env_index: npt.NDArray[np.int64]
    weight: npt.NDArray[np.float32]
    # User fields by name, (B, length, *shape), zero where ``mask`` is False; read as ``batch.fields``.
    user_fields: InitVar[dict[str, npt.NDArray[np.generic]] | None] = None

    def __post_init__(self, user_fields: dict[str, npt.NDArray[np.generic]] | None) -> None:
        self._keep_user_fields(user_fields)

    def __len__(self) -> int:
        return len(self.index)


def _describe(array: np.ndarray) -> str:
    return f"{array.dtype}{list(array.shape)}"
