"""Several batches' frames among the same encoded sources (a Ray group's), checked and laid out once, then
decoded batch by batch.

``decode_blocks`` checks its arguments and numbers the sources' frames at every call. A group of ``G``
batches drawn together (``ShardedReplay.batches``) decodes from the same sources ``G`` times, so
``BlockBatches`` does that work once: every reference is checked, and every argument of the compiled
decoder laid out, when it is made; a batch's decode is then one compiled call on its slice. (Blocks
compressed against other frames, ``"lz4-reference"``, are found through the table of the whole group's
frames: cutting a table per batch cost more numpy work per group than the compiled pass over the whole
table costs each batch.)

A frame that fails its checksum is decoded again by ``decode_blocks``, whose error names it as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from mmreplay import extensions
from mmreplay.errors import CorruptStoreError
from mmreplay.frames import referenced_blocks
from mmreplay.frames.threads import batch_threads, thread_limit
from mmreplay.frames.wire import decode_blocks
from mmreplay.validation import parse_decode_threads, parse_positive_int

if TYPE_CHECKING:
    from types import ModuleType

    from mmreplay.frames.wire import BlockRefs, EncodedFrames

_lz4batch: ModuleType | None = extensions.load("_lz4batch")


class BlockBatches:
    """``batches`` equal batches of referenced frames among ``sources``, decoded one batch at a time.

    Batch g is frames ``g * n : (g + 1) * n`` of ``refs`` flattened (``refs`` of any shape, in C order), where
    ``n = refs.starts.size // batches``.
    The sources' buffers must not change while this object is used (an answer from Ray's object store,
    a store's encoded batch).

    Args:
        sources: the ``EncodedFrames`` that ``refs.sources`` indexes, all of one frame shape.
        refs: every batch's frames, batch after batch.
        batches: how many batches ``refs`` holds.
        decode_threads: the most threads a batch may decode on (None: the cores this process may use).

    Attributes:
        sources: the sources, as given.
        refs: ``refs`` flattened: every batch's frames, one after the other.
        batches: how many batches.
        per_batch: frames a batch (``n``).
        frame_shape: the shape of one decoded frame.
        limit: the most threads a batch decodes on.

    Raises:
        TypeError: ``batches`` or ``decode_threads`` is not an int.
        ValueError: ``sources`` is empty, ``refs`` does not split into ``batches`` equal batches, or it
            names a source or a frame the sources do not have, or the sources' frame shapes differ.
    """

    def __init__(
        self, sources: Sequence[EncodedFrames], refs: BlockRefs, *, batches: int, decode_threads: int | None = None
    ) -> None:
        batches = parse_positive_int(batches, "batches")
        count = refs.starts.size
        if count % batches:
            raise ValueError(f"refs holds {count} frames; expected a multiple of batches ({batches})")
        if not sources:
            raise ValueError("sources is empty; expected the EncodedFrames that refs.sources indexes")
        shapes = {source.frame_shape for source in sources}
        if len(shapes) != 1:
            raise ValueError(f"the sources' frames have shapes {' and '.join(map(str, sorted(shapes)))}; "
                             "expected one frame shape")
        flat = (refs.sources, refs.starts, refs.lengths, refs.checksums, refs.seeds)
        self.refs = type(refs)(*(array.reshape(-1) for array in flat),
                               None if refs.frames is None else refs.frames.reshape(-1))
        self.sources, self.batches = list(sources), batches
        self.per_batch = count // batches
        self.frame_shape: tuple[int, ...] = shapes.pop()
        self.limit = thread_limit(parse_decode_threads(decode_threads))
        self._views = [memoryview(source.data) for source in self.sources]
        self._decode = self._prepare()

    def __len__(self) -> int:
        return self.batches

    def decode(self, g: int) -> npt.NDArray[np.uint8]:
        """Batch g's frames, decoded into a new array.

        Args:
            g: the batch, 0 to ``batches - 1``.

        Returns:
            (n, *frame_shape) uint8.

        Raises:
            IndexError: ``g`` is out of range.
            CorruptStoreError: a frame fails its checksum or does not decode to one frame (the message
                names it by its row in the batch).
        """
        if not 0 <= g < self.batches:
            raise IndexError(f"batch {g} of {self.batches}")
        out = np.empty((self.per_batch, *self.frame_shape), np.uint8)
        if self._decode(g, out) >= 0:
            self._raise(g, out)
        return out

    def _prepare(self) -> Callable[[int, npt.NDArray[np.uint8]], int]:
        """The compiled call that decodes batch g into ``out`` (-1: every frame good, else a failing row),
        its arguments laid out for every batch here; ``decode_blocks`` per batch where none applies."""
        if self.per_batch == 0:
            return lambda g, out: -1  # nothing to decode
        referenced_blocks.check_sources(self.refs.sources, len(self.sources))
        referencing = [source for source in self.sources if source.references is not None]
        # the frames' own indices checked here on every path (decode_blocks would check them at each batch)
        table = referenced_blocks.group_table(self.sources, self.refs) if referencing else None
        if _lz4batch is None or any(source.format_version < 6 for source in referencing):
            return self._general
        n, nbytes = self.per_batch, self.per_batch * int(np.prod(self.frame_shape))
        threads = batch_threads(nbytes, self.limit)
        if not referencing:
            arrays = _plain_arrays(self.refs)
            frame_nbytes = nbytes // n

            def plain(g: int, out: npt.NDArray[np.uint8]) -> int:
                rows = slice(g * n, (g + 1) * n)
                return int(_lz4batch.decode(self._views, tuple(array[rows] for array in arrays), out.reshape(n, -1),
                                            frame_nbytes, threads))
            return plain
        assert table is not None
        every, wanted = table[0], table[1].reshape(self.batches, n)
        blocks = (every.source, every.starts, every.lengths, every.checksums, every.seeds)
        shape = referenced_blocks.compiled_shape(self.frame_shape)

        def whole(g: int, out: npt.NDArray[np.uint8]) -> int:
            return int(_lz4batch.decode_referenced(self._views, blocks, every.reference, wanted[g],
                                                   out.reshape(n, -1), shape, threads))
        return whole

    def _general(self, g: int, out: npt.NDArray[np.uint8]) -> int:
        """Batch g through ``decode_blocks`` (which raises for a bad frame): -1."""
        decode_blocks(self.sources, self.refs.take(slice(g * self.per_batch, (g + 1) * self.per_batch)), out,
                      decode_threads=self.limit)
        return -1

    def _raise(self, g: int, out: npt.NDArray[np.uint8]) -> None:
        """Decode batch g again through ``decode_blocks``, whose error names the failing frame."""
        self._general(g, out)
        raise CorruptStoreError(f"batch {g}'s frames do not decode: a block was damaged on disk or on the way")


def _plain_arrays(refs: BlockRefs) -> tuple[npt.NDArray[np.generic], ...]:
    """The compiled decoder's per-frame arrays of flat ``refs`` (sources, starts, lengths, checksums, seeds as
    uint32), contiguous."""
    return (np.ascontiguousarray(refs.sources, np.int64), np.ascontiguousarray(refs.starts, np.int64),
            np.ascontiguousarray(refs.lengths, np.int64), np.ascontiguousarray(refs.checksums, np.uint32),
            np.ascontiguousarray(refs.seeds.astype(np.uint32, copy=False)))  # wraps modulo 2**32
