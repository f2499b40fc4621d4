"""One env's adds, as a training loop makes them at nearly every step: the fast path, on the calling
thread. Each add compresses and writes its frame before it returns (no helper, nothing left for a later
call), reads back exactly, even when the caller overwrites its buffers at once; a full disk refuses an
add with nothing of it counted, and the adds after it go on; and no thread but the caller's is started
or woken by them. test_fast_add checks that stores written through the fast path hold the general
path's bytes.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from atari_data import load_stream
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import ReferenceStore, assert_batch_matches

from mmreplay import ReplayStore, extensions
from mmreplay.store import internals

_lz4batch = extensions.load("_lz4batch")
ENCODINGS = pytest.mark.parametrize("encoding", ["lz4", "lz4-reference"])


def threads_of_this_process() -> set[int]:
    """The ids of this process's threads (``/proc/self/task``)."""
    return {int(name) for name in os.listdir("/proc/self/task")}


@ENCODINGS
def test_one_envs_adds_take_the_fast_path_and_read_back(tmp_path: Path, encoding: str) -> None:
    """A one-env store fed real Pong stacks with Python scalars: every add but an episode's first takes the
    fast path (with the extension), and sampling rebuilds what was added."""
    frames = load_stream("pong", ("frames",), 120)["frames"]
    store = ReplayStore.create(tmp_path / "s.mmr", frame_shape=frames.shape[1:], capacity=1_000,
                               frame_encoding=encoding)
    stacks = np.stack([frames[np.maximum(np.arange(t - 3, t + 1), 0)] for t in range(len(frames))])
    for t in range(len(frames) - 1):
        store.add(stacks[t], t % 6, float(t), stacks[t + 1], False, t == len(frames) - 2)
    if _lz4batch is not None or encoding == "lz4":
        # the first add starts the episode: the general path
        assert internals.writer_of(store).fast_adds == len(frames) - 2
    batch = store.sample(64, rng=np.random.default_rng(0))
    steps = batch.reward.astype(np.int64)
    np.testing.assert_array_equal(batch.obs, stacks[steps])
    np.testing.assert_array_equal(batch.next_obs, stacks[steps + 1])
    np.testing.assert_array_equal(batch.action, steps % 6)
    store.close()


# Run in a process of its own: threads that other tests' objects leave in the test process (their feeds,
# timers, torch's pools) may start or stop at any time, which says nothing of the adds.
THREADS_SCRIPT = """
import json, os, sys, time
from pathlib import Path
import numpy as np
from atari_data import load_stream
from mmreplay import ReplayStore, decode_blocks, encode_frames

def threads():
    return {int(name) for name in os.listdir("/proc/self/task")}

def helpers_switches():
    found = {}
    for tid in threads():
        task = Path(f"/proc/self/task/{tid}")
        try:
            if task.joinpath("comm").read_text().strip() == "mmreplay-pool":
                found[tid] = [line for line in task.joinpath("status").read_text().splitlines()
                              if "ctxt_switches" in line]
        except FileNotFoundError:
            continue
    return found

frames = load_stream("pong", ("frames",), 4_000)["frames"]
store = ReplayStore.create(Path(sys.argv[1]) / "s.mmr", frame_shape=frames.shape[1:], capacity=12_000,
                           frame_encoding=sys.argv[2], decode_threads=2)
stacks = np.stack([frames[np.maximum(np.arange(t - 3, t + 1), 0)] for t in range(200)])
for t in range(199):
    store.add(stacks[t], 0, 0.0, stacks[t + 1], False, t == 198)
store.sample(256, rng=0)
encoded = encode_frames(frames[:200])  # a decode of two threads' size starts the pool's helpers, which then sleep
decode_blocks([encoded], encoded.blocks(np.arange(200)).from_source(0), np.empty((200, *frames.shape[1:]), np.uint8))

def settled_switches():
    # The helpers go back to sleep a moment after the decode returns (on a loaded machine, later): their
    # counts once two reads 50 ms apart agree (up to 5 s), so that only a wake during the adds moves them.
    last = helpers_switches()
    for _ in range(100):
        time.sleep(0.05)
        now = helpers_switches()
        if now == last:
            return now
        last = now
    return last

before, switches = threads(), settled_switches()
seen = set()
for t in range(1, 10_001):
    k = t % 198 + 1
    store.add(stacks[k], t % 6, 0.5, stacks[k + 1], False, k == 198)
    if t % 500 == 0:
        seen |= threads()
print(json.dumps({"started": sorted((seen | threads()) - before), "helpers": len(switches),
                  "woken": helpers_switches() != switches}))
store.close()
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc/self/task")
@ENCODINGS
def test_one_envs_adds_start_and_wake_no_thread_but_the_callers(tmp_path: Path, encoding: str) -> None:
    """10,000 adds of one env (Pong stacks, Python scalars) run on the calling thread alone: the process
    (one of its own) starts no thread during them, and the pool's helpers (started by a read before) are
    never woken meanwhile (their context switches do not move), whatever the machine's cores."""
    tests = Path(__file__).resolve().parent
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", THREADS_SCRIPT, str(tmp_path), encoding], env=environment,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["started"] == [], result
    if _lz4batch is not None:
        assert result["helpers"] >= 1, result  # the read before started them: the check below can fail
    assert not result["woken"]


def test_a_one_env_add_whose_row_cannot_be_reserved_raises_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path reserves its rows' blocks as the general path does (a store into the map of a full
    disk would be a SIGBUS): once the rows run past what is reserved, a refused reservation raises the
    OSError before anything of the add is written (its frame neither), and the same add goes in once
    there is space, every transition read back exact."""
    import mmreplay.disk.files as files

    frames = np.random.default_rng(0).integers(0, 255, (6000, 16, 16), dtype=np.uint8)
    store = ReplayStore.create(tmp_path / "s", capacity=20_000, frame_shape=(16, 16), stack_size=1)
    real = files.os.posix_fallocate
    full = {"on": True}

    def fallocate(descriptor: int, offset: int, length: int) -> None:
        if full["on"] and os.readlink(f"/proc/self/fd/{descriptor}").endswith("transitions.tbl") and offset > 0:
            raise OSError(errno.ENOSPC, "No space left on device (test)")
        real(descriptor, offset, length)

    store.add(frames[0], 0, 0.0, frames[1], False, False)  # the episode's first add: the general path
    monkeypatch.setattr(files.os, "posix_fallocate", fallocate)
    added = 1
    with pytest.raises(OSError) as refused:
        for t in range(1, len(frames) - 1):
            store.add(frames[t], t % 4, float(t), frames[t + 1], False, False)
            added += 1
    assert refused.value.errno == errno.ENOSPC
    assert 1 < added < len(frames) - 2  # refused where the rows ran past the first reservation
    assert len(store) == added
    assert internals.files_of(store).frames.frames_written == added + 1  # its frame neither
    full["on"] = False
    for t in range(added, added + 10):
        store.add(frames[t], t % 4, float(t), frames[t + 1], False, False)
    store.flush()
    batch = store.read(np.arange(len(store)))
    np.testing.assert_array_equal(batch.obs[:, -1], frames[: len(store)])  # stacks of one frame
    np.testing.assert_array_equal(batch.next_obs[:, -1], frames[1 : len(store) + 1])
    np.testing.assert_array_equal(batch.action, np.arange(len(store)) % 4)
    store.close()


@ENCODINGS
def test_an_add_whose_frame_write_fails_counts_nothing_and_the_adds_after_it_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoding: str
) -> None:
    """A frame write that fails (a full disk) fails its add, which counts nothing; a reference store's env
    starts a new group then (no frame is compressed against one that was not written), and once the
    write can go on every add reads back. The disk is made full by handing the frame writes /dev/full's
    descriptor (ENOSPC on every write), so the compiled call fails where it really writes."""
    frames = np.random.default_rng(2).integers(0, 8, (14, 16, 16), dtype=np.uint8)
    store = ReplayStore.create(tmp_path / "s.mmr", frame_shape=(16, 16), stack_size=4, capacity=100,
                               frame_encoding=encoding)
    ring = internals.files_of(store).frames
    real = ring._descriptor_of
    full = {"on": False}
    device = os.open("/dev/full", os.O_WRONLY)

    def descriptor_of(segment: int) -> int:
        return device if full["on"] else real(segment)

    monkeypatch.setattr(ring, "_descriptor_of", descriptor_of)
    for t in range(4):
        store.add(frames[t], t, float(t), frames[t + 1], False, False)
    full["on"] = True
    for _ in range(2):
        with pytest.raises(OSError) as failed:
            store.add(frames[4], 4, 4.0, frames[5], False, False)
        assert failed.value.errno == errno.ENOSPC
        assert len(store) == 4
    store.read([0])
    full["on"] = False
    os.close(device)
    for t in range(4, 13):
        store.add(frames[t], t, float(t), frames[t + 1], False, False)
    store.close()
    with ReplayStore.open(tmp_path / "s.mmr", "r") as reopened:
        batch = reopened.read(np.arange(13))
        np.testing.assert_array_equal(batch.next_obs[:, -1], frames[1:14])
        np.testing.assert_array_equal(batch.action, np.arange(13))


_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(["continue", "continue", "continue", "terminate", "cut"])),
        st.tuples(st.sampled_from(["read", "sample", "flush", "episodes"]), st.just("")),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(operations=_OPERATIONS, seed=st.integers(0, 2**16), encoding=st.sampled_from(["lz4", "lz4-reference"]))
def test_adds_read_back_though_the_caller_reuses_its_buffers(
    tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[str, str]], seed: int, encoding: str
) -> None:
    """Model test: a one-env store fed by a caller that overwrites its obs and next_obs buffers in place
    after each add (a vector env's reused arrays), with reads, samples, flushes and episode lists in
    between, gives back what the model holds at each read, and after reopening."""
    path = tmp_path_factory.mktemp("reused") / "s.mmr"
    rng = np.random.default_rng(seed)
    store = ReplayStore.create(path, frame_shape=(16, 16), stack_size=4, capacity=40, frame_encoding=encoding)
    ref = ReferenceStore(frame_shape=(16, 16), capacity=40, stack_size=4)
    obs, next_obs = np.empty((4, 16, 16), np.uint8), np.empty((4, 16, 16), np.uint8)
    obs[:] = rng.integers(0, 4, (16, 16), dtype=np.uint8)  # an episode's first stack: one frame repeated
    adds = 0
    for t, (operation, how) in enumerate(operations):
        if operation == "add":
            next_obs[:-1] = obs[1:]
            next_obs[-1] = rng.integers(0, 4, (16, 16), dtype=np.uint8)
            arguments = (obs, t % 5, float(t), next_obs, how == "terminate", how == "cut")
            ref.add(*(a.copy() if isinstance(a, np.ndarray) else a for a in arguments))
            store.add(*arguments)
            adds += 1
            # the caller's buffers, rewritten in place: the next obs, or a new episode's first stack
            obs[:] = next_obs if how == "continue" else rng.integers(0, 4, (16, 16), dtype=np.uint8)
            next_obs[:] = 255
        elif adds and operation == "read":
            stored = ref.stored_steps()
            assert_batch_matches(store.read(stored), ref, stored)
        elif adds and operation == "sample":
            assert_batch_matches(store.sample(8, rng=t), ref)
        elif operation == "flush":
            store.flush()
        elif operation == "episodes":
            assert sum(e.length for e in store.episodes()) == len(ref)
    store.close()
    with ReplayStore.open(path, "r") as reopened:
        assert reopened.transitions_added == adds
        if adds:
            stored = ref.stored_steps()
            assert_batch_matches(reopened.read(stored), ref, stored)


@ENCODINGS
def test_samples_in_another_thread_see_every_counted_adds_frames(tmp_path: Path, encoding: str) -> None:
    """A thread sampling while another adds gets, in every batch, the frames of the steps it drew: an add
    is counted only once its frame and row are written, under the store's lock that reads take."""
    frames = np.random.default_rng(3).integers(0, 8, (1500, 16, 16), dtype=np.uint8)
    store = ReplayStore.create(tmp_path / "s.mmr", frame_shape=(16, 16), stack_size=4, capacity=2_000,
                               frame_encoding=encoding)
    store.add(frames[0], 0, 0.0, frames[1], False, False)
    failures: list[str] = []
    done = threading.Event()
    sampled = [0]

    def sample() -> None:
        rng, deadline, batches = np.random.default_rng(0), time.monotonic() + 60, 0
        while not done.is_set() and time.monotonic() < deadline and batches < 5_000:
            try:
                batch = store.sample(8, rng=rng)
            except Exception as error:  # a frame read before it was written: its CRC
                failures.append(repr(error))
                return
            steps = np.asarray(batch.index)
            if not (np.array_equal(batch.next_obs[:, -1], frames[steps + 1]) and np.array_equal(batch.obs[:, -1], frames[steps])):
                failures.append(f"steps {steps.tolist()}")
            batches += 1
            sampled[0] = batches
        if batches < 50:
            failures.append(f"only {batches} batches sampled")

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for t in range(1, len(frames) - 1):
            store.add(frames[t], t % 3, float(t), frames[t + 1], False, False)
            if t % 20 == 0:  # let the sampler in between adds (at most 1 s for each batch)
                seen, wait_until = sampled[0], time.monotonic() + 1
                while sampled[0] == seen and time.monotonic() < wait_until and not failures:
                    time.sleep(0.0002)
    finally:
        done.set()
        sampler.join(90)
    assert not sampler.is_alive() and not failures, failures[:3]
    store.close()
