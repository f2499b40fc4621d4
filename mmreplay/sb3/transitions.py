"""SB3's ``add`` arguments as the store's: ``done`` split into terminated and truncated by the infos'
``TimeLimit.truncated``, actions and rewards cast as SB3's buffers cast what they store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Row:
    """One add's transitions, one per env, in the store's terms."""

    action: npt.NDArray[Any]  # (n_envs, action_dim), the stored action dtype
    reward: npt.NDArray[np.float32]  # (n_envs,)
    done: npt.NDArray[np.bool_]  # SB3's done: the episode ended
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]


def parse_row(
    action: npt.ArrayLike,
    reward: npt.ArrayLike,
    done: npt.ArrayLike,
    infos: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    *,
    n_envs: int,
    action_dim: int,
    action_dtype: np.dtype[Any],
    handle_timeout_termination: bool,
) -> Row:
    """A done env whose ``TimeLimit.truncated`` is true was truncated, any other done env terminated;
    with ``handle_timeout_termination`` an env marked ``TimeLimit.truncated`` but not done was truncated
    too (SB3's buffer records its timeout, and its n-step windows stop there)."""
    ended = np.asarray(done).reshape(n_envs).astype(bool)
    truncated = (ended | handle_timeout_termination) & timeouts_of(
        infos, n_envs=n_envs, handle_timeout_termination=handle_timeout_termination
    )
    return Row(
        # Cast as SB3's buffer casts when it stores (float64 actions of a float64 space to float32, GH#1145).
        action=np.asarray(action).reshape((n_envs, action_dim)).astype(action_dtype),
        reward=np.asarray(reward, dtype=np.float32).reshape(n_envs),
        done=ended,
        terminated=ended & ~truncated,
        truncated=truncated,
    )


def timeouts_of(
    infos: Sequence[Mapping[str, Any]] | Mapping[str, Any], *, n_envs: int, handle_timeout_termination: bool
) -> npt.NDArray[np.bool_]:
    """Which envs SB3's ``TimeLimit.truncated`` marks. Gymnasium's dict of arrays (CleanRL passes it
    with ``handle_timeout_termination=False``) carries no such key: no timeouts."""
    if isinstance(infos, Mapping):
        if handle_timeout_termination:
            raise TypeError(
                "infos must be a list of one dict per env (SB3's VecEnv infos) when "
                "handle_timeout_termination=True; got a dict"
            )
        return np.zeros(n_envs, dtype=bool)
    if len(infos) != n_envs:
        raise ValueError(f"infos has {len(infos)} entries; expected {n_envs} for n_envs={n_envs}")
    return np.array([bool(info.get("TimeLimit.truncated", False)) for info in infos], dtype=bool)
