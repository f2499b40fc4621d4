"""``ReplayStore.bytes_on_disk``'s value: a count of bytes that still answers a call, as the method it was."""

from __future__ import annotations

import warnings


class DiskBytes(int):
    """The bytes a store's files occupy on disk: an ``int`` in every use, and callable for older code.

    ``store.bytes_on_disk`` is a property, as ``capacity`` and ``frame_shape`` are; code written when it
    was a method calls it, and gets the same count, with a ``DeprecationWarning``.
    """

    def __call__(self) -> int:
        """The same count as a plain ``int`` (deprecated: read ``store.bytes_on_disk`` without the call).

        Returns:
            The bytes the store's files occupy.
        """
        warnings.warn(
            "ReplayStore.bytes_on_disk is a property now, as capacity and frame_shape are: write "
            "store.bytes_on_disk, without the call",
            DeprecationWarning, stacklevel=2,
        )
        return int(self)
