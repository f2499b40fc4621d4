"""The exceptions mmreplay raises, and the warning an add gives when an episode is cut.

Each class also subclasses the builtin exception it refines, so callers can catch either:
a store that is not found is a ``FileNotFoundError``, a corrupt one a ``ValueError``.
"""

from __future__ import annotations

import io


class MmreplayError(Exception):
    """Base class of every error specific to mmreplay."""


class StoreExistsError(MmreplayError, FileExistsError):
    """``ReplayStore.create`` was given a path that already exists."""


class StoreNotFoundError(MmreplayError, FileNotFoundError):
    """``ReplayStore.open`` was given a path that holds no store."""


class CorruptStoreError(MmreplayError, ValueError):
    """A file of the store fails its checksum, is truncated, or is not a store file at all."""


class DamagedStoreError(CorruptStoreError):
    """A store's rows or frames are damaged (a flipped byte, a bad sector): the message names the damage
    found and the way out (``mmreplay verify`` lists it all; ``mmreplay salvage`` or ``mmreplay.salvage``
    copies every intact transition into a new store)."""


class FormatVersionError(CorruptStoreError):
    """The store was written in a format version this code does not read."""


class ReadOnlyStoreError(MmreplayError, io.UnsupportedOperation):
    """A write (``add``, ``flush`` of new data) was attempted on a store opened with ``mode="r"``."""


class ClosedStoreError(MmreplayError, ValueError):
    """An operation was attempted on a store after ``close()``."""


class StoreLockedError(MmreplayError, BlockingIOError):
    """Another process already holds the store open for writing."""


class StoreLimitError(MmreplayError, OSError):
    """A store asks for more than this machine can give now.

    A size its header declares (a capacity, a ring's slots, a stack) would need more memory, address space
    or disk than the process can get. Files can be sparse, so their sizes bound nothing; each such size is
    checked against the machine (``mmreplay.limits``) before anything is allocated, mapped or reserved.

    Attributes:
        errno: ``ENOMEM`` (memory, address space) or ``ENOSPC`` (disk).
    """


class StepsEvictedError(MmreplayError, IndexError):
    """Steps that were stored were evicted before they could be read.

    A writer wrapped past them while a reader, or the writer itself, asked for them.

    Args:
        message: the error's text.
        steps: the evicted steps that were asked for.

    Attributes:
        steps: the evicted steps that were asked for.
    """

    def __init__(self, message: str, *, steps: list[int]) -> None:
        super().__init__(message)
        self.steps = steps


class EpisodeNotFoundError(MmreplayError, LookupError):
    """No stored episode has the id asked for (``store.episodes().by_id``, ``mmreplay show``).

    The id is not an episode's first step, or that step was evicted. The message says which ids are stored.
    """


class EpisodeCutWarning(UserWarning):
    """An add's obs did not continue its env's open episode, so the store started a new one there.

    The episode before it is listed with ``ended_by="cut"``. Said once per env of an opened store; a loop
    that means to start episodes this way (random frames in a test, say) can ignore it by class:
    ``warnings.filterwarnings("ignore", category=mmreplay.EpisodeCutWarning)``.
    """
