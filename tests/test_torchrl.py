"""mmreplay.torchrl: MmreplayStorage under TorchRL's replay buffers, through TorchRL's and mmreplay's public
API. Frames encode their trajectory and step (tests/torchrl_transitions.py)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")
from tensordict import TensorDict
from torchrl.data import ReplayBuffer, TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import RandomSampler, SliceSampler

from mmreplay import CorruptStoreError, ReadOnlyStoreError, ReplayStore, StoreExistsError
from mmreplay.torchrl import (
    MmreplayPrioritizedSampler,
    MmreplaySliceSampler,
    MmreplayStorage,
)
from tests.torchrl_transitions import FakeCollector, expected

EVERY_FIFTH_ENDS = [(False, False)] * 4 + [(True, False)]


def check(data: TensorDict, rows: list[tuple[int, int, bool, bool]], stack_size: int) -> None:
    want = expected(rows, stack_size)
    assert data["pixels"].numpy().tolist() == want["pixels"].tolist()
    assert data["next", "pixels"].numpy().tolist() == want["next_pixels"].tolist()
    assert data["action"].numpy().tolist() == want["action"].tolist()
    assert data["next", "reward"].numpy().tolist() == want["reward"].tolist()
    assert data["next", "terminated"].numpy().tolist() == want["terminated"].tolist()
    assert data["next", "truncated"].numpy().tolist() == want["truncated"].tolist()
    assert data["collector", "traj_ids"].numpy().tolist() == want["traj"].tolist()


# -- what was extended is what is read -----------------------------------------------------------------


@pytest.mark.parametrize("stacked", [True, False], ids=["stacks", "single-frames"])
def test_what_was_extended_is_read_back_with_stacks_that_never_cross_a_reset(tmp_path: Path, stacked: bool) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=stacked, ends=EVERY_FIFTH_ENDS)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(100, tmp_path / "s.mmr", stack_size=4))
    for _ in range(3):
        rb.extend(collector.next_batch(7))
    assert len(rb) == 21
    check(rb[:], collector.rows, 4)


def test_a_read_has_the_keys_shapes_and_dtypes_that_were_written(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    data = collector.next_batch(9)
    data["policy_value"] = torch.randn(9, 3, dtype=torch.float64)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(50, tmp_path / "s.mmr", stack_size=4), batch_size=6)
    rb.extend(data.clone())
    sample = rb.sample()
    written = {key: (value.shape[1:], value.dtype) for key, value in data.items(True, True)}
    read = {key: (value.shape[1:], value.dtype) for key, value in sample.items(True, True) if key != "index"}
    assert read == written
    assert rb[:]["policy_value"].tolist() == data["policy_value"].tolist()


def test_index_holds_each_transitions_slot_as_torchrls_tensordict_writer_stores_it(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(10, tmp_path / "a.mmr", stack_size=4))
    data = collector.next_batch(13)
    data["index"] = torch.full((13,), 99)  # a written "index" is TorchRL's bookkeeping: the writer replaces it
    rb.extend(data)
    assert rb.storage[:]["index"].tolist() == list(range(10))
    assert rb.storage[torch.tensor([4, 2])]["index"].tolist() == [4, 2]
    plain = ReplayBuffer(storage=MmreplayStorage(10, tmp_path / "b.mmr", stack_size=4))
    plain.extend(collector.next_batch(3))
    assert plain.storage[:].get("index", None) is None  # nothing wrote one


def test_single_frames_are_read_as_catframes_stacks_with_the_first_frame_repeated_at_a_reset(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=False, ends=[(False, False)] * 2 + [(False, True)])
    rb = ReplayBuffer(storage=MmreplayStorage(30, tmp_path / "s.mmr", stack_size=4))
    rb.extend(collector.next_batch(6))
    pixels = rb[:]["pixels"]
    assert pixels.shape == (6, 4, 2, 2)
    # rows 3..5 are a new trajectory (the third transition truncated): its first frame repeats before it
    assert pixels[3, :, 0, 0].tolist() == [1, 1, 1, 1] and pixels[3, :, 0, 1].tolist() == [0, 0, 0, 0]
    assert pixels[5, :, 0, 1].tolist() == [0, 0, 1, 2]


def test_one_transition_added_with_rb_add_reads_back(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=2, stacked=True, ends=EVERY_FIFTH_ENDS)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(10, tmp_path / "s.mmr", stack_size=2))
    batch = collector.next_batch(3)
    for i in range(3):
        assert rb.add(batch[i]) == i
    check(rb[:], collector.rows, 2)
    assert rb.storage[1]["action"].item() == 1  # an int index gives one transition


def test_each_transition_keeps_its_slot_until_the_writer_wraps_over_it(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(10, tmp_path / "s.mmr", stack_size=4))
    index = rb.extend(collector.next_batch(7))
    assert index.tolist() == list(range(7))
    index = rb.extend(collector.next_batch(6))
    assert index.tolist() == [7, 8, 9, 0, 1, 2]
    rows = collector.rows
    by_slot = [rows[10], rows[11], rows[12]] + rows[3:10]
    check(rb[:], by_slot, 4)
    check(rb.storage[torch.tensor([9, 0])], [rows[9], rows[10]], 4)


# -- refusals ----------------------------------------------------------------------------------------


def test_a_refused_extend_writes_nothing_and_the_next_extend_goes_on(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(20, tmp_path / "s.mmr", stack_size=4))
    rb.extend(collector.next_batch(4))
    bad = collector.next_batch(3)
    del collector.rows[-3:]
    bad["action"] = bad["action"].to(torch.int32)
    with pytest.raises(TypeError, match=r"^'action' has dtype int32; expected int64 \(fixed by the first write\)$"):
        rb.extend(bad)
    assert len(rb) == 4 and rb.storage.store.transitions_added == 4
    collector2 = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    collector2.next_batch(4)
    assert rb.extend(collector2.next_batch(2)).tolist() == [4, 5]  # the writer did not move on the refusal
    check(rb[:], collector2.rows, 4)


def test_a_stack_that_goes_on_without_being_shifted_is_refused_naming_the_row(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(20, tmp_path / "s.mmr", stack_size=4))
    data = collector.next_batch(4)
    data["next", "pixels"][2] = data["next", "pixels"][2].flip(0)
    with pytest.raises(ValueError, match=r"^row 2: \('next', 'pixels'\) is not 'pixels' shifted by one frame"):
        rb.extend(data)
    assert len(rb) == 0


def test_data_without_the_observation_and_its_next_is_refused_naming_its_keys(tmp_path: Path) -> None:
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(20, tmp_path / "s.mmr"))
    with pytest.raises(ValueError, match=r"has no \('next', 'pixels'\); its keys are \['obs', 'pixels'\]$"):
        rb.extend(TensorDict({"obs": torch.zeros(3), "pixels": torch.zeros(3, 2, 2)}, [3]))


def test_keys_that_differ_from_the_first_write_are_refused(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(20, tmp_path / "s.mmr", stack_size=4))
    rb.extend(collector.next_batch(2))
    data = collector.next_batch(2).exclude(("next", "done"))
    data["extra"] = torch.zeros(2)
    with pytest.raises(ValueError, match=r"fixed by its first write\): missing \[\('next', 'done'\)\]; new \['extra'\]$"):
        rb.extend(data)


def test_writing_at_given_indices_is_refused(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(20, tmp_path / "s.mmr", stack_size=4))
    data = collector.next_batch(3)
    rb.extend(data)
    with pytest.raises(RuntimeError, match="writing at given indices .* is refused"):
        rb[0] = data[1]


def test_a_batch_with_two_batch_axes_is_refused_naming_reshape(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(20, tmp_path / "s.mmr", stack_size=4))
    with pytest.raises(ValueError, match=r"got batch size \[2, 2\]: extend with data.reshape\(-1\)"):
        rb.extend(collector.next_batch(4).reshape(2, 2))


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"max_size": 0}, "max_size must be >= 1; got 0"),
        ({"max_size": 2, "num_envs": 3}, r"max_size must be >= num_envs \(3\); got 2"),
        ({"mode": "x"}, r"mode must be one of \('w-', 'w', 'a', 'r'\); got 'x'"),
        ({"pixels_key": 3}, r"pixels_key must be a str or a tuple of str \(a TensorDict key\); got 3"),
        ({"stack_size": 0}, "stack_size must be >= 1; got 0"),
        ({"frame_encoding": "zstd"}, r"frame_encoding must be None or one of \('lz4', 'lz4-reference'\); got 'zstd'"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_created(tmp_path: Path, arguments: dict, message: str) -> None:
    kwargs = {"max_size": 10, **arguments}
    with pytest.raises((ValueError, TypeError), match=f"^{message}$"):
        MmreplayStorage(kwargs.pop("max_size"), tmp_path / "s.mmr", **kwargs)
    assert not (tmp_path / "s.mmr").exists()


# -- opening, like a file --------------------------------------------------------------------------------


def test_a_run_never_adopts_a_store_at_its_path_unless_told_to(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    first = MmreplayStorage(20, path, stack_size=4)
    TensorDictReplayBuffer(storage=first).extend(collector.next_batch(5))
    first.close()
    with pytest.raises(StoreExistsError, match="pass mode='a' to go on with a store this storage wrote, or mode='w'"):
        MmreplayStorage(20, path, stack_size=4)
    again = MmreplayStorage(20, path, stack_size=4, mode="a")
    assert len(again) == 5
    check(again[:], collector.rows, 4)
    again.close()
    replaced = MmreplayStorage(20, path, mode="w")
    assert len(replaced) == 0 and not path.exists()


def test_a_new_buffer_over_a_reopened_store_goes_on_at_its_next_slot(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    collector = FakeCollector(envs=2, stack_size=3, stacked=False, ends=EVERY_FIFTH_ENDS)
    first = MmreplayStorage(10, path, stack_size=3, num_envs=2)
    TensorDictReplayBuffer(storage=first).extend(collector.next_batch(6))
    first.close()
    storage = MmreplayStorage(10, path, stack_size=3, num_envs=2, mode="a")
    rb = TensorDictReplayBuffer(storage=storage)
    with pytest.raises(ValueError, match=r"goes to slots \[2, 3, 4, 5\]; got \[0, 1, 2, 3\]: .* "
                       r"rb.writer.load_state_dict\(storage.writer_state\(\)\)$"):
        rb.extend(collector.next_batch(2))
    rb = TensorDictReplayBuffer(storage=storage)
    rb.writer.load_state_dict(storage.writer_state())
    del collector.rows[-4:]
    collector2 = FakeCollector(envs=2, stack_size=3, stacked=False, ends=EVERY_FIFTH_ENDS)
    collector2.next_batch(6)
    assert rb.extend(collector2.next_batch(2)).tolist() == [2, 3, 4, 5]
    rows = collector2.rows
    check(rb[:], rows[10:] + rows[6:10], 3)  # each trajectory went on in its lane: its stacks too


def test_mode_w_does_not_remove_a_directory_that_holds_no_store(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="exists and is not one: not removed"):
        MmreplayStorage(20, tmp_path / "data", mode="w")
    assert (tmp_path / "data" / "keep.txt").read_text() == "mine"


def test_reopening_with_another_layout_names_what_differs(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    storage = MmreplayStorage(20, path, stack_size=4)
    TensorDictReplayBuffer(storage=storage).extend(collector.next_batch(5))
    storage.close()
    with pytest.raises(ValueError, match=r"has another layout: max_size=30 \(the store's: 20\), stack_size=2 \(the store's: 4\)$"):
        MmreplayStorage(30, path, stack_size=2, mode="a")


def test_a_store_opened_with_mode_r_is_read_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    storage = MmreplayStorage(20, path, stack_size=4)
    TensorDictReplayBuffer(storage=storage).extend(collector.next_batch(5))
    storage.close()
    reader = TensorDictReplayBuffer(storage=MmreplayStorage(20, path, mode="r"), batch_size=3)
    assert reader.sample().batch_size == (3,)
    with pytest.raises(ReadOnlyStoreError, match="is read-only: cannot write"):
        reader.extend(collector.next_batch(2))


def test_a_store_this_class_did_not_write_is_not_adopted(tmp_path: Path) -> None:
    ReplayStore.create(tmp_path / "plain.mmr", frame_shape=(2, 2), capacity=10).close()
    with pytest.raises(ValueError, match="was not written by MmreplayStorage"):
        MmreplayStorage(10, tmp_path / "plain.mmr", mode="a")


# -- several envs: lanes ---------------------------------------------------------------------------


@pytest.mark.parametrize("stacked", [True, False], ids=["stacks", "single-frames"])
def test_trajectories_of_several_envs_in_one_batch_keep_their_stacks_across_batches(tmp_path: Path, stacked: bool) -> None:
    collector = FakeCollector(envs=3, stack_size=4, stacked=stacked, ends=[(False, False)] * 6 + [(True, False)])
    storage = MmreplayStorage(200, tmp_path / "s.mmr", stack_size=4, num_envs=3)
    rb = TensorDictReplayBuffer(storage=storage)
    for _ in range(4):
        rb.extend(collector.next_batch(5))
    check(rb[:], collector.rows, 4)
    # each trajectory's frames are shared across batches: one episode per trajectory, none cut
    assert len(storage.store.episodes()) == len({t for t, _, _, _ in collector.rows})


def test_a_trajectory_whose_lane_was_taken_restarts_its_stacks_in_a_new_episode(tmp_path: Path) -> None:
    collector = FakeCollector(envs=2, stack_size=3, stacked=False, ends=[(False, False)])
    storage = MmreplayStorage(100, tmp_path / "s.mmr", stack_size=3, num_envs=1)
    rb = TensorDictReplayBuffer(storage=storage)
    rb.extend(collector.next_batch(3))  # trajectory 0 then 1 through one lane: 1 takes 0's lane
    rb.extend(collector.next_batch(2))  # 0 comes back: a new episode, its stack restarts at its step 3
    pixels = rb[:]["pixels"][:, :, 0, 1].tolist()
    assert pixels[:6] == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [0, 0, 0], [0, 0, 1], [0, 1, 2]]
    assert pixels[6] == [3, 3, 3]
    assert [episode.ended_by for episode in storage.store.episodes()] == ["cut", "cut", "cut", "in progress"]


# -- sampling ----------------------------------------------------------------------------------------


def test_random_sampler_draws_from_the_buffers_generator(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    data = collector.next_batch(30)
    draws = []
    for name in ("a", "b"):
        rb = TensorDictReplayBuffer(storage=MmreplayStorage(50, tmp_path / name, stack_size=4), sampler=RandomSampler(),
                                    batch_size=8, generator=torch.Generator().manual_seed(3))
        rb.extend(data.clone())
        draws.append(rb.sample())
    assert draws[0]["index"].tolist() == draws[1]["index"].tolist()
    assert (draws[0]["pixels"] == draws[1]["pixels"]).all()
    check(draws[0], [collector.rows[i] for i in draws[0]["index"].tolist()], 4)


def test_transforms_apply_to_what_is_sampled(tmp_path: Path) -> None:
    from torchrl.envs.transforms import Compose, ExcludeTransform, RewardScaling

    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    transform = Compose(RewardScaling(loc=1.0, scale=2.0, in_keys=[("next", "reward")]), ExcludeTransform("action"))
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(50, tmp_path / "s.mmr", stack_size=4), batch_size=4,
                                transform=transform)
    rb.extend(collector.next_batch(10))
    sample = rb.sample()
    stored = rb.storage[sample["index"]]
    assert sample.get("action", None) is None and stored.get("action", None) is not None
    assert sample["next", "reward"].tolist() == (stored["next", "reward"] * 2 + 1).tolist()
    assert (sample["pixels"] == stored["pixels"]).all()


def test_prioritized_sampler_draws_by_the_stores_priorities_and_weights_them(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    storage = MmreplayStorage(20, tmp_path / "s.mmr", stack_size=4)
    sampler = MmreplayPrioritizedSampler(storage, alpha=1.0, beta=1.0, eps=0.0)
    rb = TensorDictReplayBuffer(storage=storage, sampler=sampler, batch_size=2000, priority_key="td_error")
    data = collector.next_batch(4)
    data["td_error"] = torch.tensor([1.0, 0.0, 3.0, 0.0])
    rb.extend(data)  # TensorDictReplayBuffer sets the priorities of td_error
    sample = rb.sample()
    counts = np.bincount(sample["index"].numpy(), minlength=4)
    assert counts[1] == counts[3] == 0 and 0.15 < counts[0] / 2000 < 0.35
    weights = dict(zip(sample["index"].tolist(), sample["priority_weight"].tolist()))
    assert weights[0] == pytest.approx(1.0) and weights[2] == pytest.approx(1 / 3)
    rb.update_priority(torch.tensor([0, 2]), torch.tensor([0.0, 1.0]))
    assert set(rb.sample()["index"].tolist()) == {2}


def test_priorities_come_along_through_dumps_and_loads(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    buffers = []
    for name in ("a", "b"):
        storage = MmreplayStorage(20, tmp_path / name, stack_size=4)
        buffers.append(TensorDictReplayBuffer(storage=storage, batch_size=500,
                                              sampler=MmreplayPrioritizedSampler(storage, alpha=0.7, beta=0.5)))
    buffers[0].extend(collector.next_batch(26))
    buffers[0].update_priority(torch.arange(20), torch.arange(20, dtype=torch.float32) % 4)
    buffers[0].dumps(tmp_path / "checkpoint")
    buffers[1].loads(tmp_path / "checkpoint")
    sample = buffers[1].sample()
    assert not (sample["index"] % 4 == 0).any()  # priority 0 (eps 1e-6): next to never drawn
    slots = torch.arange(1, 20)
    weights = [b.storage.store.sampler.weights(b.storage.steps_of_slots(slots), beta=0.5) for b in buffers]
    assert np.allclose(weights[0], weights[1], rtol=1e-5)  # the same priorities, within float32 rounding


@pytest.mark.parametrize("sampler_class", [SliceSampler, MmreplaySliceSampler])
def test_slices_stay_within_one_trajectory(tmp_path: Path, sampler_class: type) -> None:
    collector = FakeCollector(envs=2, stack_size=4, stacked=True, ends=[(False, False)] * 7 + [(True, False)])
    storage = MmreplayStorage(60, tmp_path / "s.mmr", stack_size=4, num_envs=2)
    rb = TensorDictReplayBuffer(storage=storage, sampler=sampler_class(slice_len=4), batch_size=16,
                                generator=torch.Generator().manual_seed(0))
    for _ in range(5):
        rb.extend(collector.next_batch(8))
    for _ in range(5):
        sample = rb.sample().reshape(4, 4)
        trajectories = sample["collector", "traj_ids"]
        assert (trajectories == trajectories[:, :1]).all()
        steps = sample["pixels"][:, :, -1, 0, 1].to(torch.int64)
        assert (steps.diff(dim=1) == 1).all()


def test_the_two_slice_samplers_draw_the_same_slices(tmp_path: Path) -> None:
    collector = FakeCollector(envs=2, stack_size=4, stacked=True, ends=[(False, False)] * 5 + [(False, True)])
    storage = MmreplayStorage(40, tmp_path / "s.mmr", stack_size=4, num_envs=2)
    rbs = [TensorDictReplayBuffer(storage=storage, sampler=cls(slice_len=3), batch_size=12,
                                  generator=torch.Generator().manual_seed(5)) for cls in (SliceSampler, MmreplaySliceSampler)]
    for _ in range(4):
        rbs[0].extend(collector.next_batch(7))  # 56 transitions through a ring of 40
    assert rbs[0].sample()["index"].tolist() == rbs[1].sample()["index"].tolist()


# -- saving and loading ----------------------------------------------------------------------------


def test_dumps_and_loads_carry_the_transitions_at_their_slots_to_another_path(tmp_path: Path) -> None:
    collector = FakeCollector(envs=2, stack_size=4, stacked=False, ends=EVERY_FIFTH_ENDS)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(30, tmp_path / "a.mmr", stack_size=4, num_envs=2))
    for _ in range(4):
        rb.extend(collector.next_batch(6))  # 48 transitions: the ring wrapped
    rb.dumps(tmp_path / "checkpoint")
    loaded = TensorDictReplayBuffer(storage=MmreplayStorage(30, tmp_path / "b.mmr", stack_size=4, num_envs=2))
    loaded.loads(tmp_path / "checkpoint")
    assert (loaded[:] == rb[:]).all()
    more = collector.next_batch(3)
    assert loaded.extend(more.clone()).tolist() == rb.extend(more.clone()).tolist()
    assert (loaded[:] == rb[:]).all()  # the lanes came along: both stores shared the same frames


def test_after_loads_an_env_whose_every_transition_was_evicted_starts_its_stack_anew(tmp_path: Path) -> None:
    """A loaded dump rebuilds each env's episode in progress from the stored transitions, as a reopened
    store does: single frames of a trajectory none of whose transitions is stored restart their stack
    (the first frame repeated), while the original buffer, which saw the frames, goes on with them."""
    collector = FakeCollector(envs=2, stack_size=2, stacked=False, ends=[(False, False)])
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(2, tmp_path / "a.mmr", stack_size=2, num_envs=2))
    rb.extend(collector.next_batch(2))  # env 0's trajectory 0, then env 1's trajectory 1: only 1 is kept
    rb.dumps(tmp_path / "checkpoint")
    loaded = TensorDictReplayBuffer(storage=MmreplayStorage(2, tmp_path / "b.mmr", stack_size=2, num_envs=2))
    loaded.loads(tmp_path / "checkpoint")
    more = collector.next_batch(1)  # trajectory 0's step 2, trajectory 1's step 2
    rb.extend(more.clone())
    loaded.extend(more.clone())
    assert rb[0]["pixels"][:, 0, 1].tolist() == [1, 2]  # trajectory 0's frames of steps 1 and 2
    assert loaded[0]["pixels"][:, 0, 1].tolist() == [2, 2]  # step 2's frame repeated: a new stack
    assert (loaded[1]["pixels"] == rb[1]["pixels"]).all()  # trajectory 1 had transitions stored


def test_a_state_dict_names_the_store_and_loads_into_a_copy_elsewhere(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(10, tmp_path / "a.mmr", stack_size=4))
    rb.extend(collector.next_batch(13))
    state = rb.state_dict()
    other = TensorDictReplayBuffer(storage=MmreplayStorage(10, tmp_path / "b.mmr", stack_size=4))
    other.load_state_dict(state)
    assert (other[:] == rb[:]).all()
    rb.extend(collector.next_batch(1))
    with pytest.raises(ValueError, match="holds 14 transitions added, and the state_dict was taken at 13"):
        rb.load_state_dict(state)


def test_empty_removes_every_transition_and_writing_starts_at_slot_0(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    rb = TensorDictReplayBuffer(storage=MmreplayStorage(10, tmp_path / "s.mmr", stack_size=4))
    rb.extend(collector.next_batch(13))
    rb.empty()
    assert len(rb) == 0
    assert rb.extend(collector.next_batch(2)).tolist() == [0, 1]
    check(rb[:], collector.rows[-2:], 4)


def test_a_pickled_storage_reads_the_same_store_and_writes_once_the_writer_let_go(tmp_path: Path) -> None:
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    storage = MmreplayStorage(20, tmp_path / "s.mmr", stack_size=4)
    TensorDictReplayBuffer(storage=storage).extend(collector.next_batch(6))
    clone = pickle.loads(pickle.dumps(storage))
    assert (clone[:] == storage[:]).all()
    assert repr(copy.deepcopy(storage)).startswith("MmreplayStorage(")
    storage.close()
    clone_rb = TensorDictReplayBuffer(storage=clone)
    clone_rb.writer.load_state_dict(clone.writer_state())
    clone_rb.extend(collector.next_batch(2))
    check(clone[:], collector.rows, 4)


def read_actions(storage: MmreplayStorage, queue: object) -> None:
    """In a spawned process: what the storage reads."""
    queue.put((len(storage), storage[:]["action"].tolist()))  # type: ignore[attr-defined]


def test_a_storage_sent_to_another_process_reads_its_store_there_once_written(tmp_path: Path) -> None:
    from torch import multiprocessing

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    storage = MmreplayStorage(10, tmp_path / "s.mmr", stack_size=4)
    with pytest.raises(RuntimeError, match="it has not been initialized yet"):
        context.Process(target=read_actions, args=(storage, queue)).start()
    TensorDictReplayBuffer(storage=storage).extend(
        FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS).next_batch(5))
    process = context.Process(target=read_actions, args=(storage, queue))
    process.start()
    assert queue.get(timeout=300) == (5, [0, 1, 2, 3, 4])
    process.join(timeout=300)



@pytest.mark.parametrize("name", ["torchrl.json", "torchrl-lanes.json"])
def test_a_side_file_that_is_a_link_is_refused_and_its_target_never_written(tmp_path: Path, name: str) -> None:
    path = tmp_path / "s.mmr"
    collector = FakeCollector(envs=1, stack_size=4, stacked=True, ends=EVERY_FIFTH_ENDS)
    first = MmreplayStorage(20, path, stack_size=4)
    TensorDictReplayBuffer(storage=first).extend(collector.next_batch(5))
    first.close()
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    (path / name).unlink(missing_ok=True)  # the lanes file is written only once trajectories are tracked
    (path / name).symlink_to(victim)
    (path / (name + ".tmp")).symlink_to(victim)  # a temporary name the writer would open, planted too
    with pytest.raises(CorruptStoreError, match="is a symbolic link, not a regular file"):
        MmreplayStorage(20, path, stack_size=4, mode="a")
    assert victim.read_text() == "the user's file"
