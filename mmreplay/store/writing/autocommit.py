"""When a writer commits by itself: every ``commit_every`` transitions, every ``commit_interval_s``
seconds, and once more when the store is dropped or the interpreter exits.

Training scripts rarely call ``flush()`` or ``close()`` (CleanRL never closes its buffer); without these
commits a crash, or a plain exit, would keep nothing. A commit fsyncs what was added since the last one
and replaces the header: at the default interval its cost does not show in add throughput (see the
README), and a crash loses at most the adds of the last interval.
"""

from __future__ import annotations

import atexit
import math
import time
import weakref
from typing import Protocol

from mmreplay.validation import parse_number, parse_positive_int


class CommitSchedule:
    """Decides, after each add, whether the writer commits now (``due``); told of every commit (``committed``).

    The interval is measured from the last commit, so a crash loses at most the transitions added
    within ``commit_interval_s`` seconds (or the last ``commit_every``), plus none once the store is
    closed, dropped or the interpreter exits normally.
    """

    def __init__(self, *, commit_every: int | None, commit_interval_s: float | None) -> None:
        self.every = None if commit_every is None else parse_positive_int(commit_every, "commit_every")
        if commit_interval_s is None:
            self.interval = math.inf
        else:
            self.interval = parse_number(commit_interval_s, "commit_interval_s", low=0.0)
            if self.interval == 0.0:
                raise ValueError("commit_interval_s must be > 0 (None disables commits by time); got 0.0")
        self._due_step = math.inf
        self._due_time = math.inf

    def committed(self, transitions_added: int) -> None:
        """A commit covered every transition up to ``transitions_added``: start counting again."""
        self._due_step = math.inf if self.every is None else transitions_added + self.every
        self._due_time = time.monotonic() + self.interval

    def steps_until_due(self, transitions_added: int) -> float:
        """How many more transitions make a commit due by ``commit_every`` (inf without it)."""
        return self._due_step - transitions_added

    def due(self, transitions_added: int) -> bool:
        """Whether the transitions added so far should be committed now (a comparison and a clock read)."""
        return transitions_added >= self._due_step or time.monotonic() >= self._due_time


class Committable(Protocol):
    """A writer that commits on ``close``: a store open with mode ``"r+"``."""

    def close(self) -> None: ...


# The writers open in this process, committed and closed at a normal interpreter exit (atexit runs
# before modules are torn down; a garbage-collected store commits in its own ``__del__``).
_open_writers: weakref.WeakSet[Committable] = weakref.WeakSet()


def close_at_exit(store: Committable) -> None:
    """Have ``store`` committed and closed when the interpreter exits normally, if it is still open then."""
    _open_writers.add(store)


def forget(store: Committable) -> None:
    """``store`` was closed: nothing to do for it at exit."""
    _open_writers.discard(store)


@atexit.register
def _close_open_writers() -> None:
    for store in list(_open_writers):
        try:
            store.close()
        except Exception as error:  # noqa: BLE001 - at exit, report and go on with the other stores
            import sys

            print(f"mmreplay: could not commit {store!r} at exit: {error}", file=sys.stderr)
