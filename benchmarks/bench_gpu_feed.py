"""How much of a GPU learner does each replay feed keep?

For each game (Pong, MsPacman, Seaquest), batch size (32, 256) and learner (a Nature-CNN double-DQN
update, ``eager`` PyTorch and ``graph``: the whole update in one CUDA graph; ``none``: the feed alone),
every feed of ``gpu_feeds.py`` runs in the same process, on the same stores: the numpy ring fed inline and
through a Python-thread pipeline, mmreplay's ``sample`` inline, and mmreplay's ``batches(device=...)``
with host decode and with nvCOMP decode (where nvCOMP is installed). *Kept* = updates/s fed by the feed
/ updates/s with one batch resident on the device: each feed's ``--rounds`` windows take turns with
windows of the resident batch, and kept is the median of the pairs' ratios (with the lowest and highest),
so that a learner whose own rate drifts is compared with itself at the same moment. The stores' frames
follow the store's default unless ``--frame-encoding`` names one (nvCOMP decode needs ``lz4``). The
target: kept >= 0.95 for mmreplay's device batches in every cell.

A window is updates (batches, for ``none``) over ``--seconds`` after ``--warmup`` s, with the device
synchronized every 20 updates and at the end. With a learner, each feed's line also says what the learner's
thread spent an update on beside it and beside the resident batch (``learner_thread``,
``learner_thread_resident``: CPU microseconds, voluntary and involuntary context switches, CPU share of the
wall time; ``machine.ThreadWindow``), which tells a wait for the GIL from a core taken by another thread
from a slower core. Each figure is one JSON line on stdout, flushed, so a run
cut short keeps what it measured; ``--budget`` stops starting figures after that many seconds. Then
``decode_parts`` lines: the device time (CUDA events) of each part of nvCOMP decoding a batch (the copy
of the blocks, the decompression, the CRC check by the parity product and by nvCOMP's kernel, the gather)
against the host path's copy of the pixels.

    python benchmarks/bench_gpu_feed.py                       # on a CUDA machine: every cell (~4 minutes)
    python benchmarks/bench_gpu_feed.py --smoke               # anywhere: tiny, CPU, a minute
    python benchmarks/bench_gpu_feed.py --data-dir .devcarry/frames --budget 240
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import encoding_option  # noqa: E402
import gpu_feeds  # noqa: E402
from dqn_learner import DqnLearner  # noqa: E402
from frame_streams import add_data_dir_argument, stream_path  # noqa: E402
from machine import ThreadWindow  # noqa: E402
from peers import FrameStream, NumpyFrameRing  # noqa: E402

from mmreplay import ReplayStore  # noqa: E402

FEEDS = ("resident", "ring-inline", "ring-threads", "mmreplay-inline", "mmreplay-host", "mmreplay-nvcomp")
SYNC_EVERY = 20


def emit(**figure: object) -> None:
    print(json.dumps(figure), flush=True)


def fill(stream: FrameStream, capacity: int, directory: str, *, decode_threads: int | None = None,
         frame_encoding: str | None = None) -> tuple[ReplayStore, NumpyFrameRing]:
    """A store and a ring each holding ``capacity`` transitions of the stream fed cyclically; the store's
    frames in ``frame_encoding`` (None: the store's default; ``decode="device"`` needs ``"lz4"``)."""
    store = ReplayStore.create(Path(directory) / "store", frame_shape=(84, 84), capacity=capacity, stack_size=4,
                               frame_encoding=frame_encoding, decode_threads=decode_threads)
    ring = NumpyFrameRing(capacity)
    for i in range(capacity):
        inputs = stream.single_frame_inputs(i)
        store.add(*inputs)
        ring.add(*inputs)
    store.flush()
    return store, ring


def rate(step, device: torch.device, *, seconds: float, warmup: float,  # noqa: ANN001
         window: ThreadWindow | None = None) -> tuple[float, int]:
    """Calls of ``step`` per second over ``seconds`` after ``warmup``, the device synchronized every
    ``SYNC_EVERY`` calls and before the clock stops; ``window``, if given, adds what this thread spent on
    the timed calls."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    clock = time.perf_counter
    start = clock()
    while clock() - start < warmup:
        step()
    sync()
    if window is not None:
        window.start()
    calls, start = 0, clock()
    while clock() - start < seconds:
        for _ in range(SYNC_EVERY):
            step()
        calls += SYNC_EVERY
        sync()
    elapsed = clock() - start
    if window is not None:
        window.stop()
    return calls / elapsed, calls


def make_feed(name: str, store: ReplayStore, ring: NumpyFrameRing, batch_size: int, device: torch.device, seed: int,
              threads: int, store_path: Path | None = None):  # noqa: ANN201
    if name == "resident":
        return gpu_feeds.Resident(next(gpu_feeds.RingInline(ring, batch_size, device, seed)))
    if name == "ring-inline":
        return gpu_feeds.RingInline(ring, batch_size, device, seed)
    if name == "ring-threads":
        return gpu_feeds.RingThreads(ring, batch_size, device, seed, threads=threads)
    if name == "mmreplay-inline":
        return gpu_feeds.MmreplayInline(store, batch_size, device, seed)
    if name.startswith("mmreplay-host-p"):  # mmreplay-host-p8: batches(device=..., prefetch=8)
        return gpu_feeds.MmreplayDevice(store, batch_size, device, seed, decode="host",
                                        prefetch=int(name.removeprefix("mmreplay-host-p")))
    if name == "mmreplay-host-idle":  # its thread and the decode pool's helpers at SCHED_IDLE while it runs
        return gpu_feeds.MmreplayDevice(store, batch_size, device, seed, decode="host", idle=True)
    if name.startswith("mmreplay-host-g"):  # mmreplay-host-g1: batches(device=..., group=1)
        return gpu_feeds.MmreplayDevice(store, batch_size, device, seed, decode="host",
                                        group=int(name.removeprefix("mmreplay-host-g")))
    if name.startswith("mmreplay-host-t"):  # mmreplay-host-t4: a reader of the store with decode_threads=4
        reader = ReplayStore.open(store_path, "r", decode_threads=int(name.removeprefix("mmreplay-host-t")))
        return gpu_feeds.MmreplayDevice(reader, batch_size, device, seed, decode="host", owned=True)
    if name in ("mmreplay-host", "mmreplay-nvcomp"):
        return gpu_feeds.MmreplayDevice(store, batch_size, device, seed,
                                        decode="device" if name == "mmreplay-nvcomp" else "host")
    raise ValueError(f"unknown feed {name!r}: expected one of {', '.join(FEEDS)} or mmreplay-host-p<prefetch>, "
                     "mmreplay-host-t<decode threads>, mmreplay-host-g<batches a read>, mmreplay-host-idle")


def measure_group(game: str, batch_size: int, learner_name: str, feeds: list[str], store: ReplayStore,
                  store_path: Path, ring: NumpyFrameRing, device: torch.device, args: argparse.Namespace,
                  deadline: float) -> None:
    """One (game, batch, learner) group. With a learner, each feed runs in ``--rounds`` windows that take
    turns with windows of the resident batch (the first of each pair alternating), and its kept share is
    the median of the pairs' ratios, so that a learner whose own rate drifts (clocks, a shared host) is
    compared with itself at the same moment. Without one, each feed's batches/s alone."""
    learner = None
    if learner_name != "none":
        try:
            learner = DqnLearner(device, batch_size=batch_size, mode=learner_name)
        except Exception as error:  # a capture that fails is reported, not the end of the run
            emit(figure="error", game=game, batch_size=batch_size, learner=learner_name, stage="learner",
                 error=f"{type(error).__name__}: {error}")
            return
    resident = None if learner is None else make_feed("resident", store, ring, batch_size, device, args.seed,
                                                      args.threads)
    resident_rates: list[float] = []
    for name in feeds:
        base = dict(game=game, batch_size=batch_size, learner=learner_name, feed=name, device=str(device))
        if name == "resident":
            continue
        if time.monotonic() > deadline:
            emit(figure="skipped", reason="budget", **base)
            continue
        try:
            feed = make_feed(name, store, ring, batch_size, device, args.seed, args.threads, store_path)
        except Exception as error:
            emit(figure="skipped", reason=f"{type(error).__name__}: {error}", **base)
            continue
        try:
            if learner is None:
                per_second, calls = rate(lambda: next(feed), device, seconds=args.feed_seconds, warmup=args.warmup)
                emit(figure="batches_per_s", value=round(per_second, 1), kept=None, calls=calls, **base)
                continue
            fed = (lambda: learner.update(*next(feed)))  # noqa: E731
            alone = (lambda: learner.update(*next(resident)))  # noqa: E731
            pairs, calls, alone_calls = [], 0, 0
            windows = {fed: ThreadWindow(), alone: ThreadWindow()}  # the learner thread's, beside each
            for turn in range(args.rounds):
                order = (alone, fed) if turn % 2 == 0 else (fed, alone)
                measured = {}
                for step in order:
                    measured[step], count = rate(step, device, seconds=args.seconds, warmup=args.warmup,
                                                 window=windows[step])
                    calls += count if step is fed else 0
                    alone_calls += count if step is alone else 0
                pairs.append((measured[fed], measured[alone]))
            resident_rates += [r for _, r in pairs]
        except Exception as error:
            emit(figure="error", stage="measure", error=f"{type(error).__name__}: {error}", **base)
            continue
        finally:
            feed.close()
        ratios = sorted(f / r for f, r in pairs)
        emit(figure="updates_per_s", value=round(float(np.median([f for f, _ in pairs])), 1),
             kept=round(float(np.median(ratios)), 3), kept_low=round(ratios[0], 3), kept_high=round(ratios[-1], 3),
             resident=round(float(np.median([r for _, r in pairs])), 1), rounds=len(pairs), calls=calls,
             learner_thread=windows[fed].per_call(calls), learner_thread_resident=windows[alone].per_call(alone_calls),
             **base)
    if resident_rates:
        emit(figure="updates_per_s", value=round(float(np.median(resident_rates)), 1), kept=None,
             windows=len(resident_rates), game=game, batch_size=batch_size, learner=learner_name, feed="resident",
             device=str(device))


def verify(game: str, store: ReplayStore, device: torch.device, batches: int = 4) -> None:
    """Whether ``batches(device=...)`` gives what ``sample`` gives for the same draws, on this machine's
    device and the game's real frames, for each decode: one ``verify`` line each."""
    for decode in ("host", "device"):
        rng = np.random.default_rng(123)
        try:
            with store.batches(32, device=device, decode=decode, rng=123) as feed:
                described = repr(feed)
                equal = all(
                    all(np.array_equal(getattr(batch, name).cpu().numpy(), getattr(want, name))
                        for name in ("obs", "next_obs", "action", "reward", "index", "discount"))
                    for batch, want in ((next(feed), store.sample(32, rng)) for _ in range(batches))
                )
            emit(figure="verify", game=game, decode=decode, batches=batches, equal=equal, iterator=described)
        except Exception as error:
            emit(figure="verify", game=game, decode=decode, equal=None, error=f"{type(error).__name__}: {error}")


def decode_parts(game: str, batch_size: int, store: ReplayStore, device: torch.device, repeats: int) -> None:
    """Device milliseconds per batch of each part of decoding on the device, and of the host path's
    copy of its pixels, over ``repeats`` batches (CUDA events, after one untimed batch)."""
    from mmreplay.gpu.block_plan import lz4_bound, plan_blocks
    from mmreplay.gpu.crc_parity import ParityCrc, row_width
    from mmreplay.gpu.device_decode import DeviceDecoder, NvcompDecompressor
    from mmreplay.gpu.nvcomp_crc32 import NvcompCrc

    frame_nbytes, most = 84 * 84, batch_size * 8
    decoder = DeviceDecoder(device, NvcompDecompressor(device, frame_nbytes=frame_nbytes, max_frames=most),
                            max_frames=most, max_block_bytes=lz4_bound(frame_nbytes))
    rng = np.random.default_rng(0)
    parts: dict[str, list[float]] = {"blocks_copy": [], "decompress": [], "crc_parity": [], "crc_nvcomp": [],
                                     "gather": [], "pixels_copy": []}
    parity = ParityCrc(device, max_width=row_width(lz4_bound(frame_nbytes)))
    try:
        nvcomp_crc: NvcompCrc | None = NvcompCrc(device, max_blocks=most, max_block_bytes=lz4_bound(frame_nbytes))
    except (ModuleNotFoundError, RuntimeError, OSError) as error:
        nvcomp_crc = None
        emit(figure="error", stage="decode_parts", game=game, batch_size=batch_size, error=f"NvcompCrc: {error}")

    def timed(name: str, work) -> object:  # noqa: ANN001
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = work()
        end.record()
        end.synchronize()
        if timed.on:
            parts[name].append(start.elapsed_time(end))
        return result

    for repeat in range(repeats + 1):
        timed.on = repeat > 0
        encoded = store.sample_encoded(batch_size, rng)
        plan = plan_blocks(encoded.frames, encoded.frame_index)
        blocks = torch.from_numpy(np.frombuffer(plan.data, np.uint8).copy()).pin_memory()
        on_device = [torch.from_numpy(a).to(device) for a in (plan.starts, plan.lengths, plan.prefixes,
                                                                plan.checksums.astype(np.int64), plan.gather)]
        starts, lengths, prefixes, checksums, gather = on_device
        data = timed("blocks_copy", lambda: blocks.to(device, non_blocking=True))
        count = len(plan)
        timed("decompress", lambda: decoder.decompressor(data, starts, lengths, count, decoder._rows))
        timed("crc_parity", lambda: parity.checksums(data, starts, lengths, prefixes, plan.width))
        if nvcomp_crc is not None:
            timed("crc_nvcomp", lambda: nvcomp_crc.checksums(data, starts, lengths, prefixes, plan.width))
        pixels = torch.empty((batch_size, encoded.frame_index.shape[1], 84, 84), dtype=torch.uint8, device=device)
        timed("gather", lambda: torch.index_select(decoder._rows[:count, :frame_nbytes], 0, gather,
                                                   out=pixels.view(-1, frame_nbytes)))
        host_pixels = torch.from_numpy(store.sample(batch_size, rng).obs.base).pin_memory()
        timed("pixels_copy", lambda: host_pixels.to(device, non_blocking=True))
    for name, times in parts.items():
        if not times:
            continue
        emit(figure="decode_parts", game=game, batch_size=batch_size, part=name, ms_median=round(float(np.median(times)), 4),
             repeats=len(times), device=str(device))


def table(path: Path) -> str:
    """A markdown table of a run's JSON lines: per game, batch and learner, each feed's updates/s and kept
    share (batches/s for a feed alone); then the decode parts and the checks."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    figures = [f for f in lines if f["figure"] in ("updates_per_s", "batches_per_s")]
    feeds = list(dict.fromkeys(f["feed"] for f in figures))
    rows = ["| game | batch | learner | " + " | ".join(feeds) + " |", "|---|---:|---|" + "---:|" * len(feeds)]
    groups = dict.fromkeys((f["game"], f["batch_size"], f["learner"]) for f in figures)
    for game, batch, learner in groups:
        cells = []
        for feed in feeds:
            found = [f for f in figures if (f["game"], f["batch_size"], f["learner"], f["feed"]) == (game, batch, learner, feed)]
            if not found:
                cells.append("-")
            elif found[0]["kept"] is None:
                cells.append(f"{found[0]['value']:,.0f}")
            else:
                cells.append(f"{found[0]['value']:,.0f} ({found[0]['kept']:.2f})")
        rows.append(f"| {game} | {batch} | {learner} | " + " | ".join(cells) + " |")
    threads = [f for f in figures if f.get("learner_thread")]
    if threads:  # why a learner kept less: its thread's CPU an update and its switches, beside the feed (resident)
        rows += ["", "| game | batch | learner | feed | CPU us an update | voluntary switches | involuntary switches |",
                 "|---|---:|---|---|---:|---:|---:|"]
        for f in threads:
            fed, resident = f["learner_thread"], f["learner_thread_resident"]
            rows.append(f"| {f['game']} | {f['batch_size']} | {f['learner']} | {f['feed']} | {fed['cpu_us']:,.0f} "
                        f"({resident['cpu_us']:,.0f}) | {fed['voluntary']:.2f} ({resident['voluntary']:.2f}) | "
                        f"{fed['involuntary']:.2f} ({resident['involuntary']:.2f}) |")
    parts = [f for f in lines if f["figure"] == "decode_parts"]
    if parts:
        rows += ["", "| game | batch | " + " | ".join(dict.fromkeys(p["part"] for p in parts)) + " |"]
        for game, batch in dict.fromkeys((p["game"], p["batch_size"]) for p in parts):
            cells = [f"{p['ms_median']:.3f} ms" for p in parts if (p["game"], p["batch_size"]) == (game, batch)]
            rows.append(f"| {game} | {batch} | " + " | ".join(cells) + " |")
    others = [f for f in lines if f["figure"] in ("verify", "error", "skipped")]
    rows += [""] + [json.dumps(f) for f in others]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", default="pong,mspacman,seaquest")
    parser.add_argument("--batch-sizes", default="32,256")
    parser.add_argument("--learners", default="graph,eager,none", help="of graph, eager, none (the feed alone)")
    parser.add_argument("--feeds", default=",".join(FEEDS), help="of these, mmreplay-host-p<N> (device batches "
                        "with prefetch=N), mmreplay-host-t<N> (from a reader of the store with decode_threads=N) and "
                        "mmreplay-host-g<N> (group=N)")
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per window with a learner")
    parser.add_argument("--rounds", type=int, default=3, help="windows of each feed with a learner, each paired "
                        "with a window of the resident batch")
    parser.add_argument("--frame-encoding", default="default", choices=encoding_option.CHOICES,
                        help="the stores' frames (default: the store's default; decode=\"device\" needs lz4)")
    parser.add_argument("--feed-seconds", type=float, default=0.75, help="timed seconds per figure of a feed alone")
    parser.add_argument("--warmup", type=float, default=0.4)
    parser.add_argument("--threads", type=int, default=2, help="workers of the ring's Python-thread pipeline")
    parser.add_argument("--decode-repeats", type=int, default=30, help="batches timed per decode_parts figure; 0 skips")
    parser.add_argument("--budget", type=float, default=float("inf"), help="start no figure after this many seconds")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmpdir", help="where the stores live while measured")
    parser.add_argument("--smoke", action="store_true", help="tiny and quick: capacity 1,500, batch 8, pong, 0.2 s")
    parser.add_argument("--label", default="", help="a name for this run in its setup line (which code, say)")
    parser.add_argument("--table", type=Path, help="print a markdown table of this run's JSON lines and exit")
    add_data_dir_argument(parser)
    args = parser.parse_args(argv)
    if args.table is not None:
        print(table(args.table))
        return
    if args.smoke:
        args.games, args.batch_sizes, args.capacity = "pong", "8", 1_500
        args.seconds = args.feed_seconds = 0.2
        args.rounds = 2
        args.warmup, args.decode_repeats = 0.05, 2
        torch.set_num_threads(1)  # a shared CPU: torch's own threads only fight the feeds' threads
    deadline = time.monotonic() + args.budget
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    learners = [name for name in args.learners.split(",") if name]
    if not cuda:
        learners = [name for name in learners if name != "graph"]  # CUDA graphs need CUDA
    feeds = [name for name in args.feeds.split(",") if name]
    if "resident" in feeds:
        feeds.remove("resident")
    feeds.insert(0, "resident")
    nvcomp = None
    try:
        from mmreplay.gpu.nvcomp_lz4 import BatchedLZ4

        nvcomp = BatchedLZ4().version_text
    except (ModuleNotFoundError, RuntimeError, OSError) as error:
        nvcomp = f"unavailable: {error}"
    emit(figure="setup", torch=torch.__version__, device=str(device),
         gpu=torch.cuda.get_device_name(device) if cuda else None, cpus=len(os.sched_getaffinity(0)),
         nvcomp=nvcomp, capacity=args.capacity, games=args.games, batch_sizes=args.batch_sizes, learners=learners,
         feeds=feeds, seconds=args.seconds, rounds=args.rounds, threads=args.threads, smoke=args.smoke,
         frame_encoding=args.frame_encoding,
         mmreplay=str(Path(sys.modules["mmreplay"].__file__ or "").parent), label=args.label)
    for game in args.games.split(","):
        if time.monotonic() > deadline:
            emit(figure="skipped", game=game, reason="budget")
            continue
        started = time.perf_counter()
        stream = FrameStream.load(stream_path(game, args.data_dir))
        with tempfile.TemporaryDirectory(prefix="bench-gpu-feed-", dir=args.tmpdir) as directory:
            store, ring = fill(stream, args.capacity, directory,
                               frame_encoding=encoding_option.create_encoding(args.frame_encoding))
            emit(figure="filled", game=game, transitions=len(store), frame_encoding=store.frame_encoding,
                 seconds=round(time.perf_counter() - started, 1))
            verify(game, store, device)
            try:
                for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
                    for learner in learners:
                        measure_group(game, batch_size, learner, feeds, store, Path(directory) / "store", ring,
                                      device, args, deadline)
                    if cuda and args.decode_repeats and nvcomp and not nvcomp.startswith("unavailable") \
                            and time.monotonic() < deadline:
                        try:
                            decode_parts(game, batch_size, store, device, args.decode_repeats)
                        except Exception as error:
                            emit(figure="error", stage="decode_parts", game=game, batch_size=batch_size,
                                 error=f"{type(error).__name__}: {error}")
            finally:
                store.close()
    emit(figure="done", seconds_left=None if args.budget == float("inf") else round(deadline - time.monotonic(), 1))


if __name__ == "__main__":
    main()
