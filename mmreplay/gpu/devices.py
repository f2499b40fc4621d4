"""Where device batches go: torch imported on demand, and the ``device=`` argument checked.

torch is an optional dependency of mmreplay: it is imported here, when a caller asks for tensors, and a
missing torch is a ``ModuleNotFoundError`` that names the extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

TORCH_EXTRA = "pip install 'mmreplay[torch]' (or any PyTorch build from pytorch.org)"


def load_torch() -> ModuleType:
    """The torch module; ``ModuleNotFoundError`` naming the extra when it is not installed. Modules of this
    package call it where torch is first needed, then ``import torch`` where it is known to be there."""
    try:
        return importlib.import_module("torch")
    except ModuleNotFoundError as error:
        if error.name != "torch":
            raise
        raise ModuleNotFoundError(f"device= gives torch tensors, but PyTorch is not installed: {TORCH_EXTRA}",
                                  name="torch") from None


def parse_device(device: object) -> torch.device:
    """``device`` as a ``torch.device`` with its index filled in: ``"cpu"``, ``"cuda"`` (the current CUDA
    device), ``"cuda:N"``, or such a ``torch.device``. A CUDA device must exist in this process."""
    load_torch()
    import torch

    if isinstance(device, str):
        try:
            parsed = torch.device(device)
        except RuntimeError:
            raise ValueError(f"device is {device!r}; expected 'cpu', 'cuda' or 'cuda:N'") from None
    elif isinstance(device, torch.device):
        parsed = device
    else:
        raise TypeError(f"device must be a str such as 'cuda' or 'cuda:1', or a torch.device; got {type(device).__name__}")
    if parsed.type == "cpu":
        return torch.device("cpu")
    if parsed.type != "cuda":
        raise ValueError(f"device is {device!r}; batches go to 'cpu' or a 'cuda' device")
    if not torch.cuda.is_available():
        raise ValueError(
            f"device is {device!r}, but this PyTorch ({torch.__version__}) sees no CUDA device; use device='cpu'"
        )
    index = torch.cuda.current_device() if parsed.index is None else parsed.index
    count = torch.cuda.device_count()
    if not 0 <= index < count:
        raise ValueError(f"device is {device!r}; this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    return torch.device("cuda", index)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype (as ``torch.from_numpy`` maps it); ``TypeError`` for one torch lacks."""
    load_torch()
    import torch

    try:
        mapped: torch.dtype = torch.from_numpy(np.empty(0, dtype)).dtype
    except TypeError:
        raise TypeError(f"a batch array of dtype {dtype} has no torch dtype; device= cannot send it") from None
    return mapped
