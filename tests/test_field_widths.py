"""The widths a store gives its row and frame-entry fields at create time (format version 5) hold every
value they are handed: env indices past 7 (then past 2,047: the env shares a word with the flags), compressed
frames of 64 KiB and more, and frame steps that run ahead of transition steps by one more at each episode
start.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mmreplay import ReplayStore


def table_bytes(path: Path) -> tuple[int, int]:
    """(bytes per row, bytes per frame entry), from the file sizes and the slot counts of the header."""
    header = json.loads((path / "header.json").read_text())
    commit = header["commit"]
    rows = (path / "transitions.tbl").stat().st_size // header["layout"]["row_slots"]
    frame_table = path / f"frames-{commit['frame_table_generation']}.idx"
    return rows, frame_table.stat().st_size // commit["frame_slots"]


@pytest.mark.parametrize("num_envs,env_bytes", [(8, 1), (9, 2), (300, 2), (2048, 2), (2049, 3)])
def test_every_env_index_comes_back_with_the_flags_in_one_byte_up_to_8_envs_two_up_to_2048_and_three_above(
    make_pair, num_envs: int, env_bytes: int
) -> None:
    pair = make_pair(num_envs=num_envs, capacity=3 * num_envs, frame_shape=(2, 3), stack_size=2)
    rng = np.random.default_rng(num_envs)
    obs = rng.integers(0, 256, (num_envs, 2, 2, 3), dtype=np.uint8)
    for k in range(4):  # the fourth vector add evicts the first
        next_obs = np.concatenate([obs[:, 1:], rng.integers(0, 256, (num_envs, 1, 2, 3), dtype=np.uint8)], axis=1)
        ended = np.arange(num_envs) % 3 == k % 3
        pair.add(obs, np.arange(num_envs) * 7 + k, rng.random(num_envs), next_obs, ended, np.zeros(num_envs, bool))
        obs = np.where(ended[:, None, None, None], next_obs[:, -1:].repeat(2, axis=1), next_obs)
    pair.check()
    batch = pair.store.read(np.array(pair.store.stored_steps))
    assert batch.env_index.max() == num_envs - 1
    # checksum, next_delta (2 bytes: a ring of fewer than 65,536 rows), frame_lead, reward
    int64_action, other_fields = 8, 4 + (2 if 4 * num_envs + 3 * num_envs < 1 << 16 else 3) + 4 + 4
    assert table_bytes(pair.store.path)[0] == other_fields + env_bytes + int64_action


def test_more_envs_than_an_env_index_can_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"num_envs must be <= 65536; got 65537"):
        ReplayStore.create(tmp_path / "wide.mmr", capacity=70_000, frame_shape=(1,), num_envs=65_537)
    assert not (tmp_path / "wide.mmr").exists()


@pytest.mark.parametrize("encoding,links_bytes", [("lz4", 2), ("lz4-reference", 4)])
@pytest.mark.parametrize("frame_shape,length_bytes", [((84, 84), 2), ((300, 300), 4)])
def test_frames_that_do_not_compress_come_back_whatever_their_length_field(
    make_pair, frame_shape: tuple[int, int], length_bytes: int, encoding: str, links_bytes: int
) -> None:
    """Noise does not compress: a 300x300 frame takes more than 65,535 bytes, so it needs the u4 length. The
    links take 2 bytes in a small ring, 4 where they hold ref_delta as well."""
    pair = make_pair(frame_shape=frame_shape, capacity=4, stack_size=2, frame_encoding=encoding)
    rng = np.random.default_rng(7)
    frames = rng.integers(0, 256, (7, *frame_shape), dtype=np.uint8)
    for t in range(6):
        pair.add(frames[[max(t - 1, 0), t]], t, 1.0, frames[[t, t + 1]], t == 2, False)
    pair.reopen()
    pair.check()
    position_checksum = 4 + 4  # the low 32 bits of the position
    assert table_bytes(pair.store.path)[1] == position_checksum + links_bytes + length_bytes


def test_next_obs_is_right_after_many_more_frames_than_transitions(make_pair) -> None:
    """Every one-step episode writes two frames for one transition: the frame lead reaches 1,000 here,
    while the ring wraps many times."""
    pair = make_pair(frame_shape=(2, 2), capacity=7, stack_size=3)
    for t in range(1000):
        obs = np.full((3, 2, 2), t % 251, np.uint8)  # an episode's first stack repeats its first frame
        next_obs = obs.copy()
        next_obs[-1] = (t + 1) % 251
        pair.add(obs, t, float(t), next_obs, t % 2 == 0, t % 2 == 1)
    pair.reopen("r")
    pair.check()
    batch = pair.store.read(np.array([999]))
    assert (batch.next_obs[0, -1] == 1000 % 251).all() and (batch.obs[0] == 999 % 251).all()
