"""Which earlier frame of its env each frame is compressed against: the ``ReferenceScheme`` (groups,
places, branching; see ``frames.reference_codec``'s module docstring for the vocabulary) and the writer's
``EnvReferences``, one env's current group and the frames later ones of it may reference (compiled in
``_c/codec/reference_groups.c``, with the same assignments)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


# The largest group: its frames lie within max_distance (at most 65,535) frame steps of its key frame.
MAX_GROUP_SIZE = 1 << 16


@dataclass(frozen=True)
class ReferenceScheme:
    """Which earlier frame of its env each frame is compressed against, in a ``"lz4-reference"`` store.

    A *group* is a run of at most ``group_size`` consecutive frames of one env inside one episode; a
    frame's *place* is its index in its group. The frame at place 0, the *key frame*, is compressed
    alone; every other frame against its *reference*, the frame at its place with the lowest nonzero
    base-``branching`` digit set to 0. Decoding a frame needs at most ``depth`` other frames, all earlier
    frames of its group. ``ReplayStore.create`` uses groups of 32 with branching 2 when given none.

    Attributes:
        group_size: the most frames in a group, 1 to 65,536 (1: every frame is a key frame).
        branching: the base of the places' digits, 2 to ``group_size``.
        max_distance: the most frame steps from a frame back to its key frame, 1 to 65,535: a group
            that would span more starts over. It bounds the frame table's 16-bit ``ref_delta``.

    Raises:
        TypeError: a field is not an int.
        ValueError: a field is outside its range.
    """

    group_size: int = 64
    branching: int = 8
    # The most frame steps from a frame back to its key frame (a group that would span more starts over).
    # It bounds ref_delta (a 16-bit frame table field) and the frame tail's search at each commit: one
    # table read per level over max_distance frames (~0.1 ms for 8,192; ~2 ms for 65,535). A group of
    # 64 frames of one of 8 lockstep envs spans ~512 frame steps.
    max_distance: int = 8192

    def __post_init__(self) -> None:
        for name in ("group_size", "branching", "max_distance"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r}")
        if not 1 <= self.group_size <= MAX_GROUP_SIZE:
            raise ValueError(f"group_size is {self.group_size}; expected 1 to {MAX_GROUP_SIZE} (1: every frame is a "
                             "key frame)")
        if not 2 <= self.branching <= max(2, self.group_size):
            raise ValueError(f"branching is {self.branching}; expected 2 to group_size ({self.group_size})")
        if not 1 <= self.max_distance <= 0xFFFF:
            raise ValueError(f"max_distance is {self.max_distance}; expected 1 to 65535 frame steps (16-bit ref_delta)")

    @property
    def depth(self) -> int:
        """The most frames that decoding one frame needs besides itself.

        Returns:
            The smallest d with ``branching ** d >= group_size``.
        """
        depth = 0
        while self.branching**depth < self.group_size:
            depth += 1
        return depth

    def reference_places(self, places: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The place of each place's reference in its group.

        Args:
            places: places in a group, any shape, each in ``[0, group_size)``.

        Returns:
            int64, shaped as ``places``: each one's reference's place, -1 for a key frame (place 0).

        Raises:
            ValueError: a place is outside ``[0, group_size)``.
        """
        places = np.asarray(places, np.int64)
        if places.size and (places.min() < 0 or places.max() >= self.group_size):
            raise ValueError(f"places must lie in [0, {self.group_size}); got {places.min()} to {places.max()}")
        unit = np.ones_like(places)
        while True:  # the weight of each place's lowest nonzero digit
            pending = (places > 0) & ((places // unit) % self.branching == 0)
            if not pending.any():
                break
            unit[pending] *= self.branching
        return np.where(places == 0, -1, places - (places // unit) % self.branching * unit)


class EnvReferences:
    """The writer's view of one env's current group: its place, and the frames later ones may reference.

    ``assign`` is called once per frame the env writes, in frame step order; ``restart`` makes the next
    frame a key frame (call it at each episode start; a writer that reopens a store starts restarted).
    The frames kept are copies: ``depth`` frames at most.
    """

    def __init__(self, scheme: ReferenceScheme) -> None:
        self.scheme = scheme
        self._place = 0
        self._key_step = -1
        self._last_step = -1
        # _anchors[m]: (frame step, frame) referenced by the next place whose lowest nonzero digit is digit m
        self._anchors: list[tuple[int, npt.NDArray[np.uint8]]] = []

    def restart(self) -> None:
        self._place = 0
        self._anchors = []

    def forget(self) -> None:
        """``restart``, and forget the last frame step: an add that failed may assign the same steps again."""
        self.restart()
        self._last_step = -1

    def assign(
        self, frame_step: int, frame: npt.NDArray[np.uint8], *, frame_tail: int = 0
    ) -> tuple[int, npt.NDArray[np.uint8] | None]:
        """The ``ref_delta`` of the frame written at ``frame_step``, and its reference (None: a key frame).

        ``frame_tail`` is the oldest frame step the store keeps (its last commit's): a group whose key
        frame is older starts over, since that key frame may already be freed (an env that idled while
        its group's frames were evicted).
        """
        if frame_step <= self._last_step:
            raise ValueError(f"frame_step is {frame_step}; expected more than this env's last one, {self._last_step}")
        scheme = self.scheme
        if (
            self._place == scheme.group_size
            or frame_step - self._key_step > scheme.max_distance
            or self._key_step < frame_tail
        ):
            self.restart()
        self._last_step = frame_step
        place, self._place = self._place, self._place + 1
        if place == 0:
            self._key_step = frame_step
            self._anchors = [(frame_step, frame.copy())] * scheme.depth
            return 0, None
        digit, rest = 0, place
        while rest % scheme.branching == 0:
            digit, rest = digit + 1, rest // scheme.branching
        reference_step, reference = self._anchors[digit]
        if digit > 0:  # this frame is the reference of the places that follow it, down to its own level
            kept = (frame_step, frame.copy())
            self._anchors[:digit] = [kept] * digit
        return frame_step - reference_step, reference
