"""The public store: ``ReplayStore.create`` / ``open``, ``add``, ``sample``, ``read``, ``flush``, ``close``.

Vocabulary: a *transition* is (obs, action, reward, next_obs, terminated, truncated) from one env; its
*step* numbers it among all transitions ever added (a vector add numbers env 0 first). Stored transitions are always the contiguous steps ``[oldest, transitions_added)``:
eviction is first in, first out. Frames are written once; obs and next_obs stacks are rebuilt from the
frame ring's episode links when read.

Commit protocol: frames and rows are written into memory-mapped files at once (so ``sample`` sees them),
and ``flush`` makes them durable and then replaces the header, which is the only thing that makes them
count after a crash. Ring slots that the committed header still counts are never reused before the next
commit: when an add would need one, the store commits first (an automatic flush).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import IO

import numpy as np
import numpy.typing as npt

from mmreplay import codec, format, stacking
from mmreplay.batch import Batch
from mmreplay.episodes import EnvEpisode, Episode, split_episodes
from mmreplay.errors import ClosedStoreError, ReadOnlyStoreError, StoreExistsError, StoreLockedError
from mmreplay.frame_ring import FrameRing
from mmreplay.samplers import Sampler, UniformSampler
from mmreplay.transition_table import EPISODE_START, TERMINATED, TRUNCATED, TransitionTable, row_dtype
from mmreplay.validation import (
    AddArguments,
    parse_action_dtype,
    parse_add,
    parse_env_mask,
    parse_mode,
    parse_positive_int,
    parse_rng,
    parse_shape,
)

PathLike = str | os.PathLike[str]


@dataclass
class _FramePlan:
    """What one ``add`` will write: compressed frames with their episode links, and each row's fields."""

    payloads: list[bytes] = field(default_factory=list)
    prev_deltas: list[int] = field(default_factory=list)
    next_frames: list[int] = field(default_factory=list)
    oldest_frames: list[int] = field(default_factory=list)
    flags: list[int] = field(default_factory=list)
    starts: list[tuple[list[bytes], list[int]] | None] = field(default_factory=list)


class ReplayStore:
    """A replay store in a directory: frames kept once, lz4-compressed, in a memory-mapped ring on disk.

    Open it like a file: ``ReplayStore.create(path, ...)`` makes a new store (mode ``"r+"``),
    ``ReplayStore.open(path, mode)`` opens one read-only (``"r"``) or for appending (``"r+"``), and
    ``with`` closes it (which commits).
    """

    def __init__(
        self,
        directory: Path,
        layout: format.Layout,
        commit: format.Commit,
        *,
        mode: str,
        sampler: Sampler,
        lock: IO[bytes] | None,
    ) -> None:
        self._directory = directory
        self._layout = layout
        self._commit = commit
        self._mode = mode
        self._sampler = sampler
        self._lock = lock
        self._action_dtype = np.dtype(layout.action_dtype)
        self._transitions_added = commit.transitions_added
        self._frames = FrameRing(
            directory,
            frame_shape=layout.frame_shape,
            segment_bytes=layout.segment_bytes,
            frame_slots=commit.frame_slots,
            generation=commit.frame_table_generation,
            frames_written=commit.frames_written,
            bytes_written=commit.bytes_written,
            writable=mode == "r+",
        )
        self._table = TransitionTable(
            directory / format.TRANSITIONS_NAME,
            dtype=row_dtype(layout.action_shape, self._action_dtype),
            row_slots=layout.row_slots,
            writable=mode == "r+",
        )
        self._closed = False
        self._load_env_state()

    # -- construction ----------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: PathLike,
        *,
        frame_shape: tuple[int, ...],
        capacity: int,
        stack_size: int = 4,
        num_envs: int = 1,
        action_shape: tuple[int, ...] = (),
        action_dtype: npt.DTypeLike = np.int64,
        sampler: Sampler | None = None,
    ) -> ReplayStore:
        """Create an empty store at ``path`` (a directory the store owns) and open it for appending.

        ``capacity`` counts transitions; when full, the oldest transition is evicted. ``frame_shape`` is
        one frame (e.g. ``(84, 84)``); obs stacks hold ``stack_size`` frames.
        """
        frame_shape = parse_shape(frame_shape, "frame_shape", allow_empty=False)
        capacity = parse_positive_int(capacity, "capacity")
        stack_size = parse_positive_int(stack_size, "stack_size")
        num_envs = parse_positive_int(num_envs, "num_envs")
        action_shape = parse_shape(action_shape, "action_shape", allow_empty=True)
        dtype = parse_action_dtype(action_dtype)
        if capacity < num_envs:
            raise ValueError(f"capacity must be >= num_envs ({num_envs}); got {capacity}")
        directory = Path(path)
        if directory.exists():
            raise StoreExistsError(f"cannot create a store at {str(directory)!r}: the path already exists")
        frame_nbytes = int(np.prod(frame_shape))
        # Row slack lets adds continue between commits without reusing a committed row.
        slack = max(1024, 4 * num_envs, capacity // 8)
        layout = format.Layout(
            frame_shape=frame_shape,
            capacity=capacity,
            stack_size=stack_size,
            num_envs=num_envs,
            action_shape=action_shape,
            action_dtype=dtype.str,
            row_slots=capacity + slack,
            segment_bytes=max(1 << 20, min(capacity * 16, 1 << 28), 4 * frame_nbytes + 64),
        )
        frame_slots = (capacity + slack) * 21 // 20 + 2 * num_envs * (stack_size + 1) + 64
        commit = format.Commit(
            transitions_added=0,
            frames_written=0,
            bytes_written=0,
            frame_tail=0,
            frame_table_generation=0,
            frame_slots=frame_slots,
        )
        # Build the store beside its final path, then rename it into place: a crash never leaves a
        # half-made store at ``path``.
        directory.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f".{directory.name}.creating-", dir=directory.parent))
        try:
            FrameRing.create(
                building, frame_shape=frame_shape, segment_bytes=layout.segment_bytes, frame_slots=frame_slots
            ).close()
            TransitionTable.create(
                building / format.TRANSITIONS_NAME,
                dtype=row_dtype(action_shape, dtype),
                row_slots=layout.row_slots,
            ).close()
            format.write_header(building, layout, commit)
            try:
                os.rename(building, directory)
            except OSError:
                if directory.exists():
                    raise StoreExistsError(
                        f"cannot create a store at {str(directory)!r}: the path already exists"
                    ) from None
                raise
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        format.fsync_directory(directory.parent)
        return cls.open(directory, "r+", sampler=sampler)

    @classmethod
    def open(cls, path: PathLike, mode: str = "r", *, sampler: Sampler | None = None) -> ReplayStore:
        """Open an existing store read-only (``"r"``) or to read and append (``"r+"``)."""
        mode = parse_mode(mode)
        directory = Path(path)
        layout, commit = format.read_header(directory)
        lock = _acquire_writer_lock(directory) if mode == "r+" else None
        try:
            if lock is not None:
                # A writer that died may have left newer, uncommitted files: reread under the lock.
                layout, commit = format.read_header(directory)
            return cls(directory, layout, commit, mode=mode, sampler=sampler or UniformSampler(), lock=lock)
        except BaseException:
            if lock is not None:
                lock.close()
            raise

    # -- properties ------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._directory

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def frame_shape(self) -> tuple[int, ...]:
        return self._layout.frame_shape

    @property
    def capacity(self) -> int:
        return self._layout.capacity

    @property
    def stack_size(self) -> int:
        return self._layout.stack_size

    @property
    def num_envs(self) -> int:
        return self._layout.num_envs

    @property
    def action_shape(self) -> tuple[int, ...]:
        return self._layout.action_shape

    @property
    def action_dtype(self) -> np.dtype:
        return self._action_dtype

    @property
    def sampler(self) -> Sampler:
        return self._sampler

    @property
    def transitions_added(self) -> int:
        """Transitions ever added (never decreases); ``len(store) == min(transitions_added, capacity)``."""
        return self._transitions_added

    @property
    def stored_steps(self) -> range:
        """The steps of the stored transitions, oldest first."""
        return range(max(0, self._transitions_added - self.capacity), self._transitions_added)

    def __len__(self) -> int:
        return min(self._transitions_added, self.capacity)

    def __repr__(self) -> str:
        if self._closed:
            return f"<Closed ReplayStore {str(self._directory)!r}>"
        return (
            f"<ReplayStore {str(self._directory)!r} mode={self._mode!r} "
            f"transitions={len(self):,}/{self.capacity:,} frame_shape={self.frame_shape} "
            f"stack_size={self.stack_size} num_envs={self.num_envs}>"
        )

    def bytes_on_disk(self) -> int:
        """Bytes the store's files occupy on disk (allocated blocks, so sparse files count what is written)."""
        total = 0
        for root, _, files in os.walk(self._directory):
            for name in files:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
        return total

    # -- adding ----------------------------------------------------------------------------------

    def add(
        self,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        terminated: npt.ArrayLike,
        truncated: npt.ArrayLike,
        *,
        env_mask: npt.ArrayLike | None = None,
    ) -> None:
        """Record one transition per env (with ``num_envs > 1`` every argument has a leading env axis).

        ``next_obs`` is the true next observation (the final one when the episode ended). While an env's
        episode continues, ``obs`` equals its previous ``next_obs`` and only the new frame is written.
        ``env_mask`` (bool, one per env) records only the envs marked True: the others' entries are
        validated but are not transitions (gymnasium's next-step autoreset returns such an entry for an
        env the step after its episode ended).
        """
        self._check_writable("add")
        layout = self._layout
        arguments = parse_add(
            obs,
            action,
            reward,
            next_obs,
            terminated,
            truncated,
            frame_shape=layout.frame_shape,
            stack_size=layout.stack_size,
            num_envs=layout.num_envs,
            action_shape=layout.action_shape,
            action_dtype=self._action_dtype,
        )
        envs = parse_env_mask(env_mask, layout.num_envs)
        if not envs:
            return
        plan = self._plan_frames(arguments, envs)
        self._make_room(new_rows=len(envs), new_frames=len(plan.payloads))
        self._frames.append(plan.payloads, plan.prev_deltas)
        first_step = self._transitions_added
        self._table.write(
            first_step,
            next_frames=plan.next_frames,
            oldest_frames=plan.oldest_frames,
            envs=envs,
            rewards=arguments.reward[envs],
            flags=plan.flags,
            actions=arguments.action[envs],
        )
        self._transitions_added += len(envs)
        for i, env in enumerate(envs):
            episode = self._episodes[env]
            if plan.starts[i] is not None:
                episode.start(*plan.starts[i])
            episode.advance(
                arguments.next_obs[env][-1].tobytes(),
                plan.next_frames[i],
                step=first_step + i,
                ended=bool(arguments.terminated[env] or arguments.truncated[env]),
            )

    def _plan_frames(self, arguments: AddArguments, envs: list[int]) -> _FramePlan:
        """Decide which frames each recorded env writes, and compress them; nothing is written yet."""
        plan = _FramePlan()
        next_step = self._frames.frames_written
        oldest_stored = self.stored_steps.start
        for env in envs:
            obs = arguments.obs[env]
            episode = self._episodes[env]
            flags = TERMINATED * bool(arguments.terminated[env]) | TRUNCATED * bool(arguments.truncated[env])
            if episode.continues_with(obs.tobytes(), arguments.stacked, oldest_stored):
                obs_steps = list(episode.frame_steps)
                plan.starts.append(None)
            else:
                # A stack's leading repeats of its first frame come back by padding: store that frame once.
                first_distinct = 1
                while first_distinct < len(obs) and obs[first_distinct].tobytes() == obs[0].tobytes():
                    first_distinct += 1
                frames = [frame.tobytes() for frame in obs[first_distinct - 1 :]]
                steps = list(range(next_step, next_step + len(frames)))
                plan.payloads.extend(codec.compress(frame) for frame in obs[first_distinct - 1 :])
                plan.prev_deltas.extend([0] + [1] * (len(frames) - 1))
                next_step += len(frames)
                obs_steps = [steps[0]] * (self.stack_size - len(steps)) + steps
                plan.starts.append((frames, steps))
                flags |= EPISODE_START
            plan.payloads.append(codec.compress(arguments.next_obs[env][-1]))
            plan.prev_deltas.append(next_step - obs_steps[-1])
            plan.next_frames.append(next_step)
            plan.oldest_frames.append(obs_steps[0])
            plan.flags.append(flags)
            next_step += 1
        return plan

    def _make_room(self, *, new_rows: int, new_frames: int) -> None:
        """Commit (and grow the frame table) before an add would reuse a slot the committed header counts."""
        committed_rows = max(0, self._commit.transitions_added - self.capacity)
        rows_fit = self._transitions_added + new_rows - committed_rows <= self._layout.row_slots
        frames_fit = (
            self._frames.frames_written + new_frames - self._commit.frame_tail <= self._frames.frame_slots
        )
        if rows_fit and frames_fit:
            return
        self.flush()
        needed = self._frames.frames_written + new_frames - self._commit.frame_tail
        if needed > self._frames.frame_slots:
            old_generation = self._frames.generation
            self._frames.grow(max(needed, self._frames.frame_slots * 3 // 2), self._commit.frame_tail)
            self._write_commit(
                replace(
                    self._commit,
                    frame_table_generation=self._frames.generation,
                    frame_slots=self._frames.frame_slots,
                )
            )
            self._frames.remove_generation(old_generation)

    # -- committing ------------------------------------------------------------------------------

    def flush(self) -> None:
        """Make everything added so far durable, then commit it: after a crash it is all still there."""
        self._check_open("flush")
        if self._mode != "r+":
            return
        self._frames.sync()
        self._table.sync()
        frame_tail = self._frame_tail()
        self._write_commit(
            format.Commit(
                transitions_added=self._transitions_added,
                frames_written=self._frames.frames_written,
                bytes_written=self._frames.bytes_written,
                frame_tail=frame_tail,
                frame_table_generation=self._frames.generation,
                frame_slots=self._frames.frame_slots,
            )
        )
        self._frames.release_segments_before(self._frames.position_of(frame_tail))

    def _write_commit(self, commit: format.Commit) -> None:
        format.write_header(self._directory, self._layout, commit)
        self._commit = commit

    def _frame_tail(self) -> int:
        """The oldest frame step that a stored transition still needs."""
        stored = self.stored_steps
        if not stored:
            return self._frames.frames_written
        return self._table.oldest_frame(stored.start, stored.stop)

    def close(self) -> None:
        """Commit (in ``"r+"``) and release the files. Closing twice is allowed."""
        if self._closed:
            return
        try:
            if self._mode == "r+":
                self.flush()
        finally:
            self._closed = True
            self._frames.close()
            self._table.close()
            if self._lock is not None:
                self._lock.close()
                self._lock = None

    def __enter__(self) -> ReplayStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------------

    def sample(self, batch_size: int, rng: np.random.Generator | int | None = None) -> Batch:
        """``batch_size`` stored transitions drawn by the store's sampler (uniform by default).

        The same contents and the same seed give the same batch, also after close and reopen.
        """
        self._check_open("sample")
        batch_size = parse_positive_int(batch_size, "batch_size")
        generator = parse_rng(rng)
        if len(self) == 0:
            raise ValueError("cannot sample from an empty store: add transitions first")
        steps = self._sampler.sample(batch_size, stored=self.stored_steps, rng=generator)
        return self._gather(steps)

    def read(self, steps: npt.ArrayLike) -> Batch:
        """The stored transitions with these steps, in the given order."""
        self._check_open("read")
        array = np.asarray(steps)
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            raise TypeError(f"steps must be a 1-D array of ints; got {array.dtype}{list(array.shape)}")
        array = array.astype(np.int64)
        stored = self.stored_steps
        outside = (array < stored.start) | (array >= stored.stop)
        if outside.any():
            raise IndexError(
                f"step {int(array[outside][0])} is not stored; stored steps are "
                f"[{stored.start}, {stored.stop})"
            )
        return self._gather(array)

    def episodes(self) -> list[Episode]:
        """The stored episodes, oldest first: env, steps, return, how each ended, whether it is complete."""
        self._check_open("list episodes")
        stored = self.stored_steps
        columns = self._table.columns(stored.start, stored.stop, ("env", "flags", "reward"))
        open_envs = {env for env, episode in enumerate(self._episodes) if episode.open}
        return split_episodes(
            np.arange(stored.start, stored.stop, dtype=np.int64),
            columns["env"],
            columns["flags"],
            columns["reward"],
            open_envs=open_envs,
        )

    def _transition_frames(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        next_frames = self._table.read(steps)["next_frame"].astype(np.int64)
        return stacking.transition_frames(next_frames, self._frames.prev_deltas, self.stack_size)

    def _gather(self, steps: npt.NDArray[np.int64]) -> Batch:
        rows = self._table.read(steps)
        frames = stacking.transition_frames(
            rows["next_frame"].astype(np.int64), self._frames.prev_deltas, self.stack_size
        )
        # obs and next_obs are two views of one (B, stack_size + 1) array of frames: they share
        # stack_size - 1 frames, so each is decoded once, straight into the memory the batch returns.
        pixels = np.empty((*frames.shape, *self.frame_shape), np.uint8)
        self._frames.decode_into(frames.reshape(-1), pixels.reshape(-1, *self.frame_shape))
        flags = rows["flags"]
        return Batch(
            obs=pixels[:, stacking.obs_columns(self.stack_size)],
            action=np.ascontiguousarray(rows["action"]).astype(self._action_dtype),
            reward=rows["reward"].astype(np.float32),
            next_obs=pixels[:, stacking.next_obs_columns(self.stack_size)],
            terminated=(flags & TERMINATED) != 0,
            truncated=(flags & TRUNCATED) != 0,
            index=steps,
            env_index=rows["env"].astype(np.int64),
        )

    # -- state -----------------------------------------------------------------------------------

    def _load_env_state(self) -> None:
        """Rebuild each env's episode in progress from its newest stored transition."""
        self._episodes = [EnvEpisode(self.stack_size) for _ in range(self.num_envs)]
        stored = self.stored_steps
        newest = self._table.newest_of_each_env(stored.start, stored.stop, self.num_envs)
        if not newest:
            return
        steps = np.array(sorted(newest.values()), dtype=np.int64)
        rows = self._table.read(steps)
        frame_steps = self._transition_frames(steps)
        next_obs = self._gather(steps).next_obs
        for i, step in enumerate(steps.tolist()):
            episode = self._episodes[int(rows["env"][i])]
            episode.frames.extend(frame.tobytes() for frame in next_obs[i])
            episode.frame_steps.extend(frame_steps[i, 1:].tolist())
            episode.last_step = step
            episode.open = not rows["flags"][i] & (TERMINATED | TRUNCATED)

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise ClosedStoreError(f"cannot {operation}: the store at {str(self._directory)!r} is closed")

    def _check_writable(self, operation: str) -> None:
        self._check_open(operation)
        if self._mode != "r+":
            raise ReadOnlyStoreError(
                f"cannot {operation}: the store at {str(self._directory)!r} is open read-only (mode 'r'); "
                "open it with mode 'r+' to append"
            )


def _acquire_writer_lock(directory: Path) -> IO[bytes]:
    """Hold an exclusive lock for the writer; the OS releases it when the process dies."""
    lock = open(directory / format.LOCK_NAME, "ab")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise StoreLockedError(
            f"the store at {str(directory)!r} is already open for writing by another process "
            "(open it with mode 'r' to read)"
        ) from None
    return lock
