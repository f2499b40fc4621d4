"""Hostile inputs, each run in a forked child under a memory limit; prints the outcomes as JSON.

    python tests/hostile_cases.py headers 150     # hypothesis over header fields (150 examples)
    python tests/hostile_cases.py hdf5            # crafted HDF5 files, both layouts
    python tests/hostile_cases.py dopamine        # crafted Dopamine .npy headers
    python tests/hostile_cases.py sparse          # headers asking for large rings in sparse files

Each case runs in a child forked for it, whose address space is limited (``RLIMIT_AS``) to what it
has mapped at the fork plus ``BOUND`` bytes: no case may allocate or map more. A case's outcome is
``ok`` (every operation returned), ``library:<Class>`` (the first error, an ``mmreplay.errors``
class), ``other:<Class>: <message>`` (an exception mmreplay should not let out) or ``signal:<NAME>``
(the child died). Only the public API (and the CLI's ``verify_store``) is used, so the same cases run
against any version of the package (``PYTHONPATH``) to count outcomes before and after a change. A
file beside each case's store (``outside/victim``) must be unchanged afterwards: nothing may be
written outside the store.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import traceback
import zlib
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import store_files

from mmreplay import PrioritizedSampler, ReplayStore
from mmreplay.cli import verify_store
from mmreplay.disk.packed_fields import read_uint, write_uint
from mmreplay.errors import MmreplayError
from mmreplay.hdf5 import export_hdf5, import_hdf5

BOUND = 512 << 20
VICTIM = b"must never change\n"


def _vm_size() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def run_forked(action: Callable[[], None]) -> str:
    """``action()`` in a forked child under the memory bound; its outcome (see the module docstring)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        outcome = "ok"
        try:
            limit = _vm_size() + BOUND
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            action()
        except MmreplayError as error:
            outcome = f"library:{type(error).__name__}"
        except BaseException as error:  # noqa: BLE001 - the point is to count what escapes
            where = traceback.extract_tb(error.__traceback__)[-1]
            outcome = f"other:{type(error).__name__}: {str(error)[:120]} ({Path(where.filename).name}:{where.lineno})"
        os.write(write_end, outcome.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"signal:{signal.Signals(os.WTERMSIG(status)).name}"
    return text or "other:child exited without an outcome"


def frames(value: int, shape: tuple[int, ...] = (4, 5)) -> np.ndarray:
    return np.full(shape, value % 251, np.uint8)


def build_store(path: Path, *, prioritized: bool, frame_encoding: str | None = None) -> Path:
    """A small closed store (the default frame encoding, or ``frame_encoding``)."""
    sampler = PrioritizedSampler() if prioritized else None
    encoding = {} if frame_encoding is None else {"frame_encoding": frame_encoding}
    with ReplayStore.create(path, frame_shape=(4, 5), capacity=16, stack_size=2, num_envs=1, sampler=sampler,
                            **encoding) as store:
        for t in range(24):
            obs, next_obs = np.stack([frames(t), frames(t + 1)]), np.stack([frames(t + 1), frames(t + 2)])
            store.add(obs, t % 3, float(t), next_obs, t % 7 == 6, False)
    return path


def use_store(path: Path) -> None:
    """What users do with a downloaded store: inspect it, read it, sample it, verify it, append to it."""
    with ReplayStore.open(path, "r") as store:
        len(store)
        store.read(np.asarray(store.stored_steps))
        if len(store):
            store.sample(4, rng=0)
        store.episodes()
        store.bytes_on_disk
    verify_store(str(path))
    with ReplayStore.open(path, "r+") as store:
        # In the shapes the store says it holds (an edited header may say other shapes than it was made with).
        envs = (store.num_envs,) if store.num_envs > 1 else ()
        obs = np.zeros((*envs, store.stack_size, *store.frame_shape), np.uint8)
        action = np.zeros((*envs, *store.action_shape), store.action_dtype)
        reward = np.zeros(envs, np.float32) if envs else 0.0
        done = np.zeros(envs, bool) if envs else False
        store.add(obs, action, reward, obs, done, done)


# -- headers ---------------------------------------------------------------------------------------

def _paths(header: dict[str, object]) -> list[tuple[str, ...]]:
    found = [("format_version",), ("magic",)]
    for section in ("layout", "commit"):
        body = header[section]
        assert isinstance(body, dict)
        for key, value in body.items():
            found.append((section, key))
            if isinstance(value, dict):
                found.extend((section, key, inner) for inner in value)
    return found


NAMED_VALUES = [
    "|O", "V8", "M8[s]", "(2,)i4", "[('a', '<i4')]", "S4", "U2", "c16", "<f16", "../../outside/victim",
    "../outside", "/etc/passwd", 0, -1, 1, 2**31, 2**32, 2**63, 10**9, 10**18, 1.5, 1e9, float("nan"),
    True, None, [], [-1], [0, 0], [8192, 8192], [1, 2**40], {}, "",
]
NAMED_CASES = [
    *((("layout", "action_dtype"), dtype) for dtype in ("|O", "V8", "M8[s]", "(2,)i4", "[('a', '<i8')]", "S8", "c16")),
    (("commit", "frame_table_generation"), "../../outside/victim"),
    (("commit", "frame_table_generation"), ".."),
    (("layout", "stack_size"), 10**9),
    (("layout", "capacity"), -1),
    (("layout", "num_envs"), 2),
    (("layout", "frame_shape"), [8192, 8192]),
    (("layout", "row_slots"), 2**40),
    (("commit", "frame_slots"), 0),
    (("commit", "transitions_added"), 10**12),
    (("commit", "frames_written"), -1),
    (("layout", "sampler"), {"kind": "prioritized"}),
    (("commit", "sampler_state"), {"max_priority": 1e308}),
    (("layout", "segment_bytes"), 2**40),  # a writer must not reserve a terabyte of disk
    (("commit", "bytes_written"), 2**45),
    # a scheme whose depth is a loop over 2**40 (or an OverflowError)
    (("layout", "reference_scheme"), {"group_size": 2**40, "branching": 2**40, "max_distance": 8192}),
    (("layout", "reference_scheme"), {"group_size": 10**30, "branching": 10**30, "max_distance": 8192}),
]
VALUES = st.one_of(
    st.sampled_from(NAMED_VALUES),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(-3, 2**33), max_size=4),
    st.dictionaries(st.text(max_size=4), st.integers(-2, 5), max_size=2),
)
EDITS = st.one_of(
    st.tuples(st.just("set"), VALUES),
    st.tuples(st.just("shift"), st.sampled_from([-2, -1, 1, 2, 1000, 2**20])),
    st.tuples(st.just("scale"), st.sampled_from([0, 2, 1024, 2**30])),
    st.tuples(st.just("delete"), st.none()),
)


def edit_header(path: Path, where: tuple[str, ...], edit: tuple[str, object]) -> None:
    header = json.loads((path / "header.json").read_text())
    body = {key: value for key, value in header.items() if key != "checksum"}
    parent = body
    for key in where[:-1]:
        parent = parent[key]
    kind, value = edit
    old = parent.get(where[-1])
    if kind == "set":
        parent[where[-1]] = value
    elif kind == "delete":
        parent.pop(where[-1], None)
    elif isinstance(old, int) and not isinstance(old, bool):
        parent[where[-1]] = old + value if kind == "shift" else old * value
    else:
        parent[where[-1]] = value
    body["checksum"] = zlib.crc32(json.dumps(body, sort_keys=True).encode())  # what anyone can recompute
    (path / "header.json").write_text(json.dumps(body, allow_nan=True))


def header_cases(root: Path, examples: int) -> list[str]:
    bases = [build_store(root / f"base{i}.mmr", prioritized=bool(i)) for i in range(2)]
    header = json.loads((bases[1] / "header.json").read_text())
    paths = _paths(header)
    outside = root / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(VICTIM)
    outcomes: list[str] = []

    def run_case(base: int, where: tuple[str, ...], edit: tuple[str, object]) -> str | None:
        target = root / "case.mmr"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(bases[base], target)
        # A directory a path-forming field could aim at, shipped inside the store.
        (target / "frames-..").mkdir(exist_ok=True)
        try:
            edit_header(target, where, edit)
        except (KeyError, TypeError):
            return None
        outcome = run_forked(lambda: use_store(target))
        if (outside / "victim").read_bytes() != VICTIM or len(list(outside.iterdir())) != 1:
            outcome = "other:wrote outside the store"
            (outside / "victim").write_bytes(VICTIM)
        return outcome

    # The reproductions first, then hypothesis.
    for where, value in NAMED_CASES:
        outcome = run_case(1, where, ("set", value))
        if outcome is not None:
            outcomes.append(f"{'.'.join(where)}={value!r} => {outcome}")

    @settings(max_examples=examples, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(base=st.sampled_from([0, 1]), where=st.sampled_from(paths), edit=EDITS)
    def case(base: int, where: tuple[str, ...], edit: tuple[str, object]) -> None:
        outcome = run_case(base, where, edit)
        if outcome is not None:
            outcomes.append(f"{'.'.join(where)} {edit[0]} {edit[1]!r} => {outcome}")

    case()
    return outcomes


# -- sparse files ----------------------------------------------------------------------------------

def sparse_store(base: Path, target: Path, *, row_slots: int | None = None, stack_size: int | None = None) -> None:
    """``base`` copied to ``target`` with its header asking for ``row_slots`` or ``stack_size`` (and
    frame slots to match), every file it sizes extended to that size without
    writing a block (the committed priorities moved to where the larger tree keeps them): a store of
    a few KiB on disk that passes every check of its files' sizes. ``OSError`` (EFBIG) where the file
    system cannot hold files that large."""
    from mmreplay.disk import header
    from mmreplay.sampling.sum_tree import tree_size

    shutil.copytree(base, target)
    document = json.loads((target / "header.json").read_text())
    layout, commit = document["layout"], document["commit"]
    old_slots = layout["row_slots"]
    if row_slots is not None:  # the capacity stays: the same steps are stored, with the same priorities
        layout["row_slots"] = row_slots
    if stack_size is not None:
        layout["stack_size"] = stack_size
        commit["frame_slots"] = max(commit["frame_slots"], stack_size + 1)
    tree = target / "priorities.tree"
    if tree.exists():
        old_size, size = tree_size(old_slots), tree_size(layout["row_slots"])
        data = tree.read_bytes()
        with open(tree, "r+b") as file:
            file.truncate(0)
            file.truncate(48 * size + 32 + 16 * layout["row_slots"])
            file.seek(8 * size)
            file.write(data[8 * old_size : 16 * old_size])
    body = {key: value for key, value in document.items() if key != "checksum"}
    body["checksum"] = zlib.crc32(json.dumps(body, sort_keys=True).encode())
    (target / "header.json").write_text(json.dumps(body))
    # Rows and entries of format version 5 are as wide as the ring's slots need: laid out and sized by the
    # new header (next_delta's width follows row_slots; the checksum covers the bytes after it, unchanged).
    old_rows = np.fromfile(base / header.TRANSITIONS_NAME, store_files.rows_dtype(base))
    rows_dtype = store_files.rows_dtype(target)
    rows = np.zeros(len(old_rows), rows_dtype)
    for name in rows_dtype.names or ():
        if name == "next_delta":
            width = rows_dtype["next_delta"].itemsize
            deltas = read_uint(old_rows, name)
            rows[name] = (deltas if rows_dtype[name].subdtype is None else
                          np.frombuffer(b"".join(write_uint(d, width) for d in deltas.tolist()), np.uint8)
                          .reshape(len(rows), width))
        else:
            rows[name] = old_rows[name]
    transitions = target / header.TRANSITIONS_NAME
    rows.tofile(transitions)
    os.truncate(transitions, rows_dtype.itemsize * layout["row_slots"])
    table = target / header.frame_table_name(commit["frame_table_generation"])
    os.truncate(table, store_files.entry_format(target).size * commit["frame_slots"])


SPARSE_CASES = [
    *((f"{kind} row_slots=2**{bits}", kind, {"row_slots": 2**bits})
      for kind in ("uniform", "prioritized") for bits in (16, 24, 28, 32, 36, 40)),
    *((f"uniform stack_size=2**{bits}", "uniform", {"stack_size": 2**bits}) for bits in (12, 20, 24)),
]


def sparse_cases(root: Path) -> list[str]:
    """Stores whose header asks for large rings in sparse files: opened, read, sampled, verified and
    appended to within the bound, or refused with a library error (``StoreLimitError``)."""
    # Plain frames: given a larger stack_size (and frame_slots to match), a plain store still reads, where a
    # reference store fails its frames' checksums (a library error too, but not the sizes these cases test).
    bases = {"uniform": build_store(root / "uniform.mmr", prioritized=False, frame_encoding="lz4"),
             "prioritized": build_store(root / "prioritized.mmr", prioritized=True, frame_encoding="lz4")}
    outcomes = []
    for name, kind, sizes in SPARSE_CASES:
        target = root / "case.mmr"
        shutil.rmtree(target, ignore_errors=True)
        try:
            sparse_store(bases[kind], target, **sizes)
        except OSError as error:  # the file system's largest file is smaller
            outcomes.append(f"{name} => not made: {error.strerror}")
            continue
        outcomes.append(f"{name} => {run_forked(lambda: use_store(target))}")
    return outcomes


# -- HDF5 ------------------------------------------------------------------------------------------

def _export(root: Path, layout: str) -> Path:
    store_path = build_store(root / f"h5src-{layout}.mmr", prioritized=False)
    with ReplayStore.open(store_path) as store:
        target = root / ("export.h5" if layout == "mmreplay" else "export-v0")
        export_hdf5(store, target, layout=layout)
    return target if layout == "mmreplay" else target / "data" / "main_data.hdf5"


def _frames_dataset(layout: str) -> str:
    return "frames" if layout == "mmreplay" else "episode_0/observations"


def _replace(file: h5py.File, name: str, make: Callable[[h5py.Group, str], object]) -> None:
    parent, _, leaf = name.rpartition("/")
    group = file[parent] if parent else file
    del group[leaf]
    make(group, leaf)


def hdf5_edits(layout: str) -> dict[str, Callable[[h5py.File, Path], None]]:
    frames_name = _frames_dataset(layout)
    lengths = "episodes/length" if layout == "mmreplay" else "episode_0/rewards"

    def external_storage(file: h5py.File, root: Path) -> None:
        shape, dtype = file[frames_name].shape, file[frames_name].dtype
        _replace(file, frames_name, lambda g, n: g.create_dataset(n, shape=shape, dtype=dtype,
                                                                  external=[("/etc/passwd", 0, h5py.h5f.UNLIMITED)]))

    def external_link(file: h5py.File, root: Path) -> None:
        other = root / "other.h5"
        with h5py.File(other, "w") as o:
            o.create_dataset("x", data=file[frames_name][()])
        _replace(file, frames_name, lambda g, n: g.__setitem__(n, h5py.ExternalLink(str(other), "x")))

    def virtual(file: h5py.File, root: Path) -> None:
        other = root / "virtual-source.h5"
        data = file[frames_name][()]
        with h5py.File(other, "w") as o:
            o.create_dataset("x", data=data)
        vlayout = h5py.VirtualLayout(shape=data.shape, dtype=data.dtype)
        vlayout[...] = h5py.VirtualSource(str(other), "x", shape=data.shape)
        _replace(file, frames_name, lambda g, n: g.create_virtual_dataset(n, vlayout))

    def user_filter(file: h5py.File, root: Path) -> None:
        data = file[frames_name][()]

        def make(group: h5py.Group, name: str) -> None:
            plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            plist.set_chunk((1, *data.shape[1:]))
            plist.set_filter(32013, h5py.h5z.FLAG_OPTIONAL)  # a plugin's id (no plugin installed)
            space = h5py.h5s.create_simple(data.shape)
            h5py.h5d.create(group.id, name.encode(), h5py.h5t.NATIVE_UINT8, space, plist).write(
                h5py.h5s.ALL, h5py.h5s.ALL, data)

        _replace(file, frames_name, make)

    def huge_frames(file: h5py.File, root: Path) -> None:
        count = file[frames_name].shape[0]
        _replace(file, frames_name, lambda g, n: g.create_dataset(n, shape=(count, 8192, 8192), dtype=np.uint8,
                                                                  chunks=(1, 8192, 8192), compression="gzip"))
        file.attrs["frame_shape"] = np.array([8192, 8192])

    def huge_column(file: h5py.File, root: Path) -> None:
        dtype = file[lengths].dtype
        _replace(file, lengths, lambda g, n: g.create_dataset(n, shape=(2 * 10**9,), dtype=dtype, chunks=(16384,),
                                                              compression="gzip"))

    def attribute(name: str, value: object) -> Callable[[h5py.File, Path], None]:
        def edit(file: h5py.File, root: Path) -> None:
            file.attrs[name] = value
        return edit

    edits: dict[str, Callable[[h5py.File, Path], None]] = {
        "external storage": external_storage, "external link": external_link, "virtual dataset": virtual,
        "user filter": user_filter, "huge frames": huge_frames, "huge column": huge_column,
    }
    for name, value in [("action_dtype", "|O"), ("action_dtype", "V8"), ("action_dtype", "M8[s]"),
                        ("frame_shape", np.array([-1, 5])), ("frame_shape", np.array([0])),
                        ("stack_size", 10**9), ("stack_size", 0), ("num_envs", 0), ("num_envs", 2**40),
                        ("capacity", -1), ("format_version", "x"), ("action_shape", np.array([2**31])),
                        ("frame_shape", np.array([2**20, 2**20]))]:
        edits[f"attribute {name}={value!r}"] = attribute(name, value)
    if layout == "mmreplay":
        for column, value in [("length", -5), ("env_index", 7), ("frame_start", 10**6), ("transition_start", -1)]:
            def edit(file: h5py.File, root: Path, column: str = column, value: int = value) -> None:
                data = file["episodes"][column][()]
                data[0] = value
                file["episodes"][column][...] = data
            edits[f"episodes/{column}[0]={value}"] = edit
    return edits


def hdf5_cases(root: Path) -> list[str]:
    outcomes = []
    for layout in ("mmreplay", "minari"):
        source = _export(root, layout)
        for name, edit in hdf5_edits(layout).items():
            case = root / f"case-{layout}"
            shutil.rmtree(case, ignore_errors=True)
            case.mkdir()
            copy = case / source.name
            shutil.copy(source, copy)
            with h5py.File(copy, "r+") as file:
                edit(file, case)
            outcome = run_forked(lambda: import_hdf5(copy, case / "imported.mmr"))
            outcomes.append(f"{layout} {name} => {outcome}")
    return outcomes


# -- Dopamine --------------------------------------------------------------------------------------

def _npy_bytes(shape_text: str, descr: str = "|u1", payload: bytes = b"") -> bytes:
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}"
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + payload


def dopamine_cases(root: Path) -> list[str]:
    from mmreplay.dopamine import import_dopamine

    capacity = 8
    arrays = {"$store$_observation": np.zeros((capacity, 3, 4), np.uint8), "$store$_action": np.zeros(capacity, np.int32),
              "$store$_reward": np.zeros(capacity, np.float32), "$store$_terminal": np.zeros(capacity, np.uint8),
              "add_count": np.array(5), "invalid_range": np.array([4, 5, 6, 7, 0])}
    big = os.urandom(1 << 19)  # half a MB that gzip cannot shrink
    crafted = {
        "observation shape (-1,)": ("$store$_observation", _npy_bytes("(-1,)", payload=big)),
        "observation shape (-1, 3, 4)": ("$store$_observation", _npy_bytes("(-1, 3, 4)", payload=big)),
        "observation shape (2**40, 84, 84)": ("$store$_observation", _npy_bytes("(1099511627776, 84, 84)", payload=big)),
        "observation shape (8, 10**6, 10**6)": ("$store$_observation", _npy_bytes("(8, 1000000, 1000000)", payload=big)),
        "observation shape (0, 3, 4)": ("$store$_observation", _npy_bytes("(0, 3, 4)")),
        "observation shape (8, 0, 4)": ("$store$_observation", _npy_bytes("(8, 0, 4)")),
        "observation dtype object": ("$store$_observation", _npy_bytes("(8, 3, 4)", "|O", big)),
        "action shape (-1,)": ("$store$_action", _npy_bytes("(-1,)", "<i4", big)),
        "add_count shape (-1,)": ("add_count", _npy_bytes("(-1,)", "<i8", big)),
        "add_count shape (2**40,)": ("add_count", _npy_bytes("(1099511627776,)", "<i8", big)),
        "invalid_range shape (-1,)": ("invalid_range", _npy_bytes("(-1,)", "<i8", big)),
        "invalid_range shape (10**10,)": ("invalid_range", _npy_bytes("(10000000000,)", "<i8", big)),
    }
    outcomes = []
    for name, (array, content) in crafted.items():
        folder = root / "dopamine"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for key, value in arrays.items():
            with gzip.open(folder / f"{key}_ckpt.1.gz", "wb") as out:
                if key == array:
                    out.write(content)
                else:
                    np.save(out, value, allow_pickle=False)
        target = root / "dopamine.mmr"
        shutil.rmtree(target, ignore_errors=True)
        outcomes.append(f"{name} => {run_forked(lambda: import_dopamine(folder, target))}")
    return outcomes


def main(argv: list[str]) -> None:
    kind = argv[0]
    # Sparse files as large as a header may ask for fit a tmpfs (ext4 stops at 16 TiB), and cost nothing.
    shm = "/dev/shm" if kind == "sparse" and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="mmreplay-hostile-", dir=shm) as directory:
        root = Path(directory)
        if kind == "headers":
            outcomes = header_cases(root, int(argv[1]) if len(argv) > 1 else 150)
        elif kind == "hdf5":
            outcomes = hdf5_cases(root)
        elif kind == "sparse":
            outcomes = sparse_cases(root)
        else:
            outcomes = dopamine_cases(root)
    print(json.dumps({"kind": kind, "bound_bytes": BOUND, "cases": outcomes,
                      "counts": collections.Counter(map(outcome_kind, outcomes))}))


def outcome_kind(outcome: str) -> str:
    """``ok``, ``library:<Class>``, ``other:<Class>`` or ``signal:<NAME>`` of a case's outcome line."""
    text = outcome.split(" => ")[-1]
    return text if text == "ok" else ":".join(text.split(":", 2)[:2]).split(" ")[0]


if __name__ == "__main__":
    main(sys.argv[1:])
