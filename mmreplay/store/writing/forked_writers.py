"""The error of a writer's call in a forked child of the process that opened it."""

from __future__ import annotations

import os

from mmreplay.errors import ClosedStoreError


def fork_error(path: str, pid: int, operation: str) -> ClosedStoreError:
    """The error of ``operation`` on the writer of the store at ``path``, opened by process ``pid``, in a fork of it."""
    return ClosedStoreError(
        f"cannot {operation}: the store at {path!r} was opened for writing by process {pid}, and this "
        f"process ({os.getpid()}) is a fork of it; a writer belongs to the process that opened it, so this "
        "copy was closed without writing anything: open the store in this process instead "
        f"(ReplayStore.open({path!r}, 'r') to read, or 'r+' once the other process has closed it)"
    )
