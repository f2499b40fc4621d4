"""mmreplay as the benchmarks measure it: a ``ReplayStore`` in a temporary directory on disk, fed the
real frame stream by one env (``MmreplayAdapter``) or a vector of envs (``MmreplayVectorAdapter``), with
the same surface as the peers' adapters in ``peers.py`` plus ``verify``, which checks sampled batches
against the stream they came from.

One env's adds come in the forms ``ADD_FORMS`` names: single frames with numpy scalars (the stream's
own values), or 4-frame stacks (what gymnasium's ``FrameStackObservation`` hands CleanRL and SB3) with
numpy scalars, or with Python ``int``/``float``/``bool`` as those training loops pass them:
``add(stack, 1, 0.0, next_stack, False, False)``.

``transitions_per_add`` says how many transitions one ``add`` records: the benchmark makes
``ceil(capacity / transitions_per_add)`` adds to fill a buffer.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import numpy.typing as npt
from peers import FRAME_SHAPE, STACK_SIZE, FrameStream

# One env's add: obs and next_obs as single frames or stacks; action, reward and flags as numpy scalars
# (the stream's int64, float32 and bool) or as Python int, float and bool.
ADD_FORMS = ("frames", "stacks", "stacks-python")


class MmreplayAdapter:
    """One env: ``obs = frames[t]``, ``next_obs = frames[t + 1]`` for the stream's transitions in order,
    cyclically. The store finds episode starts itself (an obs that is not the previous next_obs)."""

    name = "mmreplay"
    transitions_per_add = 1

    def __init__(self, stream: FrameStream, capacity: int, seed: int, *, tmpdir: str | None,
                 num_envs: int = 1, frame_encoding: str = "lz4", reuse_out: bool = False,
                 add_form: str = "frames", reference_scheme: object = None) -> None:
        from mmreplay import ReplayStore

        if add_form not in ADD_FORMS:
            raise ValueError(f"add_form must be one of {ADD_FORMS}; got {add_form!r}")
        self.add_form = add_form
        self.stream = stream
        self.directory = Path(tempfile.mkdtemp(prefix="mmreplay-bench-", dir=tmpdir))
        try:
            self.store = ReplayStore.create(self.directory / "store", frame_shape=FRAME_SHAPE, capacity=capacity,
                                            stack_size=STACK_SIZE, num_envs=num_envs,
                                            frame_encoding=frame_encoding, reference_scheme=reference_scheme)
        except BaseException:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        self.rng = np.random.default_rng(seed)
        self.reuse_out = reuse_out  # sample into the previous batch's arrays (``sample(out=...)``)
        self.last_batch = None

    def inputs(self, i: int) -> tuple[object, ...]:
        if self.add_form == "frames":
            return self.stream.single_frame_inputs(i)
        s = self.stream
        j = i % len(s)
        t = s.transition_frame[j]
        obs, next_obs = s.stack(t), s.stack(t + 1)  # an episode's first stacks repeat its first frame
        if self.add_form == "stacks":
            return obs, s.action[j], s.reward[j], next_obs, s.terminated[j], s.truncated[j]
        return obs, int(s.action[j]), float(s.reward[j]), next_obs, bool(s.terminated[j]), bool(s.truncated[j])

    def add(self, *inputs: object) -> None:
        self.store.add(*inputs)

    def flush(self) -> None:
        self.store.flush()

    def sample(self, batch_size: int) -> object:
        self.last_batch = self.store.sample(batch_size, rng=self.rng, out=self.last_batch if self.reuse_out else None)
        return self.last_batch

    def __len__(self) -> int:
        return len(self.store)

    def bytes_per_transition(self) -> float | None:
        return self.store.bytes_on_disk / max(1, len(self.store))

    def stream_transitions(self, steps: npt.NDArray[np.int64], env_index: npt.NDArray[np.int64]
                           ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """The stream transition each stored step came from, and whether its env_index is the expected one."""
        return steps % len(self.stream), env_index == 0

    def verify(self, batch_size: int, batches: int) -> int:
        """Compare sampled batches with the stream they came from; the number of mismatching transitions."""
        bad = 0
        s = self.stream
        for _ in range(batches):
            batch = self.store.sample(batch_size, rng=self.rng)
            j, env_ok = self.stream_transitions(batch.index, batch.env_index)
            obs, next_obs = s.expected(j)
            bad += int(np.sum(
                ~env_ok
                | (batch.obs != obs).any(axis=(1, 2, 3))
                | (batch.next_obs != next_obs).any(axis=(1, 2, 3))
                | (batch.action != s.action[j])
                | (batch.reward != s.reward[j])
                | (batch.terminated != s.terminated[j])
                | (batch.truncated != s.truncated[j])
            ))
        return bad

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


class MmreplayVectorAdapter(MmreplayAdapter):
    """``num_envs`` envs, one vector ``add`` of ``(num_envs, 84, 84)`` arrays per env step.

    Env e plays the same real stream cyclically from its own offset: the episode start nearest to
    ``e / num_envs`` of the way through it, so the envs' episodes interleave (different frames at
    each call, episodes ending at different calls) and every env starts at an episode start, where
    the stream's stacks and the store's agree. Adding all envs every call, the store numbers call c's
    transitions ``c * num_envs + e``.
    """

    name = "mmreplay-vec"

    def __init__(self, stream: FrameStream, capacity: int, seed: int, *, tmpdir: str | None,
                 num_envs: int, frame_encoding: str = "lz4", reuse_out: bool = False,
                 reference_scheme: object = None) -> None:
        super().__init__(stream, capacity, seed, tmpdir=tmpdir, num_envs=num_envs, frame_encoding=frame_encoding,
                         reuse_out=reuse_out, reference_scheme=reference_scheme)
        self.transitions_per_add = num_envs
        first_frames = stream.transition_frame
        starts = np.flatnonzero(stream.stack_frames[first_frames, 0] == first_frames)  # stacks of one frame
        wanted = np.arange(num_envs) * len(stream) // num_envs
        self.offsets = starts[np.abs(starts[None, :] - wanted[:, None]).argmin(axis=1)].astype(np.int64)

    def inputs(self, i: int) -> tuple[object, ...]:
        s = self.stream
        j = (self.offsets + i) % len(s)
        t = s.transition_frame[j]
        return s.frames[t], s.action[j], s.reward[j], s.frames[t + 1], s.terminated[j], s.truncated[j]

    def stream_transitions(self, steps: npt.NDArray[np.int64], env_index: npt.NDArray[np.int64]
                           ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        n = self.transitions_per_add
        env = steps % n
        return (self.offsets[env] + steps // n) % len(self.stream), env_index == env
