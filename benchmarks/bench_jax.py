"""A batch on the JAX device: flashbax 0.1.3's flat buffer against a store read through ``mmreplay.jax``.

Both hold the same real Pong transitions (``tests/atari_data.py``'s recorded frames, 84x84, stacks of 4).
One process, rounds alternating between the two, each round timing ``--batches`` batches of 32 made ready
on JAX's default device (``block_until_ready``):

- ``flashbax``: ``make_flat_buffer`` (``add_batch_size=1``), its jitted ``sample(state, key)`` of 32; each
  experience holds the obs and next_obs stacks whole (as flashbax's flat buffer stores them: a pair of
  consecutive timesteps);
- ``mmreplay.jax.batches``: the store's ``batches()`` thread and ``to_jax`` (the frames sent once, the stacks
  cut on the device), keyed by a jax key;
- ``sample + to_jax``: ``store.sample`` and ``to_jax`` on the caller's thread, with no prefetch.

It also counts flashbax's wrong next observations: the flat buffer pairs each timestep with the one after
it, so at an episode end the pair's second obs is the next episode's first (the store keeps the final one).
Prints one JSON line per round and a summary (medians). Not a timed test: the figures go to
docs/benchmarks.md with the machine and date.

    python benchmarks/bench_jax.py --transitions 10000 --rounds 7
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def pong_stacks(count: int) -> list[tuple[np.ndarray, int, float, np.ndarray, bool]]:
    """``count`` real Pong transitions (obs stack, action, reward, next_obs stack, episode ended)."""
    from atari_data import load_stream

    stream = load_stream("pong", ("frames", "episode_start", "action", "reward", "terminated"), count + 64)
    transitions, stack = [], None
    for t in range(len(stream["frames"]) - 1):
        if stream["episode_start"][t] or stack is None:
            stack = np.repeat(stream["frames"][t][None], 4, axis=0)
        if stream["action"][t] < 0:
            continue
        next_stack = np.concatenate([stack[1:], stream["frames"][t + 1][None]])
        ended = bool(stream["terminated"][t]) or bool(stream["episode_start"][t + 1])
        transitions.append((stack, int(stream["action"][t]), float(stream["reward"][t]), next_stack, ended))
        stack = None if ended else next_stack
        if len(transitions) == count:
            break
    return transitions


def flashbax_buffer(transitions: list[Any]) -> tuple[Callable[[Any], Any], Any, int]:
    """A flat buffer of the transitions' timesteps (obs, action, reward, done), its jitted sample, and how many
    of its pairs (a timestep and the next, what its sample returns as first and second) hold a second obs
    that is not the transition's true next obs, counted by comparing the buffer's stored obs with them."""
    import flashbax as fbx
    import jax
    import jax.numpy as jnp

    buffer = fbx.make_flat_buffer(max_length=len(transitions) + 1, min_length=2, sample_batch_size=32,
                                  add_batch_size=1)
    timestep = {"obs": jnp.zeros((4, 84, 84), jnp.uint8), "action": jnp.int32(0), "reward": jnp.float32(0),
                "done": jnp.bool_(False)}
    state = buffer.init(timestep)
    add = jax.jit(buffer.add, donate_argnums=0)
    for obs, action, reward, next_obs, ended in transitions:
        step = {"obs": obs[None], "action": np.int32([action]), "reward": np.float32([reward]), "done": np.bool_([ended])}
        state = add(state, step)
    stored = state.experience["obs"][0]
    wrong = sum(1 for i in range(len(transitions) - 1)
                if not np.array_equal(np.asarray(stored[i + 1]), transitions[i][3]))
    sample = jax.jit(buffer.sample)
    return (lambda key: sample(state, key)), state, wrong


def time_batches(make: Callable[[], Any], batches: int) -> float:
    """Microseconds a batch, ``batches`` made ready in a row."""
    import jax

    started = time.perf_counter()
    for _ in range(batches):
        jax.block_until_ready(make())
    return (time.perf_counter() - started) / batches * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transitions", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=200, help="batches timed a round, each way")
    args = parser.parse_args(argv)

    import jax

    import mmreplay.jax
    from mmreplay import ReplayStore

    transitions = pong_stacks(args.transitions)
    sample_flashbax, _, wrong = flashbax_buffer(transitions)
    directory = Path(tempfile.mkdtemp(prefix="bench-jax-"))
    store = ReplayStore.create(directory / "pong.mmr", frame_shape=(84, 84), capacity=len(transitions))
    for obs, action, reward, next_obs, ended in transitions:
        store.add(obs, action, reward, next_obs, ended, False)
    store.flush()
    keys = iter(jax.random.split(jax.random.key(0), 10**6))
    stream = mmreplay.jax.batches(store, 32, key=next(keys))
    generator = mmreplay.jax.generator_from_key(next(keys))
    ways: dict[str, Callable[[], Any]] = {
        "flashbax": lambda: sample_flashbax(next(keys)),
        "mmreplay.jax.batches": lambda: next(stream),
        "sample + to_jax": lambda: mmreplay.jax.to_jax(store.sample(32, generator)),
    }
    for make in ways.values():  # compiled and warm before the first round
        time_batches(make, 5)
    rounds: dict[str, list[float]] = {name: [] for name in ways}
    for r in range(args.rounds):
        order = list(ways) if r % 2 == 0 else list(reversed(ways))
        for name in order:
            rounds[name].append(time_batches(ways[name], args.batches))
        print(json.dumps({"round": r, **{name: round(values[-1], 1) for name, values in rounds.items()}}), flush=True)
    stream.close()
    summary = {
        "transitions": len(transitions), "episode_ends": sum(t[4] for t in transitions),
        "flashbax_wrong_next_obs": wrong, "pairs_checked": len(transitions) - 1, "jax_device": str(jax.devices()[0]),
        "store_bytes_on_disk": store.bytes_on_disk(),
        "flashbax_bytes_on_device": len(transitions) * 4 * 84 * 84,
        **{f"{name} us/batch (median of {args.rounds})": round(statistics.median(values), 1)
           for name, values in rounds.items()},
    }
    store.close()
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
