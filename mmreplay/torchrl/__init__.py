"""TorchRL: ``MmreplayStorage``, a TorchRL storage whose transitions live in a ``ReplayStore``, and the
samplers that read mmreplay's own structure (``MmreplayPrioritizedSampler``, ``MmreplaySliceSampler``).

``pip install 'mmreplay[torchrl]'``. See ``storage`` (the storage), ``layout`` (how a TensorDict's keys map
onto a store), ``lanes`` (which env each trajectory writes to), ``tensordicts`` (conversions),
``persistence`` (the layout file, copies for dumps and loads) and ``samplers``. TorchRL, tensordict and
torch are imported by this package only.
"""

try:
    import tensordict  # noqa: F401
    import torchrl  # noqa: F401
except ModuleNotFoundError as error:
    raise ModuleNotFoundError(
        f"mmreplay.torchrl needs TorchRL and tensordict ({error}): pip install 'mmreplay[torchrl]'",
        name=error.name,
    ) from error

from mmreplay.torchrl.samplers import MmreplayPrioritizedSampler, MmreplaySliceSampler
from mmreplay.torchrl.storage import MmreplayStorage

__all__ = ["MmreplayPrioritizedSampler", "MmreplaySliceSampler", "MmreplayStorage"]
