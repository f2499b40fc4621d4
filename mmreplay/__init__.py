"""mmreplay: a disk-backed, memory-mapped experience replay store for RL agents that see images.

Each frame is stored once, lz4-compressed, in a ring on disk; obs and next_obs stacks are rebuilt from
neighbouring frames at sample time, never crossing an episode start.
"""

import warnings

from mmreplay.batch import Batch, SequenceBatch
from mmreplay.dopamine import import_dopamine  # noqa: E402
from mmreplay.errors import (
    ClosedStoreError,
    CorruptStoreError,
    DamagedStoreError,
    EpisodeCutWarning,
    EpisodeNotFoundError,
    FormatVersionError,
    MmreplayError,
    ReadOnlyStoreError,
    StepsEvictedError,
    StoreExistsError,
    StoreLimitError,
    StoreLockedError,
    StoreNotFoundError,
)
from mmreplay.extensions import PerformanceWarning, warn_if_not_built
from mmreplay.frames.block_batches import BlockBatches
from mmreplay.frames.reference_scheme import ReferenceScheme
from mmreplay.frames.wire import (
    BlockRefs,
    EncodedFrames,
    decode_blocks,
    encode_frames,
    encode_stacks,
)
from mmreplay.gpu.tensor_batches import TensorBatch, TensorSequenceBatch
from mmreplay.hdf5 import export_hdf5, import_hdf5  # noqa: E402 (they use the store API above)
from mmreplay.copying import salvage  # noqa: E402
from mmreplay.sampling.samplers import PrioritizedSampler, UniformSampler
from mmreplay.store import ReplayStore
from mmreplay.store.feeds.device_batches import DeviceBatches
from mmreplay.store.reading.encoded_batches import (
    EncodedBatch,
    EncodedSequenceBatch,
    decode_batch,
    decode_sequences,
)

__all__ = [
    "Batch",
    "BlockBatches",
    "BlockRefs",
    "PrioritizedSampler",
    "SequenceBatch",
    "ClosedStoreError",
    "EncodedBatch",
    "EncodedFrames",
    "EncodedSequenceBatch",
    "CorruptStoreError",
    "DamagedStoreError",
    "DeviceBatches",
    "EpisodeCutWarning",
    "EpisodeNotFoundError",
    "FormatVersionError",
    "MmreplayError",
    "PerformanceWarning",
    "ReadOnlyStoreError",
    "ReferenceScheme",
    "ReplayStore",
    "StoreExistsError",
    "StoreLimitError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StepsEvictedError",
    "TensorBatch",
    "TensorSequenceBatch",
    "UniformSampler",
    "decode_batch",
    "decode_blocks",
    "decode_sequences",
    "encode_frames",
    "encode_stacks",
    "export_hdf5",
    "import_dopamine",
    "import_hdf5",
    "salvage",
]

# The one place the version is written: pyproject.toml reads it (``[tool.setuptools.dynamic]``).
__version__ = "0.1.0"

warn_if_not_built()  # one PerformanceWarning per process when a compiled extension could not be imported


def __getattr__(name: str) -> object:
    """``mmreplay.Sampler``, no longer public (``create`` takes the two samplers above): the protocol, with a
    ``DeprecationWarning``; any other missing name is an ``AttributeError``."""
    if name == "Sampler":
        warnings.warn(
            "mmreplay.Sampler is not public: ReplayStore.create takes mmreplay.UniformSampler() or "
            "mmreplay.PrioritizedSampler(alpha=...), and no sampler of one's own",
            DeprecationWarning, stacklevel=2,
        )
        from mmreplay.sampling.samplers import Sampler

        return Sampler
    raise AttributeError(f"module 'mmreplay' has no attribute {name!r}")
