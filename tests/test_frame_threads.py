"""How many threads decode a batch (``mmreplay.frames.threads``): the batch's size, the cores the
process may use (affinity, a cgroup CPU quota) and a cap; and the compiled pool that runs them, at every
thread count up to its maximum, from several callers at once."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
from extension_status import absent_reason
from hypothesis import given, settings
from hypothesis import strategies as st
from test_codec import Segments, random_frames, real_frames

from mmreplay import ReplayStore, decode_batch
from mmreplay.frames import lz4_codec as codec
from mmreplay.frames import ring as frame_ring
from mmreplay.frames import threads as frame_threads
from mmreplay.frames.ring import FrameRing
from mmreplay.frames.threads import (
    BYTES_PER_THREAD,
    MAX_THREADS,
    SPLIT_MIN_BYTES,
    background_limit,
    batch_threads,
    cgroup_cpu_limit,
    compress_threads,
    helper_rows,
    thread_limit,
    usable_cores,
)
from mmreplay.store import internals

NOT_BUILT = absent_reason("_lz4batch")
# Frames that compress like a game's (mostly constant, noisy rows) for the pool's tests, which then run
# where no recorded stream is (the 16-core box of benchmarks/lab/cores_box.sh has no ALE).
POOL_FRAMES = random_frames(600, seed=40)
ATARI_ROW = 5 * 84 * 84  # decoded bytes of one transition's stacks of 4 (5 distinct frames)


# -- the policy ------------------------------------------------------------------------------------


@given(nbytes=st.integers(0, 1 << 30))
def test_on_two_cores_a_batch_decodes_on_one_thread_below_the_split_and_on_two_from_it(nbytes: int) -> None:
    assert batch_threads(nbytes, 2) == (1 if nbytes < SPLIT_MIN_BYTES else 2)


@given(nbytes=st.integers(0, 1 << 34), more=st.integers(0, 1 << 20), limit=st.integers(1, 200))
def test_threads_grow_with_the_batch_and_never_pass_the_limit_or_the_pool(nbytes: int, more: int, limit: int) -> None:
    threads = batch_threads(nbytes, limit)
    assert 1 <= threads <= min(limit, MAX_THREADS)
    assert batch_threads(nbytes + more, limit) >= threads


def test_a_sampled_batch_of_32_atari_stacks_takes_eleven_threads_where_the_cores_allow() -> None:
    assert batch_threads(32 * ATARI_ROW, 16) == 2 + (32 * ATARI_ROW - SPLIT_MIN_BYTES) // BYTES_PER_THREAD == 11
    assert batch_threads(32 * ATARI_ROW, 8) == 8
    assert batch_threads(256 * ATARI_ROW, 16) == 16
    assert batch_threads(32 * 5 * 4 * 4, 16) == 1  # CartPole's states: never a helper


def test_tiny_batches_never_wake_a_helper_whatever_the_limit() -> None:
    assert batch_threads(SPLIT_MIN_BYTES - 1, MAX_THREADS) == 1


@given(row_nbytes=st.integers(1, 1 << 22), rows=st.integers(0, 100_000))
def test_batches_of_fewer_rows_than_helper_rows_are_those_batch_threads_keeps_on_one_thread(row_nbytes: int,
                                                                                              rows: int) -> None:
    if rows < helper_rows(row_nbytes):
        assert batch_threads(rows * row_nbytes, MAX_THREADS) == 1
    else:
        assert batch_threads(rows * row_nbytes, MAX_THREADS) >= 2


def test_the_thread_limit_is_the_usable_cores_capped_by_decode_threads() -> None:
    cores = usable_cores()
    assert 1 <= cores <= len(os.sched_getaffinity(0))
    assert thread_limit() == min(cores, MAX_THREADS)
    assert thread_limit(1) == 1
    assert thread_limit(cores + 5) == min(cores, MAX_THREADS)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to take one away")
def test_a_process_pinned_to_one_core_decodes_on_one_thread() -> None:
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert usable_cores() == 1
        assert thread_limit() == 1
        assert batch_threads(1 << 30, thread_limit()) == 1
    finally:
        os.sched_setaffinity(0, before)


# -- cgroup CPU quotas -----------------------------------------------------------------------------


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_cgroup_v2_quota_of_one_and_a_half_cpus_reads_as_1_5(tmp_path: Path) -> None:
    write(tmp_path / "proc", "0::/\n")
    write(tmp_path / "fs" / "cpu.max", "150000 100000\n")
    assert cgroup_cpu_limit(tmp_path / "fs", tmp_path / "proc") == 1.5


def test_a_cgroup_v2_cpu_max_of_max_is_no_quota(tmp_path: Path) -> None:
    write(tmp_path / "proc", "0::/\n")
    write(tmp_path / "fs" / "cpu.max", "max 100000\n")
    assert cgroup_cpu_limit(tmp_path / "fs", tmp_path / "proc") is None


def test_the_smallest_quota_along_a_v2_cgroup_and_its_parents_counts(tmp_path: Path) -> None:
    write(tmp_path / "proc", "0::/user.slice/job/inner\n")
    write(tmp_path / "fs" / "user.slice" / "cpu.max", "300000 100000")
    write(tmp_path / "fs" / "user.slice" / "job" / "cpu.max", "800000 100000")
    write(tmp_path / "fs" / "user.slice" / "job" / "inner" / "cpu.max", "max 100000")
    assert cgroup_cpu_limit(tmp_path / "fs", tmp_path / "proc") == 3.0


def test_a_cgroup_v1_quota_reads_quota_over_period(tmp_path: Path) -> None:
    write(tmp_path / "proc", "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n0::/\n")
    write(tmp_path / "fs" / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "400000\n")
    write(tmp_path / "fs" / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(tmp_path / "fs", tmp_path / "proc") == 4.0


def test_a_cgroup_v1_quota_of_minus_one_is_no_quota(tmp_path: Path) -> None:
    write(tmp_path / "proc", "1:cpu:/\n")
    write(tmp_path / "fs" / "cpu" / "cpu.cfs_quota_us", "-1\n")
    write(tmp_path / "fs" / "cpu" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(tmp_path / "fs", tmp_path / "proc") is None


def test_a_container_whose_cgroup_path_names_the_hosts_reads_its_mounts_root(tmp_path: Path) -> None:
    write(tmp_path / "proc", "1:cpu:/kubepods/pod42/container7\n")
    write(tmp_path / "fs" / "cpu" / "cpu.cfs_quota_us", "200000\n")
    write(tmp_path / "fs" / "cpu" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(tmp_path / "fs", tmp_path / "proc") == 2.0


def test_unreadable_or_garbled_cgroup_files_mean_no_quota(tmp_path: Path) -> None:
    assert cgroup_cpu_limit(tmp_path / "fs", tmp_path / "missing") is None
    write(tmp_path / "proc", "0::/\n")
    write(tmp_path / "fs" / "cpu.max", "lots\n")
    assert cgroup_cpu_limit(tmp_path / "fs", tmp_path / "proc") is None
    write(tmp_path / "fs" / "cpu.max", "0 100000\n")
    assert cgroup_cpu_limit(tmp_path / "fs", tmp_path / "proc") is None


def test_a_quota_below_one_cpu_still_leaves_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frame_threads, "_cgroup_limit_of_this_process", lambda: 0.3)
    assert usable_cores() == 1
    monkeypatch.setattr(frame_threads, "_cgroup_limit_of_this_process", lambda: 2.9)
    assert usable_cores() == min(2, len(os.sched_getaffinity(0)))


@pytest.mark.parametrize(("cores", "limit", "expected"), [(16, 16, 15), (16, 8, 8), (2, 2, 1), (1, 1, 1), (4, 3, 3)])
def test_a_background_decode_leaves_the_consumers_core(monkeypatch: pytest.MonkeyPatch, cores: int, limit: int,
                                                       expected: int) -> None:
    monkeypatch.setattr(frame_threads, "usable_cores", lambda: cores)
    assert background_limit(limit) == expected


@pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT)  # the pure-Python decode plans no threads
@pytest.mark.parametrize("device", [None, "cpu"], ids=["numpy batches", "device batches"])
@pytest.mark.parametrize("length", [None, 3], ids=["transitions", "windows"])
@pytest.mark.parametrize("encoding", ["lz4", "lz4-reference"])
def test_batches_threads_decode_on_all_but_one_core_and_sample_on_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str | None, length: int | None, encoding: str
) -> None:
    # Four usable cores: sample() in the caller may take all four, batches()' thread three (the caller,
    # busy training meanwhile, keeps its core). The limit each batch is planned with is recorded.
    if device is not None:
        pytest.importorskip("torch")
    from mmreplay.store.reading import transition_reader as reading

    monkeypatch.setattr(frame_threads, "usable_cores", lambda: 4)
    limits: dict[str, list[int]] = {}
    planned = reading.batch_threads

    def recording(nbytes: int, limit: int) -> int:
        limits.setdefault(threading.current_thread().name, []).append(limit)
        return planned(nbytes, limit)

    monkeypatch.setattr(reading, "batch_threads", recording)  # transitions' compiled read
    monkeypatch.setattr(codec, "batch_threads", recording)  # windows' frames, decoded through the ring
    monkeypatch.setattr(frame_ring, "batch_threads", recording)  # the same, through either ring's compiled read
    store = ReplayStore.create(tmp_path / "s", frame_shape=(84, 84), capacity=400, stack_size=4,
                               frame_encoding=encoding)
    frames = POOL_FRAMES
    for i in range(300):
        store.add(frames[i % 600], i % 4, 0.0, frames[(i + 1) % 600], (i + 1) % 90 == 0, False)
    assert internals.reader_of(store).thread_limit == 4
    kwargs = {} if device is None else {"device": device}
    with store.batches(64, rng=0, length=length, **kwargs) as batches:
        for _ in range(3):
            next(batches)
    if length is None:
        store.sample(64, rng=0)
    else:
        store.sample_sequences(64, length, rng=0)
    assert set(limits.get("mmreplay-prefetch", [])) == {3}
    assert set(limits.get(threading.current_thread().name, [])) == {4}
    store.close()


# -- the compiled pool -----------------------------------------------------------------------------


@pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT)
@settings(max_examples=60, deadline=None)
@given(threads=st.integers(1, MAX_THREADS), count=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_every_thread_count_up_to_the_pools_maximum_decodes_every_frame(threads: int, count: int, seed: int) -> None:
    segments = Segments(POOL_FRAMES, count=3)
    picks = np.random.default_rng(seed).choice(len(segments.frames), count)
    bad, out = segments.decode(picks, accelerated=True, threads=threads)
    assert bad == -1
    assert np.array_equal(out, segments.frames[picks])


@pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT)
@pytest.mark.parametrize("threads", [2, 7, MAX_THREADS])
def test_on_many_threads_the_first_bad_frame_is_still_the_one_named(threads: int) -> None:
    segments = Segments(random_frames(200, seed=31))
    for index in (0, 3, 117, 199):
        bytes_ = segments.contents[0]
        position = int(segments.offsets[index]) + 2
        bytes_[position] ^= 0x10
        try:
            bad, _ = segments.decode(np.arange(200, dtype=np.int64), accelerated=True, threads=threads)
        finally:
            bytes_[position] ^= 0x10
        assert bad == index


@pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT)
def test_six_callers_posting_batches_of_up_to_the_maximum_threads_at_once_each_get_their_own_frames() -> None:
    """Helpers take the newest posted batch and references to it without a lock: six Python threads
    posting at once, with thread counts that leave helpers idle and that want more than exist, must each
    get every frame of their own batch."""
    segments = Segments(POOL_FRAMES, count=2)
    failures: list[str] = []

    def decode_many(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(80):
            picks = rng.choice(len(segments.frames), int(rng.integers(1, 400)))
            threads = int(rng.choice([1, 2, 3, 8, 17, MAX_THREADS]))
            bad, out = segments.decode(picks, accelerated=True, threads=threads)
            if bad != -1 or not np.array_equal(out, segments.frames[picks]):
                failures.append(f"caller {seed}: bad={bad} on {threads} threads")

    callers = [threading.Thread(target=decode_many, args=(seed,)) for seed in range(6)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=300)
    assert not any(caller.is_alive() for caller in callers), "a decode never finished"
    assert failures == []


@pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT)
def test_decode_batch_without_threads_follows_the_policy_and_its_limit() -> None:
    segments = Segments(POOL_FRAMES)
    picks = np.arange(len(segments.frames), dtype=np.int64)
    for limit in (1, 2, 5, MAX_THREADS):
        bad, out = segments.decode(picks, accelerated=True, limit=limit)
        assert bad == -1 and np.array_equal(out, segments.frames)
    with pytest.raises(ValueError, match=f"threads is {MAX_THREADS + 1}; expected 1 to {MAX_THREADS}"):
        segments.decode(picks, accelerated=True, threads=MAX_THREADS + 1)


def test_the_policy_module_and_the_compiled_pool_agree_on_the_maximum() -> None:
    source = (Path(__file__).resolve().parent.parent / "mmreplay" / "_c" / "pool" / "work_pool.h").read_text()
    assert f"#define POOL_MAX_THREADS {MAX_THREADS}\n" in source


# -- compression on the pool's threads -------------------------------------------------------------


def test_compression_takes_a_thread_for_each_12_kib_of_a_calls_frames_from_four_cores() -> None:
    assert compress_threads(1, 7056, 16) == 1
    assert compress_threads(2, 7056, 16) == 1  # 14 KB: on the calling thread
    assert compress_threads(8, 7056, 16) == 4
    assert compress_threads(64, 7056, 16) == 16
    assert compress_threads(64, 7056, 4) == 4
    assert compress_threads(64, 7056, 3) == 1  # below COMPRESS_MIN_CORES: on the calling thread
    assert compress_threads(100, 16, 16) == 1  # CartPole-sized frames: 1.6 KB in all
    assert compress_threads(1, 1 << 20, 16) == 1  # one frame is one task, however large
    assert compress_threads(64, 7056, 1) == 1


@given(count=st.integers(1, 10_000), frame_nbytes=st.integers(1, 1 << 20), limit=st.integers(1, 200))
def test_compression_threads_never_pass_the_frames_the_limit_or_the_pool(count: int, frame_nbytes: int,
                                                                           limit: int) -> None:
    assert 1 <= compress_threads(count, frame_nbytes, limit) <= min(max(1, count), limit, MAX_THREADS)


@pytest.mark.parametrize("limit", [1, 2, 5, MAX_THREADS])
@pytest.mark.parametrize("source", ["pong", "mspacman", "noise"])
def test_a_batch_compressed_on_any_number_of_threads_is_each_frame_compressed_alone(source: str, limit: int) -> None:
    frames = random_frames(90, seed=8) if source == "noise" else np.ascontiguousarray(real_frames(source)[:90])
    seeds = np.random.default_rng(3).integers(0, 2**32, len(frames), dtype=np.uint64).astype(np.uint32)
    data, lengths, checksums = codec.compress_batch(frames, seeds, limit=limit)
    payloads = [codec.compress(frame) for frame in frames]
    assert data == b"".join(payloads)
    assert lengths.tolist() == [len(payload) for payload in payloads]
    assert checksums.tolist() == [codec.checksum(payload, int(seed)) for payload, seed in zip(payloads, seeds)]


@pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT)
@pytest.mark.parametrize("threads", [1, 3, 8])
def test_a_frame_ring_written_with_compression_threads_holds_the_bytes_of_one_written_without(
    tmp_path: Path, threads: int
) -> None:
    frames = np.ascontiguousarray(real_frames("mspacman")[:300])
    rings = {}
    for name, count in (("alone", 1), ("shared", threads)):
        (tmp_path / name).mkdir()
        ring = FrameRing.create(tmp_path / name, frame_shape=frames.shape[1:], segment_bytes=200_000, frame_slots=512)
        for start in range(0, len(frames), 25):  # segments fill: the general path takes the frames that straddle
            chunk = frames[start : start + 25]
            ring.append_frames(chunk, [start % 3] * len(chunk), threads=count)
        ring.sync()
        rings[name] = ring
    assert rings["alone"].bytes_written == rings["shared"].bytes_written
    for path in sorted((tmp_path / "alone").rglob("*")):
        if path.is_file():
            assert path.read_bytes() == (tmp_path / "shared" / path.relative_to(tmp_path / "alone")).read_bytes(), path
    out = np.empty_like(frames)
    rings["shared"].decode_into(np.arange(len(frames), dtype=np.int64), out, limit=4)
    assert np.array_equal(out, frames)


# -- decode_threads= on the learner's side (encoded batches) ---------------------------------------


def encoded_store(tmp_path: Path) -> ReplayStore:
    """A store of 300 transitions of game-like 84x84 frames in a few episodes of one env."""
    store = ReplayStore.create(tmp_path / "s.mmr", frame_shape=(84, 84), capacity=1000, stack_size=4)
    frames = POOL_FRAMES
    for t in range(300):
        ended = t % 97 == 96
        store.add(frames[t], t % 5, 0.5, frames[t + 1], ended, False)
    return store


@pytest.mark.parametrize("decode_threads", [None, 1, 2, 7, MAX_THREADS])
def test_an_encoded_batch_decodes_to_the_same_batch_whatever_its_decode_threads(tmp_path: Path,
                                                                                decode_threads: int | None) -> None:
    with encoded_store(tmp_path) as store:
        expected = store.sample(64, 3)
        encoded = store.sample_encoded(64, 3)
        for batch in (encoded.decode(decode_threads=decode_threads), decode_batch(encoded, decode_threads=decode_threads)):
            assert np.array_equal(batch.obs, expected.obs) and np.array_equal(batch.next_obs, expected.next_obs)
        windows = store.sample_sequences_encoded(6, 20, 4)
        assert np.array_equal(windows.decode(decode_threads=decode_threads).obs, store.sample_sequences(6, 20, 4).obs)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, rf"^decode_threads must be None \(the cores this process may use\) or 1 to {MAX_THREADS}; got 0$"),
        (MAX_THREADS + 1, ValueError, rf"^decode_threads must be None .* or 1 to {MAX_THREADS}; got {MAX_THREADS + 1}$"),
        (2.0, TypeError, r"^decode_threads must be None or an int; got float 2.0$"),
        ("4", TypeError, r"^decode_threads must be None or an int; got str '4'$"),
        (True, TypeError, r"^decode_threads must be None or an int; got bool True$"),
    ],
)
def test_a_decode_threads_that_is_not_none_or_1_to_the_maximum_is_refused(
    tmp_path: Path, value: object, error: type[Exception], message: str
) -> None:
    with encoded_store(tmp_path) as store:
        encoded = store.sample_encoded(8, 1)
        with pytest.raises(error, match=message):
            encoded.decode(decode_threads=value)  # type: ignore[arg-type]
        with pytest.raises(error, match=message):
            encoded.frames.decode(decode_threads=value)  # type: ignore[arg-type]


# -- decode_threads= on create and open ------------------------------------------------------------


@pytest.mark.parametrize("cap", [1, 2, 3, MAX_THREADS])
def test_every_read_returns_the_same_batch_whatever_the_decode_threads_cap(tmp_path: Path, cap: int) -> None:
    """sample, n-step sample, sample_sequences, read and iterate decode on up to ``cap`` threads (a batch
    of 256 stacks of 84x84 frames asks for all it may have): the same pixels as one thread decodes."""
    with encoded_store(tmp_path):
        pass
    with ReplayStore.open(tmp_path / "s.mmr", "r", decode_threads=1) as one, \
            ReplayStore.open(tmp_path / "s.mmr", "r", decode_threads=cap) as many:
        assert internals.reader_of(many).thread_limit == min(cap, usable_cores())
        for read in (lambda s: s.sample(256, 5), lambda s: s.sample(64, 6, n_step=3),
                     lambda s: s.sample_sequences(8, 30, 7), lambda s: s.read(np.arange(250)),
                     lambda s: next(iter(s.iterate(128)))):
            expected, got = read(one), read(many)
            assert np.array_equal(got.obs, expected.obs) and np.array_equal(got.next_obs, expected.next_obs)


def test_a_writer_created_or_opened_with_a_cap_adds_and_samples_as_one_without(tmp_path: Path) -> None:
    store = ReplayStore.create(tmp_path / "capped.mmr", frame_shape=(84, 84), capacity=500, stack_size=4,
                               decode_threads=2)
    assert internals.reader_of(store).thread_limit == min(2, usable_cores())
    for t in range(120):
        store.add(POOL_FRAMES[t], 1, 0.0, POOL_FRAMES[t + 1], False, False)
    store.close()
    with ReplayStore.open(tmp_path / "capped.mmr", "r+", decode_threads=1) as store:
        assert internals.reader_of(store).thread_limit == 1
        batch = store.read(np.arange(100))
        assert np.array_equal(batch.next_obs[:, -1], POOL_FRAMES[1:101])


@pytest.mark.parametrize(("value", "error"), [(0, ValueError), (MAX_THREADS + 1, ValueError), (1.5, TypeError),
                                              ("all", TypeError), (False, TypeError)])
def test_create_refuses_a_decode_threads_that_is_not_none_or_1_to_the_maximum_before_writing(
    tmp_path: Path, value: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="^decode_threads must be None"):
        ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=10, decode_threads=value)  # type: ignore[arg-type]
    assert not (tmp_path / "s.mmr").exists()
    ReplayStore.create(tmp_path / "t.mmr", frame_shape=(4, 4), capacity=10).close()
    for mode in ("r", "r+"):
        with pytest.raises(error, match="^decode_threads must be None"):
            ReplayStore.open(tmp_path / "t.mmr", mode, decode_threads=value)  # type: ignore[arg-type]


@pytest.mark.skipif(not codec.ACCELERATED or not os.path.isdir("/proc/self/task"), reason=NOT_BUILT + " (or no /proc)")
def test_the_pools_helper_threads_are_named_mmreplay_pool() -> None:
    """Once a batch decodes on several threads, the pool's helpers are this process's threads named
    ``mmreplay-pool`` (what ``top -H`` shows, and how benchmarks/gpu_feeds.IdleThreads finds them)."""
    segments = Segments(POOL_FRAMES)
    picks = np.arange(200) % len(segments.frames)
    bad, out = segments.decode(picks, accelerated=True, threads=4)
    assert bad == -1 and np.array_equal(out, segments.frames[picks])
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                names.append(comm.read().strip())
        except OSError:  # a thread that ended meanwhile
            pass
    assert "mmreplay-pool" in names, names
