"""The record that ``sample`` and ``read`` return."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, repr=False)
class Batch:
    """A batch of transitions, each field with a leading batch axis.

    ``index`` is each transition's step (its position among all transitions ever added, never reused);
    pass it back to ``update_priorities``. ``env_index`` says which env produced it.
    """

    obs: npt.NDArray[np.uint8]
    action: npt.NDArray[np.generic]
    reward: npt.NDArray[np.float32]
    next_obs: npt.NDArray[np.uint8]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    index: npt.NDArray[np.int64]
    env_index: npt.NDArray[np.int64]

    def to_torch(self, device: object = None, *, pin_memory: bool = False) -> dict[str, object]:
        """The fields as torch tensors (torch is imported only here). On the CPU no pixels are copied:
        ``obs`` and ``next_obs`` share the batch's memory; ``pin_memory`` copies into page-locked memory
        for faster transfers to a GPU ``device``."""
        import torch

        tensors: dict[str, object] = {}
        for item in fields(self):
            tensor = torch.from_numpy(getattr(self, item.name))
            if pin_memory:
                tensor = tensor.pin_memory()
            if device is not None:
                tensor = tensor.to(device, non_blocking=pin_memory)
            tensors[item.name] = tensor
        return tensors

    def __len__(self) -> int:
        return len(self.index)

    def __repr__(self) -> str:
        parts = [f"{f.name}={_describe(getattr(self, f.name))}" for f in fields(self)]
        return f"Batch({', '.join(parts)})"


def _describe(array: np.ndarray) -> str:
    return f"{array.dtype}{list(array.shape)}"
