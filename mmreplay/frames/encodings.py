"""How a store encodes its frames, chosen once at create time and recorded in the header's layout.

- ``"lz4"`` (the default for frames that are not uint8, and for uint8 frames under
  ``REFERENCE_MIN_FRAME_BYTES``): each frame is one lz4 block, compressed alone; a plain ``FrameRing``.
  Its header has no encoding fields, exactly as before the choice existed.
- ``"lz4-reference"`` (the default for uint8 frames of ``REFERENCE_MIN_FRAME_BYTES`` or more): each frame
  is compressed against an earlier frame of the same env, its reference (``reference_codec``: groups of
  ``group_size`` frames per env, a key frame compressed alone at the start of each, references arranged
  by ``branching``); a ``ReferenceFrameRing`` whose entries also hold ``ref_delta``. 2.4x (Pong) to
  5.9x (MsPacman) fewer bytes per transition on Atari; reading a frame decodes at most ``scheme.depth``
  other frames, and adding costs a reference-aware encode per frame.

The writer side is a *frame encoder*: ``encode(env, frame_step, frame, restart=...)`` returns a frame's
payload and ``ref_delta``. The reference encoder keeps each env's ``EnvReferences`` (the frames later
ones may reference) in memory; ``checkpoint``/``rollback`` undo what a failed add assigned, so that no
frame is ever encoded against a frame that was not written.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from mmreplay import extensions
from mmreplay.disk import header
from mmreplay.disk.store_directory import StoreDirectory
from mmreplay.errors import CorruptStoreError
from mmreplay.frames import lz4_codec
from mmreplay.frames import legacy_frames, reference_codec
from mmreplay.frames.reference_ring import UNITS_VERSION, ReferenceFrameRing
from mmreplay.frames.reference_scheme import EnvReferences, ReferenceScheme
from mmreplay.frames.ring import FrameRing
from mmreplay.limits import check_memory

_lz4batch = extensions.load("_lz4batch")  # its reference groups: a writer's, both add paths'

PLAIN = "lz4"
REFERENCE = "lz4-reference"
assert header.FRAME_ENCODINGS == (PLAIN, REFERENCE)
# The smallest uint8 frame (in bytes) that create gives reference frames when it is given no encoding.
# Below it a frame's block is mostly its row and table entry, which a reference does not shrink, while
# every read follows the reference chains. benchmarks/bench_small_frames.py (capacity 3,000, stack 4,
# Pong, MsPacman and Seaquest frames subsampled; 2-core machine; results/small-frames-2core.jsonl):
# reference against plain bytes a transition 54.6 / 53.2 at 1x1, 54.6-56.0 / 57.3 at 2x2, 56.0-65.5 /
# 68.3-71.0 at 4x4 (a few bytes saved), 65.5-75.1 / 79.2-117.4 at 8x8 (14-46 saved); a sample(32) ~2x
# plain's time at 1x1 to 4x4 (22-27 against 11-13 us), 1.1x-1.8x at 8x8 to 21x21, and 0.6x-1.0x at 84x84.
# On the 16-core box a prioritized sample + update at 1,000,000 1x1 frames ran at 0.73x cpprb's rate on
# reference frames and 1.55x on plain ones (results/box-h200-reference-default.md).
REFERENCE_MIN_FRAME_BYTES = 64
# A store's scheme when create is given none: groups of 32 frames, each frame against the one at its
# place with the lowest set bit cleared (depth 5: half the frames reference the frame before, a quarter
# the one two back, ...). Measured at capacity 100,000, stack 4, one env, on the 2-core development VM
# (docs/benchmarks.md, "Frame encodings"): against groups of 256 (depth 8), 1-16% more bytes a transition
# (Pong 115 -> 119, Breakout 105 -> 113, MsPacman 264 -> 306, Seaquest 214 -> 228) for uniform sample(32)
# and sample(256) rates 1.1x-1.3x of theirs: a sampled frame's chain is shorter, and its key frame nearer.
DEFAULT_SCHEME = ReferenceScheme(group_size=32, branching=2)


def default_encoding(frame_shape: tuple[int, ...], frame_dtype: np.dtype) -> str:
    """The encoding create gives frames of this shape and dtype when it is given none: reference frames
    for uint8 frames of REFERENCE_MIN_FRAME_BYTES or more (images), plain lz4 for others."""
    if frame_dtype == np.uint8 and math.prod(frame_shape) >= REFERENCE_MIN_FRAME_BYTES:
        return REFERENCE
    return PLAIN


def parse_frame_encoding(
    frame_encoding: object, reference_scheme: object
) -> tuple[str, dict[str, int] | None]:
    """The layout's ``frame_encoding`` and ``reference_scheme`` fields for ``ReplayStore.create``'s arguments."""
    if not isinstance(frame_encoding, str):
        raise TypeError(f"frame_encoding must be a str; got {type(frame_encoding).__name__} {frame_encoding!r}")
    if frame_encoding not in header.FRAME_ENCODINGS:
        expected = " or ".join(repr(name) for name in header.FRAME_ENCODINGS)
        raise ValueError(f"frame_encoding is {frame_encoding!r}; expected {expected}")
    if reference_scheme is not None and not isinstance(reference_scheme, ReferenceScheme):
        raise TypeError(
            f"reference_scheme must be a ReferenceScheme or None; got {type(reference_scheme).__name__}"
        )
    if frame_encoding == PLAIN:
        if reference_scheme is not None:
            raise ValueError(f"reference_scheme is only for frame_encoding={REFERENCE!r}; got frame_encoding={PLAIN!r}")
        return PLAIN, None
    return REFERENCE, asdict(reference_scheme if reference_scheme is not None else DEFAULT_SCHEME)


def scheme_of(layout: header.Layout, directory: StoreDirectory | Path) -> ReferenceScheme | None:
    """The store's reference scheme (None for plain frames), checked as the header gives it."""
    if layout.frame_encoding == PLAIN:
        return None
    fields = layout.reference_scheme
    try:
        if not isinstance(fields, dict):
            raise TypeError(f"expected an object, got {type(fields).__name__}")
        return ReferenceScheme(**fields)
    except (TypeError, ValueError) as error:
        raise CorruptStoreError(
            f"{directory / header.HEADER_NAME}: reference_scheme {fields!r} is not a valid scheme ({error})"
        ) from None


def has_references(layout: header.Layout) -> bool:
    """Whether the store's frame table entries hold ``ref_delta`` (see ``frames.frame_entries.frame_entry``)."""
    return layout.frame_encoding == REFERENCE


# What a frame costs beyond its pixels where a store keeps or reads it: its step and table entry in a
# batch's arrays, and a writer's record of its envs' episodes (a Python int and bytes object a frame).
_FRAME_BOOKKEEPING_BYTES = 128


def block_extra(layout: header.Layout) -> int:
    """A stored frame's bytes beyond lz4's worst case (``FrameRing``'s ``extra``): what a reference frame's
    block holds besides its frame (its changed units' numbers; version 5's list of changed rows)."""
    if layout.frame_encoding != REFERENCE or layout.format_version < 5:
        return 0
    if layout.format_version < UNITS_VERSION:
        return legacy_frames.changed_rows_bound(layout.frame_shape)
    return reference_codec.block_extra(layout.frame_shape)


def create_ring(directory: StoreDirectory | Path, layout: header.Layout, commit: header.Commit) -> FrameRing:
    """The empty frame ring of a new store with this layout (its segments folder and frame table)."""
    scheme = scheme_of(layout, directory)
    return FrameRing.create(
        directory,
        frame_shape=layout.frame_shape,
        segment_bytes=layout.segment_bytes,
        frame_slots=commit.frame_slots,
        version=layout.format_version,
        max_distance=None if scheme is None else scheme.max_distance,
        extra=block_extra(layout),
        frame_dtype=np.dtype(layout.frame_dtype),
    )


def open_ring(directory: StoreDirectory | Path, layout: header.Layout, commit: header.Commit, *, writable: bool) -> FrameRing:
    """The store's frame ring, of the class its encoding needs, at its committed counts.

    First, what reading the store takes however few transitions it holds is checked against the memory
    this process can get: a transition of each env (``stack_size + 1`` frames, with their bookkeeping),
    which a writer also keeps as its envs' episodes in progress (the frames and their steps)."""
    frame_cost = math.prod(layout.frame_shape) * np.dtype(layout.frame_dtype).itemsize + _FRAME_BOOKKEEPING_BYTES
    check_memory((2 if writable else 1) * layout.num_envs * (layout.stack_size + 1) * frame_cost,
                 f"{directory}: a transition of each of {layout.num_envs:,} envs (the header's num_envs, "
                 f"stack_size {layout.stack_size:,} and frame_shape {layout.frame_shape})")
    scheme = scheme_of(layout, directory)
    make: Callable[..., FrameRing] = (
        functools.partial(FrameRing, max_distance=None) if scheme is None
        else functools.partial(ReferenceFrameRing, scheme=scheme)
    )
    return make(
        directory,
        frame_shape=layout.frame_shape,
        segment_bytes=layout.segment_bytes,
        frame_slots=commit.frame_slots,
        generation=commit.frame_table_generation,
        frames_written=commit.frames_written,
        bytes_written=commit.bytes_written,
        writable=writable,
        version=layout.format_version,
        extra=block_extra(layout),
        frame_dtype=np.dtype(layout.frame_dtype),
    )


class FrameEncoder(Protocol):
    """Compresses the frames a writer adds, in frame step order; see the module docstring."""

    records_references: bool  # whether payloads come with ref_deltas for the frame table
    frame_tail: int  # the oldest frame step the store keeps (its last commit's)
    # add's fast path may write this encoder's frames (a compiled call: FrameRing.append_frames, with
    # ``groups`` for reference frames)
    fast_path: bool

    @property
    def groups(self) -> object | None:
        """A reference encoder's compiled groups (``_lz4batch.reference_groups``); else None."""

    def encode(
        self, env: int, frame_step: int, frame: npt.NDArray[np.uint8], *, restart: bool
    ) -> tuple[bytes, int]: ...

    def checkpoint(self) -> None: ...

    def rollback(self, envs: range | list[int] | None = None) -> None: ...


class PlainEncoder:
    """Each frame alone: ``codec.compress``; no state."""

    records_references = False
    fast_path = True
    groups = None

    def __init__(self) -> None:
        self.frame_tail = 0

    def encode(
        self, env: int, frame_step: int, frame: npt.NDArray[np.uint8], *, restart: bool
    ) -> tuple[bytes, int]:
        return lz4_codec.compress(frame), 0

    def checkpoint(self) -> None:
        pass

    def rollback(self, envs: range | list[int] | None = None) -> None:
        pass


class ReferenceEncoder:
    """Each frame against its reference in its env's current group (``EnvReferences``).

    A writer that opens a store starts every env with a key frame: the frames an earlier writer kept
    in memory are gone, and a new group needs nothing from disk. With the compiled extension the groups
    are the extension's (``groups``: the same assignments as ``EnvReferences``), which add's fast path
    writes through too. An add that fails after its frames were assigned restarts their envs
    (``rollback``): no frame is ever encoded against a frame that was not written, and a key frame needs
    nothing.
    """

    records_references = True

    def __init__(self, scheme: ReferenceScheme, *, num_envs: int, frame_shape: tuple[int, ...]) -> None:
        self.frame_tail = 0
        self._scheme = scheme
        self._frame_shape = frame_shape
        self._envs = [EnvReferences(scheme) for _ in range(num_envs)]
        self._touched: set[int] = set()  # the envs assigned a frame since the last checkpoint
        self.groups: object | None = None
        if _lz4batch is not None:
            self.groups = _lz4batch.reference_groups(
                num_envs=num_envs, group_size=scheme.group_size, branching=scheme.branching,
                max_distance=scheme.max_distance, frame_nbytes=math.prod(frame_shape),
                row_nbytes=reference_codec.row_nbytes(frame_shape), unit=reference_codec.unit_nbytes(frame_shape),
            )
        self.fast_path = self.groups is not None

    def encode(
        self, env: int, frame_step: int, frame: npt.NDArray[np.uint8], *, restart: bool
    ) -> tuple[bytes, int]:
        self._touched.add(env)
        contiguous = np.ascontiguousarray(frame, np.uint8).reshape(self._frame_shape)
        if self.groups is not None:
            assert _lz4batch is not None
            payload, ref_delta = _lz4batch.groups_encode(self.groups, env, frame_step, contiguous, restart,
                                                         self.frame_tail)
            return payload, ref_delta
        references = self._envs[env]
        if restart:
            references.restart()
        ref_delta, reference = references.assign(frame_step, contiguous, frame_tail=self.frame_tail)
        return reference_codec.compress_against(contiguous, reference), ref_delta

    def checkpoint(self) -> None:
        """Start counting the envs that a ``rollback`` restarts (an add that failed before writing)."""
        self._touched = set()

    def rollback(self, envs: range | list[int] | None = None) -> None:
        """Restart the envs assigned a frame since the last checkpoint, and ``envs``: their next frames are
        key frames."""
        restarted = sorted(self._touched | set(envs or ()))
        if self.groups is not None:
            assert _lz4batch is not None
            _lz4batch.groups_restart(self.groups, restarted)
        for env in restarted:
            self._envs[env].forget()
        self._touched = set()


def encoder_for(layout: header.Layout, directory: StoreDirectory | Path) -> FrameEncoder:
    """A new writer's frame encoder for the store's encoding."""
    scheme = scheme_of(layout, directory)
    if scheme is None:
        return PlainEncoder()
    return ReferenceEncoder(scheme, num_envs=layout.num_envs, frame_shape=layout.frame_shape)
