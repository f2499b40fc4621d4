"""``store.batches(..., device=...)``: batches as torch tensors, prepared by a thread.

On every machine the pipeline runs to ``device="cpu"`` (no pinning, no copy): it must yield exactly what
successive ``sample`` (``sample_sequences``) calls with an equal generator return, in order, for uniform,
prioritized and n-step batches and for windows; raise the thread's errors in the caller; stop its thread
on ``close``; and hand out memory that stays valid until the next ``next()``. Where CUDA is, the same
checks run on the GPU (skipped here otherwise).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from reference_windows import FailingSampler
from strategies import numbered_frame, stack
from synthetic_frames import sprite_frames

from mmreplay import PrioritizedSampler

torch = pytest.importorskip("torch")

FRAME = (6, 5)
NAMES = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "index", "env_index", "weight", "discount")
WINDOW_NAMES = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "mask", "index", "env_index", "weight")
CUDA = torch.cuda.is_available()


def fill(store, count, *, episode=7, first=0):
    """``count`` transitions of numbered frames, an episode ending every ``episode`` steps (next_obs
    shifted: obs and next_obs share frames)."""
    for i in range(first, first + count):
        store.add(numbered_frame(FRAME, i), i % 5, float(i), numbered_frame(FRAME, i + 1), (i + 1) % episode == 0,
                  False)


def assert_same(device_batch, batch, names=NAMES):
    for name in names:
        np.testing.assert_array_equal(getattr(device_batch, name).cpu().numpy(), getattr(batch, name),
                                      err_msg=f"batch.{name}")
    assert device_batch.fields.keys() == batch.fields.keys()
    for name, array in batch.fields.items():
        np.testing.assert_array_equal(device_batch.fields[name].cpu().numpy(), array, err_msg=f"fields[{name!r}]")


def threads_named(name):
    return [t for t in threading.enumerate() if t.name == name]


def wait_until_stopped(threads, seconds=10.0):
    """Poll (a generous bound, not a timing assertion) until the threads have ended."""
    deadline = time.monotonic() + seconds
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [t for t in threads if t.is_alive()]


@pytest.mark.parametrize("kwargs", [dict(), dict(n_step=3, gamma=0.9), dict(beta=0.7)], ids=["plain", "n_step", "beta"])
@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
@pytest.mark.parametrize("per_read", [None, 1, 3], ids=["default-per-read", "1-per-read", "3-per-read"])
def test_device_batches_on_the_cpu_equal_successive_samples_with_an_equal_generator(
    make_store, kwargs, prioritized, per_read
):
    """Read one, three or (a uniform sampler's default) four batches at a time, each is what ``sample``
    draws and weighs in turn with the same generator."""
    store = make_store(frame_shape=FRAME, capacity=60, stack_size=4, sampler=PrioritizedSampler() if prioritized else None)
    fill(store, 80)
    if prioritized:
        store.update_priorities(np.arange(20, 80), np.linspace(0.1, 5, 60))
    expected_rng = np.random.default_rng(11)
    expected = [store.sample(16, expected_rng, **kwargs) for _ in range(12)]
    with store.batches(16, prefetch=3, rng=np.random.default_rng(11), device="cpu", group=per_read,
                       **kwargs) as batches:
        for batch, want in zip(batches, expected):
            assert_same(batch, want)
            assert batch.obs.device.type == "cpu" and batch.obs.dtype == torch.uint8


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
@pytest.mark.parametrize("per_read", [None, 1, 3], ids=["default-per-read", "1-per-read", "3-per-read"])
def test_device_windows_on_the_cpu_equal_successive_sample_sequences(make_store, prioritized, per_read):
    store = make_store(frame_shape=FRAME, capacity=60, stack_size=3, sampler=PrioritizedSampler() if prioritized else None)
    fill(store, 70, episode=9)
    rng = np.random.default_rng(5)
    with store.batches(6, length=5, rng=5, device="cpu", beta=0.5, group=per_read) as batches:
        for _, batch in zip(range(10), batches):
            assert_same(batch, store.sample_sequences(6, 5, rng, beta=0.5), WINDOW_NAMES)
            assert tuple(batch.obs.shape) == (6, 5, 3, *FRAME)


def test_obs_and_next_obs_are_views_of_one_tensor_of_stack_size_plus_one_frames(make_store):
    store = make_store(frame_shape=FRAME, capacity=40, stack_size=4)
    fill(store, 40)
    with store.batches(8, rng=0, device="cpu") as batches:
        batch = next(batches)
    frame_bytes = int(np.prod(FRAME))
    assert batch.obs.untyped_storage().data_ptr() == batch.next_obs.untyped_storage().data_ptr()
    assert batch.next_obs.data_ptr() - batch.obs.data_ptr() == frame_bytes
    assert batch.obs.stride(0) == 5 * frame_bytes  # rows of stack_size + 1 frames: 5 sent, not 8


@pytest.mark.parametrize("per_read", [1, 4])
def test_a_batch_holding_a_transition_stored_with_its_given_next_obs_comes_out_as_sample_gives_it(make_store, per_read):
    """Its values, and its frames shared between obs and next_obs where the batches read with it (one, or
    four) allow it: a read that holds a detached row is drawn again into separate obs and next_obs."""
    store = make_store(frame_shape=(3, 4), capacity=50, stack_size=3)
    n = 1
    for episode in range(12):  # CleanRL's loop: each episode ends with the next one's reset stack as next_obs
        obs = stack(n, n, n)
        for t in range(4):
            last = t == 3
            next_obs = stack(n + 1, n + 1, n + 1) if last else np.concatenate([obs[1:], stack(n + 1)])
            store.add(obs, t, float(n), next_obs, last, False)
            obs, n = next_obs, n + 1
    rng = np.random.default_rng(3)
    expected = [store.sample(12, rng) for _ in range(20)]
    assert any(not np.shares_memory(b.obs, b.next_obs) for b in expected)  # some batch holds a detached row
    with store.batches(12, rng=3, device="cpu", prefetch=1, group=per_read) as batches:
        for i, (batch, want) in enumerate(zip(batches, expected)):
            assert_same(batch, want)
            read = expected[i - i % per_read : i - i % per_read + per_read]
            shared = all(np.shares_memory(b.obs, b.next_obs) for b in read)
            assert (batch.next_obs.data_ptr() - batch.obs.data_ptr() == 12) == shared


def test_update_priorities_takes_a_device_batch_index(make_store):
    store = make_store(frame_shape=FRAME, capacity=40, stack_size=2, sampler=PrioritizedSampler())
    fill(store, 40)
    with store.batches(8, rng=0, device="cpu") as batches:
        batch = next(batches)
        assert batch.index.device.type == "cpu"
        store.update_priorities(batch.index, torch.full((8,), 50.0))
    drawn = store.sample(200, rng=1).index
    assert np.isin(drawn, batch.index.numpy()).mean() > 0.5  # 8 of 40 steps now hold most of the mass


def test_user_fields_come_as_tensors_beside_the_batch(make_store):
    store = make_store(frame_shape=FRAME, capacity=30, stack_size=2, fields={"logits": ((3,), np.float16)})
    for i in range(30):
        store.add(numbered_frame(FRAME, i), i % 5, float(i), numbered_frame(FRAME, i + 1), False, False,
                  fields={"logits": np.full(3, i, np.float16)})
    rng = np.random.default_rng(2)
    with store.batches(4, rng=2, device="cpu") as batches:
        for _, batch in zip(range(5), batches):
            assert_same(batch, store.sample(4, rng))
            assert batch.fields["logits"].dtype == torch.float16


def test_an_error_in_the_thread_is_raised_by_next_after_the_batches_drawn_before_it(make_store):
    store = make_store(frame_shape=FRAME, capacity=20, sampler=FailingSampler(fail_at=4))
    fill(store, 10)
    before = set(threads_named("mmreplay-prefetch"))
    # draw 1 is the layout's, in the caller; one batch a read: draws 2 and 3 come out, draw 4 fails
    batches = store.batches(4, prefetch=2, rng=0, device="cpu", group=1)
    threads = [t for t in threads_named("mmreplay-prefetch") if t not in before]
    assert len(threads) == 1
    assert len(next(batches)) == 4 and len(next(batches)) == 4
    with pytest.raises(RuntimeError, match=r"^injected failure in draw 4$"):
        next(batches)
    assert wait_until_stopped(threads) == []
    with pytest.raises(StopIteration):
        next(batches)


def test_an_error_in_a_read_of_several_batches_is_raised_by_next_in_place_of_its_first_batch(make_store):
    """The batches of one read are drawn and read together: draw 1 is the layout's, reads of two draw 2-3
    and 4-5, and the read of 6-7 fails at draw 7, so the fifth next() raises it, and then the iterator ends."""
    store = make_store(frame_shape=FRAME, capacity=20, sampler=FailingSampler(fail_at=7))
    fill(store, 10)
    before = set(threads_named("mmreplay-prefetch"))
    batches = store.batches(4, prefetch=2, rng=0, device="cpu", group=2)
    threads = [t for t in threads_named("mmreplay-prefetch") if t not in before]
    assert [len(next(batches)) for _ in range(4)] == [4, 4, 4, 4]
    with pytest.raises(RuntimeError, match=r"^injected failure in draw 7$"):
        next(batches)
    assert wait_until_stopped(threads) == []
    with pytest.raises(StopIteration):
        next(batches)


@pytest.mark.parametrize("how", ["close", "with", "store.close"])
def test_closing_stops_the_thread(make_store, how):
    store = make_store(frame_shape=FRAME, capacity=20)
    fill(store, 20)
    before = set(threads_named("mmreplay-prefetch"))
    batches = store.batches(4, rng=0, device="cpu")
    next(batches)
    threads = [t for t in threads_named("mmreplay-prefetch") if t not in before]
    assert len(threads) == 1
    if how == "close":
        batches.close()
    elif how == "with":
        with batches:
            next(batches)
    else:
        store.close()
    assert wait_until_stopped(threads) == []
    assert "closed" in repr(batches) or how == "store.close"
    with pytest.raises(StopIteration):
        next(batches)


def test_a_batch_is_valid_until_the_next_next_and_its_memory_comes_back_after_prefetch_plus_two(make_store):
    store = make_store(frame_shape=FRAME, capacity=40, stack_size=3)
    fill(store, 40)
    rng = np.random.default_rng(9)
    expected = [store.sample(8, rng) for _ in range(12)]
    with store.batches(8, rng=9, device="cpu", prefetch=2, group=1) as batches:
        first = next(batches)
        kept = {name: getattr(first, name).clone() for name in NAMES}
        assert_same(first, expected[0])  # still intact while held, though the thread has filled others
        later = [next(batches) for _ in range(4)]
    assert later[3].obs.data_ptr() == first.obs.data_ptr()  # slot 0 again: 2 waiting + 1 filling + 1 held
    assert len({b.obs.data_ptr() for b in [first, *later[:3]]}) == 4
    assert_same(type(first)(**kept), expected[0])  # a clone outlives the slot


def test_a_read_of_four_batches_fills_one_slot_whose_memory_comes_back_after_three_reads(make_store):
    """Four batches a read (a uniform sampler's default for batches of 256), views of one slot's rows in
    draw order; with prefetch 2 (one read waiting), the thread fills a third slot while the consumer holds
    one."""
    store = make_store(frame_shape=FRAME, capacity=40, stack_size=3)
    fill(store, 40)
    rng = np.random.default_rng(9)
    expected = [store.sample(8, rng) for _ in range(13)]
    got = []
    with store.batches(8, rng=9, device="cpu", prefetch=2, group=4) as batches:
        for want in expected:
            got.append(next(batches))
            assert_same(got[-1], want)  # valid until the next next()
    row = got[0].obs.stride(0)
    assert [b.obs.data_ptr() - got[0].obs.data_ptr() for b in got[:4]] == [8 * row * i for i in range(4)]
    assert len({b.obs.data_ptr() for b in got[0:12:4]}) == 3
    assert got[12].obs.data_ptr() == got[0].obs.data_ptr()  # slot 0 again: 1 read waiting + 1 filling + 1 held


def test_group_is_checked_and_needs_a_device_and_host_decoding(make_store):
    store = make_store(frame_shape=FRAME, capacity=20)
    fill(store, 10)
    with pytest.raises(ValueError, match=r"^group must be a positive int or None; got 0$"):
        store.batches(4, device="cpu", group=0)
    with pytest.raises(TypeError, match=r"^group must be a positive int or None; got float$"):
        store.batches(4, device="cpu", group=2.0)
    with pytest.raises(TypeError, match=r"^group needs device=: numpy batches are read one at a time$"):
        store.batches(4, group=2)
    with pytest.raises(ValueError, match=r"^group=2 needs decode='host'"):
        store.batches(4, device="cpu", decode="device", group=2)


@pytest.mark.parametrize("batch_size,per_read", [(1, 8), (32, 8), (128, 8), (256, 4), (512, 2), (1024, 1), (5000, 1)])
def test_a_uniform_samplers_default_reads_batches_up_to_1024_rows_at_most_8(make_store, batch_size, per_read):
    store = make_store(frame_shape=FRAME, capacity=20)
    fill(store, 10)
    with store.batches(batch_size, rng=0, device="cpu") as batches:
        assert (f"group={per_read}" in repr(batches)) == (per_read > 1)
        assert ("group" in repr(batches)) == (per_read > 1)


def test_a_prioritized_sampler_reads_one_batch_at_a_time_by_default(make_store):
    store = make_store(frame_shape=FRAME, capacity=20, sampler=PrioritizedSampler())
    fill(store, 10)
    with store.batches(4, rng=0, device="cpu") as batches:
        assert "group" not in repr(batches)
    with store.batches(4, rng=0, device="cpu", group=3) as batches:
        assert "group=3" in repr(batches)


def test_batches_without_a_device_also_take_length_and_yield_successive_windows(make_store):
    store = make_store(frame_shape=FRAME, capacity=40, stack_size=2)
    fill(store, 40)
    for reuse in (False, True):
        rng = np.random.default_rng(4)
        with store.batches(5, length=3, rng=4, reuse=reuse) as batches:
            for _, batch in zip(range(8), batches):
                want = store.sample_sequences(5, 3, rng)
                for name in WINDOW_NAMES:
                    np.testing.assert_array_equal(getattr(batch, name), getattr(want, name))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(device="gpu"), ValueError, r"^device is 'gpu'; expected 'cpu', 'cuda' or 'cuda:N'$"),
        (dict(device=0), TypeError, r"^device must be a str such as 'cuda' or 'cuda:1', or a torch.device; got int$"),
        (dict(device="meta"), ValueError, r"^device is 'meta'; batches go to 'cpu' or a 'cuda' device$"),
        (dict(device="cpu", decode="gpu"), ValueError, r"^decode is 'gpu'; expected 'host' \(the compiled decoder"),
        (dict(device="cpu", decode=None), TypeError, r"^decode must be a str, 'host' or 'device'; got NoneType$"),
        (dict(device="cpu", decode="device"), ValueError, r"^decode='device' decodes on a CUDA device; device is cpu"),
        (dict(device="cpu", n_step=0), ValueError, r"n_step"),
        (dict(device="cpu", length=0), ValueError, r"length"),
        (dict(device="cpu", bogus=1), TypeError, r"bogus"),
        (dict(device="cpu", out=None), TypeError, r"^batches\(\) takes no out"),
    ],
)
def test_bad_arguments_are_refused_in_the_caller_before_a_thread_starts(make_store, kwargs, error, message):
    store = make_store(frame_shape=FRAME, capacity=20, frame_encoding="lz4")  # decode='device' takes plain frames
    fill(store, 10)
    before = threading.enumerate()
    with pytest.raises(error, match=message):
        store.batches(4, **kwargs)
    assert [t for t in threading.enumerate() if t not in before] == []


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_a_cuda_device_without_cuda_is_refused_naming_the_cpu(make_store):
    store = make_store(frame_shape=FRAME, capacity=20)
    fill(store, 10)
    with pytest.raises(ValueError, match=r"^device is 'cuda', but this PyTorch \(.*\) sees no CUDA device; use device='cpu'$"):
        store.batches(4, device="cuda")


def test_decoding_on_the_device_refuses_a_store_whose_blocks_do_not_carry_the_batch(make_store):
    store = make_store(frame_shape=FRAME, capacity=20, stack_padding="zeros")
    fill(store, 10)
    with pytest.raises(ValueError, match=r"^decode='device' decodes the stored blocks of a store with .*"
                                         r"stack_padding='zeros'.*: use decode='host'$"):
        store.batches(4, device="cpu", decode="device")


def test_without_torch_device_batches_name_the_extra_and_mmreplay_imports_without_torch(tmp_path):
    script = f"""
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
sys.meta_path.insert(0, NoTorch())
import numpy as np
from mmreplay import ReplayStore
store = ReplayStore.create({str(tmp_path / 's.mmr')!r}, frame_shape=(2, 2), capacity=8)
store.add(np.zeros((2, 2), np.uint8), 0, 0.0, np.ones((2, 2), np.uint8), False, False)
assert "torch" not in sys.modules
next(store.batches(1))  # numpy batches need no torch
try:
    store.batches(1, device="cpu")
except ModuleNotFoundError as error:
    print(error)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("device= gives torch tensors, but PyTorch is not installed: "
                                     "pip install 'mmreplay[torch]' (or any PyTorch build from pytorch.org)")


def test_the_repr_names_the_settings_and_the_records_show_dtypes_shapes_and_devices(make_store):
    store = make_store(frame_shape=FRAME, capacity=20, stack_size=2)
    fill(store, 10)
    batches = store.batches(4, rng=0, device="cpu", n_step=2)
    assert repr(batches) == "<DeviceBatches batch_size=4 device=cpu decode='host' prefetch=2 group=8 open>"
    batch = next(batches)
    assert repr(batch).startswith("TensorBatch(obs=uint8[4, 2, 6, 5] cpu, action=int64[4] cpu, reward=float32[4] cpu,")
    batches.close()
    assert repr(batches).endswith(" closed>")


# -- where CUDA is ---------------------------------------------------------------------------------

cuda_only = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


@cuda_only
@pytest.mark.parametrize("kwargs", [dict(), dict(n_step=3), dict(length=4)], ids=["plain", "n_step", "windows"])
def test_cuda_batches_equal_successive_samples_and_are_ready_on_the_consumers_stream(make_store, kwargs):
    store = make_store(frame_shape=(84, 84), capacity=300, stack_size=4)
    fill_real(store, 300)
    kwargs = dict(kwargs)  # the parameter itself stays as given
    length = kwargs.pop("length", None)
    rng = np.random.default_rng(1)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side), store.batches(32, rng=1, device="cuda", length=length, **kwargs) as batches:
        for _, batch in zip(range(20), batches):
            assert batch.obs.is_cuda and batch.action.is_cuda and not batch.index.is_cuda
            checksum = batch.obs.sum(dtype=torch.int64)  # read on the consumer's (side) stream, not synchronized
            want = store.sample(32, rng, **kwargs) if length is None else store.sample_sequences(32, length, rng)
            assert int(checksum) == int(want.obs.sum(dtype=np.int64))
            assert_same(batch, want, NAMES if length is None else WINDOW_NAMES)


@cuda_only
def test_cuda_batches_send_stack_size_plus_one_frames_a_row(make_store):
    store = make_store(frame_shape=(84, 84), capacity=100, stack_size=4)
    fill_real(store, 100)
    with store.batches(16, rng=0, device="cuda:0") as batches:
        batch = next(batches)
    assert batch.next_obs.data_ptr() - batch.obs.data_ptr() == 84 * 84 and batch.obs.stride(0) == 5 * 84 * 84


@cuda_only
def test_cuda_batches_are_not_overwritten_while_the_consumers_stream_still_reads_them(make_store):
    # The consumer's stream lags milliseconds behind the host (a sleep kernel before each read): the thread's
    # copies into a slot must wait for the reads queued there before the next next(), however far behind.
    store = make_store(frame_shape=(84, 84), capacity=300, stack_size=4)
    fill_real(store, 300)
    rng = np.random.default_rng(3)
    before = torch.cuda.current_stream()
    sums, wants = [], []
    with store.batches(8, rng=3, device="cuda", prefetch=1) as batches:
        for _ in range(12):
            batch = next(batches)
            torch.cuda._sleep(2_000_000)  # ~1 ms of the consumer stream's time before it reads the batch
            sums.append(batch.obs.sum(dtype=torch.int64) + batch.next_obs.sum(dtype=torch.int64) * 7)
            want = store.sample(8, rng)
            wants.append(int(want.obs.sum(dtype=np.int64)) + int(want.next_obs.sum(dtype=np.int64)) * 7)
        assert torch.cuda.current_stream() == before  # the thread's side stream is its own, never the caller's
    assert [int(s) for s in sums] == wants


def fill_real(store, count):
    """Atari-sized frames that compress like real ones, made here: the CUDA tests run where ALE is not."""
    frames = sprite_frames(count + 1)
    for i in range(count):
        store.add(frames[i], i % 6, float(i % 3), frames[i + 1], (i + 1) % 97 == 0, False)


def test_device_batches_stay_exact_while_the_caller_keeps_adding(make_store):
    store = make_store(frame_shape=FRAME, capacity=400, stack_size=3)
    fill(store, 40)
    with store.batches(8, rng=0, device="cpu", prefetch=3) as batches:
        for round_ in range(30):
            fill(store, 10, first=40 + 10 * round_)  # the thread samples while these are added
            batch = next(batches)
            assert_same(batch, store.read(batch.index.numpy()), ("obs", "action", "reward", "next_obs", "index"))


# -- the events' protocol, on fake CUDA objects (runs everywhere) ---------------------------------------------


class FakeEvent:
    """A CUDA event: ``passed`` says whether the device has reached it; the calls are counted."""

    def __init__(self, passed):
        self.passed, self.calls = passed, []

    def query(self):
        self.calls.append("query")
        return self.passed

    def synchronize(self):
        self.calls.append("synchronize")

    def record(self, stream=None):
        self.calls.append(("record", stream.cuda_stream))


class FakeStream:
    def __init__(self, handle):
        self.cuda_stream, self.waited = handle, []

    def wait_event(self, event):
        self.waited.append(event)


class FakeBlock:
    def __init__(self):
        self.recorded = []

    def record_stream(self, stream):
        self.recorded.append(stream.cuda_stream)


@pytest.mark.parametrize("passed", [True, False], ids=["copy done", "copy running"])
def test_a_slot_is_waited_on_only_while_its_copy_runs(passed):
    # take(): the thread refills a slot's host memory once the copy out of it is done; it blocks (and gives
    # up the GIL) only while that copy still runs.
    from mmreplay.store.feeds.slots import SlotRing

    ring = SlotRing(torch.device("cpu"), 2)
    events = [FakeEvent(passed) for _ in ring.slots]
    for slot, event in zip(ring.slots, events):
        slot.ready = event
    ring.take(), ring.take()
    assert [event.calls for event in events] == [["query"] if passed else ["query", "synchronize"]] * 2


def test_next_waits_on_a_pending_copy_releases_the_held_slot_and_records_each_stream_once(monkeypatch):
    from mmreplay.store.feeds.device_batches import DeviceBatches
    from mmreplay.store.feeds.slots import SlotRing

    ring = SlotRing(torch.device("cpu"), 3)
    ring.cuda = True  # the consumer's side of the protocol, with the fake events and streams below
    blocks = [FakeBlock() for _ in ring.slots]
    for k, slot in enumerate(ring.slots):
        slot.ready, slot.released = FakeEvent(passed=k != 1), FakeEvent(passed=True)  # slot 1's copy still runs
        slot.hold((blocks[k],))
    streams = {"now": FakeStream(7)}
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: streams["now"])
    order = iter([0, 1, 2] * 4)
    batches = DeviceBatches(lambda: (ring.slots[next(order)], ["batch"]), ring, depth=1, description="fake")
    try:
        for _ in range(6):  # each slot handed over twice
            assert next(batches) == "batch"
        assert streams["now"].waited == [ring.slots[1].ready] * 2  # only the pending copy is waited on
        assert [b.recorded for b in blocks] == [[7], [7], [7]]  # once per block and stream
        assert ring.slots[0].released.calls == [("record", 7)] * 2  # each time the consumer moved past it
        streams["now"] = FakeStream(9)  # the consumer switches streams: each block recorded on it once more
        for _ in range(6):
            next(batches)
        assert [b.recorded for b in blocks] == [[7, 9], [7, 9], [7, 9]]
    finally:
        batches.close()


def test_a_reads_batches_share_its_slot_which_is_released_once_the_consumer_moves_past_the_last(monkeypatch):
    """Reads of three batches: each batch is ready on the consumer's stream when handed over, the slot is
    released (its event recorded) only by the next() after the read's last batch, and a next() that fails
    before it holds a read's slot hands out none of that read's other batches."""
    from mmreplay.store.feeds.device_batches import DeviceBatches
    from mmreplay.store.feeds.slots import SlotRing

    ring = SlotRing(torch.device("cpu"), 3)
    ring.cuda = True
    blocks = [FakeBlock() for _ in ring.slots]
    for k, slot in enumerate(ring.slots):
        slot.ready, slot.released = FakeEvent(passed=False), FakeEvent(passed=True)
        slot.hold((blocks[k],))
    stream = FakeStream(7)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream)
    order = iter(range(12))
    batches = DeviceBatches(lambda: (ring.slots[next(order) % 3], [f"b{k}" for k in range(3)]), ring, depth=1,
                            description="fake")
    try:
        assert [next(batches) for _ in range(3)] == ["b0", "b1", "b2"]
        assert ring.slots[0].released.calls == []  # still held: its last batch was just handed over
        assert stream.waited == [ring.slots[0].ready] * 3  # each batch ready on the consumer's stream
        assert blocks[0].recorded == [7]
        assert next(batches) == "b0"  # the next read's first batch: slot 0 released
        assert ring.slots[0].released.calls == [("record", 7)]

        def failing_wait(event):
            raise RuntimeError("the wait failed")

        stream.wait_event = failing_wait
        with pytest.raises(RuntimeError, match="the wait failed"):
            next(batches)  # slot 1's second batch: the slot is no longer held
        stream.wait_event = FakeStream(7).wait_event
        assert next(batches) == "b0"  # the read's third batch is dropped with it: the next read's first
    finally:
        batches.close()
