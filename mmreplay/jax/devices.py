"""The ``device=`` argument of ``batches`` and ``to_jax``: a ``jax.Device``, a platform name, or None."""

from __future__ import annotations

import jax


def parse_device(device: object) -> jax.Device | None:
    """The jax device that ``device`` names.

    Args:
        device: None (JAX's default device, uncommitted, as ``jax.device_put`` places it), a ``jax.Device``,
            or a string: a platform (``"cpu"``, ``"gpu"``, ``"cuda"``, ``"tpu"``), its first device, or
            ``"PLATFORM:N"``, its N-th.

    Returns:
        The device, or None for JAX's default.

    Raises:
        TypeError: ``device`` is none of these.
        ValueError: no such platform or device here (the message lists the devices there are).
    """
    if device is None or isinstance(device, jax.Device):
        return device
    if not isinstance(device, str):
        raise TypeError(f"device must be a jax.Device, a platform name such as 'cpu' or 'gpu:0', or None; "
                        f"got {type(device).__name__}")
    platform, _, number = device.partition(":")
    if number and not number.isdigit():
        raise ValueError(f"device {device!r}: expected 'PLATFORM' or 'PLATFORM:N' with N a device number")
    try:
        found = jax.devices(platform)
    except RuntimeError:
        found = []
    if not found or int(number or 0) >= len(found):
        raise ValueError(f"device {device!r}: no such device here; JAX has {[str(d) for d in jax.devices()]}")
    return found[int(number or 0)]
