"""Hypothesis strategies and input builders shared by the store's tests.

Frames encode their own number: every pixel holds ``n % 256`` except the first, which holds
``n // 256 % 256``, so a mismatch printed by a failing test says which frame was given back. Frames of
other dtypes (``FRAME_DTYPES``) say it their own way (``numbered_frame``); float frames also carry a NaN
whose payload is the number, an infinity and a negative zero, which must come back bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st
from reference import ReferenceStore

FRAME_SHAPES = [(3, 4), (2, 2, 3), (4,), (1,)]  # images, and vectors (CartPole's state is (4,))
FRAME_DTYPES = [np.uint8, np.uint8, np.float32, np.float16, np.int16, np.bool_]  # uint8 drawn most
FIELD_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.uint16, np.int64, np.bool_]
FIELD_SHAPES = [(), (1,), (3,), (2, 5), (18,)]
ACTION_SPECS = [((), np.int64), ((2,), np.float32), ((), np.uint8)]


def frame(value: int, shape: tuple[int, ...] = (3, 4)) -> np.ndarray:
    """A frame every pixel of which holds ``value`` (named tests number frames by their value)."""
    return np.full(shape, value, dtype=np.uint8)


def stack(*values: int, shape: tuple[int, ...] = (3, 4)) -> np.ndarray:
    """A stack of ``frame(v)`` for each value, oldest first."""
    return np.array([frame(v, shape) for v in values], dtype=np.uint8)


def numbered_frame(frame_shape: tuple[int, ...], n: int, dtype: Any = np.uint8) -> np.ndarray:
    """A frame whose pixels say it is frame ``n``.

    uint8: every pixel ``n % 256``, the first ``n // 256 % 256``. bool: pixel i is bit i of n. int16:
    every pixel n, the first -n. float: every pixel n + 0.5, the first a quiet NaN whose payload is n,
    the last +inf, -inf or -0.0 by n % 3 (frames of one pixel: the NaN alone).
    """
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        frame = np.full(frame_shape, n % 256, dtype=np.uint8)
        frame.flat[0] = (n // 256) % 256
        return frame
    if dtype == np.bool_:
        bits = (n >> np.arange(int(np.prod(frame_shape)))) & 1
        return bits.astype(np.bool_).reshape(frame_shape)
    if dtype.kind in "iu":
        frame = np.full(frame_shape, n % 30000, dtype=dtype)
        frame.flat[0] = -(n % 30000) if dtype.kind == "i" else n // 30000
        return frame
    frame = np.full(frame_shape, n + 0.5, dtype=dtype)
    bits = {2: (np.uint16, 0x7E00, 0x1FF), 4: (np.uint32, 0x7FC00000, 0x3FFFFF)}[dtype.itemsize]
    frame.reshape(-1).view(bits[0])[0] = bits[1] | (n & bits[2])  # NaN, payload n
    if frame.size > 1:
        frame.flat[-1] = (np.inf, -np.inf, -0.0)[n % 3]
    return frame


class FrameSource:
    """Hands out frames numbered 1, 2, 3, ... (frame 0 would equal an all-zero frame)."""

    def __init__(self, frame_shape: tuple[int, ...], frame_dtype: Any = np.uint8) -> None:
        self.frame_shape = tuple(frame_shape)
        self.frame_dtype = np.dtype(frame_dtype)
        self.count = 0

    @classmethod
    def of(cls, config: dict[str, Any]) -> FrameSource:
        """Frames for a store made with ``config`` (``store_configs``'s, or ``ReplayStore.create``'s)."""
        return cls(config["frame_shape"], config.get("frame_dtype", np.uint8))

    def frame(self) -> np.ndarray:
        self.count += 1
        return numbered_frame(self.frame_shape, self.count, self.frame_dtype)

    def stack(self, stack_size: int) -> np.ndarray:
        return np.array([self.frame() for _ in range(stack_size)], dtype=self.frame_dtype)


@st.composite
def field_specs(draw: Any) -> dict[str, tuple[tuple[int, ...], Any]]:
    """One to three user fields of random shapes and dtypes."""
    count = draw(st.integers(1, 3))
    return {f"f{i}": (draw(st.sampled_from(FIELD_SHAPES)), draw(st.sampled_from(FIELD_DTYPES))) for i in range(count)}


def field_values(specs: dict[str, tuple[tuple[int, ...], Any]], lead: tuple[int, ...]) -> st.SearchStrategy[dict]:
    """Values of every field for one add: any bits of the field's dtype (NaN payloads, infinities, -0.0)."""
    from hypothesis.extra.numpy import arrays

    return st.fixed_dictionaries({name: arrays(np.dtype(dtype), (*lead, *shape)) for name, (shape, dtype) in specs.items()})


@st.composite
def store_configs(draw: Any, with_fields: bool = False) -> dict[str, Any]:
    """Small store configurations: every boundary case is a few transitions away."""
    num_envs = draw(st.integers(1, 3))
    capacity = draw(st.integers(num_envs, 12))
    stack_size = draw(st.integers(1, 4))
    frame_shape = draw(st.sampled_from(FRAME_SHAPES))
    frame_dtype = draw(st.sampled_from(FRAME_DTYPES))
    action_shape, action_dtype = draw(st.sampled_from(ACTION_SPECS))
    return dict(
        frame_shape=frame_shape,
        frame_dtype=frame_dtype,
        capacity=capacity,
        stack_size=stack_size,
        num_envs=num_envs,
        action_shape=action_shape,
        action_dtype=action_dtype,
        **({"fields": draw(field_specs())} if with_fields else {}),
    )


def actions(action_shape: tuple[int, ...], action_dtype: Any) -> st.SearchStrategy[np.ndarray]:
    dtype = np.dtype(action_dtype)
    if dtype.kind == "f":
        elements = st.floats(-1e6, 1e6, allow_nan=False, width=32)
    else:
        info = np.iinfo(dtype)
        elements = st.integers(max(int(info.min), -1000), min(int(info.max), 1000))
    return st.lists(elements, min_size=int(np.prod(action_shape)), max_size=int(np.prod(action_shape))).map(
        lambda xs: np.array(xs, dtype=dtype).reshape(action_shape)
    )


rewards = st.floats(allow_nan=False, allow_infinity=False, width=32)

# (terminated, truncated): mostly neither, so episodes run for a few transitions.
endings = st.sampled_from(
    [(False, False)] * 5 + [(True, False), (False, True), (True, True)]
)

# How an env's obs relates to its previous next_obs in one add.
#   continue: obs equals the previous next_obs (continues the episode unless it ended)
#   new:      fresh frames (a new episode, cut without a flag if the previous had not ended)
#   near:     a stack whose newest frame equals the previous next_obs's newest, older frames differ
#   repeat:   continue, with next_obs's newest frame equal to obs's newest (a static screen)
RELATIONS = ["continue", "new", "near", "repeat"]

# What a stacked next_obs is when its transition terminated or truncated (any stack is allowed there):
#   shifted: obs shifted by one frame, as always
#   reset:   a reset observation: one new frame repeated (CleanRL's and SB3's next_obs at termination)
#   fresh:   a stack of new frames
#   obs:     the obs stack itself
FINAL_STACKS = ["shifted", "shifted", "reset", "fresh", "obs"]


@dataclass
class AddArgs:
    obs: np.ndarray
    action: Any
    reward: Any
    next_obs: np.ndarray
    terminated: Any
    truncated: Any
    fields: dict[str, np.ndarray] | None = None  # user fields, for a store that has them

    def as_tuple(self) -> tuple[Any, ...]:
        return (self.obs, self.action, self.reward, self.next_obs, self.terminated, self.truncated)

    def keywords(self) -> dict[str, Any]:
        """``add``'s keyword arguments: the user fields, if any."""
        return {} if self.fields is None else {"fields": self.fields}


def one_env_arguments(data: Any, ref: ReferenceStore, frames: FrameSource, env: int, as_stack: bool):
    """(obs, action, reward, next_obs, terminated, truncated) for one env, drawn from ``data``."""
    previous = ref.previous_next_obs(env)
    relation = data.draw(st.sampled_from(RELATIONS), label=f"env {env} relation")
    if previous is None:
        relation = "new"
    if relation == "near" and not (as_stack and ref.stack_size > 1):
        relation = "new"
    s = ref.stack_size
    if relation in ("continue", "repeat"):
        obs = previous.copy() if as_stack else previous[-1].copy()
    elif relation == "near":
        obs = np.concatenate([frames.stack(s - 1), previous[-1:]], axis=0)
    else:
        obs = frames.stack(s) if as_stack else frames.frame()
    newest = (obs[-1] if as_stack else obs).copy() if relation == "repeat" else frames.frame()
    next_obs = np.concatenate([obs[1:], newest[None]], axis=0) if as_stack else newest
    action = data.draw(actions(ref.action_shape, ref.action_dtype), label=f"env {env} action")
    reward = data.draw(rewards, label=f"env {env} reward")
    terminated, truncated = data.draw(endings, label=f"env {env} ending")
    if (terminated or truncated) and as_stack and s > 1:
        final = data.draw(st.sampled_from(FINAL_STACKS), label=f"env {env} final next_obs")
        if final == "reset":
            next_obs = np.array([frames.frame()] * s, dtype=frames.frame_dtype)
        elif final == "fresh":
            next_obs = frames.stack(s)
        elif final == "obs":
            next_obs = obs.copy()
    return obs, action, reward, next_obs, terminated, truncated


def draw_add(data: Any, ref: ReferenceStore, frames: FrameSource) -> AddArgs:
    """Valid arguments for one ``add``: the same form (frames or stacks) for all envs of the add."""
    as_stack = data.draw(st.booleans(), label="stacks")
    per_env = [one_env_arguments(data, ref, frames, env, as_stack) for env in range(ref.num_envs)]
    lead = () if ref.num_envs == 1 else (ref.num_envs,)
    fields = data.draw(field_values(ref.field_specs, lead), label="fields") if ref.field_specs else None
    if ref.num_envs == 1:
        obs, action, reward, next_obs, terminated, truncated = per_env[0]
        return AddArgs(obs, action, reward, next_obs, terminated, truncated, fields)
    obs, action, reward, next_obs, terminated, truncated = zip(*per_env)
    return AddArgs(
        fields=fields,
        obs=np.array(obs, dtype=ref.frame_dtype),
        action=np.array(action, dtype=ref.action_dtype),
        reward=np.array(reward, dtype=np.float32),
        next_obs=np.array(next_obs, dtype=ref.frame_dtype),
        terminated=np.array(terminated, dtype=bool),
        truncated=np.array(truncated, dtype=bool),
    )


# A pattern that finds the argument named "obs" (and not only "next_obs") in an error message.
OBS = r"\bobs\b"

# Ways to spoil a valid add; each gives a pattern for the argument its error must name, and its type.
SPOILERS = [
    ("obs_dtype", OBS, TypeError),
    ("next_obs_dtype", "next_obs", TypeError),
    ("obs_stack_length", OBS, ValueError),
    ("action_shape", "action", ValueError),
    ("reward_nan_last_env", "reward", ValueError),
    ("unshifted_stack_last_env", "next_obs", ValueError),
    ("terminated_shape", "terminated", ValueError),
    ("field_missing", "fields", ValueError),
    ("field_shape", "fields", ValueError),
    ("field_dtype", "fields", TypeError),
]


def spoil(args: AddArgs, how: str, ref: ReferenceStore) -> AddArgs | None:
    """A copy of ``args`` made invalid in one way, or None when ``how`` cannot apply to ``args``."""
    n = ref.num_envs
    lead = () if n == 1 else (n,)
    obs, next_obs = args.obs.copy(), args.next_obs.copy()
    action, reward = np.array(args.action, dtype=ref.action_dtype), np.array(args.reward, dtype=np.float64)
    terminated = np.array(args.terminated, dtype=bool)
    as_stack = obs.ndim == len(lead) + 1 + len(ref.frame_shape)
    if how.startswith("field_"):
        if not args.fields:
            return None
        fields = dict(args.fields)
        name = next(iter(fields))
        if how == "field_missing":
            del fields[name]
        elif how == "field_shape":
            fields[name] = np.zeros((*lead, 7, 7), fields[name].dtype)
        else:  # complex values cast to no field dtype
            fields[name] = np.zeros(fields[name].shape, np.complex64)
        return AddArgs(obs, action, reward, next_obs, terminated, args.truncated, fields)
    if how == "obs_dtype":
        other = np.float64 if ref.frame_dtype != np.float64 else np.float32
        return AddArgs(obs.astype(other), action, reward, next_obs, terminated, args.truncated, args.fields)
    if how == "next_obs_dtype":
        other = np.int32 if ref.frame_dtype != np.int32 else np.int16
        with np.errstate(invalid="ignore"):  # NaN and inf become some int32: any value is refused
            return AddArgs(obs, action, reward, next_obs.astype(other), terminated, args.truncated, args.fields)
    if how == "obs_stack_length":
        wrong = np.zeros((*lead, ref.stack_size + 1, *ref.frame_shape), dtype=ref.frame_dtype)
        return AddArgs(wrong, action, reward, next_obs, terminated, args.truncated, args.fields)
    if how == "action_shape":
        return AddArgs(obs, np.zeros((*lead, *ref.action_shape, 3), ref.action_dtype), reward, next_obs,
                       terminated, args.truncated, args.fields)
    if how == "reward_nan_last_env":
        reward = reward.copy()
        if n == 1:
            reward = np.float64("nan")
        else:
            reward[-1] = np.nan
        return AddArgs(obs, action, reward, next_obs, terminated, args.truncated, args.fields)
    if how == "unshifted_stack_last_env":
        if not as_stack or ref.stack_size < 2:
            return None
        target = next_obs if n == 1 else next_obs[-1]
        source = obs if n == 1 else obs[-1]
        # next_obs[:-1] no longer equals obs[1:]: its oldest frame is obs[1] with every bit flipped (bools
        # negated), which differs from obs[1] whatever the frames are (flipping next_obs[0] itself would
        # not do: a final stack that was not shifted can become shifted, as 1-pixel bool frames showed).
        if ref.frame_dtype == np.bool_:
            target[0] = ~source[1]
        else:
            target[0] = source[1]
            target[0].view(np.uint8)[...] ^= 0xFF
        # ... in a transition that goes on (one that ends may carry any next_obs).
        truncated = np.array(args.truncated, dtype=bool)
        if n == 1:
            terminated, truncated = np.False_, np.False_
        else:
            terminated[-1] = truncated[-1] = False
        return AddArgs(obs, action, reward, next_obs, terminated, truncated, args.fields)
    if how == "terminated_shape":
        return AddArgs(obs, action, reward, next_obs, np.zeros((*lead, 2), dtype=bool), args.truncated, args.fields)
    raise ValueError(how)
