"""The frame stream the benchmark replays, and the buffers it measures mmreplay against (peers).

A *frame stream* is one ``atari_<game>`` npz file (``frame_streams.py``): every observation in the order seen,
transition t being ``(frames[t], action[t], reward[t], frames[t + 1], terminated[t], truncated[t])``
for every t with ``action[t] >= 0``. The benchmark feeds those transitions cyclically, one ``add`` per
env step, until a buffer holds ``capacity`` transitions.

Every buffer is wrapped in an adapter with the same small surface:

- ``inputs(i)``: the arguments of the i-th add (untimed: building a stack from the stream is the env's
  job, not the buffer's);
- ``add(*inputs)``: the timed call, one env step;
- ``sample(batch_size)``: one uniform batch with obs and next_obs stacks;
- ``__len__``, ``bytes_per_transition()`` (``None`` where the buffer's arrays cannot be reached) and
  ``close()``.

Peers:

- ``sb3``: Stable-Baselines3 ``ReplayBuffer(optimize_memory_usage=True, handle_timeout_termination=False)``
  over ``Box(0, 255, (4, 84, 84), uint8)``: one 4-frame stack per transition, next_obs read from the
  following slot.
- ``cpprb``: cpprb ``ReplayBuffer`` with ``next_of="obs"`` and ``stack_compress="obs"``: stacks stored
  with overlapping strides along the obs's last axis (so obs are channels-last, (84, 84, 4)),
  ``on_episode_end()`` called at every episode end.
- ``numpy``: ``NumpyFrameRing`` below, a plain ring of uncompressed single frames in RAM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

FRAME_SHAPE = (84, 84)
STACK_SIZE = 4

# Bytes each peer allocates per transition, for the "does it fit in memory" check before measuring.
# sb3: one uint8 4-stack + int64 action + float32 reward, done, timeout; cpprb: about one frame
# (measured 7,339 of anonymous memory at capacity 100,000); numpy: one frame + 8 + 4 + 1 + 1 + 1 + 8 bytes of fields.
ESTIMATED_BYTES_PER_TRANSITION = {"sb3": 28_224 + 20, "cpprb": 7_700, "numpy": 7_056 + 23}
PEER_PACKAGES = {"sb3": "stable_baselines3", "cpprb": "cpprb", "numpy": "numpy"}


@dataclass(frozen=True)
class FrameStream:
    """One recorded frame stream and the index arithmetic that turns it into transitions and stacks."""

    frames: npt.NDArray[np.uint8]  # (N, 84, 84)
    transition_frame: npt.NDArray[np.int64]  # (T,) frame step t of each transition
    action: npt.NDArray[np.int64]  # (T,)
    reward: npt.NDArray[np.float32]  # (T,)
    terminated: npt.NDArray[np.bool_]  # (T,)
    truncated: npt.NDArray[np.bool_]  # (T,)
    ends_episode: npt.NDArray[np.bool_]  # (T,) the episode ends after this transition (flag or cut)
    stack_frames: npt.NDArray[np.int64]  # (N, stack_size) frame steps of the stack whose newest is t

    @classmethod
    def load(cls, path: Path, stack_size: int = STACK_SIZE) -> FrameStream:
        with np.load(path) as data:
            frames = np.ascontiguousarray(data["frames"])
            episode_start = data["episode_start"].astype(bool)
            action = data["action"].astype(np.int64)
            reward = data["reward"].astype(np.float32)
            terminated = data["terminated"].astype(bool)
            truncated = data["truncated"].astype(bool)
        n = len(frames)
        t = np.flatnonzero(action[:-1] >= 0)
        # The episode's first frame for every frame: stacks repeat it before the episode starts,
        # like gymnasium's FrameStackObservation.
        first = np.maximum.accumulate(np.where(episode_start, np.arange(n), 0))
        stack_frames = np.maximum(np.arange(n)[:, None] + np.arange(1 - stack_size, 1), first[:, None])
        # Frame t + 1 without an action is its episode's final frame (or the file's last).
        ends = terminated[t] | truncated[t] | (action[t + 1] < 0)
        return cls(
            frames=frames,
            transition_frame=t.astype(np.int64),
            action=action[t],
            reward=reward[t],
            terminated=terminated[t],
            truncated=truncated[t],
            ends_episode=ends,
            stack_frames=stack_frames.astype(np.int64),
        )

    def __len__(self) -> int:
        """Transitions in one pass over the stream."""
        return len(self.transition_frame)

    def single_frame_inputs(self, i: int) -> tuple[object, ...]:
        """The i-th add of a cyclic feed as single frames: (obs, action, reward, next_obs, terminated, truncated)."""
        j = i % len(self)
        t = self.transition_frame[j]
        return self.frames[t], self.action[j], self.reward[j], self.frames[t + 1], self.terminated[j], self.truncated[j]

    def stack(self, frame_step: int) -> npt.NDArray[np.uint8]:
        return self.frames[self.stack_frames[frame_step]]

    def expected(self, steps: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]:
        """obs and next_obs of the transitions numbered ``steps`` in a cyclic feed from step 0."""
        t = self.transition_frame[steps % len(self)]
        return self.frames[self.stack_frames[t]], self.frames[self.stack_frames[t + 1]]


class Adapter(Protocol):
    name: str

    def inputs(self, i: int) -> tuple[object, ...]: ...
    def add(self, *inputs: object) -> None: ...
    def sample(self, batch_size: int) -> object: ...
    def __len__(self) -> int: ...
    def bytes_per_transition(self) -> float | None: ...
    def close(self) -> None: ...


class NumpyFrameRing:
    """A plain in-RAM ring of uncompressed single frames: the simplest buffer that stores a frame once.

    Slots hold a frame *stream*: an episode's first frame, then one frame per transition. A frame's
    slot also holds the transition taken from it (``has_action``), so next_obs is the following frame
    and an episode's final frame is kept (next_obs stays exact at terminations and truncations).
    ``episode_first`` keeps, per frame, the step of its episode's first frame: stacks are clipped to it
    (positions before the episode repeat its first frame, as gymnasium's FrameStackObservation does).
    A transition is sampleable when its frame has an action, its next frame is written and no frame of
    its obs stack has been overwritten. Sampling draws frame steps uniformly and keeps the sampleable
    ones (episode-final frames are ~0.1% of Pong frames, so one draw of 1.25x the batch nearly always
    suffices).
    """

    def __init__(self, capacity: int, *, frame_shape: tuple[int, ...] = FRAME_SHAPE, stack_size: int = STACK_SIZE):
        self.capacity = capacity
        self.stack_size = stack_size
        self.frames = np.zeros((capacity, *frame_shape), np.uint8)
        self.action = np.zeros(capacity, np.int64)
        self.reward = np.zeros(capacity, np.float32)
        self.terminated = np.zeros(capacity, bool)
        self.truncated = np.zeros(capacity, bool)
        self.has_action = np.zeros(capacity, bool)
        self.episode_first = np.zeros(capacity, np.int64)
        self.frames_written = 0  # a step: never wraps
        self.transitions = 0  # stored transitions
        self._open = False  # the newest frame belongs to an episode that continues
        self._first = 0
        self._offsets = np.arange(-stack_size + 1, 2)  # obs window and the next frame

    def _write_frame(self, frame: npt.NDArray[np.uint8]) -> int:
        step = self.frames_written
        slot = step % self.capacity
        if step >= self.capacity and self.has_action[slot]:
            self.transitions -= 1  # its transition is evicted with its frame
        self.frames[slot] = frame
        self.has_action[slot] = False
        self.episode_first[slot] = self._first
        self.frames_written = step + 1
        return slot

    def add(self, obs, action, reward, next_obs, terminated, truncated) -> None:  # noqa: ANN001
        newest = (self.frames_written - 1) % self.capacity
        if not self._open or not np.array_equal(obs, self.frames[newest]):
            self._first = self.frames_written
            newest = self._write_frame(obs)
        self.action[newest] = action
        self.reward[newest] = reward
        self.terminated[newest] = terminated
        self.truncated[newest] = truncated
        self.has_action[newest] = True
        self.transitions += 1
        self._write_frame(next_obs)
        self._open = not (terminated or truncated)

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, npt.NDArray]:
        oldest = max(0, self.frames_written - self.capacity)
        chosen = np.empty(0, np.int64)
        while len(chosen) < batch_size:
            steps = rng.integers(oldest, self.frames_written - 1, size=batch_size + batch_size // 4 + 4)
            slots = steps % self.capacity
            first = self.episode_first[slots]
            ok = self.has_action[slots] & (np.maximum(steps - self.stack_size + 1, first) >= oldest)
            chosen = np.concatenate([chosen, steps[ok]])
        steps = chosen[:batch_size]
        slots = steps % self.capacity
        window = np.maximum(steps[:, None] + self._offsets, self.episode_first[slots][:, None]) % self.capacity
        return {
            "obs": self.frames[window[:, :-1]],
            "action": self.action[slots],
            "reward": self.reward[slots],
            "next_obs": self.frames[window[:, 1:]],
            "terminated": self.terminated[slots],
            "truncated": self.truncated[slots],
        }

    def __len__(self) -> int:
        return self.transitions

    @property
    def nbytes(self) -> int:
        arrays = (self.frames, self.action, self.reward, self.terminated, self.truncated, self.has_action,
                  self.episode_first)
        return sum(a.nbytes for a in arrays)


class NumpyAdapter:
    name = "numpy"

    def __init__(self, stream: FrameStream, capacity: int, seed: int):
        self.stream = stream
        self.ring = NumpyFrameRing(capacity)
        self.rng = np.random.default_rng(seed)

    def inputs(self, i: int) -> tuple[object, ...]:
        return self.stream.single_frame_inputs(i)

    def add(self, *inputs: object) -> None:
        self.ring.add(*inputs)

    def sample(self, batch_size: int) -> object:
        return self.ring.sample(batch_size, self.rng)

    def __len__(self) -> int:
        return len(self.ring)

    def bytes_per_transition(self) -> float | None:
        return self.ring.nbytes / max(1, len(self.ring))

    def close(self) -> None:
        del self.ring


class SB3Adapter:
    name = "sb3"

    def __init__(self, stream: FrameStream, capacity: int, seed: int):
        import warnings

        import torch
        from gymnasium import spaces
        from stable_baselines3.common.buffers import ReplayBuffer

        # One thread, like every other buffer here: torch's intra-op threads only fight the rest of a
        # busy 2-core machine (sampling was 10x slower and erratic with its default of 2).
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        np.random.seed(seed)  # SB3 samples with numpy's global generator
        self.stream = stream
        observation_space = spaces.Box(0, 255, (STACK_SIZE, *FRAME_SHAPE), np.uint8)
        action_space = spaces.Discrete(int(max(18, stream.action.max() + 1)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its psutil "not enough memory" warning: we checked already
            self.buffer = ReplayBuffer(
                capacity,
                observation_space,
                action_space,
                device="cpu",
                n_envs=1,
                optimize_memory_usage=True,
                handle_timeout_termination=False,
            )
        self._infos: list[dict[str, object]] = [{}]

    def inputs(self, i: int) -> tuple[object, ...]:
        s = self.stream
        j = i % len(s)
        t = s.transition_frame[j]
        return (
            s.stack(t)[None],
            s.stack(t + 1)[None],
            s.action[j : j + 1],
            s.reward[j : j + 1],
            s.terminated[j : j + 1],
        )

    def add(self, *inputs: object) -> None:
        obs, next_obs, action, reward, done = inputs
        self.buffer.add(obs, next_obs, action, reward, done, self._infos)

    def sample(self, batch_size: int) -> object:
        return self.buffer.sample(batch_size)

    def __len__(self) -> int:
        return self.buffer.size()

    def bytes_per_transition(self) -> float | None:
        b = self.buffer
        arrays = [b.observations, b.actions, b.rewards, b.dones, b.timeouts]
        if getattr(b, "next_observations", None) is not None:
            arrays.append(b.next_observations)
        return sum(a.nbytes for a in arrays) / max(1, len(self))

    def close(self) -> None:
        del self.buffer


class CpprbAdapter:
    name = "cpprb"

    def __init__(self, stream: FrameStream, capacity: int, seed: int):
        import cpprb

        np.random.seed(seed)  # cpprb samples with numpy's global generator
        self.stream = stream
        # stack_compress shares frames between consecutive stacks along the obs's LAST axis, so the
        # stack goes last: (84, 84, 4). Given (4, 84, 84) it compresses along a pixel axis and silently
        # returns wrong obs (checked: 2,497 of 2,500 stored obs differed from what was added).
        env_dict = {
            "obs": {"shape": (*FRAME_SHAPE, STACK_SIZE), "dtype": np.uint8},
            "act": {"dtype": np.int64},
            "rew": {"dtype": np.float32},
            "done": {"dtype": np.float32},
        }
        self.buffer = cpprb.ReplayBuffer(capacity, env_dict, next_of="obs", stack_compress="obs")
        self._cached_step, self._cached = -1, np.empty(0, np.uint8)

    def _stack_last(self, frame_step: int) -> npt.NDArray[np.uint8]:
        # Built per step outside the timed add (an env wrapper's job), reusing the previous next_obs;
        # not precomputed for the whole stream, which would add 564 MB to the measured anonymous memory.
        if frame_step != self._cached_step:
            self._cached = np.ascontiguousarray(np.moveaxis(self.stream.stack(frame_step), 0, -1))
            self._cached_step = frame_step
        return self._cached

    def inputs(self, i: int) -> tuple[object, ...]:
        s = self.stream
        j = i % len(s)
        t = s.transition_frame[j]
        obs = self._stack_last(t)
        return obs, s.action[j], s.reward[j], self._stack_last(t + 1), s.terminated[j], s.ends_episode[j]

    def add(self, *inputs: object) -> None:
        obs, action, reward, next_obs, terminated, ends_episode = inputs
        self.buffer.add(obs=obs, act=action, rew=reward, next_obs=next_obs, done=terminated)
        if ends_episode:
            self.buffer.on_episode_end()

    def sample(self, batch_size: int) -> object:
        return self.buffer.sample(batch_size)

    def __len__(self) -> int:
        return self.buffer.get_stored_size()

    def bytes_per_transition(self) -> float | None:
        return None  # its arrays live in C++; the benchmark reports its anonymous memory growth instead

    def close(self) -> None:
        del self.buffer


PEERS: dict[str, type] = {"sb3": SB3Adapter, "cpprb": CpprbAdapter, "numpy": NumpyAdapter}
