"""What ``ReplayStore`` asks of its one collaborator, chosen when the store opens: a ``Writer`` (mode
``"r+"``: adds, commits, the writer lock) or a ``Follower`` (mode ``"r"``: following the writer's commits,
and the retry when the writer overtook a read).

The façade reads through the collaborator's ``files`` and asks it only what the mode decides: how many
transitions there are, whether to follow a newer commit first, how to run a read, and every write (a
follower refuses them). Calls go one way: a collaborator never calls back into the façade.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

import numpy.typing as npt

from mmreplay.disk import header
from mmreplay.frames.wire import EncodedFrames
from mmreplay.store.writing.autocommit import Committable
from mmreplay.store.reading.mapped_files import MappedFiles

T = TypeVar("T")


class Role(Protocol):
    """The part of an open store that its mode decides (see the module docstring)."""

    @property
    def mode(self) -> str:
        """``"r+"`` for a writer, ``"r"`` for a follower."""

    @property
    def sees_frames_move(self) -> bool:
        """Whether the frames it reads may be replaced under it (a follower behind the writer)."""

    @property
    def files(self) -> MappedFiles: ...

    @property
    def committed(self) -> header.Commit:
        """The commit it holds: the writer's last, or the newest the follower followed."""

    @property
    def transitions_added(self) -> int: ...

    def follow(self) -> None:
        """Pick up a newer commit, if the header changed (a writer's is the newest: nothing to do)."""

    def refresh(self) -> bool:
        """``ReplayStore.refresh``: follow the header now; whether the store changed."""

    def consistent(self, read: Callable[[], T]) -> T:
        """Run ``read``, retried after a refresh where a writer overtook it."""

    def open_envs(self) -> set[int]:
        """The envs whose episode is in progress."""

    def check_writable(self, operation: str) -> None:
        """Raise ``ClosedStoreError`` or ``ReadOnlyStoreError`` for ``operation`` where it cannot write."""

    def add(
        self,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        terminated: npt.ArrayLike,
        truncated: npt.ArrayLike,
        *,
        env_mask: npt.ArrayLike | None,
        fields: dict[str, npt.ArrayLike] | None,
        fragment: bool,
    ) -> None: ...

    def add_encoded(
        self,
        frames: EncodedFrames,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        terminated: npt.ArrayLike,
        truncated: npt.ArrayLike,
        *,
        env_index: int,
        fields: dict[str, npt.ArrayLike] | None = None,
    ) -> None: ...

    def update_priorities(self, index: npt.ArrayLike, priority: npt.ArrayLike) -> None: ...

    def flush(self) -> None:
        """Commit what was added (a follower has nothing to commit)."""

    def cleared(self) -> Role:
        """The collaborator of the same store emptied (``ReplayStore.clear``); this one is then closed."""

    def close(self) -> None:
        """Commit what a writer added, then release the files (and the writer lock)."""

    def forked(self) -> None:
        """This process is a fork of the one that opened the store: a writer's copy is closed without
        writing anything; a follower goes on reading, under a lock of its own."""

    def close_at_exit(self, store: Committable) -> None:
        """Have ``store`` (the façade over this collaborator) closed at a normal interpreter exit where
        closing it then commits (a writer's); the collaborator never calls it."""
