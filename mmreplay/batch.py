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
        """The fields as torch tensors (torch is imported only here). On the CPU no pixels are copied:
        ``obs`` and ``next_obs`` share the batch's memory; ``pin_memory`` copies into page-locked memory
        for faster transfers to a GPU ``device``. User fields come as ``"fields.<name>"`` keys (one flat
        dict of tensors, as ``torch.save`` and a ``TensorDict`` take it)."""
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
        """The user fields (``ReplayStore.create(fields=...)``) by name, each with the record's leading
        axes; empty for a store without any. Not a dataclass field, so ``dataclasses.fields`` of a record
        lists its arrays only (the constructor takes them as ``user_fields``)."""
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

    ``index`` is each transition's step (its position among all transitions ever added, never reused);
    pass it back to ``update_priorities``. ``env_index`` says which env produced it. ``weight`` is the
    importance weight (1 under uniform sampling) and ``discount`` the factor for bootstrapping from
    ``next_obs``: gamma^m after m reward steps (1 from ``read``), times 0 when the last of them
    terminated, so that ``reward + discount * Q(next_obs)`` is the target (as dm_env, Acme and TF-Agents
    read it). ``obs`` and ``next_obs`` are views of one array and share ``stack_size - 1`` frames, but
    in a batch that holds a transition whose final next_obs was stored as given (not obs shifted), and
    in n-step batches, they share none.
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
    """Windows of consecutive transitions of one env and episode: fields shaped (B, length, ...).

    ``mask`` is False past the episode's end or the env's newest transition; there the fields are zero
    and ``index`` is -1. ``env_index`` and ``weight`` are per window.
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
