"""Rebuilding episodes from Dopamine's slots, in written order, and adding them to a store as stacks.

``import_dopamine`` (``dopamine``) reads the files and hands over every slot it imports; the rules that
turn slots into transitions (padding skipped, time limits as truncations, fragments, the newest slot
held back) are listed in ``dopamine``'s docstring.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from mmreplay.store import ReplayStore

Slot = tuple[int, npt.NDArray[np.uint8], int, float, bool, bool]  # written slot, frame, action, reward, terminal, end


class SlotEpisodes:
    """Rebuilds episodes from slots and adds their transitions (as stacks) to the store."""

    def __init__(self, store: ReplayStore, padding: int | None, *, zero_padded: bool) -> None:
        self.store = store
        self.stack = store.stack_size
        self.writer_padding = padding
        self.zero_padded = zero_padded
        self.zero = np.zeros(store.frame_shape, np.uint8)
        self.history: deque[npt.NDArray[np.uint8]] | None = None  # the episode's newest frames
        self.pending: tuple[int, float] | None = None  # the previous slot's action and reward
        self.padding = 0  # padding slots still to skip
        self.known_start = False  # the next slot after padding starts an episode (not a fragment)
        self.first_add = False  # the next transition added is the first of its episode
        self.added = 0

    def feed(self, slots: Iterator[Slot]) -> int:
        expected = None
        for slot, frame, action, reward, terminal, end in slots:
            if slot != expected:
                self._cut(slot)
            expected = slot + 1
            if self.padding < 0:
                raise ValueError("cannot tell the writer's stack_size from the files (no whole run of padding "
                                 "slots in them): pass writer_stack_size=")
            if self.padding:
                if frame.any() or action or reward or terminal:
                    raise ValueError(f"written slot {slot} should be padding (the writer's stack_size is "
                                     f"{(self.writer_padding or 0) + 1}) but is not all zero: pass writer_stack_size=")
                self.padding -= 1
                continue
            if end and not terminal:
                # A time limit: this slot's next frame was never written; the episode ends, truncated,
                # with the transition that leads to this slot's frame.
                if self.history is not None:
                    self._emit(frame, terminated=False, truncated=True)
                self._episode_ended()
                continue
            if self.history is None:
                if self.known_start:
                    first = [self.zero if self.zero_padded else frame] * (self.stack - 1) + [frame]
                    self.history = deque(first, maxlen=self.stack)
                else:
                    self.history = deque([frame], maxlen=self.stack)
                self.first_add = True
            else:
                self._emit(frame, terminated=False, truncated=False)
                self.history.append(frame)
            self.pending = (action, reward)
            if terminal:
                self._emit(self.zero, terminated=True, truncated=False)
                self._episode_ended()
        return self.added

    def _episode_ended(self) -> None:
        self.history, self.pending = None, None
        self.padding = -1 if self.writer_padding is None else self.writer_padding  # -1: unknown, needed
        self.known_start = True

    def _cut(self, slot: int) -> None:
        """Slots resume at ``slot`` after a gap (or at the start): the episode in progress ends here."""
        self.history, self.pending = None, None
        self.known_start = slot == 0
        self.padding = 0
        if slot == 0:  # Dopamine pads before the first episode
            self.padding = -1 if self.writer_padding is None else self.writer_padding

    def _emit(self, next_frame: npt.NDArray[np.uint8], *, terminated: bool, truncated: bool) -> None:
        history = self.history
        assert history is not None and self.pending is not None
        if len(history) < self.stack:
            return  # still collecting the first obs stack of an episode whose start is not in the files
        obs = np.stack(history)
        next_obs = np.concatenate([obs[1:], next_frame[None]])
        action, reward = self.pending
        self.store.add(obs, np.int32(action), np.float32(reward), next_obs, terminated, truncated,
                       fragment=not self.known_start and self.first_add)
        self.first_add = False
        self.added += 1
