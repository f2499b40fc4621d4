"""Replaying an HDF5 dataset's episodes into a store in the order of their original steps.

Each episode is read in blocks of ``block`` transitions by a ``Cursor``; a heap merges the cursors by
step, so the store receives every env's transitions in the order they were first added. Each
episode's first obs arrives as its whole stack and the rest frame by frame (a final stack whole), so
the store rebuilds stacks exactly as they were (``copying.feeder``: consecutive transitions of increasing
envs share one vector ``add``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

import numpy as np

from mmreplay.hdf5.datasets import FIELD_PREFIX, Source


class Cursor:
    """One episode being read in blocks: its transition at ``position`` as obs/next_obs stacks."""

    def __init__(self, source: Source, episode: int, block: int) -> None:
        self.source, self.episode, self.block = source, episode, block
        self.length = int(source.lengths[episode])
        self.position = 0
        self._load()

    def _load(self) -> None:
        start, stop = self.position, min(self.length, self.position + self.block)
        self._start = start
        stack = self.source.stack_size
        final = stack - 1 if stop == self.length and self.source.final_stacks[self.episode] else 0
        self._frames = self.source.frames(self.episode, start, stop + stack + final)
        self._columns = self.source.columns(self.episode, start, stop)

    @property
    def step(self) -> int:
        return int(self._columns["step"][self.position - self._start])

    def transition(self) -> tuple[Any, ...]:
        i, stack = self.position - self._start, self.source.stack_size
        c = self._columns
        # A final stack follows the last obs whole; any other next_obs is the obs shifted by one frame.
        final = self.position == self.length - 1 and self.source.final_stacks[self.episode]
        next_obs = self._frames[i + stack : i + 2 * stack] if final else self._frames[i + 1 : i + 1 + stack]
        fields = {name: c[FIELD_PREFIX + name][i] for name in self.source.fields}
        # The first transition of a fragment (an episode exported without its start) starts one again.
        fragment = self.position == 0 and not self.source.complete[self.episode]
        return (int(self.source.envs[self.episode]), self._frames[i : i + stack], c["action"][i], c["reward"][i],
                next_obs, bool(c["terminated"][i]), bool(c["truncated"][i]), fields, fragment)

    def advance(self) -> bool:
        """Move to the next transition; False at the episode's end."""
        self.position += 1
        if self.position >= self.length:
            return False
        if self.position - self._start >= len(self._columns["step"]):
            self._load()
        return True


def merged(source: Source, block: int) -> Iterator[tuple[Any, ...]]:
    """Every transition of every episode, in the order of their original steps."""
    order = np.argsort(source.first_steps, kind="stable")
    heap: list[tuple[int, int, Cursor]] = []
    admitted = 0
    while heap or admitted < len(order):
        if admitted < len(order) and (not heap or source.first_steps[order[admitted]] < heap[0][0]):
            episode = int(order[admitted])
            admitted += 1
            if source.lengths[episode] > 0:
                cursor = Cursor(source, episode, block)
                heapq.heappush(heap, (cursor.step, episode, cursor))
            continue
        _, episode, cursor = heapq.heappop(heap)
        yield cursor.transition()
        if cursor.advance():
            heapq.heappush(heap, (cursor.step, episode, cursor))
