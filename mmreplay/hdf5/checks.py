"""What an HDF5 input may hold before anything is read from it, and how files are closed whatever failed.

An HDF5 file can make its reader open other files: a dataset's *external storage* names raw files whose
bytes it serves (``/etc/passwd`` as pixels), an *external link* opens another HDF5 file, a *virtual
dataset* maps others, and a *user-defined filter* loads a plugin library. An import reads only the file
it was given: each of these is refused (``allow_external=True`` allows the first three). And since a tiny
file can declare huge datasets (unallocated chunks read as zeros), each dataset's declared bytes are
bounded by what its stored bytes can inflate to (deflate's most, ~1032:1) before any of it is read.

``close_file`` closes a file and every object it opened even where HDF5 fails to flush (a full disk):
an object id left open makes libhdf5's exit handler crash the interpreter.
"""

from __future__ import annotations

import h5py  # type: ignore[import-untyped]
import numpy as np

from mmreplay.errors import CorruptStoreError

# Filters every HDF5 build has (deflate, shuffle, fletcher32) and h5py's own lzf: no plugin is loaded.
BUILTIN_FILTERS = {h5py.h5z.FILTER_DEFLATE, h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_FLETCHER32, 32000}
MAX_INFLATION = 1100  # declared bytes per stored byte: deflate's ratio is at most about 1032:1
INFLATION_SLACK = 1 << 20  # small datasets: HDF5 may leave a dataset of fill values unallocated
READ_BLOCK_BYTES = 1 << 26  # frames are read at most this many bytes at a time (64 MiB)
# An imported layout's bounds, as a store header's (mmreplay.disk.header_parsing): a frame, an action, a count.
MAX_FRAME_BYTES = 1 << 30
MAX_ACTION_BYTES = 1 << 12
MAX_FIELD_BYTES = 1 << 24  # one transition's value of one user field (as header_fields)
MAX_SLOTS = 1 << 40
ACTION_KINDS = "biuf"
DATA_KINDS = "biufSU"  # numbers and fixed-length strings (variable-length strings too, below)


def check_input(file: h5py.File, name: str, *, allow_external: bool = False) -> None:
    """Refuse links and datasets that reach outside ``file``, plugin filters, non-numeric data and
    declared sizes that the stored bytes cannot hold; a ``CorruptStoreError`` naming the object."""
    problems: list[str] = []

    def visit(path: str, link: object) -> None:
        if isinstance(link, h5py.ExternalLink) and not allow_external:
            problems.append(f"{path} is an external link to {link.filename!r}:{link.path!r}")
        elif isinstance(link, h5py.HardLink):
            item = file.get(path)
            if isinstance(item, h5py.Dataset):
                problem = _dataset_problem(item, allow_external=allow_external)
                if problem:
                    problems.append(f"{path} {problem}")

    _visit_links(file, visit)
    if problems:
        raise CorruptStoreError(
            f"{name}: refused: {problems[0]} (an import reads only the file it is given)"
            + (f"; and {len(problems) - 1} more" if len(problems) > 1 else "")
        )


def _visit_links(group: h5py.Group, visit: object, prefix: str = "") -> None:
    """``visit(path, link)`` for every link under ``group``, without following external or soft links."""
    for key in group:
        link = group.get(key, getlink=True)
        path = f"{prefix}{key}"
        visit(path, link)  # type: ignore[operator]
        if isinstance(link, h5py.HardLink):
            item = group.get(key)
            if isinstance(item, h5py.Group):
                _visit_links(item, visit, path + "/")


def _dataset_problem(dataset: h5py.Dataset, *, allow_external: bool) -> str | None:
    plist = dataset.id.get_create_plist()
    external, virtual = plist.get_external_count() > 0, plist.get_layout() == h5py.h5d.VIRTUAL
    if external and not allow_external:
        name = plist.get_external(0)[0]
        return f"stores its data in an external file {name.decode(errors='replace')!r}"
    if virtual and not allow_external:
        return "is a virtual dataset (its data lies in other files)"
    for index in range(plist.get_nfilters()):
        code = plist.get_filter(index)[0]
        if code not in BUILTIN_FILTERS:
            return f"uses filter {code}, not one of HDF5's own (deflate, shuffle, fletcher32, lzf)"
    dtype = dataset.dtype
    plain = dtype.kind in DATA_KINDS or h5py.check_string_dtype(dtype) is not None
    if not plain or dtype.fields is not None or dtype.subdtype is not None:
        return f"has dtype {dtype}; expected numbers or strings"
    if external or virtual:
        return None  # allowed: its size is the other files'
    declared = int(np.prod(dataset.shape, dtype=np.float64)) * dtype.itemsize
    stored = dataset.id.get_storage_size()
    if declared > stored * MAX_INFLATION + INFLATION_SLACK:
        return f"declares shape {dataset.shape} ({declared} bytes) but stores {stored} bytes"
    return None


def close_file(file: h5py.File, name: str) -> None:
    """Close ``file`` and every object it opened; an ``OSError`` if HDF5 could not complete it."""
    try:
        file.close()
        return
    except Exception as error:  # h5py raises RuntimeError or OSError when the final flush fails
        failure = error
    try:
        if file.id.valid:
            for object_id in h5py.h5f.get_obj_ids(file.id, h5py.h5f.OBJ_ALL):
                while object_id.valid:
                    h5py.h5i.dec_ref(object_id)
    except Exception:  # closing what can be closed is all that is left to do
        pass
    raise OSError(f"{name}: HDF5 could not complete the file ({failure})") from None
