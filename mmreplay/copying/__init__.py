"""Stores written again as new stores: ``convert`` (a store of an older format, in the current one) and
``salvage`` (every intact transition of a damaged store).

This family reaches a store through its public face (``mmreplay.store``), as serialization does, and
builds the new store beside its target (``disk.atomic_builds``): nothing appears there unless complete.
"""

from mmreplay.copying.conversion import convert
from mmreplay.copying.salvage import SalvageSummary, salvage

__all__ = ["SalvageSummary", "convert", "salvage"]
