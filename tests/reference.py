"""A deliberately naive, in-memory model of what ``ReplayStore`` must give back.

The model keeps, per env, a plain list of episodes; each episode is a plain list of transitions, and
each transition holds its full ``obs`` and ``next_obs`` stacks as numpy arrays. Nothing is shared,
compressed or rebuilt lazily: the stacks a transition is sampled with are computed once, at ``add``
time, by the rules of the contract:

* A new episode starts for an env at its first add, after a transition that terminated or truncated,
  and whenever ``obs`` is not equal to that env's previous ``next_obs`` (a single frame is compared with
  the newest frame of the previous ``next_obs`` stack; a stack with the whole previous stack, as sampled).
* At an episode start, ``obs`` added as a stack is kept exactly; a single frame is repeated for the
  positions before it (gymnasium's ``FrameStackObservation`` default). While the episode continues,
  ``obs`` is the previous ``next_obs`` stack. With ``stack_padding="zeros"`` the *padding* positions
  come back as all-zero frames: those a single frame was repeated into, and a start stack's leading
  repeats of its first frame but the last of them; they shift out as the episode goes on.
* ``next_obs`` added as a stack is kept exactly; a single frame is pushed onto ``obs``'s stack. A
  transition that terminated or truncated may carry any next_obs stack (not obs shifted by one frame:
  the reset observation, as CleanRL and SB3 pass it): it is kept exactly too, as given.
* Steps count every transition ever added, env 0 first within a vector add; only the newest
  ``capacity`` steps are stored (first in, first out across envs).

The model does not validate its input: tests only hand it what the store accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RefTransition:
    """One transition as the store must give it back."""

    step: int
    env_index: int
    obs: np.ndarray  # (stack_size, *frame_shape) of the store's frame_dtype
    action: np.ndarray  # action_shape, action_dtype
    reward: np.float32
    next_obs: np.ndarray  # (stack_size, *frame_shape) of the store's frame_dtype
    terminated: bool
    truncated: bool
    episode_start: bool  # the model's verdict: this transition opens an episode
    fields: dict[str, np.ndarray] = field(default_factory=dict)  # user fields, as given (cast to their dtype)
    obs_padding: tuple[bool, ...] = ()  # per obs position: padding (zeros in a zero-padding store)
    next_padding: tuple[bool, ...] = ()


class ReferenceStore:
    """Plain lists of per-env episodes of transitions; see the module docstring for the rules."""

    def __init__(
        self,
        *,
        frame_shape: Sequence[int],
        capacity: int,
        stack_size: int = 4,
        num_envs: int = 1,
        action_shape: Sequence[int] = (),
        action_dtype: Any = np.int64,
        frame_encoding: str = "lz4",  # how the store compresses frames changes nothing it gives back
        reference_scheme: Any = None,
        frame_dtype: Any = np.uint8,
        fields: dict[str, tuple[Any, Any]] | None = None,  # user fields: name -> (shape, dtype)
        stack_padding: str = "first",
    ) -> None:
        self.frame_dtype = np.dtype(frame_dtype)
        self.stack_padding = stack_padding
        self.frame_shape = tuple(int(n) for n in frame_shape)
        self.capacity = int(capacity)
        self.stack_size = int(stack_size)
        self.num_envs = int(num_envs)
        self.action_shape = tuple(int(n) for n in action_shape)
        self.action_dtype = np.dtype(action_dtype)
        self.field_specs = {name: (tuple(shape), np.dtype(dtype)) for name, (shape, dtype) in (fields or {}).items()}
        # episodes[env] is a list of episodes; an episode is a list of RefTransition.
        self.episodes: list[list[list[RefTransition]]] = [[] for _ in range(self.num_envs)]
        # by_step[step] is the transition with that step, or None once it was evicted.
        self.by_step: list[RefTransition | None] = []
        self.first_step = 0  # the first step since the last clear(): steps keep counting across it

    # -- what the store must report -------------------------------------------------------------

    @property
    def transitions_added(self) -> int:
        return len(self.by_step)

    def __len__(self) -> int:
        return min(self.transitions_added - self.first_step, self.capacity)

    def clear(self) -> None:
        """``ReplayStore.clear``: nothing stored and every episode from scratch; steps keep counting."""
        self.first_step = len(self.by_step)
        self.by_step = [None] * len(self.by_step)
        self.episodes = [[] for _ in range(self.num_envs)]

    def stored_steps(self) -> np.ndarray:
        """The steps the store must hold, oldest first."""
        return np.arange(self.transitions_added - len(self), self.transitions_added, dtype=np.int64)

    def transition(self, step: int) -> RefTransition:
        item = self.by_step[step] if 0 <= step < len(self.by_step) else None
        if item is None:
            raise IndexError(f"step {step} is not stored")
        return item

    def last_transition(self, env_index: int) -> RefTransition | None:
        """The env's most recent transition (kept even when the store evicted it)."""
        episodes = self.episodes[env_index]
        return episodes[-1][-1] if episodes else None

    def previous_next_obs(self, env_index: int) -> np.ndarray | None:
        last = self.last_transition(env_index)
        return None if last is None else last.next_obs

    def episode_in_progress(self, env_index: int) -> bool:
        last = self.last_transition(env_index)
        return last is not None and not (last.terminated or last.truncated)

    def expected(self, steps: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
        """The fields of the Batch that ``read(steps)`` (or a sample with these indices) must return."""
        items = [self.transition(int(s)) for s in np.asarray(steps, dtype=np.int64).reshape(-1)]
        n = len(items)
        stack = (n, self.stack_size, *self.frame_shape)
        return {
            "obs": np.array([self.padded(t.obs, t.obs_padding) for t in items], dtype=self.frame_dtype).reshape(stack),
            "action": np.array([t.action for t in items], dtype=self.action_dtype).reshape(
                (n, *self.action_shape)
            ),
            "reward": np.array([t.reward for t in items], dtype=np.float32).reshape(n),
            "next_obs": np.array([self.padded(t.next_obs, t.next_padding) for t in items],
                                 dtype=self.frame_dtype).reshape(stack),
            "terminated": np.array([t.terminated for t in items], dtype=bool).reshape(n),
            "truncated": np.array([t.truncated for t in items], dtype=bool).reshape(n),
            "index": np.array([t.step for t in items], dtype=np.int64).reshape(n),
            "env_index": np.array([t.env_index for t in items], dtype=np.int64).reshape(n),
        }

    # -- the one operation that changes the model -------------------------------------------------

    def add(self, obs, action, reward, next_obs, terminated, truncated, fields=None) -> list[int]:
        """Record one transition per env, with the store's argument conventions; returns the steps."""
        fields = {name: np.asarray(value) for name, value in (fields or {}).items()}
        if self.num_envs == 1:
            obs, next_obs = np.asarray(obs)[None], np.asarray(next_obs)[None]
            action = np.asarray(action)[None]
            reward, terminated, truncated = [reward], [terminated], [truncated]
            fields = {name: value[None] for name, value in fields.items()}
        steps = []
        for env in range(self.num_envs):
            steps.append(
                self._add_one(
                    env,
                    np.asarray(obs[env], dtype=self.frame_dtype),
                    np.asarray(action[env]),
                    reward[env],
                    np.asarray(next_obs[env], dtype=self.frame_dtype),
                    bool(terminated[env]),
                    bool(truncated[env]),
                    {name: value[env].astype(self.field_specs[name][1]) for name, value in fields.items()},
                )
            )
        return steps

    def padded(self, stack: np.ndarray, padding: tuple[bool, ...]) -> np.ndarray:
        if self.stack_padding != "zeros" or not any(padding):
            return stack
        out = stack.copy()
        out[np.array(padding)] = 0
        return out

    def _is_stack(self, x: np.ndarray) -> bool:
        return x.shape == (self.stack_size, *self.frame_shape)

    def _starts_episode(self, env: int, obs: np.ndarray) -> bool:
        last = self.last_transition(env)
        if last is None or last.terminated or last.truncated:
            return True
        if self._is_stack(obs):
            return not same_bits(obs, last.next_obs)
        return not same_bits(obs, last.next_obs[-1])

    def _add_one(self, env, obs, action, reward, next_obs, terminated, truncated, fields=None) -> int:
        start = self._starts_episode(env, obs)
        size = self.stack_size
        if start:
            if self._is_stack(obs):
                obs_stack = obs.copy()
                repeats = 1
                while repeats < size and same_bits(obs[repeats], obs[0]):
                    repeats += 1
                obs_padding = (True,) * (repeats - 1) + (False,) * (size - repeats + 1)
            else:
                obs_stack = np.array([obs] * size, dtype=self.frame_dtype)
                obs_padding = (True,) * (size - 1) + (False,)
        else:
            last = self.last_transition(env)
            assert last is not None
            obs_stack, obs_padding = last.next_obs, last.next_padding
        shifted_padding = obs_padding[1:] + (False,)
        if self._is_stack(next_obs):
            next_stack = next_obs.copy()
            # bit for bit, as the store compares frames (a NaN frame equals itself)
            detached = (terminated or truncated) and not same_bits(next_obs[:-1], obs_stack[1:])
            next_padding = (False,) * size if detached else shifted_padding
        else:
            next_stack = np.concatenate([obs_stack[1:], next_obs[None]], axis=0)
            next_padding = shifted_padding
        step = len(self.by_step)
        item = RefTransition(
            step=step,
            env_index=env,
            obs=obs_stack,
            action=np.asarray(action).astype(self.action_dtype).reshape(self.action_shape),
            reward=np.float32(reward),
            next_obs=next_stack,
            terminated=terminated,
            truncated=truncated,
            episode_start=start,
            fields=fields or {},
            obs_padding=obs_padding,
            next_padding=next_padding,
        )
        if start:
            self.episodes[env].append([])
        self.episodes[env][-1].append(item)
        self.by_step.append(item)
        evicted = len(self.by_step) - 1 - self.capacity
        if evicted >= 0:
            self.by_step[evicted] = None  # first in, first out across envs
        return step


BATCH_FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "index", "env_index")


def bits(array: np.ndarray) -> np.ndarray:
    """The array's bytes, one more axis (a NaN equals only the same NaN, and -0.0 differs from 0.0)."""
    array = np.ascontiguousarray(array)
    return array.reshape(*array.shape, 1).view(np.uint8)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes, dtypes and bytes: how the store compares an obs with the previous next_obs."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def assert_batch_matches(batch: Any, ref: ReferenceStore, steps: Sequence[int] | np.ndarray | None = None) -> None:
    """Assert that ``batch`` holds exactly the reference's transitions with ``steps``.

    ``steps`` defaults to ``batch.index`` (for samples, whose steps are chosen by the store).
    Dtypes and shapes are checked as well as values.
    """
    if steps is None:
        steps = np.asarray(batch.index)
        stored = set(ref.stored_steps().tolist())
        outside = sorted(set(steps.tolist()) - stored)
        assert not outside, f"batch.index holds steps {outside} that are not stored ({len(ref)} stored)"
    want = ref.expected(steps)
    assert_fields_match(getattr(batch, "fields", {}), ref, np.asarray(steps, np.int64))
    for name in BATCH_FIELDS:
        got = getattr(batch, name)
        assert isinstance(got, np.ndarray), f"batch.{name} is {type(got).__name__}, expected ndarray"
        assert got.dtype == want[name].dtype, f"batch.{name} has dtype {got.dtype}; expected {want[name].dtype}"
        assert got.shape == want[name].shape, f"batch.{name} has shape {got.shape}; expected {want[name].shape}"
        if not np.array_equal(bits(got), bits(want[name])):
            rows = [i for i in range(len(got)) if not same_bits(got[i], want[name][i])]
            i = rows[0]
            raise AssertionError(
                f"batch.{name} differs from the reference at {len(rows)} rows; first: row {i} "
                f"(step {int(want['index'][i])}, env {int(want['env_index'][i])}):\n"
                f"got\n{got[i]}\nexpected\n{want[name][i]}"
            )


def expected_fields(ref: ReferenceStore, steps: np.ndarray, mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The user fields of these steps (any shape), zero where ``mask`` is False."""
    flat, where = steps.reshape(-1), (np.ones(steps.shape, bool) if mask is None else mask).reshape(-1)
    want = {}
    for name, (shape, dtype) in ref.field_specs.items():
        values = np.zeros((len(flat), *shape), dtype)
        for i, step in enumerate(flat.tolist()):
            if where[i]:
                values[i] = ref.transition(step).fields[name]
        want[name] = values.reshape(*steps.shape, *shape)
    return want


def assert_fields_match(got: dict[str, np.ndarray], ref: ReferenceStore, steps: np.ndarray,
                        mask: np.ndarray | None = None) -> None:
    """The batch's user fields equal the reference's bit for bit (NaN payloads and -0.0 included)."""
    want = expected_fields(ref, steps, mask)
    assert list(got) == list(want), f"batch.fields has keys {list(got)}; expected {list(want)}"
    for name, values in want.items():
        assert got[name].dtype == values.dtype and got[name].shape == values.shape, (
            f"batch.fields[{name!r}] is {got[name].dtype}{list(got[name].shape)}; expected "
            f"{values.dtype}{list(values.shape)}"
        )
        assert np.ascontiguousarray(got[name]).tobytes() == values.tobytes(), f"batch.fields[{name!r}] differs"


def assert_store_matches(store: Any, ref: ReferenceStore, *, chunk: int = 256) -> None:
    """Assert that the store's counts and every stored transition equal the reference's."""
    assert store.transitions_added == ref.transitions_added, (
        f"transitions_added is {store.transitions_added}; expected {ref.transitions_added}"
    )
    assert len(store) == len(ref), f"len(store) is {len(store)}; expected {len(ref)}"
    steps = ref.stored_steps()
    for lo in range(0, len(steps), chunk):
        part = steps[lo : lo + chunk]
        assert_batch_matches(store.read(part), ref, part)


def snapshot(store: Any) -> tuple[int, int, dict[str, np.ndarray] | None]:
    """Everything observable about the stored contents, to compare before and after a call."""
    n = len(store)
    added = store.transitions_added
    if n == 0:
        return n, added, None
    batch = store.read(np.arange(added - n, added))
    return n, added, {name: np.array(getattr(batch, name), copy=True) for name in BATCH_FIELDS}


def assert_same_snapshot(before, after) -> None:
    assert before[0] == after[0], f"len(store) changed from {before[0]} to {after[0]}"
    assert before[1] == after[1], f"transitions_added changed from {before[1]} to {after[1]}"
    if before[2] is None:
        return
    for name in BATCH_FIELDS:
        np.testing.assert_array_equal(after[2][name], before[2][name], err_msg=f"batch.{name} changed")
