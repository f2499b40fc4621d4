"""TorchRL: ``MmreplayStorage``, a TorchRL storage whose transitions live in a ``ReplayStore``, and the
samplers that read mmreplay's own structure (``MmreplayPrioritizedSampler``, ``MmreplaySliceSampler``).

``pip install 'mmreplay[torchrl]'``. See ``storage`` (the storage), ``layout`` (how a TensorDict's keys map
onto a store), ``lanes`` (which env each trajectory writes to), ``tensordicts`` (conversions), ``opening``
(the path's mode), ``persistence`` (the layout file, copies for dumps and loads) and ``samplers``.
TorchRL, tensordict and torch are imported by this package only.
"""

from mmreplay.extras import require

require("mmreplay.torchrl", extra="torchrl", modules=("torch", "tensordict", "torchrl"))

from mmreplay.torchrl.storage import MmreplayStorage  # noqa: E402  (after the check that names the extra)
from mmreplay.torchrl.samplers import MmreplayPrioritizedSampler, MmreplaySliceSampler  # noqa: E402

__all__ = ["MmreplayPrioritizedSampler", "MmreplaySliceSampler", "MmreplayStorage"]
