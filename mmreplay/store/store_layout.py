"""What a store is laid out as, read from its header and fixed when it was created: its path, format
version, frame shape and dtype, capacity, stack size, envs, action shape and dtype, sampler, user fields,
stack padding and frame encoding. ``ReplayStore`` has these as properties of its own (it derives from
``StoreLayout``); they read the files the store's collaborator maps, and never write."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mmreplay.disk.header import Layout
from mmreplay.frames import encodings
from mmreplay.frames.reference_scheme import ReferenceScheme
from mmreplay.sampling.samplers import Sampler
from mmreplay.store.reading.mapped_files import MappedFiles


class StoreLayout:
    """The read-only properties of a store's layout; ``_files`` and ``_layout`` are set by ``ReplayStore``
    when it opens (and again at ``clear``)."""

    _files: MappedFiles
    _layout: Layout

    @property
    def path(self) -> Path:
        """The store's directory: the real, absolute path it was opened at (resolved once, at open).

        Returns:
            The path.
        """
        return self._files.directory.path

    @property
    def format_version(self) -> int:
        """The on-disk format version this store was written in; an older one opens read-only.

        Returns:
            The version number.
        """
        return self._files.format_version

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """One frame's shape, fixed at create time.

        Returns:
            The shape, such as ``(84, 84)``.
        """
        return self._layout.frame_shape

    @property
    def frame_dtype(self) -> np.dtype:
        """The frames' dtype, uint8 unless ``create`` was given another; obs and next_obs have it.

        Returns:
            The little-endian numpy dtype.
        """
        return self._files.frames.frame_dtype

    @property
    def capacity(self) -> int:
        """The most transitions kept; when full, the oldest is evicted.

        Returns:
            The capacity in transitions.
        """
        return self._layout.capacity

    @property
    def stack_size(self) -> int:
        """Frames per obs.

        Returns:
            The stack size.
        """
        return self._layout.stack_size

    @property
    def num_envs(self) -> int:
        """Envs whose transitions each ``add`` takes, side by side.

        Returns:
            The number of envs.
        """
        return self._layout.num_envs

    @property
    def action_shape(self) -> tuple[int, ...]:
        """One action's shape.

        Returns:
            The shape (``()`` for scalar actions).
        """
        return self._layout.action_shape

    @property
    def action_dtype(self) -> np.dtype:
        """The actions' dtype.

        Returns:
            The numpy dtype.
        """
        return self._files.action_dtype

    @property
    def sampler(self) -> Sampler:
        """The sampler that draws the store's batches.

        Returns:
            A ``UniformSampler`` or a ``PrioritizedSampler``.
        """
        return self._files.sampler

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """The user fields in declaration order, empty for a store without any.

        Returns:
            name -> (shape, dtype).
        """
        return {name: (shape, np.dtype(dtype).newbyteorder("=")) for name, shape, dtype in self._layout.fields}

    @property
    def stack_padding(self) -> str:
        """What an obs stack at an episode start holds before its first frame, fixed at create time.

        Returns:
            ``"first"`` (that frame repeated) or ``"zeros"`` (all-zero frames).
        """
        return self._layout.stack_padding

    @property
    def frame_encoding(self) -> str:
        """How frames are compressed, fixed at create time.

        Returns:
            ``"lz4"`` or ``"lz4-reference"``.
        """
        return self._layout.frame_encoding

    @property
    def reference_scheme(self) -> ReferenceScheme | None:
        """The scheme of a ``"lz4-reference"`` store: which frame each frame is compressed against.

        Returns:
            The scheme, or None for a ``"lz4"`` store.

        Raises:
            CorruptStoreError: the header's scheme is not a valid one.
        """
        return encodings.scheme_of(self._layout, self._files.directory)
