"""Hostile and damaged files: every integer a header or row declares is bounded
before anything is allocated, a short write on a full disk is ENOSPC, and damage is contained: reported
by ``verify`` row by row and frame by frame, named by ``open`` with the way out (``salvage``).

The stores are small and made here; their files are edited as a user (or a bad sector) would: a header
rewritten with its checksum recomputed, one byte of a row or a frame flipped (``store_files`` lays the
binary files out as docs/formats.md documents them).
"""

from __future__ import annotations

import errno
import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import store_files

from mmreplay import CorruptStoreError, ReplayStore
from mmreplay.cli import main, verify_store
from mmreplay.disk import header_parsing
from mmreplay.frames import reference_scheme
from mmreplay.rows.checksums import row_checksum
from mmreplay.rows.transitions import FLAG_BITS, unchecked_bytes

ENCODINGS = ["lz4", "lz4-reference"]


def tagged(tag: int, shape: tuple[int, ...] = (8, 8)) -> np.ndarray:
    """A frame that says which it is: its first 4 bytes hold ``tag``, the rest a pattern of it."""
    frame = np.full(shape, tag % 251, np.uint8)
    frame.reshape(-1)[:4] = np.frombuffer(int(tag).to_bytes(4, "little"), np.uint8)
    return frame


def build(path: Path, encoding: str, *, num_envs: int = 2, transitions: int = 40, stack_size: int = 2) -> Path:
    """A closed store of ``num_envs`` envs whose frames are all distinct (``tagged``): episodes of 3 to 9
    transitions, some terminated, some truncated."""
    with ReplayStore.create(path, frame_shape=(8, 8), capacity=64, stack_size=stack_size, num_envs=num_envs,
                            frame_encoding=encoding) as store:
        rng = np.random.default_rng(1)
        tag = [1000 * (env + 1) for env in range(num_envs)]
        stacks = [np.stack([tagged(t)] * stack_size) for t in tag]
        left = rng.integers(3, 10, num_envs)
        for _ in range(transitions // num_envs):
            obs = np.stack(stacks)
            next_stacks = []
            for env in range(num_envs):
                tag[env] += 1
                next_stacks.append(np.concatenate([stacks[env][1:], tagged(tag[env])[None]]))
            left -= 1
            ended = left == 0
            terminated, truncated = ended & (rng.random(num_envs) < 0.5), ended.copy()
            truncated &= ~terminated
            store.add(obs, rng.integers(0, 4, num_envs), rng.random(num_envs).astype(np.float32), np.stack(next_stacks),
                      terminated, truncated)
            for env in range(num_envs):
                if ended[env]:
                    tag[env] += 1
                    next_stacks[env] = np.stack([tagged(tag[env])] * stack_size)
                    left[env] = rng.integers(3, 10)
            stacks = next_stacks
    return path


def rewrite_header(path: Path, edit: Callable[[dict], None]) -> None:
    """Edit header.json's body and recompute its checksum (what anyone can do)."""
    document = json.loads((path / "header.json").read_text())
    document.pop("checksum")
    edit(document)
    document["checksum"] = zlib.crc32(json.dumps(document, sort_keys=True).encode())
    (path / "header.json").write_text(json.dumps(document))


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


# -- item 6: a header's reference scheme --------------------------------------------------------------


def test_the_header_bounds_are_the_reference_schemes() -> None:
    assert header_parsing.MAX_GROUP_SIZE == reference_scheme.MAX_GROUP_SIZE


@pytest.mark.parametrize("value", [2**40, 10**30])
def test_a_reference_scheme_of_huge_groups_is_refused_by_open_info_verify_and_episodes(
    tmp_path: Path, value: int, capsys: pytest.CaptureFixture[str]
) -> None:
    path = build(tmp_path / "s.mmr", "lz4-reference")
    rewrite_header(path, lambda h: h["layout"]["reference_scheme"].update(group_size=value, branching=value))
    message = (rf"s\.mmr/header\.json: header field reference_scheme\.group_size is {value}; expected an integer "
               r"in \[1, 65536\]")
    with pytest.raises(CorruptStoreError, match=message):
        ReplayStore.open(path)
    for command in ("info", "episodes"):
        status, out, err = cli(capsys, command, str(path))
        assert status == 1 and "reference_scheme.group_size" in err and "Overflow" not in err
    status, out, _ = cli(capsys, "verify", str(path), "--json")
    assert status == 1 and "reference_scheme.group_size" in json.loads(out)["problems"][0]


@pytest.mark.parametrize(("scheme", "field"), [
    ({"group_size": 64, "branching": 1, "max_distance": 8192}, "branching"),
    ({"group_size": 64, "branching": 65, "max_distance": 8192}, "branching"),
    ({"group_size": 64, "branching": 2, "max_distance": 2**16}, "max_distance"),
    ({"group_size": 64, "branching": 2}, None),
    ({"group_size": 64, "branching": 2, "max_distance": 8192, "depth": 10**9}, None),
])
def test_every_field_of_a_reference_scheme_is_bounded(tmp_path: Path, scheme: dict, field: str | None) -> None:
    path = build(tmp_path / "s.mmr", "lz4-reference")
    rewrite_header(path, lambda h: h["layout"].__setitem__("reference_scheme", scheme))
    expected = (rf"header field reference_scheme\.{field} is" if field else
                r"header field reference_scheme is .*; expected an object of exactly group_size, branching, max_distance")
    with pytest.raises(CorruptStoreError, match=expected):
        ReplayStore.open(path)


# -- item 7: a row naming an env beyond num_envs ---------------------------------------------------


def set_row_env(path: Path, step: int, env: int) -> None:
    """Give the row of ``step`` another env, and recompute its checksum (a crafted file)."""
    dtype = store_files.rows_dtype(path)
    table = path / "transitions.tbl"
    slot = step % store_files.header_of(path)["layout"]["row_slots"]
    with open(table, "r+b") as file:
        file.seek(slot * dtype.itemsize)
        row = bytearray(file.read(dtype.itemsize))
        offset, width = dtype.fields["flags_env"][1], dtype["flags_env"].itemsize
        word = int.from_bytes(row[offset : offset + width], "little")
        row[offset : offset + width] = ((word & ((1 << FLAG_BITS) - 1)) | env << FLAG_BITS).to_bytes(width, "little")
        row[0:4] = row_checksum(bytes(row[unchecked_bytes(dtype):]), step).to_bytes(4, "little")
        file.seek(slot * dtype.itemsize)
        file.write(bytes(row))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_row_naming_an_env_beyond_num_envs_is_damage_named_by_open_info_episodes_and_verify(
    tmp_path: Path, encoding: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = build(tmp_path / "s.mmr", encoding)
    set_row_env(path, 5, 3)
    message = r"the row of transition 5 names env 3, but the store has 2 env\(s\)"
    with pytest.raises(CorruptStoreError, match=message):
        ReplayStore.open(path)
    for command in ("info", "episodes"):
        status, _, err = cli(capsys, command, str(path))
        assert status == 1 and "transition 5 names env 3" in err and "IndexError" not in err, err
    report = verify_store(str(path))
    assert report["damaged_rows"] == [{"step": 5, "file": "transitions.tbl",
                                       "offset": 5 * store_files.rows_dtype(path).itemsize,
                                       "problem": "names env 3, but the store has 2 env(s)"}]
    assert report["transitions"] == 40


def test_a_sampled_row_naming_an_env_beyond_num_envs_is_refused_by_the_compiled_read(tmp_path: Path) -> None:
    path = build(tmp_path / "s.mmr", "lz4", num_envs=2)
    with ReplayStore.open(path) as store:
        store.read(np.arange(40))  # maps the segments: the compiled read runs from now on
        set_row_env(path, 30, 2)
        with pytest.raises(CorruptStoreError, match="the row of transition 30 names env 2"):
            store.read(np.array([29, 30, 31]))
        with pytest.raises(CorruptStoreError, match="the row of transition 30 names env 2"):
            store.read(np.array([30]))


# -- item 8: a short write on a full disk ----------------------------------------------------------


@pytest.fixture
def tiny_filesystem(tmp_path: Path):
    """A 1.2 MB tmpfs (skipped where nothing can be mounted)."""
    import gc
    import subprocess

    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 1.2 MB tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        gc.collect()
        if subprocess.run(["umount", str(mount_point)], check=False, capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill_up(filesystem: Path) -> None:
    """Write one file until ``filesystem`` has no block left."""
    descriptor = os.open(filesystem / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(descriptor, b"\xff" * 4096):
            pass
    except OSError as error:
        assert error.errno == errno.ENOSPC
    finally:
        os.close(descriptor)


@pytest.mark.parametrize("how", ["add", "add_encoded"])
def test_a_frame_write_that_only_partly_fits_a_full_disk_raises_enospc_naming_the_segment(
    tiny_filesystem: Path, how: str
) -> None:
    # Once the disk is full, a segment's last page still takes frames; the add whose frames cross into the
    # next page writes part of them (a short write), and must then say why the rest did not fit: ENOSPC,
    # as every other full-disk error of the store does. add_encoded writes a plain store's blocks as they
    # came (the general path's pwrite); add compresses them in one compiled call.
    from mmreplay import encode_frames

    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (64, 32, 32), np.uint8)  # incompressible: ~1 KiB a frame
    store = ReplayStore.create(tiny_filesystem / "s.mmr", frame_shape=(32, 32), capacity=200, stack_size=2,
                               frame_encoding="lz4", commit_interval_s=None)
    failures = []
    try:
        store.add(np.stack([noise[0]] * 2), 0, 0.0, noise[0:2], False, False)
        store.flush()
        _fill_up(tiny_filesystem)
        for t in range(1, 60):
            try:
                if how == "add":
                    store.add(noise[t - 1 : t + 1], 0, 0.0, noise[t : t + 2], False, False)
                else:
                    store.add_encoded(encode_frames(noise[t - 1 : t + 2]), np.array([[0, 1]]), np.array([0]),
                                      np.array([0.0], np.float32), np.array([[1, 2]]), np.array([False]),
                                      np.array([False]))
            except OSError as error:
                failures.append((error.errno, str(error)))
                break
    finally:
        try:
            store.close()
        except OSError:
            pass
    assert failures, "the disk never filled"
    code, message = failures[0]
    assert code == errno.ENOSPC and "short write" not in message, failures
    assert "s.mmr/frames/0000000000.seg: No space left on device" in message, message
