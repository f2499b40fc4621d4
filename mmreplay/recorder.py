"""Gymnasium wrappers that record every step into a ``ReplayStore``: for collecting offline data sets
from any policy, or for feeding a replay store from an existing training loop.

``RecordEpisodes`` wraps one env; ``RecordVectorEpisodes`` wraps a vector env in any autoreset mode.
Both record the *true* next_obs of every transition: the final observation when an episode ended
(terminated or truncated), never the reset one. The caller owns the store: the wrappers add to it and
``close()`` commits it (``flush``), but only the caller closes it. Gymnasium is imported by this
module only.

A store with user fields (``ReplayStore.create(fields=...)``) takes them from ``fields_from_info``, a
function from an ``info`` dict to the fields (for a vector env: gymnasium's vector info, to fields with
the env axis). A transition's fields come from the info returned *with its obs* (by ``reset``, or by the
step before), as an action mask or ``lives`` describe the observation the action was chosen on; this
is also how Minari's ``infos`` line up with ``observations``, and how the Minari export writes them.

Both gymnasium 1.x and 0.29 work. Gymnasium 0.29 (which CleanRL pins) names the vector wrapper base
``VectorEnvWrapper`` and has no ``AutoresetMode``: its vector envs always reset in the same step and
put the final observation in ``info["final_observation"]`` (not ``"final_obs"``); its ``FrameStack``
returns ``LazyFrames``, which are converted to arrays here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, SupportsFloat

from mmreplay.extras import require

require("mmreplay.recorder", extra="recorder", modules=("gymnasium",))

import gymnasium as gym  # noqa: E402  (after the check that names the extra)
import gymnasium.vector  # noqa: E402
import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402
from gymnasium.vector import VectorEnv  # noqa: E402

from mmreplay.store import ReplayStore  # noqa: E402

FieldsFromInfo = Callable[[dict[str, Any]], dict[str, npt.ArrayLike]]

if TYPE_CHECKING:
    from gymnasium.vector import AutoresetMode, VectorWrapper
else:  # gymnasium 0.29 has no VectorWrapper and no AutoresetMode
    VectorWrapper = getattr(gymnasium.vector, "VectorWrapper", None) or gymnasium.vector.VectorEnvWrapper

# The info keys of a same-step autoreset: (final observations, which envs ended), gymnasium 1.x then 0.29.
FINAL_OBS_KEYS = (("final_obs", "_final_obs"), ("final_observation", "_final_observation"))


class RecordEpisodes(gym.Wrapper[Any, Any, Any, Any]):
    """Records each ``step`` of one env as a transition (obs, action, reward, next_obs, terminated,
    truncated) in ``store``; ``reset`` starts a new episode. Observations may be single frames or
    stacks (``FrameStackObservation``), matching the store's ``frame_shape`` and ``stack_size``."""

    def __init__(
        self, env: gym.Env[Any, Any], store: ReplayStore, *, fields_from_info: FieldsFromInfo | None = None
    ) -> None:
        if store.num_envs != 1:
            raise ValueError(f"store has num_envs={store.num_envs}; expected 1 for a single env (use RecordVectorEpisodes)")
        _check_observation_space(env.observation_space, store)
        _check_fields_from_info(fields_from_info, store)
        super().__init__(env)
        self.store = store
        self.fields_from_info = fields_from_info
        self._obs: npt.NDArray[np.generic] | None = None
        self._info: dict[str, Any] = {}  # the info returned with _obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._obs, self._info = np.asarray(obs), info
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._obs is None:
            raise RuntimeError("cannot step: call reset() first, so that the first transition has an obs")
        next_obs, reward, terminated, truncated, info = self.env.step(action)
        fields = None if self.fields_from_info is None else self.fields_from_info(self._info)
        next_array = np.asarray(next_obs)  # gymnasium 0.29's FrameStack returns LazyFrames
        self.store.add(self._obs, action, float(reward), next_array, bool(terminated), bool(truncated), fields=fields)
        self._obs, self._info = next_array, info
        return next_obs, reward, terminated, truncated, info

    def close(self) -> None:
        self.store.flush()
        super().close()


class RecordVectorEpisodes(VectorWrapper):
    """Records each ``step`` of a gymnasium vector env, one transition per env, in ``store``
    (created with ``num_envs`` equal to the vector env's).

    The final observation is found as the env's autoreset mode puts it:

    - next-step (gymnasium's default): the ending step's next_obs is the final observation; the
      following step only resets that env, so its entry is not recorded (``env_mask``);
    - same-step: the ending step returns the reset observation, and the final one is in
      ``info["final_obs"]`` for the envs marked by ``info["_final_obs"]`` (``info["final_observation"]``
      and ``info["_final_observation"]`` in gymnasium 0.29, whose vector envs always work so);
    - disabled: the ending step's next_obs is the final observation and the caller resets.

    ``autoreset_mode`` is the wrapped env's ``AutoresetMode``, or None on gymnasium 0.29, which has
    no such setting.
    """

    def __init__(
        self, env: VectorEnv[Any, Any, Any], store: ReplayStore, *, fields_from_info: FieldsFromInfo | None = None
    ) -> None:
        if store.num_envs != env.num_envs:
            raise ValueError(f"store has num_envs={store.num_envs}; expected {env.num_envs} like the vector env")
        _check_observation_space(env.single_observation_space, store)
        _check_fields_from_info(fields_from_info, store)
        super().__init__(env)
        self.store = store
        self.fields_from_info = fields_from_info
        self._info: dict[str, Any] = {}  # the vector info returned with _obs
        self.autoreset_mode: AutoresetMode | None = _autoreset_mode(env)
        self._next_step = self.autoreset_mode is not None and self.autoreset_mode is type(self.autoreset_mode).NEXT_STEP
        self._obs: npt.NDArray[np.generic] | None = None
        self._resetting = np.zeros(env.num_envs, dtype=bool)  # next-step mode: envs whose next step resets

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        # gymnasium types VectorEnv.reset's seed as an int, but its vector envs also take one seed per env.
        obs, info = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]
        mask = None if options is None else options.get("reset_mask")
        self._resetting[slice(None) if mask is None else np.asarray(mask, dtype=bool)] = False
        self._obs, self._info = obs, info
        return obs, info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        if self._obs is None:
            raise RuntimeError("cannot step: call reset() first, so that the first transitions have an obs")
        next_obs, reward, terminated, truncated, info = self.env.step(actions)
        obs = self._obs
        fields = None if self.fields_from_info is None else self.fields_from_info(self._info)
        if self._next_step:
            recorded = ~self._resetting
            self.store.add(obs, actions, reward, next_obs, terminated, truncated, env_mask=recorded, fields=fields)
            self._resetting = np.asarray(terminated | truncated, dtype=bool)
        else:
            self.store.add(obs, actions, reward, _final_obs(next_obs, info), terminated, truncated, fields=fields)
        self._obs, self._info = next_obs, info
        return next_obs, reward, terminated, truncated, info

    def close(self, **kwargs: Any) -> None:
        self.store.flush()
        super().close(**kwargs)

    def __del__(self) -> None:
        # Gymnasium 0.29's VectorEnvWrapper.__del__ reads self.env, which a wrapper refused by
        # __init__ never set (it recursed in __getattr__); gymnasium 1.x has no such method.
        if "env" in vars(self):
            getattr(super(), "__del__", lambda: None)()


def _autoreset_mode(env: VectorEnv[Any, Any, Any]) -> AutoresetMode | None:
    """The env's autoreset mode (gymnasium 1.0, before the setting existed, resets in the next step);
    None on gymnasium 0.29."""
    modes = getattr(gymnasium.vector, "AutoresetMode", None)
    if modes is None:
        return None
    mode: AutoresetMode = modes(env.metadata.get("autoreset_mode", modes.NEXT_STEP))
    return mode


def _final_obs(next_obs: npt.NDArray[np.generic], info: dict[str, Any]) -> npt.NDArray[np.generic]:
    """next_obs with each ended env's entry replaced by its final observation (same-step autoreset)."""
    for final_key, ended_key in FINAL_OBS_KEYS:
        ended = info.get(ended_key)
        if ended is not None and np.any(ended):
            real = np.array(next_obs)
            for env in np.flatnonzero(ended):
                real[env] = np.asarray(info[final_key][env])
            return real
    return next_obs


def _check_fields_from_info(fields_from_info: object, store: ReplayStore) -> None:
    """A store with user fields needs the function that makes them; one without takes none."""
    if fields_from_info is not None and not callable(fields_from_info):
        raise TypeError(f"fields_from_info must be a function from info to fields; got {type(fields_from_info).__name__}")
    if store.fields and fields_from_info is None:
        raise ValueError(f"store has fields {list(store.fields)}; pass fields_from_info, a function from info to them")
    if fields_from_info is not None and not store.fields:
        raise ValueError("fields_from_info was given, but the store has no fields (create it with fields=...)")


def _check_observation_space(space: gym.Space[Any], store: ReplayStore) -> None:
    frame, stack = store.frame_shape, (store.stack_size, *store.frame_shape)
    shape = getattr(space, "shape", None)
    if shape not in (frame, stack):
        raise ValueError(
            f"observation_space has shape {shape}; expected {frame} (one frame) or {stack} (a stack) for the store"
        )
    if getattr(space, "dtype", None) != store.frame_dtype:
        raise TypeError(
            f"observation_space must have the store's frame dtype {store.frame_dtype}; got {getattr(space, 'dtype', None)}"
        )
