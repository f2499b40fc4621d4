"""Reverb's side of ``bench_reverb.py``: a Reverb server and its clients, run in Reverb's own venv.

Never imported by the project: ``bench_reverb.py`` starts this file with the Python of a venv that has
``dm-reverb==0.14.0`` and ``tensorflow-cpu==2.15.0`` (``requirements-reverb.txt``), inside a network
namespace of its own where only the loopback interface exists (Reverb's server listens on every
interface, ``[::]:port``, and takes no address to bind to). It reads one JSON command a line on stdin and
answers each with one line ``@@ {json}`` on stdout (TensorFlow and Reverb log to stderr).

Two roles:

- ``--server``: the server, with two tables of ``--capacity`` items each, ``uniform`` (``Uniform``
  sampler) and ``prioritized`` (``Prioritized(0.6)``), both with a ``Fifo`` remover and a ``MinSize(1)``
  rate limiter (no sample-to-insert ratio), and the learner's measures: ``insert`` (through its writer
  processes), ``prefetched`` (``TrajectoryDataset`` batched and prefetched with tf.data),
  ``one_call`` (``Client.sample`` of 32, one call a batch), ``prioritized`` (the dataset on the
  prioritized table and ``mutate_priorities`` of the batch's 32 keys after each batch), ``memory``
  (this process's RSS: the server lives in it, the writers do not).
- ``--writer``: a writer process, one ``TrajectoryWriter`` per table; a step's frame is appended once
  and an item references the 5 frames of its obs and next_obs, so frames are shared by the 4 items that
  use them (Reverb's own way to keep stacks of overlapping frames). An episode's first frame is appended
  3 more times before it, so that the first stacks repeat it, as mmreplay's do.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

STACK = 4
BATCH = 32


def answer(value: dict[str, Any]) -> None:
    sys.stdout.write("@@ " + json.dumps(value) + "\n")
    sys.stdout.flush()


def rss_kib() -> dict[str, int]:
    """This process's resident memory from /proc/self/status, in KiB (anonymous and file-backed)."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile"):
                fields[name] = int(value.split()[0])
    return fields


def stream_steps(path: str) -> tuple[np.ndarray, list[tuple[int, int, float, bool, bool, bool]]]:
    """The stream's frames and its transitions (frame t, action, reward, terminated, truncated, first of episode)."""
    with np.load(path) as data:
        frames, action, reward = data["frames"], data["action"], data["reward"]
        terminated, truncated, start = data["terminated"], data["truncated"], data["episode_start"]
    steps = [(int(t), int(action[t]), float(reward[t]), bool(terminated[t]), bool(truncated[t]), bool(start[t]))
             for t in np.flatnonzero(action >= 0)]
    return frames, steps


def writer_main(args: argparse.Namespace) -> None:
    import reverb

    frames, steps = stream_steps(args.stream)
    client = reverb.Client(args.address)
    writers = {table: client.trajectory_writer(num_keep_alive_refs=STACK + 1) for table in ("uniform", "prioritized")}
    blank = {"action": np.int64(0), "reward": np.float32(0), "terminated": np.bool_(False), "truncated": np.bool_(False)}
    answer({"ready": True})
    for line in sys.stdin:
        command = json.loads(line)
        if "check" in command:
            answer(check(client, frames, steps, command["check"]))
            continue
        writer, table = writers[command["table"]], command["table"]
        started = time.perf_counter()
        for t, action, reward, terminated, truncated, first in steps[: command["count"]]:
            if first:
                for _ in range(STACK):  # the episode's first frame, then 3 copies: stacks repeat it
                    writer.append({"frame": frames[t], **blank})
            # frame t + 1 with this transition's fields: the item is (frames t-3..t, t-2..t+1, fields of t).
            writer.append({"frame": frames[t + 1], "action": np.int64(action), "reward": np.float32(reward),
                           "terminated": np.bool_(terminated), "truncated": np.bool_(truncated)})
            history = writer.history
            writer.create_item(table, priority=1.0, trajectory={
                "obs": history["frame"][-STACK - 1 : -1], "next_obs": history["frame"][-STACK:],
                "action": history["action"][-1], "reward": history["reward"][-1],
                "terminated": history["terminated"][-1], "truncated": history["truncated"][-1]})
            if terminated or truncated:
                writer.end_episode(clear_buffers=True)
        writer.end_episode(clear_buffers=True)  # the stream's cut last episode: the next insert starts anew
        writer.flush()
        answer({"inserted": min(command["count"], len(steps)), "seconds": time.perf_counter() - started})


def check(client: Any, frames: np.ndarray, steps: list[tuple[int, int, float, bool, bool, bool]], count: int) -> dict[str, int]:
    """How many of ``count`` items sampled from ``uniform`` are a transition of the stream, stacks and fields equal.

    A transition t of an episode that starts at frame s has obs frames max(s, t-3) .. t and next_obs
    max(s, t-2) .. t+1, as mmreplay stacks them (an episode's first frame repeated).
    """
    by_last: dict[bytes, list[tuple[int, int, int, float, bool, bool]]] = {}
    start = 0
    for t, action, reward, terminated, truncated, first in steps:
        start = t if first else start
        by_last.setdefault(frames[t].tobytes(), []).append((t, start, action, reward, terminated, truncated))
    matched = 0
    for sample in client.sample("uniform", num_samples=count, emit_timesteps=False, unpack_as_table_signature=True):
        data = sample.data
        for t, s, action, reward, terminated, truncated in by_last.get(data["obs"][-1].tobytes(), []):
            obs = frames[[max(s, t - STACK + 1 + i) for i in range(STACK)]]
            next_obs = frames[[max(s, t - STACK + 2 + i) for i in range(STACK)]]
            if (np.array_equal(data["obs"], obs) and np.array_equal(data["next_obs"], next_obs)
                    and int(data["action"]) == action and float(data["reward"]) == reward
                    and bool(data["terminated"]) == terminated and bool(data["truncated"]) == truncated):
                matched += 1
                break
    return {"checked": count, "matched": matched}


def server_main(args: argparse.Namespace) -> None:
    import reverb
    import tensorflow as tf

    signature = {
        "obs": tf.TensorSpec([STACK, 84, 84], tf.uint8), "next_obs": tf.TensorSpec([STACK, 84, 84], tf.uint8),
        "action": tf.TensorSpec([], tf.int64), "reward": tf.TensorSpec([], tf.float32),
        "terminated": tf.TensorSpec([], tf.bool), "truncated": tf.TensorSpec([], tf.bool),
    }
    tables = [reverb.Table(name=name, sampler=sampler, remover=reverb.selectors.Fifo(), max_size=args.capacity,
                           rate_limiter=reverb.rate_limiters.MinSize(1), signature=signature)
              for name, sampler in (("uniform", reverb.selectors.Uniform()),
                                    ("prioritized", reverb.selectors.Prioritized(priority_exponent=0.6)))]
    server = reverb.Server(tables)
    address = f"localhost:{server.port}"
    client = reverb.Client(address)
    writers = [subprocess.Popen([sys.executable, __file__, "--writer", "--address", address, "--stream", args.stream],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(args.writers)]
    iterators: dict[str, Any] = {}
    rng = np.random.default_rng(0)

    def read(process: subprocess.Popen) -> dict[str, Any]:
        for line in process.stdout:
            if line.startswith("@@ "):
                return json.loads(line[3:])
        raise RuntimeError(f"Reverb writer {process.pid} ended (exit {process.wait()})")

    def dataset(table: str) -> Any:
        if table not in iterators:
            data = reverb.TrajectoryDataset.from_table_signature(
                address, table, max_in_flight_samples_per_worker=args.in_flight, num_workers_per_iterator=args.sample_workers)
            iterators[table] = data.batch(BATCH, drop_remainder=True).prefetch(args.prefetch).as_numpy_iterator()
            for _ in range(args.prefetch + 1):  # the first batches: the pipeline's start, not its steady state
                next(iterators[table])
        return iterators[table]

    def timed(call: Any, seconds: float) -> float:
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            call()
            count += 1
        return count / (time.perf_counter() - started)

    def one_call() -> None:
        samples = list(client.sample("uniform", num_samples=BATCH, emit_timesteps=False, unpack_as_table_signature=True))
        np.stack([sample.data["obs"] for sample in samples]), np.stack([sample.data["next_obs"] for sample in samples])

    def prioritized_step(iterator: Any) -> None:
        sample = next(iterator)
        info = sample.info
        weights = (info.table_size.astype(np.float64) * info.probability) ** -0.4  # beta 0.4, as mmreplay's default
        weights /= weights.max()
        priorities = rng.uniform(0.1, 2.0, BATCH)
        client.mutate_priorities("prioritized", updates=dict(zip(info.key.tolist(), priorities.tolist())))

    try:
        for process in writers:
            read(process)
        answer({"ready": True, "port": server.port, "pid": os.getpid(), "writer_pids": [p.pid for p in writers]})
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            if op == "insert":
                started = time.perf_counter()
                for process in writers:
                    process.stdin.write(json.dumps({"table": command["table"], "count": command["count"]}) + "\n")
                    process.stdin.flush()
                inserted = sum(read(process)["inserted"] for process in writers)
                seconds = time.perf_counter() - started
                answer({"transitions": inserted, "seconds": seconds, "per_s": inserted / seconds})
            elif op == "prefetched":
                iterator = dataset("uniform")
                answer({"per_s": timed(lambda: next(iterator), command["seconds"])})
            elif op == "one_call":
                one_call()
                answer({"per_s": timed(one_call, command["seconds"])})
            elif op == "prioritized":
                iterator = dataset("prioritized")
                answer({"per_s": timed(lambda: prioritized_step(iterator), command["seconds"])})
            elif op == "check":
                writers[0].stdin.write(json.dumps({"check": command["count"]}) + "\n")
                writers[0].stdin.flush()
                answer(read(writers[0]))
            elif op == "memory":
                sizes = {name: info.current_size for name, info in client.server_info().items()}
                answer({"rss_kib": rss_kib(), "table_sizes": sizes})
            elif op == "listening":
                answer({"ss": subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout,
                        "interfaces": subprocess.run(["ip", "-brief", "addr"], capture_output=True, text=True).stdout})
            else:
                raise ValueError(f"unknown command {op!r}")
    finally:
        for process in writers:
            process.stdin.close()
            process.terminate()
            process.wait(timeout=30)
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", action="store_true")
    parser.add_argument("--writer", action="store_true")
    parser.add_argument("--address")
    parser.add_argument("--stream", required=True, help="the frame stream's npz file")
    parser.add_argument("--capacity", type=int, default=200_000)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--prefetch", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=2 * BATCH, help="the dataset's max_in_flight_samples_per_worker")
    parser.add_argument("--sample-workers", type=int, default=-1, help="the dataset's num_workers_per_iterator")
    args = parser.parse_args()
    if args.writer:
        writer_main(args)
    else:
        server_main(args)


if __name__ == "__main__":
    main()
