"""A numpy generator from a jax key: the store samples with numpy, a JAX learner carries keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def generator_from_key(key: jax.Array) -> np.random.Generator:
    """The numpy generator that one jax PRNG key stands for: PCG64 seeded by the key's words.

    The same key always gives a generator that draws the same numbers, and different keys give
    independent streams (``np.random.SeedSequence`` mixes the words), so a learner that splits its key
    (``key, sample_key = jax.random.split(key)``) and passes ``sample_key`` here draws reproducible
    batches from its one seed. The key is read, not consumed: split it first, as for any jax draw.

    Args:
        key: one key, typed (``jax.random.key(seed)``) or raw (``jax.random.PRNGKey(seed)``, uint32 words).

    Returns:
        A new ``np.random.Generator``, for ``store.sample(..., rng=)`` or ``batches``.

    Raises:
        TypeError: ``key`` is not a jax key nor an array of uint32 words.
        ValueError: ``key`` holds several keys (a split's result before indexing), or no words.
    """
    if not hasattr(key, "dtype") or not hasattr(key, "shape"):
        raise TypeError(f"key must be a jax PRNG key (jax.random.key or jax.random.PRNGKey); got {type(key).__name__}")
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"key must be one key; got {key.shape} keys (index the result of jax.random.split)")
        words = np.asarray(jax.random.key_data(key))
    else:
        words = np.asarray(key)
        if words.dtype != np.uint32:
            raise TypeError(f"key must be a jax PRNG key or its uint32 words; got an array of {words.dtype}")
        if words.ndim != 1 or words.size == 0:
            raise ValueError(
                f"key must be one raw key, a 1-D array of uint32 words; got shape {words.shape} "
                "(index the result of jax.random.split)"
            )
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(word) for word in words.ravel()])))
