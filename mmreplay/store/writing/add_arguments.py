"""The arguments of ``add``: shapes, dtypes, rewards, flags and user fields checked and normalized
before anything is written, and the fast parse of the add a training loop makes at nearly every step.

Messages name the argument, what was expected and what was received. ``TypeError`` is for the wrong
kind of thing (dtype, type), ``ValueError`` for the wrong value or shape. Nothing here writes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import numpy as np
import numpy.typing as npt




class AddArguments(NamedTuple):
    """One ``add`` call, normalized: every field has a leading env axis; frames are C-contiguous.

    ``obs`` and ``next_obs`` have shape (num_envs, k, *frame_shape) with k = 1 when single frames were
    given, or k = stack_size when stacks were (``stacked``). ``envs`` lists the envs to record (all, or
    those ``env_mask`` marks); only their values were checked. ``detached`` (one per env) marks the
    recorded envs whose transition ended its episode with a next_obs stack that is not obs shifted by
    one frame (the reset observation, as CleanRL and SB3 pass it): it is stored whole, as given.
    """

    obs: npt.NDArray[Any]
    action: npt.NDArray[Any]
    reward: npt.NDArray[np.float32]
    next_obs: npt.NDArray[Any]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    stacked: bool
    envs: list[int]
    detached: npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class AddShapes:
    """What ``parse_add`` expects of a store's adds, worked out once per store (``AddShapes.of``).

    ``frame``, ``stack`` and ``action`` are the expected shapes of one env's frame, stack and action,
    with the env axis in front when ``num_envs > 1`` (``env_axis``).
    """

    frame_shape: tuple[int, ...]
    stack_size: int
    num_envs: int
    action_shape: tuple[int, ...]
    action_dtype: np.dtype
    env_axis: tuple[int, ...]
    frame: tuple[int, ...]
    stack: tuple[int, ...]
    action: tuple[int, ...]
    frame_dtype: np.dtype  # little-endian (``parse_frame_dtype``)

    @classmethod
    def of(
        cls,
        *,
        frame_shape: tuple[int, ...],
        stack_size: int,
        num_envs: int,
        action_shape: tuple[int, ...],
        action_dtype: np.dtype,
        frame_dtype: np.dtype = np.dtype(np.uint8),
    ) -> AddShapes:
        env_axis = () if num_envs == 1 else (num_envs,)
        return cls(
            frame_shape, stack_size, num_envs, action_shape, action_dtype, env_axis,
            env_axis + frame_shape, (*env_axis, stack_size, *frame_shape), env_axis + action_shape, frame_dtype,
        )

    def as_envs(self, count: int) -> AddShapes:
        """The same store's adds of ``count`` envs, with the env axis in front even for one (``add_encoded``
        checks a send's steps as the envs of one add)."""
        env_axis = (count,)
        return AddShapes(
            self.frame_shape, self.stack_size, count, self.action_shape, self.action_dtype, env_axis,
            env_axis + self.frame_shape, (*env_axis, self.stack_size, *self.frame_shape),
            env_axis + self.action_shape, self.frame_dtype,
        )


def parse_add(
    obs: object,
    action: object,
    reward: object,
    next_obs: object,
    terminated: object,
    truncated: object,
    env_mask: object,
    shapes: AddShapes,
) -> AddArguments:
    """Check an ``add`` call: the shape and dtype of every argument for every env, then the values of
    the envs it records (``env_mask``). A masked-out env's entries are not transitions (gymnasium's
    next-step autoreset passes its reset observation there, which is no shifted stack, and whatever
    reward and action), so only their shapes and dtypes must be right."""
    obs_array, obs_stacked = _parse_frames(obs, "obs", shapes)
    next_array, next_stacked = _parse_frames(next_obs, "next_obs", shapes)
    if obs_stacked != next_stacked:
        raise ValueError(
            f"obs is {'a stack' if obs_stacked else 'one frame'} but next_obs is "
            f"{'a stack' if next_stacked else 'one frame'}; give both as frames or both as stacks"
        )
    action_array = _parse_action(action, shapes)
    reward_array = _parse_reward(reward, shapes.env_axis)
    terminated_array = _parse_flag(terminated, "terminated", shapes.env_axis)
    truncated_array = _parse_flag(truncated, "truncated", shapes.env_axis)
    envs = parse_env_mask(env_mask, shapes.num_envs)
    # Values, of the recorded envs only.
    detached = np.zeros(shapes.num_envs, np.bool_)
    if obs_stacked and shapes.stack_size > 1:
        for env in envs:
            if next_array[env, :-1].tobytes() != obs_array[env, 1:].tobytes():
                if terminated_array[env] or truncated_array[env]:
                    detached[env] = True  # an episode's last next_obs may be anything: kept as given
                    continue
                where = "" if shapes.num_envs == 1 else f" for env {env}"
                raise ValueError(
                    f"next_obs[:-1] must equal obs[1:] (a frame stack shifted by one frame){where}; "
                    "it differs (only a transition that terminated or truncated may carry another next_obs, "
                    "which is stored as given)"
                )
    if action_array.dtype != shapes.action_dtype:
        action_array = _cast_action(action_array, shapes.action_dtype, envs)
    _check_rewards(reward_array, envs)
    return AddArguments(
        obs_array, action_array, reward_array, next_array, terminated_array, truncated_array, obs_stacked, envs,
        detached,
    )


class SingleFrames(NamedTuple):
    """An add that brings one new frame per env, for ``Writer.add``'s fast path (``parse_single_frames``).

    ``obs`` holds the envs' obs back to back (frames, or stacks when ``stacked``), ``next_obs`` each env's
    new frame (next_obs's newest) as bytes, ``new_frames`` the same frames as one contiguous array;
    ``action`` holds the envs' actions back to back as the store's dtype (little-endian); ``reward`` the
    rewards as float32 values; ``flags`` each env's TERMINATED/TRUNCATED bits.
    """

    obs: bytes
    stacked: bool
    next_obs: list[bytes]
    new_frames: npt.NDArray[Any]
    action: bytes
    reward: list[float]
    flags: list[int]

    def arguments(self, shapes: AddShapes, *, terminated_bit: int, truncated_bit: int) -> AddArguments:
        """The same add as ``parse_add`` gives it, without checking it again: for the general path, where
        the fast path declines an add it parsed (an env starts an episode, or a commit is due first).
        ``terminated_bit`` and ``truncated_bit`` are those ``parse_single_frames`` was given."""
        envs, frame_shape = shapes.num_envs, shapes.frame_shape
        obs = np.frombuffer(self.obs, shapes.frame_dtype).reshape(envs, -1, *frame_shape)
        newest = self.new_frames.reshape(envs, 1, *frame_shape)
        # A stacked next_obs is obs shifted by one frame (parse_single_frames compared them) and its newest.
        next_obs = np.concatenate([obs[:, 1:], newest], axis=1) if self.stacked else newest
        action = np.frombuffer(self.action, shapes.action_dtype.newbyteorder("<")).reshape(envs, *shapes.action_shape)
        return AddArguments(
            obs,
            action.astype(shapes.action_dtype, copy=False),
            np.array(self.reward, np.float32),
            next_obs,
            np.array([bool(flags & terminated_bit) for flags in self.flags]),
            np.array([bool(flags & truncated_bit) for flags in self.flags]),
            self.stacked,
            list(range(envs)),
            np.zeros(envs, np.bool_),
        )


def parse_single_frames(
    shapes: AddShapes,
    obs: object,
    action: object,
    reward: object,
    next_obs: object,
    terminated: object,
    truncated: object,
    *,
    terminated_bit: int,
    truncated_bit: int,
) -> SingleFrames | None:
    """The add that a training loop makes at nearly every step: frames or stacks as arrays of the
    store's frame dtype (a next_obs stack shifted by one frame from obs), with any action, reward and flags that ``parse_add``
    accepts (the caller checks that no env is masked out). None for anything else, valid or not:
    ``parse_add`` then decides, and names what is wrong. Accepts nothing that ``parse_add`` refuses, and
    gives the same values.

    Python ``int``/``float``/``bool`` and numpy scalars of the store's dtypes (what single-env loops pass)
    are checked with a few comparisons; any other kind of number goes through ``parse_add``'s own
    normalizers (``_parse_action``, ``_parse_reward``, ``_parse_flag``), which cost a microsecond or two
    more but give the same values by construction."""
    frames = _new_frames(obs, next_obs, shapes)
    if frames is None:
        return None
    if not shapes.env_axis:
        values = parse_one_env_values(
            shapes, action, reward, terminated, truncated, terminated_bit=terminated_bit, truncated_bit=truncated_bit
        )
        if values is None:
            return None
        return _single_frames((*frames, values[0], [values[1]], [values[2]]))
    actions = _action_bytes(action, shapes)
    if actions is None:
        return None
    rewards = _rewards(reward, shapes.env_axis)
    ended_list = _flags(terminated, "terminated", shapes.env_axis)
    cut_list = _flags(truncated, "truncated", shapes.env_axis)
    if rewards is None or ended_list is None or cut_list is None:
        return None
    flags = [terminated_bit * ended | truncated_bit * cut for ended, cut in zip(ended_list, cut_list)]
    return _single_frames((*frames, actions, rewards, flags))


def parse_one_env_values(
    shapes: AddShapes,
    action: object,
    reward: object,
    terminated: object,
    truncated: object,
    *,
    terminated_bit: int,
    truncated_bit: int,
) -> tuple[bytes, float, int] | None:
    """A one-env store's action, reward and flags as its row stores them: (the action's bytes, the reward
    as a float holding its float32 value, the TERMINATED/TRUNCATED bits), or None where ``parse_add``
    would refuse any of them or normalize it the long way (``parse_single_frames``' rules)."""
    action_bytes = _action_bytes(action, shapes)
    if action_bytes is None:
        return None
    value = _one_reward(reward)
    if value is None:
        return None
    ended = terminated if terminated is True or terminated is False else _one_flag(terminated, "terminated")
    cut = truncated if truncated is True or truncated is False else _one_flag(truncated, "truncated")
    if ended is None or cut is None:
        return None
    return action_bytes, value, terminated_bit * ended | truncated_bit * cut


def _single_frames(fields: tuple) -> SingleFrames:  # type: ignore[type-arg]
    """``SingleFrames(*fields)`` through tuple's own constructor: a NamedTuple's generated ``__new__`` is
    Python code, which costs ~0.5 us of the fast path's ~15 us."""
    return tuple.__new__(SingleFrames, fields)


def frames_form(obs: object, next_obs: object, shapes: AddShapes) -> bool | None:
    """Whether an add's obs and next_obs, numpy arrays of the store's frame dtype and of one shape, are
    stacks (True) or single frames (False); None for anything else (the fast path's parses decline it)."""
    if (
        type(obs) is not np.ndarray
        or type(next_obs) is not np.ndarray
        # numpy's builtin dtypes are singletons: an equal other one (or a big-endian one) goes the long way
        or obs.dtype is not shapes.frame_dtype
        or next_obs.dtype is not shapes.frame_dtype
        or obs.shape != next_obs.shape
    ):
        return None
    if obs.shape == shapes.stack:
        return True
    return False if obs.shape == shapes.frame else None


def _new_frames(
    obs: object, next_obs: object, shapes: AddShapes
) -> tuple[bytes, bool, list[bytes], npt.NDArray[Any]] | None:
    """``parse_single_frames``'s frames: (obs bytes, stacked, each env's new frame, the new frames as one
    contiguous array), or None. Arrays that are not C-contiguous are copied into ones that are, as
    ``parse_add`` copies them."""
    stacked = frames_form(obs, next_obs, shapes)
    if stacked is None:
        return None
    assert isinstance(obs, np.ndarray) and isinstance(next_obs, np.ndarray)
    if not next_obs.flags.c_contiguous:
        next_obs = np.ascontiguousarray(next_obs)
    envs = shapes.num_envs
    if not stacked:
        next_bytes = next_obs.tobytes()
        if envs == 1:
            return obs.tobytes(), False, [next_bytes], next_obs
        # One copy of next_obs, then a slice per env: a third of the cost of bytes() of each env's view.
        size = len(next_bytes) // envs
        return obs.tobytes(), False, [next_bytes[i : i + size] for i in range(0, len(next_bytes), size)], next_obs
    obs_bytes = obs.tobytes()  # C order, contiguous or not
    # next_obs is read in place: only its newest frames are copied.
    next_view = next_obs.data.cast("B")
    size = len(obs_bytes) // envs  # an env's stack
    frame = size // shapes.stack_size
    if envs == 1:  # next_obs[:-1] == obs[1:], compared in place
        if not obs_bytes.startswith(next_view[: size - frame], frame):
            return None
        return obs_bytes, True, [next_view[size - frame :].tobytes()], next_obs[-1]
    for start in range(0, len(obs_bytes), size):
        if not obs_bytes.startswith(next_view[start : start + size - frame], start + frame):
            return None
    new = [next_view[start + size - frame : start + size].tobytes() for start in range(0, len(obs_bytes), size)]
    return obs_bytes, True, new, np.ascontiguousarray(next_obs[:, -1])


def _action_bytes(action: object, shapes: AddShapes) -> bytes | None:
    """Every env's action as the row stores it (the store's dtype, little-endian), or None where
    ``parse_add`` would refuse it. A numpy scalar of the store's dtype or a Python ``int`` for a signed
    integer dtype (as ``np.asarray`` makes an int64 of it, which casts only to signed integers and floats
    with the same kind) is packed directly; any other kind goes through ``parse_add``'s checks."""
    if not shapes.action:  # one env, one number
        if type(action) is shapes.action_dtype.type:
            return cast(np.generic, action).tobytes()
        if type(action) is int:
            bounds = _SIGNED_BOUNDS.get(shapes.action_dtype.type)
            if bounds is not None:
                low, high, size = bounds
                return action.to_bytes(size, "little", signed=True) if low <= action <= high else None
    elif (
        type(action) is np.ndarray
        and action.dtype == shapes.action_dtype
        and action.dtype.isnative
        and action.shape == shapes.action
    ):
        return action.tobytes()
    try:
        array = _parse_action(action, shapes)
        if array.dtype != shapes.action_dtype:
            array = _cast_action(array, shapes.action_dtype, list(range(shapes.num_envs)))
    except (TypeError, ValueError, OverflowError):
        return None
    return array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def _one_reward(reward: object) -> float | None:
    """One env's reward as the float32 value the row stores (a Python float holding it exactly once the
    row casts it), or None where ``parse_add`` would refuse it."""
    if type(reward) is float:
        value = reward
    elif type(reward) in _EXACT_FLOATS:
        value = float(cast(np.floating[Any], reward))
    elif type(reward) is int and -_EXACT_INT <= reward <= _EXACT_INT:
        # Exact as a float64, so the row's float32 cast rounds once, as numpy's int64 -> float32 does.
        value = float(reward)
    else:
        value = math.nan
    if -_FLOAT32_MAX <= value <= _FLOAT32_MAX:  # also refuses nan
        return value
    rewards = _rewards(reward, ())
    return None if rewards is None else rewards[0]


def _rewards(reward: object, env_axis: tuple[int, ...]) -> list[float] | None:
    """Every env's reward, rounded to float32 as ``parse_add`` rounds it, or None where it would refuse them."""
    if type(reward) is np.ndarray and reward.dtype in _FLOAT_DTYPES and reward.shape == env_axis and env_axis:
        rewards: list[float] = reward.tolist()
        if all(-_FLOAT32_MAX <= value <= _FLOAT32_MAX for value in rewards):  # also refuses nan
            return rewards if reward.dtype == np.float32 else reward.astype(np.float32).tolist()
    try:
        rewards = _parse_reward(reward, env_axis).tolist()
    except (TypeError, ValueError, OverflowError):
        return None
    return rewards if all(math.isfinite(value) for value in rewards) else None


def _one_flag(value: object, name: str) -> bool | None:
    """One env's terminated or truncated flag, or None where ``parse_add`` would refuse it."""
    if type(value) is np.bool_:
        return bool(value)
    flags = _flags(value, name, ())
    return None if flags is None else flags[0]


def _flags(value: object, name: str, env_axis: tuple[int, ...]) -> list[bool] | None:
    """Every env's terminated or truncated flag, or None where ``parse_add`` would refuse them."""
    if type(value) is np.ndarray and value.dtype == np.bool_ and value.shape == env_axis and env_axis:
        return value.tolist()  # type: ignore[no-any-return]
    try:
        return _parse_flag(value, name, env_axis).tolist()  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError):
        return None


_EXACT_INT = 2**53  # every int up to this is exact as a float64


_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


_EXACT_FLOATS = frozenset((np.float16, np.float32, np.float64))  # float() of them is exact


# Bounds and width of each signed integer action dtype, by its scalar type (Python ints pack directly).
_SIGNED_BOUNDS = {
    t: (int(np.iinfo(t).min), int(np.iinfo(t).max), np.dtype(t).itemsize) for t in (np.int8, np.int16, np.int32, np.int64)
}


_TRUE = np.ones(1, np.bool_)
_FALSE = np.zeros(1, np.bool_)
_TRUE.flags.writeable = _FALSE.flags.writeable = False
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _expected_env_text(env_axis: tuple[int, ...]) -> str:
    return f"num_envs={env_axis[0]}" if env_axis else "num_envs=1"


def _parse_frames(value: object, name: str, shapes: AddShapes) -> tuple[npt.NDArray[Any], bool]:
    """Frames of the store's dtype; big-endian ones are the same values, converted (never another
    dtype: a float64 obs for a float32 store is refused, as a silent rounding would be a surprise)."""
    array = np.asarray(value)
    if array.dtype != shapes.frame_dtype:
        if array.dtype.newbyteorder("<") != shapes.frame_dtype or array.dtype.byteorder != ">":
            raise TypeError(f"{name} must have dtype {shapes.frame_dtype}; got {array.dtype}")
        array = array.astype(shapes.frame_dtype)
    if array.shape == shapes.frame:
        stacked = False
    elif array.shape == shapes.stack:
        stacked = True
    else:
        raise ValueError(
            f"{name} has shape {array.shape}; expected {shapes.frame} (one frame) or {shapes.stack} "
            f"(a stack of {shapes.stack_size}) for {_expected_env_text(shapes.env_axis)}"
        )
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array.reshape(shapes.num_envs, -1, *shapes.frame_shape), stacked


def _parse_action(value: object, shapes: AddShapes) -> npt.NDArray[Any]:
    """The action's shape and kind; its values are cast by ``_cast_action``."""
    if type(value) is shapes.action_dtype.type and not shapes.action:  # one env's scalar of the very dtype
        return np.array([value])
    array = np.asarray(value)
    if array.shape != shapes.action:
        raise ValueError(
            f"action has shape {array.shape}; expected {shapes.action} for action_shape={shapes.action_shape} "
            f"and {_expected_env_text(shapes.env_axis)}"
        )
    # Any integer kind goes into any integer dtype (a Python int is int64 to numpy, and an unsigned action
    # dtype must take it): ``_cast_action`` then refuses the values that do not fit.
    integers = array.dtype.kind in "iu" and shapes.action_dtype.kind in "iu"
    if array.dtype != shapes.action_dtype and not integers and (
        array.dtype.kind not in "iufb" or not np.can_cast(array.dtype, shapes.action_dtype, casting="same_kind")
    ):
        raise TypeError(f"action has dtype {array.dtype}; expected values castable to {shapes.action_dtype}")
    return array.reshape(shapes.num_envs, *shapes.action_shape)


def _cast_action(array: npt.NDArray[Any], action_dtype: np.dtype, envs: list[int]) -> npt.NDArray[Any]:
    cast = array.astype(action_dtype)
    if not np.can_cast(array.dtype, action_dtype) and not np.array_equal(
        cast[envs], array[envs], equal_nan=action_dtype.kind == "f"
    ):
        raise ValueError(f"action has values out of range for {action_dtype}: {array[envs].ravel()[:8]}")
    return cast


def _parse_reward(value: object, env_axis: tuple[int, ...]) -> npt.NDArray[np.float32]:
    """The reward's shape and kind, as float32 (one per env); its values are checked by ``_check_rewards``."""
    if not env_axis and isinstance(value, (float, np.floating, np.integer)):  # without np.asarray's overhead
        array = np.array(value)
    else:
        array = np.asarray(value)
    if array.shape != env_axis:
        raise ValueError(f"reward has shape {array.shape}; expected {env_axis} for {_expected_env_text(env_axis)}")
    if array.dtype.kind not in "iuf":
        raise TypeError(f"reward must be a real number; got dtype {array.dtype}")
    with np.errstate(over="ignore"):  # beyond float32's range becomes inf, which _check_rewards refuses
        return array.astype(np.float32).reshape(-1)


def _check_rewards(rewards: npt.NDArray[np.float32], envs: list[int]) -> None:
    if len(rewards) == 1:
        if envs and not math.isfinite(rewards[0]):
            raise ValueError(f"reward must be finite; got {rewards[0]}")
    elif envs and not np.isfinite(rewards[envs]).all():
        raise ValueError(f"reward must be finite; got {rewards[envs]} for envs {envs}")


def _parse_flag(value: object, name: str, env_axis: tuple[int, ...]) -> npt.NDArray[np.bool_]:
    if not env_axis and (value is True or value is False or type(value) is np.bool_):
        return _TRUE if value else _FALSE
    array = np.asarray(value)
    if array.shape != env_axis:
        raise ValueError(f"{name} has shape {array.shape}; expected {env_axis} for {_expected_env_text(env_axis)}")
    if array.dtype != np.bool_:
        raise TypeError(f"{name} must be bool; got dtype {array.dtype}")
    return array.reshape(-1)


def parse_env_mask(value: object, num_envs: int) -> list[int]:
    """The envs an ``add`` records: all of them, or those where ``env_mask`` is True."""
    if value is None:
        return list(range(num_envs))
    array = np.asarray(value)
    if array.dtype != np.bool_:
        raise TypeError(f"env_mask must be bool; got dtype {array.dtype}")
    if array.shape != (num_envs,):
        raise ValueError(f"env_mask has shape {array.shape}; expected ({num_envs},) for num_envs={num_envs}")
    return np.flatnonzero(array).tolist()


def records_every_env(env_mask: object, num_envs: int) -> bool:
    """Whether an ``env_mask`` leaves every env in: None, or a bool array of them all True (gymnasium's
    next-step autoreset recipe passes one at every step; it masks an env only the step after its
    episode ended)."""
    return env_mask is None or (
        type(env_mask) is np.ndarray
        and env_mask.dtype == np.bool_
        and env_mask.shape == (num_envs,)
        and bool(env_mask.all())
    )


def parse_fields(
    value: object, specs: tuple[tuple[str, tuple[int, ...], str], ...], shapes: AddShapes, envs: list[int] | None
) -> dict[str, npt.NDArray[Any]]:
    """``add``'s ``fields``: exactly the store's fields, each with the env axis rules of every other
    argument, as arrays (num_envs, *shape) of the field's dtype (native byte order). ``envs``: the envs
    the add records (None: all), whose values are checked (integers in range, floats not overflowing)."""
    names = [name for name, _, _ in specs]
    if value is None:
        if specs:
            raise ValueError(f"fields is missing; this store's adds take fields {names}")
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"fields must be a dict of name -> array; got {type(value).__name__}")
    missing = [name for name in names if name not in value]
    extra = [name for name in value if name not in names]
    if missing or extra:
        raise ValueError(f"fields has keys {list(value)}; expected {names} (missing {missing}, unknown {extra})")
    recorded = list(range(shapes.num_envs)) if envs is None else envs
    arrays: dict[str, npt.NDArray[Any]] = {}
    for name, shape, dtype_text in specs:
        dtype = np.dtype(dtype_text).newbyteorder("=")
        array = np.asarray(value[name])
        expected = shapes.env_axis + shape
        if array.shape != expected:
            raise ValueError(
                f"fields[{name!r}] has shape {array.shape}; expected {expected} for shape {shape} and "
                f"{_expected_env_text(shapes.env_axis)}"
            )
        arrays[name] = _cast_field(name, array.reshape(shapes.num_envs, *shape), dtype, recorded)
    return arrays


def _cast_field(name: str, array: npt.NDArray[Any], dtype: np.dtype, envs: list[int]) -> npt.NDArray[Any]:
    """A field's values (num_envs, *shape) as ``dtype``: bool from bool only; integers that fit; floats
    from numbers, refusing finite values that overflow to infinity. Values of the recorded ``envs`` only."""
    if array.dtype == dtype:
        return array
    kind_ok = array.dtype.kind in "biuf" and (
        array.dtype.kind == "b" if dtype.kind == "b" else np.can_cast(array.dtype, dtype, casting="same_kind")
    )
    if not kind_ok:
        raise TypeError(f"fields[{name!r}] has dtype {array.dtype}; expected values castable to {dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        cast = array.astype(dtype)
    given, stored = array[envs], cast[envs]
    if dtype.kind == "f":
        bad = np.isfinite(given) & ~np.isfinite(stored)
    else:
        bad = np.zeros(1, np.bool_) if np.can_cast(array.dtype, dtype) else stored != given
    if np.any(bad):
        raise ValueError(f"fields[{name!r}] has values out of range for {dtype}: {given[bad][:8]}")
    return cast
