"""Windows of consecutive transitions of one env and episode, for n-step returns and sequences.

Pure index arithmetic over the transition table's forward links; no pixels. A window starts at a
sampled step and follows each transition's link to the env's next transition while the episode goes on:
it stops after a transition that terminated or truncated, and before a transition that is not stored
yet. A link is trusted only after checking it (the target exists, belongs to the same env and does not
start an episode), because a crash can leave a link to a step that was never committed and later reused.
A link that passes those checks must also chain frames: the target's obs ends with the frame this
transition's next_obs ends with (found one frame link back from the target's next_obs frame, or
``stack_size`` links back when the target is detached: see ``stacking``). The link is outside the row
checksum (it is written when the next transition arrives), so this is what catches a corrupt one: it is
an error, never a shorter window.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from mmreplay.rows.stacking import Stacks
from mmreplay.rows.transitions import (
    EPISODE_START,
    FRAGMENT_START,
    TERMINATED,
    TRUNCATED,
    RowChecksumError,
    detached_rows,
    next_frame_steps,
    row_envs,
    row_flags,
    row_next_deltas,
)

RowsOf = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.void]]


def follow_episodes(
    steps: npt.NDArray[np.int64],
    length: int,
    *,
    rows_of: RowsOf,
    newest_exclusive: int,
    stacks: Stacks | None = None,
    stack_size: int = 1,
    table_path: object = "transitions.tbl",
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Steps (B, length) of each window and a mask (B, length): False (step 0) past the window's end.

    ``stacks`` (stacks of ``stack_size`` frames through the frame table's episode links) enables the
    frame-chain check of each link.
    """
    window = np.zeros((len(steps), length), np.int64)
    mask = np.zeros((len(steps), length), np.bool_)
    window[:, 0] = steps
    mask[:, 0] = True
    current = steps.copy()
    alive = np.ones(len(steps), np.bool_)
    rows = rows_of(current)
    for position in range(1, length):
        alive &= (row_flags(rows) & (TERMINATED | TRUNCATED)) == 0
        delta = row_next_deltas(rows)
        candidate = current + delta
        alive &= (delta > 0) & (candidate < newest_exclusive)
        if not alive.any():
            break
        linked = rows_of(np.where(alive, candidate, current))
        alive &= (row_envs(linked) == row_envs(rows)) & ((row_flags(linked) & (EPISODE_START | FRAGMENT_START)) == 0)
        if stacks is not None and alive.any():
            _check_frame_chain(
                current[alive], candidate[alive], rows[alive], linked[alive], stacks, stack_size, table_path
            )
        current = np.where(alive, candidate, current)
        window[:, position] = np.where(alive, candidate, 0)
        mask[:, position] = alive
        rows = linked  # the rows of ``current`` wherever a window is still alive; the rest are never read
    return window, mask


def _check_frame_chain(
    steps: npt.NDArray[np.int64],
    linked_steps: npt.NDArray[np.int64],
    rows: npt.NDArray[np.void],
    linked: npt.NDArray[np.void],
    stacks: Stacks,
    stack_size: int,
    table_path: object,
) -> None:
    linked_next = next_frame_steps(linked, linked_steps)
    linked_obs_newest = stacks(linked_next, 1)[:, 0]
    detached = detached_rows(linked)
    if detached.any():
        linked_obs_newest[detached] = stacks(linked_next[detached], stack_size)[:, 0]
    broken = linked_obs_newest != next_frame_steps(rows, steps)
    if broken.any():
        step = int(steps[np.argmax(broken)])
        raise RowChecksumError(
            f"{table_path}: the episode link of transition {step} points to a transition that does not "
            "continue it (corrupt link)",
            step=step,
        )


def n_step_returns(
    rewards: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_], gamma: float
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """sum over k < m of gamma^k r_k for each window, and m (the number of steps each window holds)."""
    discounts = gamma ** np.arange(rewards.shape[1], dtype=np.float64)
    returns = (np.where(mask, rewards, 0.0) * discounts).sum(axis=1)
    return returns.astype(np.float32), mask.sum(axis=1)
