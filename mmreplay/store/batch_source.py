"""What the store's feeds (``mmreplay.store.feeds``) read batches through: ``sample`` and
``sample_sequences`` as the façade runs them, by a reader of the feed's choosing and several batches at
a time, and their encoded forms.

The façade makes one ``BatchSource`` when it opens, reads its own samples through it, and points it at
its new files after ``clear()`` (``adopt``); a feed keeps the one it is given for its life. This is the
store's one seam below the public API for its feeds: they never touch the façade's private state.
"""

from __future__ import annotations

import numpy as np

from mmreplay.batch import Batch, SequenceBatch
from mmreplay.store import reads
from mmreplay.store.reading.encoded_batches import EncodedBatch, EncodedSequenceBatch, encoding_reader
from mmreplay.store.reading.transition_reader import TransitionReader
from mmreplay.store.role import Role


class BatchSource:
    """The reads of one open store, through whichever collaborator (``Role``) it has now."""

    def __init__(self, role: Role) -> None:
        self.adopt(role)

    def adopt(self, role: Role) -> None:
        """Read through ``role``'s files from now on (at opening, and after ``clear``).

        Args:
            role: the store's collaborator, a ``Writer`` or a ``Follower``.
        """
        self._role = role
        self._files = role.files
        self._reader = role.files.reader

    @property
    def reader(self) -> TransitionReader:
        """The store's own reader: what ``sample`` and ``read`` decode through."""
        return self._reader

    def background_reader(self) -> TransitionReader:
        """The reader of a feed's thread: the store's, decoding on all but the consumer's core.

        Returns:
            A reader over the same files whose decode leaves one usable core to the caller.
        """
        return self._reader.for_background()

    def sample(
        self,
        batch_size: int,
        rng: np.random.Generator | int | None,
        *,
        beta: float = 0.4,
        n_step: int = 1,
        gamma: float = 0.99,
        out: Batch | None = None,
        replace_shared_out: bool = False,
        reader: TransitionReader | None = None,
        count: int = 1,
    ) -> Batch:
        """``ReplayStore.sample``, read by ``reader``.

        Args:
            batch_size, rng, beta, n_step, gamma, out: as ``ReplayStore.sample`` takes them.
            replace_shared_out: an ``out`` whose obs and next_obs share frames is replaced by a new batch
                where the draw needs them apart, instead of refused (``reads.sample_transitions``).
            reader: the reader to decode with (None: the store's own).
            count: batches drawn in order and read as one (their rows back to back).

        Returns:
            The batch (``count * batch_size`` rows).

        Raises:
            ClosedStoreError: the store is closed.
            ValueError, TypeError: as ``ReplayStore.sample`` raises them.
        """
        self._files.check_open("sample")
        return reads.sample_transitions(
            self._role, self._reader if reader is None else reader, batch_size, rng, beta=beta, n_step=n_step,
            gamma=gamma, out=out, replace_shared_out=replace_shared_out, count=count,
        )

    def sample_sequences(
        self,
        batch_size: int,
        length: int,
        rng: np.random.Generator | int | None,
        *,
        beta: float = 0.4,
        out: SequenceBatch | None = None,
        reader: TransitionReader | None = None,
        count: int = 1,
    ) -> SequenceBatch:
        """``ReplayStore.sample_sequences``, read by ``reader``.

        Args:
            batch_size, length, rng, beta, out: as ``ReplayStore.sample_sequences`` takes them.
            reader: the reader to decode with (None: the store's own).
            count: batches drawn in order and read as one.

        Returns:
            The windows (``count * batch_size`` of them).

        Raises:
            ClosedStoreError: the store is closed.
            ValueError, TypeError: as ``ReplayStore.sample_sequences`` raises them.
        """
        self._files.check_open("sample_sequences")
        return reads.sample_sequences(self._role, self._reader if reader is None else reader, batch_size, length, rng,
                                      beta=beta, out=out, count=count)

    def sample_encoded(
        self, batch_size: int, rng: np.random.Generator | int | None, *, beta: float = 0.4, n_step: int = 1,
        gamma: float = 0.99,
    ) -> EncodedBatch:
        """``ReplayStore.sample_encoded``: ``sample``'s draw with its frames left compressed.

        Args:
            batch_size, rng, beta, n_step, gamma: as ``ReplayStore.sample`` takes them.

        Returns:
            The encoded batch, whose ``decode()`` is the batch ``sample`` returns for the same arguments.

        Raises:
            ClosedStoreError: the store is closed.
            ValueError: the store's frames cannot travel encoded (see ``encoding_reader``).
        """
        reader = encoding_reader(self._files, "sample_encoded", verify=self._role.sees_frames_move)
        return reader.encoded(self.sample(batch_size, rng, beta=beta, n_step=n_step, gamma=gamma, reader=reader))

    def sample_sequences_encoded(
        self, batch_size: int, length: int, rng: np.random.Generator | int | None, *, beta: float = 0.4
    ) -> EncodedSequenceBatch:
        """``ReplayStore.sample_sequences_encoded``: ``sample_sequences``' draw with its frames compressed.

        Args:
            batch_size, length, rng, beta: as ``ReplayStore.sample_sequences`` takes them.

        Returns:
            The encoded windows, whose ``decode()`` is what ``sample_sequences`` returns for them.

        Raises:
            ClosedStoreError: the store is closed.
            ValueError: the store's frames cannot travel encoded (see ``encoding_reader``).
        """
        self._files.check_open("sample_sequences_encoded")
        reader = encoding_reader(self._files, "sample_sequences_encoded", verify=self._role.sees_frames_move)
        return reader.encoded_sequences(self.sample_sequences(batch_size, length, rng, beta=beta, reader=reader))
