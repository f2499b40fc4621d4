"""Replay over Ray, measured in one run on this machine with real Pong frames (batch 32, stack 4).

1. Bytes per sampled batch through Ray: the encoded batch (stored lz4 blocks + index) against its pixels.
2. Learner batches/s: a local store's ``sample`` against ``ShardedReplay`` (synchronous ``sample``, which
   draws from the states the shards' previous answers carried, one call per shard; ``refresh()`` then
   ``sample``, the two round trips every synchronous sample made before; ``sample(prefetch=, group=)``,
   served from groups fetched ahead as ``batches`` fetches them; the prefetching ``batches`` iterator with --prefetch and --group, with groups of 64 and with the small
   groups of before, and ``direct_read`` of co-located shards), same contents, in --rounds rounds: each
   rate is measured right after the local store's (an iterator first hands out what it fetched ahead
   meanwhile, untimed), and the ratios reported are the medians of the per-round ratios.
3. Ingest: transitions/s from K writer actors into S shards, until every writer's flush returned (sends of
   32 steps, the default, and of 128).
4. RLlib: ``MmreplayEpisodeReplayBuffer`` against RLlib's ``PrioritizedEpisodeReplayBuffer``, each in its
   own process, fed the same real Pong steps as ``(84, 84, 4)`` float32 in 4-step chunks (as DQN feeds
   them): RSS growth (scaled to 10,000 steps), seconds per 1,000 adds, ms per ``sample(32, n_step=3)``
   (median of 100); and the mmreplay buffer fed uint8 stacks, which it returns as uint8 (no conversion).

    python benchmarks/bench_ray.py [--seconds 5] [--rounds 3] [--prefetch 2] [--group 512] [--direct-group 64]
        [--writers 2] [--shards 2] [--rllib-steps 3000] [--paths client_sample,client_sample_refreshed]
        [--skip-ingest-128] [--frame-encoding lz4|lz4-reference]

Prints one JSON object (and writes it to --out if given).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mmreplay.testing import atari_frames

STACK = 4


def transitions(stream: dict[str, np.ndarray]) -> list[tuple[int, int, bool, bool]]:
    """(frame t, action, terminated, truncated) of every transition t of the stream."""
    steps = np.flatnonzero(stream["action"] >= 0)
    return [(int(t), int(stream["action"][t]), bool(stream["terminated"][t]), bool(stream["truncated"][t]))
            for t in steps]


def fill(add: Any, stream: dict[str, np.ndarray], *, repeat: int = 1) -> int:
    """Add the stream's transitions (single frames) through ``add(obs, action, reward, next_obs, term, trunc)``."""
    frames, rewards = stream["frames"], stream["reward"]
    count = 0
    for _ in range(repeat):
        for t, action, terminated, truncated in transitions(stream):
            add(frames[t], np.int64(action), np.float32(rewards[t]), frames[t + 1], np.bool_(terminated),
                np.bool_(truncated))
            count += 1
    return count


def rate(call: Any, seconds: float, warmup: int = 1) -> float:
    """Calls per second of ``call()`` over about ``seconds``, after ``warmup`` calls (for a prefetching
    iterator: what it fetched ahead while something else was measured, so that only its steady state
    is timed)."""
    for _ in range(warmup):
        call()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        count += 1
    return count / (time.perf_counter() - start)


def iterate(batches: Any) -> Any:
    """A call that takes the iterator's next batch."""
    return lambda: next(batches)


def ray_figures(stream: dict[str, np.ndarray], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    # Loopback alone (tests/ray_loopback.py): set before ray is imported, or Ray 2.60 listens on every interface.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    from mmreplay import ReplayStore, decode_batch
    from mmreplay.ray import ShardedReplay

    results: dict[str, Any] = {}
    encoding = {} if args.frame_encoding is None else {"frame_encoding": args.frame_encoding}
    local = ReplayStore.create(work / "local.mmr", frame_shape=(84, 84), capacity=200_000, **encoding)
    start = time.perf_counter()
    results["transitions"] = fill(local.add, stream)
    local.flush()
    results["add_transitions_per_s"] = round(results["transitions"] / (time.perf_counter() - start))
    results["add_encoded_transitions_per_s"] = add_encoded_rate(stream, work, encoding=encoding)
    rng = np.random.default_rng(0)
    encoded = local.sample_encoded(32, rng=0)
    decoded = decode_batch(encoded)
    results["bytes_per_batch_decoded"] = int(decoded.obs.base.nbytes)
    results["bytes_per_batch_encoded"] = int(encoded.nbytes)

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             _temp_dir=str(work / "ray"), namespace="mmreplay-bench")
    try:
        replay = ShardedReplay.create("bench", str(work / "shards"), num_shards=args.shards, frame_shape=(84, 84),
                                      capacity=400_000, placement="local", envs_per_shard=16, **encoding)

        @ray.remote(num_cpus=0)
        def act(name: str, key: str, stream_ref: Any, steps_per_send: int) -> int:
            writer = ShardedReplay.connect(name).writer(key, shard=int(key[1:]) % args.shards,
                                                        steps_per_send=steps_per_send)
            count = fill(writer.add, stream_ref)
            writer.flush()
            return count

        def ingest(name: str, steps_per_send: int) -> dict[str, Any]:
            start = time.perf_counter()
            added = sum(ray.get([act.remote(name, f"w{k}", stream_ref, steps_per_send) for k in range(args.writers)]))
            seconds = time.perf_counter() - start
            return {"writers": args.writers, "shards": args.shards, "steps_per_send": steps_per_send,
                    "transitions": added, "seconds": round(seconds, 2), "transitions_per_s": round(added / seconds)}

        stream_ref = ray.put(stream)
        results["ingest"] = ingest("bench", 32)  # the writers' default sends
        # Larger sends: a Ray call per 128 steps of an env instead of 32 (into replays of their own).
        if not args.skip_ingest_128:
            larger = ShardedReplay.create("bench-128", str(work / "shards-128"), num_shards=args.shards,
                                          frame_shape=(84, 84), capacity=400_000, placement="local", envs_per_shard=16,
                                          **encoding)
            results["ingest_steps_per_send_128"] = ingest("bench-128", 128)
            larger.close(destroy=True)
        parts = replay.sample_encoded(32, rng=0)
        results["bytes_per_batch_over_ray"] = int(sum(part.nbytes for _, part, _ in parts))
        sequences = local.sample_sequences_encoded(8, 10, rng=0)
        results["sequences_8x10_bytes_decoded_encoded"] = [int(sequences.decode().obs.base.nbytes), int(sequences.nbytes)]
        # Rates in rounds, each path right after the local store's own sample: ratios per round, then medians.
        paths = {
            "client_sample": lambda: replay.sample(32, rng),
            "client_sample_refreshed": lambda: (replay.refresh(), replay.sample(32, rng)),
            "client_sample_prefetched": lambda: replay.sample(32, rng, prefetch=args.prefetch, group=args.group),
            "client_prefetch": iterate(replay.batches(32, prefetch=args.prefetch, group=args.group, rng=1)),
            "client_prefetch_group64": iterate(replay.batches(32, prefetch=3, group=64, rng=4)),
            "client_prefetch_group4": iterate(replay.batches(32, prefetch=4, group=4, rng=3)),
            "client_direct_read": iterate(replay.batches(32, prefetch=2, group=args.direct_group, rng=2, direct_read=True)),
        }
        # What each path holds fetched ahead: taken before it is timed, so that a prefetch made while the
        # local store was measured does not count.
        ahead = {"client_sample": 1, "client_sample_refreshed": 1, "client_sample_prefetched": args.prefetch * args.group,
                 "client_prefetch": args.prefetch * args.group, "client_prefetch_group64": 192,
                 "client_prefetch_group4": 16,
                 "client_direct_read": 2 * args.direct_group}
        if args.paths:
            paths = {name: call for name, call in paths.items() if name in args.paths.split(",")}
        rounds: dict[str, list[float]] = {"local_sample": [], **{name: [] for name in paths}}
        ratios: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.rounds):
            for name, call in paths.items():
                local_rate = rate(lambda: local.sample(32, rng), args.seconds)
                rounds["local_sample"].append(local_rate)
                rounds[name].append(rate(call, args.seconds, warmup=ahead[name]))
                ratios[name].append(rounds[name][-1] / local_rate)
        results["settings"] = {"prefetch": args.prefetch, "group": args.group, "rounds": args.rounds,
                               "seconds_per_rate": args.seconds, "prefetch_group64": [3, 64], "prefetch_group4": [4, 4],
                               "direct_read": [2, args.direct_group]}
        for name, values in rounds.items():
            results[f"{name}_batches_per_s"] = round(float(np.median(values)))
        for name, values in ratios.items():
            results[f"{name.removeprefix('client_')}_over_local"] = round(float(np.median(values)), 3)
        for name, values in rounds.items():
            results[f"{name}_us_per_batch"] = round(1e6 / float(np.median(values)))
        replay.close(destroy=True)
    finally:
        ray.shutdown()
        local.close()
    return results


def add_encoded_rate(stream: dict[str, np.ndarray], work: Path, steps_per_send: int = 32, *,
                     encoding: dict[str, str] | None = None) -> int:
    """Transitions/s into a store through ``add_encoded`` (what a shard does per send), the stream's
    frames encoded beforehand (the writers' side), in sends of ``steps_per_send`` steps of one episode."""
    from mmreplay import ReplayStore, encode_frames

    frames = stream["frames"]
    sends = []
    rows = transitions(stream)
    for first in range(0, len(rows), steps_per_send):
        part = rows[first : first + steps_per_send]
        cut = next((i + 1 for i, row in enumerate(part) if row[2] or row[3]), len(part))  # one episode a send
        part = part[:cut]
        ts = np.array([row[0] for row in part])
        used = np.unique(np.concatenate([ts, ts + 1]))
        position = {int(t): i for i, t in enumerate(used)}
        sends.append((encode_frames(frames[used]), np.array([position[int(t)] for t in ts]),
                      np.array([row[1] for row in part]), stream["reward"][ts],
                      np.array([position[int(t) + 1] for t in ts]), np.array([row[2] for row in part]),
                      np.array([row[3] for row in part])))
    store = ReplayStore.create(work / "encoded.mmr", frame_shape=(84, 84), capacity=200_000, **(encoding or {}))
    start = time.perf_counter()
    for send in sends:
        store.add_encoded(*send)
    store.flush()
    seconds = time.perf_counter() - start
    count = len(store)
    store.close()
    return round(count / seconds)


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rllib_child(kind: str, steps: int, work: Path) -> dict[str, Any]:
    """Feed ``steps`` real Pong steps to one RLlib buffer in 4-step chunks; time adds and samples."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import PrioritizedEpisodeReplayBuffer

    from mmreplay.rllib import MmreplayEpisodeReplayBuffer

    stream = atari_frames.load("pong", atari_frames.BENCHMARK_FRAMES)
    frames = stream["frames"]
    before = rss_mib()
    if kind == "rllib":
        buffer = PrioritizedEpisodeReplayBuffer(capacity=1_000_000, alpha=0.6, beta=0.4)
    else:
        buffer = MmreplayEpisodeReplayBuffer(capacity=1_000_000, path=str(work / f"rllib-{kind}.mmr"), seed=0)
    at_init = rss_mib()

    def stacked(t: int, start: int) -> np.ndarray:  # (84, 84, 4) float32 as RLlib's Atari wrapper gives
        indices = [max(start, t - 3 + i) for i in range(STACK)]
        pixels = frames[indices].transpose(1, 2, 0)
        return pixels if kind == "mmreplay-uint8" else pixels.astype(np.float32) / 128 - 1

    add_seconds, added, episode, chunk_start, start_frame = 0.0, 0, 0, None, 0
    t = 0
    while added < steps:
        if stream["episode_start"][t]:
            start_frame, episode = t, episode + 1
        stop = t
        while stop < t + 4 and stream["action"][stop] >= 0:
            stop += 1
        if stop == t:  # an episode's final frame: the next one starts a new episode
            t += 1
            continue
        ended = bool(stream["terminated"][stop - 1] or stream["truncated"][stop - 1])
        chunk = SingleAgentEpisode(
            id_=f"e{episode}", observations=[stacked(i, start_frame) for i in range(t, stop + 1)],
            actions=[int(a) for a in stream["action"][t:stop]], rewards=[float(r) for r in stream["reward"][t:stop]],
            terminated=bool(stream["terminated"][stop - 1]), truncated=bool(stream["truncated"][stop - 1]),
            len_lookback_buffer=0, t_started=t - start_frame,
        )
        chunk.to_numpy()
        began = time.perf_counter()
        buffer.add([chunk])
        add_seconds += time.perf_counter() - began
        if added == 0:  # growth is counted from the first add: mmreplay makes its store there
            at_first_add, first_chunk = rss_mib(), stop - t
        added += stop - t
        t = stop + (1 if ended else 0)
    after = rss_mib()
    sample_times = []
    for _ in range(100):
        began = time.perf_counter()
        buffer.sample(num_items=32, n_step=3, gamma=0.99, beta=0.4, batch_length_T=0, lookback=0,
                      min_batch_length_T=0, sample_episodes=True)
        sample_times.append(time.perf_counter() - began)
    figures = {
        "kind": kind, "steps": added, "rss_at_init_mib": round(at_init - before, 1),
        "rss_at_first_add_mib": round(at_first_add - before, 1),
        "rss_growth_mib": round(after - at_first_add, 1),
        "rss_growth_per_10k_steps_mib": round((after - at_first_add) * 10_000 / (added - first_chunk), 1),
        "add_s_per_1000_steps": round(add_seconds * 1000 / added, 3),
        "sample_ms_per_batch": round(1000 * float(np.median(sample_times)), 2),
    }
    if kind != "rllib":
        figures["bytes_on_disk"] = buffer.store.bytes_on_disk
        buffer.store.close()
    return figures


def rllib_figures(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    results = {}
    for kind in ("rllib", "mmreplay", "mmreplay-uint8"):
        run = subprocess.run([sys.executable, __file__, "--rllib-child", kind, "--rllib-steps", str(args.rllib_steps),
                              "--work", str(work)], capture_output=True, text=True, timeout=1800)
        if run.returncode != 0:
            raise RuntimeError(f"the {kind} buffer's run failed:\n{run.stderr[-3000:]}")
        results[kind] = json.loads(run.stdout.strip().splitlines()[-1])
    mine, theirs = results["mmreplay"], results["rllib"]
    results["rss_growth_ratio"] = round(mine["rss_growth_per_10k_steps_mib"] / theirs["rss_growth_per_10k_steps_mib"], 4)
    results["sample_time_ratio"] = round(mine["sample_ms_per_batch"] / theirs["sample_ms_per_batch"], 3)
    results["add_time_ratio"] = round(mine["add_s_per_1000_steps"] / theirs["add_s_per_1000_steps"], 3)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each rate is measured")
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every rate (medians are reported)")
    parser.add_argument("--prefetch", type=int, default=2, help="ShardedReplay.batches' prefetch")
    parser.add_argument("--group", type=int, default=512, help="ShardedReplay.batches' group, through the actors")
    parser.add_argument("--direct-group", type=int, default=64, help="ShardedReplay.batches' group, direct reads")
    parser.add_argument("--rllib-steps", type=int, default=3000, help="Pong steps fed to each RLlib buffer")
    parser.add_argument("--paths", help="only these learner paths, comma-separated (client_sample, "
                        "client_sample_refreshed, client_prefetch, client_prefetch_group64, ...)")
    parser.add_argument("--skip-ingest-128", action="store_true", help="skip the ingest with sends of 128 steps")
    parser.add_argument("--skip-rllib", action="store_true")
    parser.add_argument("--frame-encoding", choices=["lz4", "lz4-reference"], default=None,
                        help="the local store's and the shards' (default: ReplayStore.create's)")
    parser.add_argument("--only-rllib", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rllib-child", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rllib_child:
        print(json.dumps(rllib_child(args.rllib_child, args.rllib_steps, args.work)))
        return
    work = Path(tempfile.mkdtemp(prefix="mmr-bench-ray-"))
    try:
        stream = atari_frames.load("pong", atari_frames.BENCHMARK_FRAMES)
        results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_1m": os.getloadavg()[0]}}
        if not args.only_rllib:
            results["ray"] = ray_figures(stream, args, work)
            r = results["ray"]
            r["decoded_over_encoded"] = round(r["bytes_per_batch_decoded"] / r["bytes_per_batch_over_ray"], 1)
        if not args.skip_rllib:
            results["rllib"] = rllib_figures(args, work)
        results["machine"]["load_1m_after"] = os.getloadavg()[0]
        results["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        text = json.dumps(results, indent=1)
        print(text)
        if args.out:
            args.out.write_text(text + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
