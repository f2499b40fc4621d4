"""How dense, and at what cost, is compressing each frame against a reference frame (issue 7)?

For each game and each candidate scheme (who references whom) and encoder (how a dependent frame is
compressed against its reference), on real frames (recorded with ALE, see ``frame_streams.py``):

- bytes/frame: mean compressed size over the first ``--frames`` frames, key frames included; groups
  restart at each episode start (``reference_scheme.EnvReferences``); key frames use lz4 HC 9;
- encode: median us/frame over ``--repeats`` passes over ``--timed`` frames (key frames at their
  share), and its median ratio to plain lz4 (``codec.compress``) timed just before on the same frames;
- decode: a sampled batch (``--batch`` transitions of stack 4: 5 frames each, clipped at episode starts
  like the store) with every frame it depends on: median us for plan + locate + decode, the part in the
  compiled decode call, and the median ratio to the same frames as plain lz4 blocks through
  ``codec.decode_batch`` (compiled, one thread), timed just before on the same batch;
- an estimate of bytes on disk per transition: frame bytes plus today's frame table and row overhead
  for a full store of capacity 1,000,000, plus 2 bytes per frame table entry for ``ref_delta``.

Then the vector-env question: 8 envs stepping in lockstep (the stream's episodes dealt to the envs,
then interleaved frame by frame), per-env groups (a recorded ``ref_delta``) against an arithmetic key
``frame_step - frame_step % K`` that needs no field.

Run: ``python benchmarks/bench_dense.py`` (~6 minutes on 2 busy cores); ``--quick`` (~30 s) for 2,000
frames and the two encoders that matter. Needs mmreplay._lz4ref and mmreplay._lz4batch built.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import lz4.block
import numpy as np
import numpy.typing as npt

from mmreplay.disk import header as format
from mmreplay.frames import lz4_codec as codec
from mmreplay.frames import reference_codec
from mmreplay.frames.frame_entries import frame_entry
from mmreplay.frames.reference_scheme import EnvReferences, ReferenceScheme
from mmreplay.rows.transitions import row_dtype

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frame_streams import stream_path  # noqa: E402

Frame = npt.NDArray[np.uint8]
Steps = npt.NDArray[np.int64]
Encoder = Callable[[Frame, Frame], bytes]


def hc(level: int) -> Encoder:
    return lambda frame, ref: lz4.block.compress(
        frame, store_size=False, mode="high_compression", compression=level, dict=ref.tobytes()
    )


ENCODERS: dict[str, Encoder] = {
    "lz4ref (C)": lambda frame, ref: reference_codec.compress_against(frame, ref),
    "lz4 dict": lambda frame, ref: lz4.block.compress(frame, store_size=False, dict=ref.tobytes()),
    "xor+lz4": lambda frame, ref: lz4.block.compress(np.bitwise_xor(frame, ref), store_size=False),
    "lz4 dict HC3": hc(3),
    "lz4 dict HC9": hc(9),
}
DECODED = ("lz4ref (C)", "lz4 dict HC9")  # xor+lz4 would need another decoder; the rest decode alike

# name -> (scheme, group size); scheme None: a chain, each frame against the previous one, a key every K
SCHEMES: dict[str, tuple[ReferenceScheme | None, int]] = {
    "star K=4": (ReferenceScheme(4, 4), 4),
    "star K=8": (ReferenceScheme(8, 8), 8),
    "star K=16": (ReferenceScheme(16, 16), 16),
    "tree K=16 b=4": (ReferenceScheme(16, 4), 16),
    "tree K=64 b=8": (ReferenceScheme(64, 8), 64),
    "tree K=16 b=2": (ReferenceScheme(16, 2), 16),
    "chain K=16": (None, 16),
}


def load(game: str, frames: int) -> tuple[Frame, npt.NDArray[np.bool_]]:
    data = np.load(stream_path(game))
    return data["frames"][:frames], data["episode_start"][:frames]


def _seconds(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def ref_deltas_for(scheme: ReferenceScheme | None, group: int, starts: npt.NDArray[np.bool_]) -> Steps:
    """Each frame's ref_delta in one env's stream (groups restart at episode starts)."""
    deltas = np.zeros(len(starts), np.int64)
    if scheme is None:
        place = 0
        for step, start in enumerate(starts.tolist()):
            place = 0 if start or place == group else place
            deltas[step] = 1 if place else 0
            place += 1
        return deltas
    references = EnvReferences(scheme)
    dummy = np.zeros(1, np.uint8)
    for step, start in enumerate(starts.tolist()):
        if start:
            references.restart()
        deltas[step] = references.assign(step, dummy)[0]
    return deltas


def encode_all(frames: Frame, deltas: Steps, encoder: Encoder) -> list[bytes]:
    return [
        reference_codec.compress_against(frame, None) if delta == 0 else encoder(frame, frames[step - delta])
        for step, (frame, delta) in enumerate(zip(frames, deltas.tolist()))
    ]


def encode_time(frames: Frame, deltas: Steps, encoder: Encoder, timed: int, repeats: int) -> tuple[float, float]:
    """Median us/frame, and median ratio to plain lz4 timed right before it on the same frames."""
    times, ratios = [], []
    for _ in range(repeats):
        plain = _seconds(lambda: [codec.compress(frame) for frame in frames[:timed]])
        dense = _seconds(lambda: encode_all(frames[:timed], deltas[:timed], encoder))
        times.append(dense / timed)
        ratios.append(dense / plain)
    return statistics.median(times) * 1e6, statistics.median(ratios)


class Segment:
    """Payloads laid end to end in one buffer, with the columns a frame table would hold."""

    def __init__(self, payloads: list[bytes]) -> None:
        self.lengths = np.array([len(p) for p in payloads], np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.checksums = np.array([zlib.crc32(p, s) for s, p in enumerate(payloads)], np.uint32)
        self.views = [memoryview(b"".join(payloads))]

    def locate(self, steps: Steps) -> tuple[Steps, Steps, Steps, npt.NDArray[np.uint32], Steps]:
        return np.zeros(len(steps), np.int64), self.offsets[steps], self.lengths[steps], self.checksums[steps], steps


def sample_batches(starts: npt.NDArray[np.bool_], batch: int, count: int, rng: np.random.Generator) -> list[Steps]:
    """(batch, 5) frame steps per batch: obs and next_obs stacks of 4, clipped at episode starts."""
    episode_first = np.maximum.accumulate(np.where(starts, np.arange(len(starts)), 0))
    picks = []
    for _ in range(count):
        newest = np.empty(0, np.int64)
        while len(newest) < batch:  # a transition's next frame is never its episode's reset frame
            drawn = rng.integers(1, len(starts), batch)
            newest = np.concatenate([newest, drawn[~starts[drawn]]])[:batch]
        steps = newest[:, None] + np.arange(-4, 1)
        picks.append(np.maximum(steps, episode_first[newest][:, None]))
    return picks


def time_decode(
    segment: Segment, plain: Segment, deltas: Steps, picks: list[Steps], depth: int
) -> tuple[float, float, float, float]:
    """Per batch, plain lz4 then the scheme, back to back (a busy machine slows both alike).

    Returns medians of us per batch (plan + locate + decode) and of us in the decode call, the median
    ratio to plain lz4 (locate + decode), and the mean count of extra frames decoded.
    """
    totals, calls, ratios, extras = [], [], [], []
    out = np.empty((picks[0].size, 84, 84), np.uint8)
    for steps in picks:
        start = time.perf_counter()
        columns = plain.locate(steps.reshape(-1))
        assert codec.decode_batch(*columns, out, views=plain.views, threads=1) == -1
        plain_seconds = time.perf_counter() - start
        start = time.perf_counter()
        plan = reference_codec.plan_decode(steps, ref_deltas_of=deltas.__getitem__, depth=depth)
        columns = segment.locate(plan.steps)
        middle = time.perf_counter()
        bad = reference_codec.decode_batch(*columns, plan.refs, plan.rows, out, views=segment.views)
        end = time.perf_counter()
        assert bad == -1
        totals.append(end - start)
        calls.append(end - middle)
        ratios.append((end - start) / plain_seconds)
        extras.append(plan.extra)
    return (statistics.median(totals) * 1e6, statistics.median(calls) * 1e6, statistics.median(ratios),
            float(np.mean(extras)))  # fmt: skip


def time_plain(segment: Segment, picks: list[Steps]) -> float:
    times = []
    out = np.empty((picks[0].size, 84, 84), np.uint8)
    for steps in picks:
        start = time.perf_counter()
        columns = segment.locate(steps.reshape(-1))
        assert codec.decode_batch(*columns, out, views=segment.views, threads=1) == -1
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def overhead_per_transition(ref_field_bytes: int) -> float:
    """Frame table and row bytes per transition of a full store of capacity 1,000,000 (one env)."""
    capacity = 1_000_000
    layout, commit = format.new_store(frame_shape=(84, 84), capacity=capacity, stack_size=4, num_envs=1,
                                      action_shape=(), action_dtype=np.dtype("int64"), sampler={})  # fmt: skip
    rows = row_dtype((), np.dtype("int64"), 1).itemsize * layout.row_slots
    table = (frame_entry(84 * 84).itemsize + ref_field_bytes) * commit.frame_slots
    return (rows + table) / capacity


def check_round_trip(frames: Frame, segment: Segment, deltas: Steps, depth: int) -> None:
    out = np.empty_like(frames)
    reference_codec.decode_frames(np.arange(len(frames)), out, ref_deltas_of=deltas.__getitem__,
                                  locate=segment.locate, views=segment.views, depth=depth)  # fmt: skip
    assert np.array_equal(out, frames), "decoded frames differ"


def game_table(game: str, args: argparse.Namespace, rng: np.random.Generator) -> None:
    frames, starts = load(game, args.frames)
    per_transition = len(frames) / max(1, int((~starts[1:]).sum()))  # frames written per transition
    plain = Segment([codec.compress(frame) for frame in frames])
    picks = sample_batches(starts, args.batch, args.batches, rng)
    plain_encode = statistics.median(
        _seconds(lambda: [codec.compress(frame) for frame in frames[: args.timed]]) / args.timed
        for _ in range(args.repeats)
    )
    print(f"\n### {game}: {len(frames)} frames; plain lz4 {plain.lengths.mean():.0f} B/frame, encode "
          f"{plain_encode * 1e6:.1f} us/frame, batch decode {time_plain(plain, picks):.0f} us; frame table and "
          f"rows today {overhead_per_transition(0):.1f} B/transition\n")  # fmt: skip
    print("| scheme | encoder | depth | bytes/frame | est. bytes/transition | encode us/frame (x plain) | "
          "decode us/batch (in the call) | decode x plain | extra frames/batch |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    overhead = overhead_per_transition(2)
    for scheme_name in args.schemes:
        scheme, group = SCHEMES[scheme_name]
        deltas = ref_deltas_for(scheme, group, starts)
        depth = scheme.depth if scheme is not None else group - 1
        for encoder_name in args.encoders:
            encoder = ENCODERS[encoder_name]
            payloads = encode_all(frames, deltas, encoder)
            size = float(np.mean([len(p) for p in payloads]))
            encode_us, encode_ratio = encode_time(frames, deltas, encoder, args.timed, args.repeats)
            decode = "- | - | -"
            if encoder_name in DECODED:
                segment = Segment(payloads)
                check_round_trip(frames, segment, deltas, depth)
                total, call, ratio, extra = time_decode(segment, plain, deltas, picks, depth)
                decode = f"{total:.0f} ({call:.0f}) | x{ratio:.2f} | {extra:.0f}"
            estimate = size * per_transition + overhead
            print(f"| {scheme_name} | {encoder_name} | {depth} | {size:.1f} | {estimate:.0f} | "
                  f"{encode_us:.1f} (x{encode_ratio:.1f}) | {decode} |", flush=True)  # fmt: skip


def interleaved(games: list[str], envs: int) -> None:
    """``envs`` envs in lockstep: the stream's episodes dealt to the envs, then interleaved frame by frame."""
    print(f"\n### vector env: {envs} envs interleaved frame by frame, encoder lz4ref (C)\n")
    print("| game | scheme | per-env groups (ref_delta recorded): bytes/frame | arithmetic key: bytes/frame |")
    print("|---|---|---|---|")
    for game in games:
        frames, starts = load(game, 20_000)  # all of it: each env needs several episodes
        bounds = np.append(np.flatnonzero(starts), len(frames))
        streams: list[list[int]] = [[] for _ in range(envs)]
        for k in range(len(bounds) - 1):
            min(streams, key=len).extend(range(bounds[k], bounds[k + 1]))
        length = min(len(s) for s in streams)
        order = np.array([s[i] for i in range(length) for s in streams], np.int64)  # frame step -> source
        mixed, mixed_starts = frames[order], starts[order]
        env = np.tile(np.arange(envs), length)
        for name in ("star K=8", "tree K=64 b=8"):
            scheme = SCHEMES[name][0]
            assert scheme is not None
            deltas = np.zeros(len(order), np.int64)
            for e in range(envs):
                steps = np.flatnonzero(env == e)
                local = ref_deltas_for(scheme, scheme.group_size, mixed_starts[steps])
                deltas[steps] = steps - steps[np.arange(len(steps)) - local]
            per_env = np.mean([len(p) for p in encode_all(mixed, deltas, ENCODERS["lz4ref (C)"])])
            places = np.arange(len(order)) % scheme.group_size
            arithmetic = np.where(places == 0, 0, places - scheme.reference_places(places))
            global_ = np.mean([len(p) for p in encode_all(mixed, arithmetic, ENCODERS["lz4ref (C)"])])
            print(f"| {game} | {name} | {per_env:.1f} | {global_:.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", default=["pong", "breakout", "mspacman"])
    parser.add_argument("--frames", type=int, default=6000, help="frames of each game to compress")
    parser.add_argument("--timed", type=int, default=600, help="frames per encode timing pass")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32, help="transitions per sampled batch")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--envs", type=int, default=8, help="envs of the vector-env table")
    parser.add_argument("--encoders", nargs="+", default=list(ENCODERS), choices=list(ENCODERS))
    parser.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=list(SCHEMES))
    parser.add_argument("--quick", action="store_true", help="2,000 frames, 150 batches, lz4ref and HC9 only")
    args = parser.parse_args()
    if args.quick:
        args.frames, args.batches, args.timed, args.repeats = 2000, 150, 300, 3
        args.encoders = list(DECODED)
    if not reference_codec.ACCELERATED or not codec.ACCELERATED:
        raise SystemExit("build mmreplay._lz4ref and mmreplay._lz4batch first (python setup.py build_ext --inplace)")
    print(f"frames: the first {args.frames} of each stream; key frames lz4 HC{reference_codec.KEY_LEVEL}; "
          f"{args.batches} batches of {args.batch} transitions (stack 4); medians")  # fmt: skip
    rng = np.random.default_rng(0)
    for game in args.games:
        game_table(game, args, rng)
    interleaved(args.games, args.envs)


if __name__ == "__main__":
    main()
