"""JAX learners: batches of a store as pytrees of ``jax.Array`` on a chosen device, numpy generators driven
by a jax key, and priorities straight from jax arrays.

``pip install 'mmreplay[jax]'``. ``batches(store, batch_size, key=...)`` yields ``JaxBatch`` records (pytrees
that ``jax.jit`` takes whole) prepared ahead by the store's own ``batches()``
thread; ``to_jax(batch)`` converts one ``Batch`` that ``store.sample`` returned; ``generator_from_key(key)`` is
the numpy generator a key stands for. ``store.update_priorities`` takes jax arrays as they are. The modules:
``keys`` (generators from keys), ``devices`` (the ``device=`` argument), ``host_frames`` (the one contiguous
array of a batch's frames), ``records`` (``JaxBatch``), ``transfer`` (``to_jax``) and ``feed`` (``batches``).
jax is imported by this package only; it reaches a store through mmreplay's public names.
"""

from mmreplay.extras import require

require("mmreplay.jax", extra="jax", modules=("jax",))

from mmreplay.jax.feed import JaxBatches, batches  # noqa: E402  (after the check that names the extra)
from mmreplay.jax.keys import generator_from_key  # noqa: E402
from mmreplay.jax.records import JaxBatch  # noqa: E402
from mmreplay.jax.transfer import to_jax  # noqa: E402

__all__ = ["JaxBatch", "JaxBatches", "batches", "generator_from_key", "to_jax"]
