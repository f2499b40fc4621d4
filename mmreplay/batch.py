"""The records that ``sample``, ``read`` and ``sample_sequences`` return."""

from __future__ import annotations

from dataclasses import dataclass, fields
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
        for faster transfers to a GPU ``device``."""
        import torch

        tensors: dict[str, torch.Tensor] = {}
        for item in fields(self):  # type: ignore[arg-type]
            tensor = torch.from_numpy(getattr(self, item.name))
            if pin_memory:
                tensor = tensor.pin_memory()
            if device is not None:
                tensor = tensor.to(device, non_blocking=pin_memory)
            tensors[item.name] = tensor
        return tensors

    def __repr__(self) -> str:
        parts = [f"{item.name}={_describe(getattr(self, item.name))}" for item in fields(self)]  # type: ignore[arg-type]
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

    obs: npt.NDArray[np.uint8]
    action: npt.NDArray[np.generic]
    reward: npt.NDArray[np.float32]
    next_obs: npt.NDArray[np.uint8]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    index: npt.NDArray[np.int64]
    env_index: npt.NDArray[np.int64]
    weight: npt.NDArray[np.float32]
    discount: npt.NDArray[np.float32]

    def __len__(self) -> int:
        return len(self.index)


@dataclass(frozen=True, repr=False)
class SequenceBatch(_Record):
    """Windows of consecutive transitions of one env and episode: fields shaped (B, length, ...).

    ``mask`` is False past the episode's end or the env's newest transition; there the fields are zero
    and ``index`` is -1. ``env_index`` and ``weight`` are per window.
    """

    obs: npt.NDArray[np.uint8]
    action: npt.NDArray[np.generic]
    reward: npt.NDArray[np.float32]
    next_obs: npt.NDArray[np.uint8]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    mask: npt.NDArray[np.bool_]
    index: npt.NDArray[np.int64]
    env_index: npt.NDArray[np.int64]
    weight: npt.NDArray[np.float32]

    def __len__(self) -> int:
        return len(self.index)


def _describe(array: np.ndarray) -> str:
    return f"{array.dtype}{list(array.shape)}"
