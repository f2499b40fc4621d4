"""Decoding on the device (``decode="device"``), checked without a GPU: the CRC-32 as a parity matrix
product against ``zlib.crc32``, the plan of blocks and gather indices against the encoded batch, and the
whole feed on the CPU with python-lz4 standing in for nvCOMP (the one call that needs a GPU), against
``sample``; a damaged block is refused. Where libnvcomp is installed its C API is probed; where CUDA and
nvCOMP are, the real decoder runs against the host path."""

from __future__ import annotations

import zlib
from pathlib import Path

import lz4.block
import numpy as np
import pytest
from atari_data import load_stream
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic_frames import sprite_frames

from mmreplay import CorruptStoreError, EncodedFrames, PrioritizedSampler, encode_frames
from mmreplay.gpu import crc_parity
from mmreplay.gpu.block_plan import lz4_bound, plan_blocks

torch = pytest.importorskip("torch")

from mmreplay.store.feeds import device_decoded_feed  # noqa: E402
from mmreplay.store.feeds.device_batches import DeviceBatches  # noqa: E402
from mmreplay.store.feeds.slots import SlotRing  # noqa: E402
from mmreplay.store.internals import batch_source_of  # noqa: E402

INVERT = 0xFFFFFFFF
CPU = torch.device("cpu")


# -- the CRC as a matrix product ---------------------------------------------------------------------

def zlib_register(data: bytes) -> int:
    """R(data) by zlib: from register seed ^ F = 0, and the final inversion undone."""
    return zlib.crc32(data, INVERT) ^ INVERT


def test_the_table_and_the_plain_register_are_zlibs():
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 3, 4, 17, 300):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert crc_parity.register(data) == zlib_register(data)


@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=40))
def test_the_four_byte_prefix_of_a_seed_brings_the_register_to_the_seed_zlib_starts_from(seeds):
    prefixes = crc_parity.seed_prefixes(np.array(seeds, np.uint64))
    assert prefixes.shape == (len(seeds), 4) and prefixes.dtype == np.uint8
    for seed, prefix in zip(seeds, prefixes):
        assert zlib_register(prefix.tobytes()) == seed ^ INVERT


def test_seeds_are_taken_modulo_two_to_the_32_as_zlib_takes_them():
    wide = np.array([2**32 + 5, -1 % 2**64], np.uint64)
    assert np.array_equal(crc_parity.seed_prefixes(wide), crc_parity.seed_prefixes(np.array([5, 2**32 - 1])))


blocks_and_seeds = st.lists(
    st.tuples(st.binary(min_size=0, max_size=200), st.integers(0, 2**32 - 1)), min_size=1, max_size=24
)


@pytest.fixture(scope="module")
def parity():
    return crc_parity.ParityCrc(CPU, max_width=crc_parity.row_width(400))


def crcs_of(blocks, seeds, checker, *, width=None):
    lengths = np.array([len(b) for b in blocks], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    data = torch.from_numpy(np.frombuffer(b"".join(blocks) + b"\0", np.uint8).copy())
    prefixes = torch.from_numpy(crc_parity.seed_prefixes(np.array(seeds, np.uint64)))
    width = width or crc_parity.row_width(int(lengths.max()))
    rows = crc_parity.rows_of_blocks(data, torch.from_numpy(starts), torch.from_numpy(lengths), prefixes, width)
    return checker.row_checksums(rows).tolist()


@settings(max_examples=60, deadline=None)
@given(blocks_and_seeds)
def test_the_parity_product_gives_zlib_crc32_of_each_block_with_its_seed(parity, pairs):
    blocks, seeds = [b for b, _ in pairs], [s for _, s in pairs]
    assert crcs_of(blocks, seeds, parity) == [zlib.crc32(b, s) for b, s in pairs]


def test_the_parity_product_is_exact_at_the_widest_row_and_for_rows_of_zeros_and_of_ones(parity):
    longest = parity.max_width - crc_parity.PREFIX_BYTES
    blocks = [b"\xff" * longest, b"\0" * longest, b"\xff", b"\0", bytes(range(256))]
    seeds = [0, 2**32 - 1, 123456789, 0, 7]
    assert crcs_of(blocks, seeds, parity, width=parity.max_width) == [zlib.crc32(b, s) for b, s in zip(blocks, seeds)]


def test_the_float_product_gives_what_the_int8_product_gives(parity):
    rng = np.random.default_rng(3)
    blocks = [rng.integers(0, 256, rng.integers(1, 390), dtype=np.uint8).tobytes() for _ in range(30)]
    seeds = rng.integers(0, 2**32, 30).tolist()
    as_float = crc_parity.ParityCrc(CPU, max_width=parity.max_width)
    as_float.uses_int8 = False
    assert crcs_of(blocks, seeds, as_float) == crcs_of(blocks, seeds, parity) == [zlib.crc32(b, s) for b, s in zip(blocks, seeds)]


def test_a_narrower_rows_matrix_is_the_tail_of_a_wider_one():
    wide, narrow = crc_parity.parity_matrix(192), crc_parity.parity_matrix(64)
    assert wide.shape == (8 * 192, 32) and np.array_equal(wide[-8 * 64 :], narrow)


def test_a_row_wider_than_the_matrix_is_refused(parity):
    rows = torch.zeros((2, parity.max_width + 64), dtype=torch.uint8)
    with pytest.raises(ValueError, match=rf"^rows are {parity.max_width + 64} bytes wide; this ParityCrc was built "
                                         rf"for at most {parity.max_width}$"):
        parity.row_checksums(rows)


@settings(max_examples=40, deadline=None)
@given(blocks_and_seeds)
def test_blocks_laid_out_behind_their_prefixes_for_nvcomp_have_the_register_of_zlib_crc32(pairs):
    from mmreplay.gpu.nvcomp_crc32 import chunks_of_blocks

    blocks, seeds = [b for b, _ in pairs], [s for _, s in pairs]
    lengths = np.array([len(b) for b in blocks], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    prefixes = crc_parity.seed_prefixes(np.array(seeds, np.uint64))
    chunks, chunk_starts, sizes = chunks_of_blocks(
        torch.from_numpy(np.frombuffer(b"".join(blocks), np.uint8).copy()), torch.from_numpy(starts),
        torch.from_numpy(lengths), torch.from_numpy(prefixes))
    laid = chunks.numpy().tobytes()
    assert len(laid) == int(lengths.sum()) + 4 * len(blocks)
    for block, seed, prefix, start, size in zip(blocks, seeds, prefixes, chunk_starts.tolist(), sizes.tolist()):
        assert laid[start : start + size] == prefix.tobytes() + block
        assert zlib_register(laid[start : start + size]) ^ INVERT == zlib.crc32(block, seed)


# -- the plan of an encoded batch ---------------------------------------------------------------------

def pong_store(make_store, count=400, *, synthetic=False, **kwargs):
    """Real Pong frames; ``synthetic``: frames made here (for the GPU tests, which run where ALE is not)."""
    frames = sprite_frames(count + 1) if synthetic else load_stream("pong", ("frames",), count + 1)["frames"]
    store = make_store(frame_shape=(84, 84), capacity=count, stack_size=4, frame_encoding="lz4", **kwargs)
    for i in range(count):
        store.add(frames[i], i % 6, float(i % 3), frames[i + 1], (i + 1) % 97 == 0, (i + 1) % 151 == 0)
    return store


def test_the_plan_places_every_stored_block_and_gathers_each_transitions_frames(make_store):
    store = pong_store(make_store)
    encoded = store.sample_encoded(32, rng=0)
    plan = plan_blocks(encoded.frames, encoded.frame_index)
    assert len(plan) == len(encoded.frames) and np.array_equal(plan.gather, encoded.frame_index.reshape(-1))
    data = bytes(plan.data)
    pixels = np.stack([np.frombuffer(lz4.block.decompress(data[s : s + n], uncompressed_size=84 * 84), np.uint8)
                       for s, n in zip(plan.starts, plan.lengths)])
    for s, n, checksum, seed in zip(plan.starts, plan.lengths, plan.checksums, encoded.frames.seeds):
        assert zlib.crc32(data[s : s + n], int(seed)) == checksum
    batch = encoded.decode()
    gathered = pixels[plan.gather].reshape(32, -1, 84, 84)
    assert np.array_equal(gathered[:, :4], batch.obs) and np.array_equal(gathered[:, -4:], batch.next_obs)
    assert plan.width >= int(plan.lengths.max()) + 4 and plan.width % crc_parity.ROW_ALIGNMENT == 0
    assert plan.width <= crc_parity.row_width(lz4_bound(84 * 84))


def test_a_frame_index_naming_no_block_is_refused():
    frames = encode_frames(np.zeros((3, 2, 2), np.uint8))
    with pytest.raises(ValueError, match=r"^frame_index holds 0 to 3; expected 0 to 2$"):
        plan_blocks(frames, np.array([[0, 3]]))


def test_blocks_compressed_against_other_frames_are_refused():
    plain = encode_frames(np.arange(12, dtype=np.uint8).reshape(3, 2, 2))
    referencing = EncodedFrames(plain.data, plain.lengths, plain.checksums, plain.seeds, (2, 2), np.array([-1, 0, 0]))
    with pytest.raises(ValueError, match=r"blocks compressed against other frames .* decode it on the host"):
        plan_blocks(referencing, np.array([[1, 2]]))
    alone = EncodedFrames(plain.data, plain.lengths, plain.checksums, plain.seeds, (2, 2), np.array([-1, -1, -1]))
    assert np.array_equal(plan_blocks(alone, np.array([[1, 2]])).gather, [1, 2])


@pytest.mark.parametrize("stack_size", [1, 2, 4])
def test_no_encoded_batch_names_more_distinct_frames_than_the_staging_holds(make_store, stack_size):
    from strategies import stack

    from mmreplay.store.feeds.device_decoded_feed import most_distinct_frames

    store = make_store(frame_shape=(3, 4), capacity=120, stack_size=stack_size, frame_encoding="lz4")
    n, rng = 1, np.random.default_rng(stack_size)
    for episode in range(40):  # short episodes; most end with a next_obs stored as given (CleanRL's reset stack)
        obs = stack(*[n] * stack_size)
        for t in range(int(rng.integers(1, 6))):
            detached, last = bool(rng.integers(0, 2)), t == 3
            ends = last or rng.random() < 0.2
            following = stack(*[n + 1] * stack_size) if ends and detached else np.concatenate([obs[1:], stack(n + 1)])
            store.add(obs, t, 1.0, following, ends, False)
            obs, n = following, n + 1
            if ends:
                break
    for seed in range(30):
        for length in (None, 1, 3, 9):
            encoded = (store.sample_encoded(16, rng=seed, n_step=1 + seed % 3) if length is None
                       else store.sample_sequences_encoded(16, length, rng=seed))
            assert len(encoded.frames) <= most_distinct_frames(16, length, stack_size)


# -- the feed on the CPU, python-lz4 in nvCOMP's place ---------------------------------------------------

class HostLz4:
    """A ``Decompressor`` on the CPU: python-lz4, block by block, into the rows; from its call number
    ``fail_from`` on (the first is 1), it reports the blocks ``fail`` names as not decoded."""

    def __init__(self, frame_nbytes, fail=(), fail_from=1):
        self.frame_nbytes = self.row_bytes = frame_nbytes
        self.fail = set(fail)
        self.fail_from = fail_from
        self.calls = 0

    def __call__(self, data, starts, lengths, count, out):
        self.calls += 1
        fail = self.fail if self.calls >= self.fail_from else set()
        raw = data.numpy().tobytes()
        good = torch.zeros(count, dtype=torch.bool)
        for i in range(count):
            s, n = int(starts[i]), int(lengths[i])
            try:
                frame = lz4.block.decompress(raw[s : s + n], uncompressed_size=self.frame_nbytes)
            except lz4.block.LZ4BlockError:
                continue
            out[i, : len(frame)] = torch.frombuffer(bytearray(frame), dtype=torch.uint8)
            good[i] = len(frame) == self.frame_nbytes and i not in fail
        return good


def cpu_decoded(store, batch_size, *, rng, length=None, prefetch=2, decompressor=None, **sample_kwargs):
    ring = SlotRing(CPU, prefetch + 2)
    feed = device_decoded_feed.open_feed(
        store, batch_source_of(store), ring, np.random.default_rng(rng), batch_size=batch_size, length=length, sample_kwargs=sample_kwargs,
        decompressor=decompressor or HostLz4(int(np.prod(store.frame_shape))),
    )
    return DeviceBatches(feed, ring, depth=prefetch, description="cpu test")


def assert_same(device_batch, batch, names):
    for name in names:
        np.testing.assert_array_equal(getattr(device_batch, name).numpy(), getattr(batch, name), err_msg=name)


TRANSITION = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "index", "env_index", "weight", "discount")
WINDOW = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "mask", "index", "env_index", "weight")


@pytest.mark.parametrize("kwargs", [{}, {"n_step": 3, "gamma": 0.9}, {"beta": 0.6}], ids=["plain", "n_step", "beta"])
def test_blocks_decoded_by_the_device_path_equal_successive_samples(make_store, kwargs):
    store = pong_store(make_store, sampler=PrioritizedSampler())
    store.update_priorities(np.arange(100, 300), np.linspace(0.5, 3, 200))
    rng = np.random.default_rng(21)
    with cpu_decoded(store, 16, rng=21, **kwargs) as batches:
        for _, batch in zip(range(6), batches):
            assert_same(batch, store.sample(16, rng, **kwargs), TRANSITION)


def test_windows_decoded_by_the_device_path_equal_sample_sequences_zeroed_past_their_end(make_store):
    store = pong_store(make_store)
    rng = np.random.default_rng(8)
    with cpu_decoded(store, 4, rng=8, length=30) as batches:
        for _, batch in zip(range(4), batches):
            want = store.sample_sequences(4, 30, rng)
            assert_same(batch, want, WINDOW)
    assert not want.mask.all()  # some window ended early: its zeroed positions were compared too


def damage_first_next_obs_frame(store, batch_size, rng) -> int:
    """Flip a byte of the stored block of the first transition's next_obs frame in the draw of
    ``sample_encoded(batch_size, rng)``; the transition's step."""
    encoded = store.sample_encoded(batch_size, rng=rng)
    plan = plan_blocks(encoded.frames, encoded.frame_index)
    newest = int(encoded.frame_index[0, -1])
    start, length = int(plan.starts[newest]), int(plan.lengths[newest])
    block = bytes(plan.data)[start : start + length]
    for path in sorted(Path(store.path).glob("frames/*.seg")):
        raw = bytearray(path.read_bytes())
        at = raw.find(block)
        if at >= 0:
            raw[at + length // 2] ^= 0x40
            path.write_bytes(bytes(raw))
            return int(encoded.index[0])
    raise AssertionError("the block is not in any segment")


def refused_message(transition: int) -> str:
    return (rf"^a frame read for transition {transition} fails its checksum or does not decode to one frame of shape "
            r"\(84, 84\) on the device: the store is damaged$")


def test_a_block_that_fails_its_checksum_is_refused_naming_a_transition_that_needed_it(make_store):
    store = pong_store(make_store)
    transition = damage_first_next_obs_frame(store, 8, rng=4)
    with cpu_decoded(store, 8, rng=4) as batches:  # the same draw: a writer's reader does not verify on the host
        with pytest.raises(CorruptStoreError, match=refused_message(transition)):
            next(batches)


class Lenient(HostLz4):
    """Decodes what it can and calls every block good: the CRC check alone must then refuse damage."""

    def __call__(self, data, starts, lengths, count, out):
        super().__call__(data, starts, lengths, count, out)
        return torch.ones(count, dtype=torch.bool)


@pytest.mark.parametrize("damaged", [0, 5, "last"])
def test_a_damaged_block_is_refused_by_its_checksum_even_where_the_decompressor_reports_none(make_store, damaged):
    from mmreplay.gpu.device_decode import DeviceDecoder

    store = pong_store(make_store)
    encoded = store.sample_encoded(8, rng=3)
    plan = plan_blocks(encoded.frames, encoded.frame_index)
    damaged = len(plan) - 1 if damaged == "last" else damaged
    data = np.frombuffer(plan.data, np.uint8).copy()
    data[plan.starts[damaged] + plan.lengths[damaged] - 1] ^= 1
    decoder = DeviceDecoder(CPU, Lenient(84 * 84), max_frames=64, max_block_bytes=lz4_bound(84 * 84))
    first_bad = torch.empty(1, dtype=torch.int64)
    decoder.decode(
        data=torch.from_numpy(data), starts=torch.from_numpy(plan.starts), lengths=torch.from_numpy(plan.lengths),
        prefixes=torch.from_numpy(plan.prefixes), checksums=torch.from_numpy(plan.checksums.astype(np.int64)), count=len(plan),
        width=plan.width, gather=torch.from_numpy(plan.gather), pixels=torch.empty((8, 5, 84, 84), dtype=torch.uint8),
        first_bad=first_bad,
    )
    assert int(first_bad[0]) == damaged


def test_a_block_that_does_not_decode_to_one_frame_is_refused(make_store):
    store = pong_store(make_store)
    with cpu_decoded(store, 8, rng=2, decompressor=HostLz4(84 * 84, fail={0}, fail_from=3)) as batches:
        with pytest.raises(CorruptStoreError, match=r"does not decode to one frame of shape \(84, 84\) on the device"):
            next(batches)


def test_a_decompressor_that_does_not_decode_as_the_host_is_refused_before_it_serves_a_batch(make_store):
    store = pong_store(make_store)
    with pytest.raises(RuntimeError, match=r"^decoding on cpu did not give the host's frames \(first refused: 0\): "
                                           r"use decode='host'$"):
        cpu_decoded(store, 8, rng=2, decompressor=HostLz4(84 * 84, fail={0}))



# -- nvCOMP itself ------------------------------------------------------------------------------------

def test_nvcomp_is_probed_through_its_c_api_where_libnvcomp_is_installed():
    from mmreplay.gpu import nvcomp_lz4

    if nvcomp_lz4.find_library() is None:
        with pytest.raises(ModuleNotFoundError, match=r"^decode='device' needs NVIDIA nvCOMP, which is not installed: "
                                                      r"pip install nvidia-libnvcomp-cu13"):
            nvcomp_lz4.BatchedLZ4()
        return
    lz4 = nvcomp_lz4.BatchedLZ4()
    assert lz4.version_text.startswith("6.") and lz4.alignment[0] == 1
    assert lz4.temp_bytes(1280, 7056) >= 0
    assert "decompress" in lz4.status_text(12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kwargs", [{}, {"n_step": 3}, {"length": 8}], ids=["plain", "n_step", "windows"])
def test_nvcomp_on_the_gpu_decodes_what_the_host_decodes(make_store, kwargs):
    from mmreplay.gpu import nvcomp_lz4

    if nvcomp_lz4.find_library() is None:
        pytest.skip("libnvcomp is not installed")
    store = pong_store(make_store, synthetic=True)
    kwargs = dict(kwargs)  # the parameter itself stays as given
    length = kwargs.pop("length", None)
    rng = np.random.default_rng(6)
    with store.batches(32, rng=6, device="cuda", decode="device", length=length, **kwargs) as batches:
        for _, batch in zip(range(10), batches):
            want = store.sample(32, rng, **kwargs) if length is None else store.sample_sequences(32, length, rng)
            for name in TRANSITION if length is None else WINDOW:
                np.testing.assert_array_equal(getattr(batch, name).cpu().numpy(), getattr(want, name), err_msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_nvcomp_on_the_gpu_refuses_a_damaged_block(make_store):
    from mmreplay.gpu import nvcomp_lz4

    if nvcomp_lz4.find_library() is None:
        pytest.skip("libnvcomp is not installed")
    store = pong_store(make_store, synthetic=True)
    transition = damage_first_next_obs_frame(store, 16, rng=9)
    with store.batches(16, rng=9, device="cuda", decode="device") as batches:
        with pytest.raises(CorruptStoreError, match=refused_message(transition)):
            next(batches)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("method", ["parity", "nvcomp"])
def test_each_crc_checker_gives_zlib_crc32_on_the_gpu(method):
    from mmreplay.gpu import nvcomp_lz4
    from mmreplay.gpu.nvcomp_crc32 import NvcompCrc

    if method == "nvcomp" and nvcomp_lz4.find_library() is None:
        pytest.skip("libnvcomp is not installed")
    device = torch.device("cuda")
    rng = np.random.default_rng(12)
    blocks = [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in rng.integers(1, 7000, 300)]
    blocks[:3] = [b"\0" * 5, b"\xff" * lz4_bound(84 * 84), b"x"]
    seeds = [0, 2**32 - 1, *rng.integers(0, 2**32, 298).tolist()]
    lengths = np.array([len(b) for b in blocks], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    checker = (crc_parity.ParityCrc(device, max_width=crc_parity.row_width(lz4_bound(84 * 84))) if method == "parity"
               else NvcompCrc(device, max_blocks=300, max_block_bytes=lz4_bound(84 * 84)))
    got = checker.checksums(
        torch.from_numpy(np.frombuffer(b"".join(blocks), np.uint8).copy()).to(device), torch.from_numpy(starts).to(device),
        torch.from_numpy(lengths).to(device),
        torch.from_numpy(crc_parity.seed_prefixes(np.array(seeds, np.uint64))).to(device),
        crc_parity.row_width(int(lengths.max())),
    )
    assert got.cpu().tolist() == [zlib.crc32(b, s) for b, s in zip(blocks, seeds)]
