"""Hostile inputs end in a library error or a correct result: never a signal, another exception, or an
allocation beyond the bound (``hostile_cases.BOUND``, 512 MiB above what the process had mapped).

``hostile_cases.py`` runs each case in a forked child under ``RLIMIT_AS`` and reports outcomes; these
tests run it in a subprocess (a crash must not take pytest with it) and read its JSON. Heavier runs:
``python tests/hostile_cases.py headers 2000``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def run_cases(*arguments: str) -> dict[str, object]:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}
    finished = subprocess.run([sys.executable, str(HERE / "hostile_cases.py"), *arguments], capture_output=True,
                              text=True, env=environment, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    report: dict[str, object] = json.loads(finished.stdout)
    return report


def escaped(report: dict[str, object]) -> list[str]:
    cases = report["cases"]
    assert isinstance(cases, list) and cases
    return [case for case in cases if case.split(" => ")[-1].startswith(("other:", "signal:"))]


def test_crafted_headers_open_or_fail_with_a_library_error_and_write_nothing_outside_the_store() -> None:
    report = run_cases("headers", "100")
    assert escaped(report) == []
    assert any("frame_table_generation='../../outside/victim' => library:CorruptStoreError" in case
               for case in report["cases"])  # type: ignore[union-attr]
    assert "layout.action_dtype='|O' => library:CorruptStoreError" in report["cases"]  # type: ignore[operator]
    schemes = [case for case in report["cases"] if case.startswith("layout.reference_scheme={'group_size'")]  # type: ignore[union-attr]
    assert len(schemes) == 2 and all(case.endswith("=> library:CorruptStoreError") for case in schemes), schemes


def test_crafted_hdf5_files_are_refused_with_a_library_error_in_both_layouts() -> None:
    report = run_cases("hdf5")
    assert escaped(report) == []
    cases = report["cases"]
    assert isinstance(cases, list)
    for layout in ("mmreplay", "minari"):
        for name in ("external storage", "external link", "virtual dataset", "user filter", "huge frames",
                     "huge column"):
            assert f"{layout} {name} => library:CorruptStoreError" in cases


def test_crafted_dopamine_npy_headers_are_refused_with_a_library_error() -> None:
    report = run_cases("dopamine")
    assert escaped(report) == []
    assert report["counts"] == {"library:CorruptStoreError": len(report["cases"])}  # type: ignore[arg-type]


@pytest.mark.parametrize("what", ["storage", "link"])
def test_an_import_refuses_external_data_with_a_message_naming_it(tmp_path: Path, what: str) -> None:
    import h5py
    import numpy as np

    from mmreplay import CorruptStoreError, ReplayStore
    from mmreplay.hdf5 import export_hdf5, import_hdf5

    with ReplayStore.create(tmp_path / "a.mmr", frame_shape=(2, 3), capacity=8, stack_size=2) as store:
        store.add(np.zeros((2, 2, 3), np.uint8), 0, 0.0, np.zeros((2, 2, 3), np.uint8), True, False)
        export_hdf5(store, tmp_path / "x.h5")
    with h5py.File(tmp_path / "x.h5", "r+") as file:
        shape = file["frames"].shape
        del file["frames"]
        if what == "storage":
            file.create_dataset("frames", shape=shape, dtype=np.uint8, external=[("/etc/passwd", 0, 10**6)])
            expected = r"refused: frames stores its data in an external file '/etc/passwd'"
        else:
            file["frames"] = h5py.ExternalLink("/tmp/other.h5", "frames")
            expected = r"refused: frames is an external link to '/tmp/other.h5':'frames'"
    with pytest.raises(CorruptStoreError, match=expected):
        import_hdf5(tmp_path / "x.h5", tmp_path / "b.mmr")
    assert not (tmp_path / "b.mmr").exists()
