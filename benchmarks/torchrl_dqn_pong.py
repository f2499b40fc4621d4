"""TorchRL's DQN on ALE Pong with two storages, the same seed: TorchRL's ``LazyMemmapStorage`` and
``MmreplayStorage``. Are the losses the same, and what does each storage cost in memory, disk and time?

The agent is TorchRL's own pieces as its ``sota-implementations/dqn`` example assembles them: a
``Collector`` over one env, an ``EGreedyModule`` over a ``QValueActor`` (the Nature CNN), ``DQNLoss``
(l2, a delayed target network with ``HardUpdate``), Adam, and a ``TensorDictReplayBuffer`` sampled by
its ``RandomSampler`` from a seeded generator. The env is ``ALE/Pong-v5`` with gymnasium's
``AtariPreprocessing`` (84x84 grayscale uint8, frame skip 4, up to 30 no-ops) and TorchRL's
``CatFrames(4, dim=-3)``: pixels of (4, 84, 84) uint8, which ``MmreplayStorage(stack_size=4)`` stores
as one frame per step. Each storage trains in its own process (so its memory is its own), one after
the other; then each process times ``rb.sample()`` and ``rb.extend`` on its full buffer.

    python benchmarks/torchrl_dqn_pong.py                                   # both, default sizes
    python benchmarks/torchrl_dqn_pong.py --steps 4000 --buffer 2000        # a short check
    python benchmarks/torchrl_dqn_pong.py --json benchmarks/results/torchrl-dqn-pong.json --raw-json /tmp/raw.json
    python benchmarks/torchrl_dqn_pong.py --render-only /tmp/raw.json --json benchmarks/results/torchrl-dqn-pong.json

Prints the losses' agreement (bit for bit, as float32), and per storage: bytes on disk per transition,
peak and final resident memory, and medians of extend, sample and update times with their ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STORAGES = ("memmap", "mmreplay")


def make_env(seed: int):  # type: ignore[no-untyped-def]
    import ale_py
    import gymnasium
    from torchrl.envs import (
        CatFrames,
        Compose,
        GymWrapper,
        RenameTransform,
        StepCounter,
        TransformedEnv,
        UnsqueezeTransform,
    )

    gymnasium.register_envs(ale_py)
    env = gymnasium.make("ALE/Pong-v5", frameskip=1)
    env = gymnasium.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)
    env = TransformedEnv(GymWrapper(env), Compose(
        RenameTransform(in_keys=["observation"], out_keys=["pixels"], create_copy=False),
        UnsqueezeTransform(dim=-3, in_keys=["pixels"]),
        CatFrames(N=4, dim=-3, in_keys=["pixels"]),
        StepCounter(),
    ))
    env.set_seed(seed)
    return env


def make_model(env):  # type: ignore[no-untyped-def]
    import torch
    from torchrl.data import Composite
    from torchrl.modules import MLP, ConvNet, QValueActor

    class Scale(torch.nn.Module):
        def forward(self, pixels: torch.Tensor) -> torch.Tensor:
            return pixels.to(torch.float32) / 255.0

    cnn = ConvNet(activation_class=torch.nn.ReLU, num_cells=[32, 64, 64], kernel_sizes=[8, 4, 3], strides=[4, 2, 1])
    features = cnn(torch.ones(env.observation_spec["pixels"].shape)).shape[-1]
    action_spec = env.action_spec
    mlp = MLP(in_features=features, activation_class=torch.nn.ReLU, out_features=action_spec.space.n, num_cells=[512])
    return QValueActor(module=torch.nn.Sequential(Scale(), cnn, mlp), spec=Composite(action=action_spec), in_keys=["pixels"])


def make_storage(kind: str, size: int, directory: Path):  # type: ignore[no-untyped-def]
    if kind == "memmap":
        from torchrl.data import LazyMemmapStorage

        return LazyMemmapStorage(size, scratch_dir=directory / "memmap")
    from mmreplay.torchrl import MmreplayStorage

    return MmreplayStorage(size, directory / "pong.mmr", stack_size=4)


def disk_bytes(path: Path) -> int:
    """Allocated bytes of every file under ``path`` (sparse files count what is written)."""
    return sum(os.stat(os.path.join(root, name)).st_blocks * 512 for root, _, files in os.walk(path) for name in files)


def memory() -> dict[str, int]:
    """Resident memory now (anonymous and file-backed, from /proc) and the process's peak, in bytes."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                fields[name] = int(value.split()[0]) * 1024
    fields["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return fields


def train(kind: str, args: argparse.Namespace, directory: Path) -> dict:
    """One training run with storage ``kind``: its losses (float32 bits) and what it cost."""
    import torch
    from tensordict.nn import TensorDictSequential
    from torchrl.collectors import Collector
    from torchrl.data import TensorDictReplayBuffer
    from torchrl.modules import EGreedyModule
    from torchrl.objectives import DQNLoss, HardUpdate

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # one thread: the same float sums in both runs, and the same share of a busy machine
    torch.use_deterministic_algorithms(True)
    before = memory()
    env = make_env(args.seed)
    model = make_model(env)
    greedy = EGreedyModule(annealing_num_steps=args.steps // 2, eps_init=1.0, eps_end=0.05, spec=model.spec)
    explore = TensorDictSequential(model, greedy)
    storage = make_storage(kind, args.buffer, directory)
    rb = TensorDictReplayBuffer(storage=storage, batch_size=args.batch_size, generator=torch.Generator().manual_seed(args.seed))
    loss_module = DQNLoss(value_network=model, loss_function="l2", delay_value=True)
    loss_module.make_value_estimator(gamma=0.99)
    target = HardUpdate(loss_module, value_network_update_interval=args.target_every)
    optimizer = torch.optim.Adam(loss_module.parameters(), lr=2.5e-4)
    collector = Collector(create_env_fn=env, policy=explore, frames_per_batch=args.frames_per_batch,
                          total_frames=args.steps, init_random_frames=args.init_random)
    losses: list[str] = []
    times: dict[str, list[float]] = {"extend": [], "sample": [], "update": [], "collect": []}
    collected = 0
    start = time.perf_counter()
    clock = time.perf_counter()
    for data in collector:
        times["collect"].append(time.perf_counter() - clock)
        data = data.reshape(-1)
        collected += data.numel()
        greedy.step(data.numel())
        tic = time.perf_counter()
        rb.extend(data)
        times["extend"].append(time.perf_counter() - tic)
        if collected >= args.init_random:
            for _ in range(args.updates_per_batch):
                tic = time.perf_counter()
                sample = rb.sample()
                times["sample"].append(time.perf_counter() - tic)
                tic = time.perf_counter()
                loss = loss_module(sample)["loss"]
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(loss_module.parameters(), max_norm=10.0)
                optimizer.step()
                target.step()
                times["update"].append(time.perf_counter() - tic)
                losses.append(struct.pack("<f", float(loss.detach())).hex())
        clock = time.perf_counter()
    wall = time.perf_counter() - start
    collector.shutdown()
    after_training = memory()
    throughput = sample_rate(rb, args)
    slices = slice_rates(storage, kind, args)
    path = directory / ("memmap" if kind == "memmap" else "pong.mmr")
    usage = disk_bytes(path)
    if kind == "mmreplay":
        storage.close()  # the paired measurement opens it again
    else:
        rb.dumps(directory / "memmap-dump")  # what the paired measurement loads
    return {
        "storage": kind, "transitions": len(rb), "wall_s": wall, "losses": losses, "times": times,
        "disk_bytes": usage, "memory_before": before, "memory_after_training": after_training,
        "sampling": throughput, "slices": slices,
    }


def sample_rate(rb, args: argparse.Namespace) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Batches per second of ``rb.sample()`` on the full buffer: the median of ``--repeats`` rounds of
    ``--batches`` batches each."""
    rounds = []
    for _ in range(args.repeats):
        tic = time.perf_counter()
        for _ in range(args.batches):
            rb.sample()
        rounds.append(args.batches / (time.perf_counter() - tic))
    return {"batches_per_s": statistics.median(rounds), "rounds": rounds}


def slice_rates(storage, kind: str, args: argparse.Namespace) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Batches per second drawn by slice samplers (slices of 8, batches of 32) over the full storage:
    TorchRL's ``SliceSampler`` on either storage, and ``MmreplaySliceSampler`` on MmreplayStorage. Each
    draws batches for up to ``SLICE_SECONDS`` (at least 2) and gives the median of their rates."""
    import torch
    from torchrl.data import TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import SliceSampler

    samplers = {"SliceSampler": SliceSampler}
    if kind == "mmreplay":
        from mmreplay.torchrl import MmreplaySliceSampler

        samplers["MmreplaySliceSampler"] = MmreplaySliceSampler
    rates = {}
    for name, sampler in samplers.items():
        rb = TensorDictReplayBuffer(storage=storage, sampler=sampler(slice_len=8), batch_size=32,
                                    generator=torch.Generator().manual_seed(args.seed))
        rb.sample()
        times: list[float] = []
        while len(times) < 2 or (sum(times) < SLICE_SECONDS and len(times) < args.batches):
            tic = time.perf_counter()
            rb.sample()
            times.append(time.perf_counter() - tic)
        rates[name] = 1 / statistics.median(times)
    return rates


# Seconds each slice sampler draws batches for (TorchRL's SliceSampler reads the whole storage per batch).
SLICE_SECONDS = 10.0


def paired(args: argparse.Namespace, directory: Path) -> dict:
    """Both storages written and read in one process, in alternating rounds, so that the machine's drift
    falls on both alike. The memmap run's transitions (its dump, read untimed, oldest first) are extended
    into a new storage of each kind in chunks of ``--frames-per-batch`` as the collector gave them, a
    ``--repeats``-th of them per round each; then each full buffer draws ``rb.sample()`` batches for
    ``PAIRED_SECONDS`` per round. Medians over the rounds, and the median of each round's ratio; the two
    copies must read back equal."""
    import torch
    from torchrl.data import LazyMemmapStorage, TensorDictReplayBuffer

    from mmreplay.torchrl import MmreplayStorage

    source = TensorDictReplayBuffer(storage=LazyMemmapStorage(args.buffer, scratch_dir=directory / "memmap-loaded"))
    source.loads(directory / "memmap-dump")
    cursor = source.writer.state_dict()["_cursor"]
    order = torch.cat([torch.arange(cursor, args.buffer), torch.arange(cursor)])  # oldest first
    step = args.frames_per_batch
    chunks = [source.storage[order[i : i + step]].clone() for i in range(0, len(order), step)]
    del source
    buffers = {
        "memmap": TensorDictReplayBuffer(storage=LazyMemmapStorage(args.buffer, scratch_dir=directory / "memmap-copy"),
                                         batch_size=args.batch_size, generator=torch.Generator().manual_seed(args.seed)),
        "mmreplay": TensorDictReplayBuffer(storage=MmreplayStorage(args.buffer, directory / "copy.mmr", stack_size=4),
                                           batch_size=args.batch_size, generator=torch.Generator().manual_seed(args.seed)),
    }
    extended: dict[str, list[float]] = {"memmap": [], "mmreplay": []}
    per_round = -(-len(chunks) // args.repeats)
    for round_ in range(args.repeats):
        part = chunks[round_ * per_round : (round_ + 1) * per_round]
        for name, rb in buffers.items():
            copies = [chunk.clone() for chunk in part]  # a TensorDictReplayBuffer writes "index" into what it extends
            tic = time.perf_counter()
            for chunk in copies:
                rb.extend(chunk)
            extended[name].append(sum(len(chunk) for chunk in part) / (time.perf_counter() - tic))
    sampled: dict[str, list[float]] = {"memmap": [], "mmreplay": []}
    for _ in range(args.repeats):
        for name, rb in buffers.items():
            count, tic = 0, time.perf_counter()
            while time.perf_counter() - tic < PAIRED_SECONDS:
                rb.sample()
                count += 1
            sampled[name].append(count / (time.perf_counter() - tic))
    copies = [buffers[name].storage[:] for name in ("memmap", "mmreplay")]
    keys = [sorted(map(str, copy.keys(True, True))) for copy in copies]
    same = keys[0] == keys[1] and bool((copies[0] == copies[1]).all())
    if not same:
        differ = [key for key in copies[0].keys(True, True) if not (copies[0][key] == copies[1].get(key)).all()]
        print(f"paired: the copies differ: keys {keys}; values at {differ}", file=sys.stderr)
    return {
        "sample_batches_per_s": {name: statistics.median(rates) for name, rates in sampled.items()},
        "sample_ratio": statistics.median(b / a for a, b in zip(sampled["memmap"], sampled["mmreplay"])),
        "extend_transitions_per_s": {name: statistics.median(rates) for name, rates in extended.items()},
        "extend_ratio": statistics.median(b / a for a, b in zip(extended["memmap"], extended["mmreplay"])),
        "rounds": args.repeats, "copies_equal": same,
    }


# Seconds each buffer samples for in a round of the paired measurement.
PAIRED_SECONDS = 2.0


def run_child(kind: str, args: argparse.Namespace, directory: Path) -> dict:
    """``train`` in a new process (its memory is its own); its result comes back as JSON."""
    out = directory / f"{kind}.json"
    command = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--child-dir", str(directory), "--out", str(out),
               *[f"--{name.replace('_', '-')}={getattr(args, name)}" for name in SIZE_ARGUMENTS]]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    subprocess.run(command, check=True, env=environment, timeout=args.timeout)
    result: dict = json.loads(out.read_text())
    return result


SIZE_ARGUMENTS = ("steps", "buffer", "init_random", "frames_per_batch", "updates_per_batch", "batch_size",
                  "target_every", "seed", "repeats", "batches")


def median_ms(values: list[float]) -> float:
    return 1000 * statistics.median(values) if values else float("nan")


def report(results: dict[str, dict]) -> str:
    memmap, mmreplay = results["memmap"], results["mmreplay"]
    a, b = memmap["losses"], mmreplay["losses"]
    same = sum(x == y for x, y in zip(a, b))
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    lines = [
        f"losses: {len(a)} updates (memmap) and {len(b)} (mmreplay); {same} bit-identical as float32"
        + ("" if first is None else f"; first difference at update {first}"),
        "",
        "| | LazyMemmapStorage | MmreplayStorage | ratio (mmreplay / memmap) |",
        "|---|---:|---:|---:|",
    ]

    def row(name: str, x: float, y: float, unit: str, digits: int = 1) -> None:
        lines.append(f"| {name} | {x:,.{digits}f} {unit} | {y:,.{digits}f} {unit} | {y / x:.3g}x |")

    row("transitions stored", memmap["transitions"], mmreplay["transitions"], "", 0)
    row("disk per transition", memmap["disk_bytes"] / memmap["transitions"], mmreplay["disk_bytes"] / mmreplay["transitions"], "B", 0)
    for key, name in (("VmHWM", "peak resident memory"), ("RssAnon", "anonymous memory after training"),
                      ("RssFile", "file-backed memory after training")):
        row(name, memmap["memory_after_training"][key] / 2**20, mmreplay["memory_after_training"][key] / 2**20, "MiB")
    for key in ("extend", "sample", "update", "collect"):
        row(f"median {key} time (training)", median_ms(memmap["times"][key]), median_ms(mmreplay["times"][key]), "ms", 3)
    row("rb.sample() on the full buffer", memmap["sampling"]["batches_per_s"], mmreplay["sampling"]["batches_per_s"], "batches/s")
    row("SliceSampler(slice_len=8), batches of 32", memmap["slices"]["SliceSampler"], mmreplay["slices"]["SliceSampler"], "batches/s", 2)
    row("the same: MmreplaySliceSampler on MmreplayStorage", memmap["slices"]["SliceSampler"],
        mmreplay["slices"]["MmreplaySliceSampler"], "batches/s", 2)
    row("training wall time", memmap["wall_s"], mmreplay["wall_s"], "s")
    pair = results.get("paired")
    if pair is not None:
        sampled, extended = pair["sample_batches_per_s"], pair["extend_transitions_per_s"]
        lines += [
            "",
            (f"Paired (both buffers in one process, {pair['rounds']} alternating rounds; medians, and the median of "
             "each round's ratio):"),
            "",
            "| | LazyMemmapStorage | MmreplayStorage | ratio (mmreplay / memmap) |",
            "|---|---:|---:|---:|",
            (f"| rb.sample(), batches of 32 | {sampled['memmap']:,.1f} /s | {sampled['mmreplay']:,.1f} /s | "
             f"{pair['sample_ratio']:.3g}x |"),
            (f"| rb.extend of the run's transitions, chunks as collected | {extended['memmap']:,.0f} /s | "
             f"{extended['mmreplay']:,.0f} /s | {pair['extend_ratio']:.3g}x |"),
            "",
            f"The two copies read back equal: {pair['copies_equal']}.",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12_000, help="agent steps (4 frames each)")
    parser.add_argument("--buffer", type=int, default=10_000, help="max_size of both storages")
    parser.add_argument("--init-random", type=int, default=2_000, help="random steps before the first update")
    parser.add_argument("--frames-per-batch", type=int, default=16, help="steps per collector batch")
    parser.add_argument("--updates-per-batch", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--target-every", type=int, default=1_000, help="updates between target network copies")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the sampling measurement")
    parser.add_argument("--batches", type=int, default=200, help="batches per round of the sampling measurement")
    parser.add_argument("--timeout", type=int, default=3 * 3600, help="seconds a training process may take")
    parser.add_argument("--json", type=Path, help="write the report and each run's medians here")
    parser.add_argument("--raw-json", type=Path, help="write everything both runs recorded here (losses, every time)")
    parser.add_argument("--render-only", type=Path, metavar="RAW", help="report from a --raw-json file, without running")
    parser.add_argument("--child", choices=(*STORAGES, "paired"), help=argparse.SUPPRESS)
    parser.add_argument("--child-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "paired":
        args.out.write_text(json.dumps(paired(args, args.child_dir)))
        return
    if args.child:
        args.out.write_text(json.dumps(train(args.child, args, args.child_dir)))
        return
    if args.render_only:
        raw = json.loads(args.render_only.read_text())
        sizes, results = raw["arguments"], raw["results"]
    else:
        sizes = {name: getattr(args, name) for name in SIZE_ARGUMENTS}
        directory = Path(tempfile.mkdtemp(prefix="mmreplay-torchrl-dqn-"))
        try:
            results = {kind: run_child(kind, args, directory) for kind in (*STORAGES, "paired")}
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        if args.raw_json:
            args.raw_json.write_text(json.dumps({"arguments": sizes, "results": results}))
    text = report(results)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"arguments": sizes, "report": text.splitlines(), "runs": summary(results)}, indent=1))


def summary(results: dict[str, dict]) -> dict[str, dict]:
    """Each run's figures without the per-call records: medians and counts, memory, disk, sampling."""
    runs: dict[str, dict] = {"paired": results["paired"]} if "paired" in results else {}
    for kind, run in ((kind, results[kind]) for kind in STORAGES):
        runs[kind] = {
            "transitions": run["transitions"], "updates": len(run["losses"]), "wall_s": run["wall_s"],
            "disk_bytes": run["disk_bytes"], "memory_before": run["memory_before"],
            "memory_after_training": run["memory_after_training"], "sampling": run["sampling"],
            "slices": run["slices"],
            "median_ms": {key: median_ms(values) for key, values in run["times"].items()},
            "calls": {key: len(values) for key, values in run["times"].items()},
            "first_losses": [struct.unpack("<f", bytes.fromhex(value))[0] for value in run["losses"][:5]],
            "last_losses": [struct.unpack("<f", bytes.fromhex(value))[0] for value in run["losses"][-5:]],
        }
    return runs


if __name__ == "__main__":
    main()
