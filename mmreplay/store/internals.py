"""The store's internal seam for its tests: the parts of an open ``ReplayStore`` below its public API,
each reached through one function here rather than the façade's private attributes.

Nothing outside mmreplay's own tests and benchmarks should call these: they name internal objects whose
methods may change between any two versions. The store's feeds have their own seam, the
``BatchSource`` the façade hands them (``mmreplay.store.batch_source``).
"""

from __future__ import annotations

from mmreplay.errors import ReadOnlyStoreError
from mmreplay.store.batch_source import BatchSource
from mmreplay.store.reading.mapped_files import MappedFiles
from mmreplay.store.reading.transition_reader import TransitionReader
from mmreplay.store.replay_store import ReplayStore
from mmreplay.store.writing.writer import Writer


def writer_of(store: ReplayStore) -> Writer:
    """The writer behind a store opened for appending (mode ``"r+"``): its add paths and options.

    Args:
        store: an open store.

    Returns:
        The store's ``Writer``.

    Raises:
        ReadOnlyStoreError: the store is open read-only (its collaborator is a follower).
    """
    role = store._role
    if not isinstance(role, Writer):
        raise ReadOnlyStoreError(f"{store.path} is open read-only (mode {store.mode!r}): it has no writer")
    return role


def files_of(store: ReplayStore) -> MappedFiles:
    """The files the store maps now: its frame ring, tables and sampler (new ones after ``clear()``).

    Args:
        store: an open store.

    Returns:
        The store's ``MappedFiles``.
    """
    return store._files


def reader_of(store: ReplayStore) -> TransitionReader:
    """The reader ``sample`` and ``read`` decode through.

    Args:
        store: an open store.

    Returns:
        The store's ``TransitionReader``.
    """
    return store._source.reader


def batch_source_of(store: ReplayStore) -> BatchSource:
    """What the store's feeds read through.

    Args:
        store: an open store.

    Returns:
        The store's ``BatchSource``.
    """
    return store._source
