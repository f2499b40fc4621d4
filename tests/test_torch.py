"""``Batch.to_torch`` and ``SequenceBatch.to_torch``: dtypes, shapes, devices, no copy on the CPU, and
torch imported only when asked."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mmreplay import ReplayStore

FRAME = (5, 6)


@pytest.fixture
def store(tmp_path):
    with ReplayStore.create(
        tmp_path / "t.mmr", frame_shape=FRAME, capacity=64, num_envs=2, action_shape=(3,), action_dtype=np.float32
    ) as store:
        rng = np.random.default_rng(0)
        obs = rng.integers(0, 256, (2, *FRAME), dtype=np.uint8)
        for step in range(20):
            next_obs = rng.integers(0, 256, (2, *FRAME), dtype=np.uint8)
            ended = np.array([step % 7 == 6, False])
            store.add(
                obs, rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal(2), next_obs,
                ended, np.array([False, step % 5 == 4]),
            )
            obs = next_obs
        yield store


EXPECTED_DTYPES = {
    "obs": torch.uint8,
    "action": torch.float32,
    "reward": torch.float32,
    "next_obs": torch.uint8,
    "terminated": torch.bool,
    "truncated": torch.bool,
    "index": torch.int64,
    "env_index": torch.int64,
    "weight": torch.float32,
    "discount": torch.float32,
}


def test_every_field_becomes_a_tensor_with_the_batch_dtype_and_shape(store):
    batch = store.sample(8, rng=0)
    tensors = batch.to_torch()
    assert {name: t.dtype for name, t in tensors.items()} == EXPECTED_DTYPES
    for name, tensor in tensors.items():
        assert tuple(tensor.shape) == getattr(batch, name).shape, name
        assert tensor.device == torch.device("cpu")
        assert np.array_equal(tensor.numpy(), getattr(batch, name)), name
    assert tuple(tensors["obs"].shape) == (8, 4, *FRAME) and tuple(tensors["action"].shape) == (8, 3)


def test_on_the_cpu_no_pixels_are_copied(store):
    batch = store.sample(8, rng=1)
    for device in (None, "cpu", torch.device("cpu")):
        tensors = batch.to_torch(device)
        assert tensors["obs"].data_ptr() == batch.obs.ctypes.data
        assert tensors["next_obs"].data_ptr() == batch.next_obs.ctypes.data
        # obs and next_obs stay two views of one array: next_obs starts one frame later.
        assert tensors["next_obs"].data_ptr() - tensors["obs"].data_ptr() == int(np.prod(FRAME))


def test_a_device_argument_moves_every_tensor(store):
    tensors = store.sample(4, rng=2).to_torch(torch.device("meta"))  # a device every torch build has
    assert all(t.device.type == "meta" for t in tensors.values())
    assert {name: t.dtype for name, t in tensors.items()} == EXPECTED_DTYPES


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pinned_batches_reach_the_gpu_intact(store):
    batch = store.sample(8, rng=3)
    tensors = batch.to_torch("cuda", pin_memory=True)
    torch.cuda.synchronize()
    for name, tensor in tensors.items():
        assert tensor.is_cuda and np.array_equal(tensor.cpu().numpy(), getattr(batch, name)), name


def test_sequence_batches_convert_with_their_mask(store):
    batch = store.sample_sequences(3, 4, rng=0)
    tensors = batch.to_torch()
    assert tensors["mask"].dtype == torch.bool and tuple(tensors["mask"].shape) == (3, 4)
    assert tuple(tensors["obs"].shape) == (3, 4, 4, *FRAME)
    assert np.array_equal(tensors["index"].numpy(), batch.index)


def test_importing_mmreplay_does_not_import_torch():
    code = "import sys, mmreplay, mmreplay.batch; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
