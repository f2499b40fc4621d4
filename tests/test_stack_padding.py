"""``stack_padding="zeros"``: stacks at an episode start hold all-zero frames before its first frame."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from strategies import frame, stack

from mmreplay import ReplayStore, export_hdf5, import_hdf5
from mmreplay.errors import FormatVersionError


def numbers(stacks: np.ndarray) -> list[list[int]]:
    return stacks[..., 0, 0].tolist()


def zero_store(path: Path) -> ReplayStore:
    store = ReplayStore.create(path, frame_shape=(3, 4), capacity=16, stack_size=3, stack_padding="zeros")
    for n in (1, 2, 3):
        store.add(frame(n), 0, 1.0, frame(n + 1), n == 3, False)
    store.add(stack(0, 0, 9), 0, 1.0, stack(0, 9, 10), False, False)  # a start given Dopamine's way
    return store


def test_read_sample_n_step_and_sequences_zero_pad_episode_starts(tmp_path: Path) -> None:
    with zero_store(tmp_path / "z.mmr") as store:
        batch = store.read(range(4))
        assert numbers(batch.obs) == [[0, 0, 1], [0, 1, 2], [1, 2, 3], [0, 0, 9]]
        assert numbers(batch.next_obs) == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [0, 9, 10]]
        window = store.sample(16, rng=0, n_step=3)
        assert all(numbers(window.obs)[i] == numbers(batch.obs)[s] for i, s in enumerate(window.index.tolist()))
        sequences = store.sample_sequences(4, 2, rng=0)
        for i, first in enumerate(sequences.index[:, 0].tolist()):
            assert numbers(sequences.obs[i, 0]) == numbers(batch.obs)[first]


def test_the_option_is_recorded_in_the_header_and_kept_on_reopen(tmp_path: Path) -> None:
    zero_store(tmp_path / "z.mmr").close()
    assert '"stack_padding": "zeros"' in (tmp_path / "z.mmr" / "header.json").read_text()
    with ReplayStore.open(tmp_path / "z.mmr", "r+") as store:
        assert store.stack_padding == "zeros"
        store.add(stack(0, 9, 10), 0, 1.0, stack(9, 10, 11), False, False)  # continues after reopening
        assert [e.length for e in store.episodes()] == [3, 2]
    with ReplayStore.create(tmp_path / "f.mmr", frame_shape=(3, 4), capacity=4) as store:
        assert store.stack_padding == "first"
    assert "stack_padding" not in (tmp_path / "f.mmr" / "header.json").read_text()


@pytest.mark.parametrize("layout", ["mmreplay", "minari"])
def test_exports_carry_it_and_imports_recreate_it(tmp_path: Path, layout: str) -> None:
    with zero_store(tmp_path / "z.mmr") as store:
        export_hdf5(store, tmp_path / "x", layout=layout, dataset_id="x-v0")
        expected = numbers(store.read(range(4)).obs)
    import_hdf5(tmp_path / "x", tmp_path / "y.mmr")
    with ReplayStore.open(tmp_path / "y.mmr") as copy:
        assert copy.stack_padding == "zeros" and numbers(copy.read(range(4)).obs) == expected


def test_an_unknown_padding_is_refused_at_create_and_in_a_header(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"stack_padding must be one of \('first', 'zeros'\); got 'edge'"):
        ReplayStore.create(tmp_path / "a.mmr", frame_shape=(3, 4), capacity=4, stack_padding="edge")
    assert not (tmp_path / "a.mmr").exists()
    zero_store(tmp_path / "z.mmr").close()
    header = tmp_path / "z.mmr" / "header.json"
    import json
    import zlib
    document = json.loads(header.read_text())
    document["layout"]["stack_padding"] = "edge"
    del document["checksum"]
    document["checksum"] = zlib.crc32(json.dumps(document, sort_keys=True).encode())
    header.write_text(json.dumps(document))
    with pytest.raises(FormatVersionError, match="stack padding 'edge'; this mmreplay reads stack paddings 'first', 'zeros'"):
        ReplayStore.open(tmp_path / "z.mmr")
