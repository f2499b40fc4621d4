"""Record a real Atari game into an mmreplay store, then sample it and report what it took.

The agent's side of a DQN replay, on real data: ``ALE/Pong-v5`` (``--game``) made with ``frameskip=1``
and wrapped like the DQN papers (gymnasium's ``AtariPreprocessing``: 84x84 grayscale, frame_skip=4;
``FrameStackObservation``: 4-frame stacks), played by a uniform random policy for ``--steps`` env steps.
Every transition is added to a ``ReplayStore`` on disk; the store writes each new frame once,
lz4-compressed. Then the demo samples batches for a few seconds and prints transitions, episodes, bytes
on disk per transition against raw frames, add and sample throughput, and checks that sampled obs and
next_obs are exactly the stacks that were added.

    .venv/bin/python scripts/demo.py                          # ~1 minute: 40,000 Pong steps
    .venv/bin/python scripts/demo.py --game ALE/MsPacman-v5 --steps 100000 --num-envs 4 --path pacman.mmr

The store is kept, by default in ``demo.mmr`` at the repository's root (which git ignores), and the
demo ends by printing the ``mmreplay`` commands to try on it. A later run replaces the store at the
default path; a store at a path given with ``--path`` is only replaced with ``--replace``, and a path
that holds something other than a store is never deleted. ``--discard`` records into a temporary
directory and deletes it at exit.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mmreplay import ReplayStore, StoreNotFoundError

DEFAULT_PATH = Path(__file__).resolve().parent.parent / "demo.mmr"  # the repository's root; git ignores it

FRAME_SHAPE = (84, 84)
STACK_SIZE = 4
RAW_FRAME_BYTES = int(np.prod(FRAME_SHAPE))  # 7,056: one uncompressed frame
RAW_STACK_BYTES = STACK_SIZE * RAW_FRAME_BYTES  # 28,224: one uncompressed 4-frame obs


def make_env(game: str, seed: int):  # noqa: ANN201 (gymnasium is imported lazily, see main)
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    env = gym.make(game, frameskip=1)  # AtariPreprocessing does the frame skipping (and max-pooling)
    env = AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True)
    env = FrameStackObservation(env, stack_size=STACK_SIZE)  # pads an episode's start with its reset frame
    env.action_space.seed(seed)
    return env


def digest(stack: np.ndarray) -> bytes:
    return hashlib.blake2b(stack.tobytes(), digest_size=16).digest()


class Recorder:
    """Adds transitions to the store and remembers a digest of each, by step, to check samples later."""

    def __init__(self, store: ReplayStore):
        self.store = store
        self.obs_digests: list[bytes] = []
        self.next_obs_digests: list[bytes] = []
        self.terminated: list[bool] = []
        self.episodes = 0
        self.add_seconds = 0.0

    @property
    def transitions(self) -> int:
        return len(self.terminated)

    def add(self, obs, action, reward, next_obs, terminated, truncated, env_mask=None) -> None:  # noqa: ANN001
        start = time.perf_counter()
        if env_mask is None:
            self.store.add(obs, action, reward, next_obs, terminated, truncated)
        else:
            self.store.add(obs, action, reward, next_obs, terminated, truncated, env_mask=env_mask)
        self.add_seconds += time.perf_counter() - start
        if env_mask is None:  # one env, no env axis
            obs, next_obs, terminated, truncated = obs[None], next_obs[None], np.array([terminated]), np.array([truncated])
            env_mask = np.ones(1, bool)
        # A vector add numbers the recorded envs' transitions in env order: keep the digests in that order.
        for env in np.flatnonzero(env_mask):
            self.obs_digests.append(digest(obs[env]))
            self.next_obs_digests.append(digest(next_obs[env]))
            self.terminated.append(bool(terminated[env]))
            self.episodes += bool(terminated[env] or truncated[env])


def record_one_env(args: argparse.Namespace, recorder: Recorder, progress: "Progress") -> None:
    env = make_env(args.game, args.seed)
    obs, _ = env.reset(seed=args.seed)
    for _ in range(args.steps):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        # next_obs is the true next observation, the final one when the episode ended.
        recorder.add(obs, action, reward, next_obs, terminated, truncated)
        obs = env.reset()[0] if terminated or truncated else next_obs
        progress.update()
    env.close()


def record_vector_env(args: argparse.Namespace, recorder: Recorder, progress: "Progress") -> None:
    import gymnasium as gym

    envs = gym.vector.SyncVectorEnv(
        [lambda i=i: make_env(args.game, args.seed + i) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )
    envs.action_space.seed(args.seed)
    obs, _ = envs.reset(seed=args.seed)
    # gymnasium 1.x, NEXT_STEP autoreset (the default): on the step where env i's episode ends, next_obs[i]
    # is its final obs (the true next obs: record it as usual). On its *following* step the vector env
    # ignores env i's action and resets it: obs[i] is then the final obs, next_obs[i] the reset obs,
    # reward 0 and no flags. That entry is not a transition, so it is masked out of the add
    # (env_mask=False); the reset obs becomes obs[i] for the step after, and the store starts a new
    # episode there because the previous transition ended.
    # (In SAME_STEP mode instead, next_obs[i] is already the reset obs on the ending step and the final
    # obs is in infos["final_obs"][i]: record that one, and skip nothing.)
    resetting = np.zeros(args.num_envs, dtype=bool)
    while recorder.transitions < args.steps:
        actions = envs.action_space.sample()
        next_obs, rewards, terminated, truncated, _ = envs.step(actions)
        recording = ~resetting
        if recording.any():
            recorder.add(obs, actions, rewards, next_obs, terminated, truncated, env_mask=recording)
        resetting = terminated | truncated
        obs = next_obs
        progress.update(int(recording.sum()))
    envs.close()


class Progress:
    def __init__(self, total: int, recorder: Recorder):
        self.total, self.recorder = total, recorder
        self.done = 0
        self.start = self.last = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if now - self.last >= 5 or self.done >= self.total:
            self.last = now
            rate = self.done / (now - self.start)
            print(
                f"  {self.done:>9,}/{self.total:,} transitions  {self.recorder.episodes:>4} episodes  "
                f"{rate:7,.0f} env steps/s  store: {self.recorder.store.bytes_on_disk / 2**20:7.1f} MiB on disk",
                flush=True,
            )


def measure_sampling(store: ReplayStore, *, batch_size: int, seconds: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    while time.perf_counter() - start < min(0.25, seconds):  # warm up: page faults, allocator
        store.sample(batch_size, rng=rng)
    batches, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(10):
            store.sample(batch_size, rng=rng)
        batches += 10
    return batches / elapsed


def check_samples(store: ReplayStore, recorder: Recorder, *, batches: int, batch_size: int, seed: int) -> tuple[int, int, int]:
    """(transitions checked, stack-shift mismatches, mismatches against what was added)."""
    rng = np.random.default_rng(seed + 1)
    checked = shift_bad = added_bad = 0
    for _ in range(batches):
        batch = store.sample(batch_size, rng=rng)
        # next_obs is obs moved on by one frame: within an episode the stacks share stack_size - 1 frames
        # (an episode's first stacks repeat its reset frame in both, so this holds there too).
        shift_bad += int((batch.next_obs[:, :-1] != batch.obs[:, 1:]).any(axis=(1, 2, 3)).sum())
        for i, step in enumerate(batch.index.tolist()):
            same = (
                digest(batch.obs[i]) == recorder.obs_digests[step]
                and digest(batch.next_obs[i]) == recorder.next_obs_digests[step]
                and bool(batch.terminated[i]) == recorder.terminated[step]
            )
            added_bad += not same
        checked += len(batch)
    return checked, shift_bad, added_bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="ALE/Pong-v5", help="a gymnasium ALE env id")
    parser.add_argument("--steps", type=int, default=40_000, help="transitions to record (all envs together)")
    parser.add_argument("--num-envs", type=int, default=1, help="> 1: a gymnasium SyncVectorEnv")
    parser.add_argument("--capacity", type=int, help="store capacity in transitions (default: --steps)")
    parser.add_argument("--path", type=Path, help="store directory to create and keep (default: demo.mmr in the "
                                                  "repository's root, replaced by each run)")
    parser.add_argument("--replace", action="store_true", help="replace the store at --path if there is one")
    parser.add_argument("--discard", action="store_true",
                        help="record into a temporary directory and delete it at exit (--path is then ignored)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.num_envs < 1:
        parser.error("--steps and --num-envs must be >= 1")

    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)  # ale-py ships the ROMs
    capacity = args.capacity or args.steps
    temporary = args.discard
    if temporary:
        path = Path(tempfile.mkdtemp(prefix="mmreplay-demo-")) / "store.mmr"
    else:
        path = args.path or DEFAULT_PATH
        problem = clear_path(path, replace=args.replace or args.path is None)
        if problem:
            print(f"demo: {problem}", file=sys.stderr)
            return 2
    print(f"mmreplay demo: {args.game}, {args.num_envs} env(s), random policy, 84x84 grayscale, "
          f"frame_skip 4, {STACK_SIZE}-frame stacks")
    print(f"store: {path} (capacity {capacity:,} transitions; "
          f"{'deleted at exit' if temporary else 'kept after the demo'})")
    store = ReplayStore.create(
        path, frame_shape=FRAME_SHAPE, capacity=capacity, stack_size=STACK_SIZE, num_envs=args.num_envs
    )
    try:
        recorder = Recorder(store)
        progress = Progress(args.steps, recorder)
        print(f"recording {args.steps:,} transitions ...")
        started = time.perf_counter()
        if args.num_envs == 1:
            record_one_env(args, recorder, progress)
        else:
            record_vector_env(args, recorder, progress)
        start = time.perf_counter()
        store.flush()
        recorder.add_seconds += time.perf_counter() - start
        record_seconds = time.perf_counter() - started

        print(f"sampling batches of {args.batch_size} for {args.sample_seconds:g} s ...")
        sample_rate = measure_sampling(store, batch_size=args.batch_size, seconds=args.sample_seconds, seed=args.seed)
        checked, shift_bad, added_bad = check_samples(
            store, recorder, batches=20, batch_size=args.batch_size, seed=args.seed
        )

        stored = len(store)
        on_disk = store.bytes_on_disk
        per_transition = on_disk / stored
        print()
        print(f"{'transitions added':<34}{recorder.transitions:>14,}  (stored: {stored:,})")
        print(f"{'episodes ended':<34}{recorder.episodes:>14,}")
        print(f"{'recording took':<34}{record_seconds:>13.1f}s  (env steps and adds)")
        print(f"{'bytes on disk':<34}{on_disk:>14,}  ({on_disk / 2**20:.1f} MiB)")
        print(f"{'bytes on disk per transition':<34}{per_transition:>14,.0f}")
        print(f"{'  raw, one frame per transition':<34}{RAW_FRAME_BYTES:>14,}  "
              f"-> compression x{RAW_FRAME_BYTES / per_transition:.1f}")
        print(f"{'  raw, one 4-stack per transition':<34}{RAW_STACK_BYTES:>14,}  "
              f"-> compression x{RAW_STACK_BYTES / per_transition:.1f}")
        print(f"{'add throughput':<34}{recorder.transitions / recorder.add_seconds:>14,.0f}  transitions/s "
              f"(time inside store.add and the final flush)")
        print(f"{'sample throughput':<34}{sample_rate:>14,.0f}  batches/s (batch {args.batch_size})")
        ok = shift_bad == 0 and added_bad == 0
        print(f"{'sampled batches check':<34}{'ok' if ok else 'FAILED':>14}  ({checked:,} transitions: "
              f"next_obs[:, :-1] == obs[:, 1:] failed {shift_bad}, differ from what was added {added_bad})")
    finally:
        store.close()
        if temporary:
            shutil.rmtree(path.parent, ignore_errors=True)
    if not temporary:
        print_next_commands(path)
    return 0 if ok else 1


def clear_path(path: Path, *, replace: bool) -> str | None:
    """Make way for a new store at ``path``; returns why it cannot, or None when the way is clear.

    Only an mmreplay store (a directory with a header, even a damaged one) is ever deleted, and only
    with ``replace``.
    """
    if not path.exists() and not path.is_symlink():
        return None
    try:
        ReplayStore.open(path, "r").close()
    except StoreNotFoundError:
        return f"{path} exists and is not an mmreplay store; it is left alone: pass another --path"
    except Exception:  # noqa: BLE001 (a damaged store, or one in an older format: still a store)
        pass
    if not replace:
        return (f"{path} already holds a store: look at it ('mmreplay info {path}'), pass --replace to record "
                f"a new one in its place, or pass another --path")
    print(f"replacing the store an earlier run left at {path}")
    shutil.rmtree(path)
    return None


def print_next_commands(path: Path) -> None:
    """What to try on the kept store, with the paths as they can be typed from the current directory."""
    script = Path(sys.executable).parent / "mmreplay"
    command = shell_path(script) if script.exists() else f"{shell_path(Path(sys.executable))} -m mmreplay"
    store = shell_path(path)
    with ReplayStore.open(path, "r") as kept:
        episodes = kept.episodes()
    episode = next((e.id for e in episodes if e.complete), episodes[0].id if episodes else 0)
    print(f"\nstore kept at {store}. Next, look at it with mmreplay's command line:")
    print(f"  {command} info {store}")
    print(f"  {command} episodes {store}")
    print(f"  {command} show {store} {episode} -o episode{episode}.gif     # or .png: a contact sheet")
    print(f"  {command} verify {store}")
    if script.exists():
        print(f"('source {shell_path(script.parent / 'activate')}' puts mmreplay on your PATH; the next run "
              f"replaces {store}, --discard deletes its store at exit)")


def shell_path(path: Path) -> str:
    """``path`` relative to the current directory when it is inside it, else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


if __name__ == "__main__":
    sys.exit(main())
