"""Stores written again as new stores: ``convert`` (a store of an older format, in the current one).

This family reaches a store through its public face (``mmreplay.store``), as serialization does, and
builds the new store beside its target (``disk.atomic_builds``): nothing appears there unless complete.
"""

from mmreplay.copying.conversion import convert

__all__ = ["convert"]
