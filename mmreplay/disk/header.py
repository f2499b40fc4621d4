"""The on-disk layout of a store: file names, magic bytes, format version, and the header that commits.

A store is a directory::

    header.json            the commit record (replaced atomically; everything else is only trusted
                           up to the counts it holds)
    transitions.tbl        the transition table: a ring of fixed-size rows, slot = step % row_slots
    fields.tbl             stores with user fields only: their ring of checksummed rows, slot = step % row_slots
    frames-<G>.idx         the frame table, generation G: a ring of fixed-size entries, slot = frame step % frame_slots
    frames/<K>.seg         frame segment K: compressed frames at byte positions [K * segment_bytes, (K+1) * segment_bytes)

All integers in the binary files are little-endian. The header is JSON with a CRC-32 of its own body,
so a torn or hand-edited header is detected instead of trusted.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mmreplay.disk.header_parsing import parse_commit_fields, parse_layout_fields
from mmreplay.disk.store_directory import StoreDirectory
from mmreplay.errors import CorruptStoreError, FormatVersionError, StoreNotFoundError

MAGIC = "mmreplay"
# 2: rows without oldest_delta (the frame chain gives it). 3: rows hold frame_lead (u4) for next_frame
# (u8) and a one-byte env in stores of at most 256 envs; frame entries a u2 length for frames of 84x84.
# 4: row flag 8 (DETACHED: a whole next_obs stack stored as given), which a version 3 reader would misread,
# and rows checked by a CRC-32 mixed with the step (mmreplay.rows.checksums) instead of a weighted byte sum.
# 5: denser rows and frame-table entries (next_delta in as few bytes as its links need, env packed with the
# flags; an entry's position as its low 32 bits and its links packed in one field: rows.transitions.row_dtype,
# frames.frame_entries.frame_entry), and a reference-encoded frame as its changed rows (frames.legacy_frames).
# 6: a reference-encoded frame as its changed units, compressed by stock lz4 calls (frames.reference_codec);
# everything else as version 5.
FORMAT_VERSION = 6
# Version 3 stores are read as they are (rows checked by their byte sum); they open read-only, since
# rows with a version 4 checksum would not match the version 3 header. Version 4 and 5 stores of plain
# frames open for appending too, and go on writing their version's rows, entries and frames; their
# reference frames open read-only (frames.legacy_frames decodes them; `mmreplay convert` writes them anew).
READABLE_VERSIONS = (3, 4, 5, 6)
WRITABLE_VERSIONS = (4, 5, 6)
# The first version whose reference frames a writer appends to.
REFERENCE_WRITABLE_VERSION = 6

HEADER_NAME = "header.json"
# A header holds a few hundred bytes plus ~100 a user field: one MiB bounds what opening reads.
MAX_HEADER_BYTES = 1 << 20
TRANSITIONS_NAME = "transitions.tbl"
FIELDS_NAME = "fields.tbl"
SEGMENTS_DIR = "frames"
LOCK_NAME = "writer.lock"

# How frames are compressed (``frame_encoding``): the names a header may give. A header without the
# field is "lz4", and a plain store's header leaves it out (byte for byte the header it always had).
FRAME_ENCODINGS = ("lz4", "lz4-reference")
_ENCODING_FIELDS = ("frame_encoding", "reference_scheme")  # of Layout, written for other encodings only
UINT8_FRAMES = np.dtype(np.uint8).str  # Layout.frame_dtype's default, left out of the header

# A user field: (name, shape, little-endian dtype string), in declaration order. A store without user
# fields leaves the header's "fields" key out (byte for byte the header it always had); version 3
# headers never have it.
FieldSpec = tuple[str, tuple[int, ...], str]


# How a stack at an episode start is padded (``stack_padding``): "first" repeats the episode's first frame
# (gymnasium's FrameStackObservation default), "zeros" pads with all-zero frames (Dopamine, batch_rl). A
# header without the field is "first", and a "first" store's header leaves it out.
STACK_PADDINGS = ("first", "zeros")


def frame_table_name(generation: int) -> str:
    return f"frames-{generation}.idx"


def segment_name(segment: int) -> str:
    return f"{segment:010d}.seg"


@dataclass(frozen=True)
class Layout:
    """What a store holds and how its files are sized; fixed at create time."""

    frame_shape: tuple[int, ...]
    capacity: int
    stack_size: int
    num_envs: int
    action_shape: tuple[int, ...]
    action_dtype: str
    row_slots: int
    segment_bytes: int
    sampler: dict[str, object]
    # "lz4" or "lz4-reference" (see frame_encoding); the latter's ReferenceScheme fields.
    frame_encoding: str = "lz4"
    reference_scheme: dict[str, int] | None = None
    # The frames' numpy dtype string, little-endian ("<f4", "|b1"); a header without it (every uint8
    # store's, byte for byte the header it always had, and every version 3 store's) holds uint8 frames.
    frame_dtype: str = UINT8_FRAMES
    # The user fields (see FieldSpec), kept in fields.tbl; empty for a store without any.
    fields: tuple[FieldSpec, ...] = ()
    stack_padding: str = "first"  # one of STACK_PADDINGS
    # The format version the store's files are written in (the header's own field, beside the layout's):
    # FORMAT_VERSION for a new store; an older store keeps its own.
    format_version: int = FORMAT_VERSION


@dataclass(frozen=True)
class Commit:
    """The committed counts: a reader trusts the files exactly up to these.

    ``transitions_added`` and ``frames_written`` are steps (never wrap); ``bytes_written`` is the
    never-wrapping byte position where the next frame goes; ``frame_tail`` is the oldest frame step
    that some stored transition still needs; ``sampler_state`` is what the sampler commits (for a
    prioritized sampler, the largest priority seen).
    """

    transitions_added: int
    frames_written: int
    bytes_written: int
    frame_tail: int
    frame_table_generation: int
    frame_slots: int
    sampler_state: dict[str, object]
    # The first step of the store's current epoch: ``clear()`` empties a store without renumbering, so
    # steps (``batch.index``) keep counting and none is reused; steps before it were removed by a clear.
    # A header without the field (every store never cleared: the header it always had) starts at 0.
    first_step: int = 0


def new_store(
    *,
    frame_shape: tuple[int, ...],
    capacity: int,
    stack_size: int,
    num_envs: int,
    action_shape: tuple[int, ...],
    action_dtype: np.dtype,
    sampler: dict[str, object],
    frame_dtype: np.dtype = np.dtype(np.uint8),
    format_version: int = FORMAT_VERSION,
) -> tuple[Layout, Commit]:
    """The layout and the empty commit of a new store, with its rings sized for ``capacity``."""
    frame_nbytes = int(np.prod(frame_shape)) * frame_dtype.itemsize
    # Row slack lets adds go on between commits without reusing a row that the last commit counts.
    slack = max(1024, 4 * num_envs, capacity // 8)
    layout = Layout(
        frame_shape=frame_shape,
        capacity=capacity,
        stack_size=stack_size,
        num_envs=num_envs,
        action_shape=action_shape,
        action_dtype=action_dtype.str,
        row_slots=capacity + slack,
        # Big enough to amortize files and small enough that the dead part of the oldest one is a small
        # share of the store; always room for a few incompressible frames.
        segment_bytes=max(1 << 20, min(capacity * 16, 1 << 28), 4 * frame_nbytes + 64),
        sampler=sampler,
        frame_dtype=frame_dtype.str,
        format_version=format_version,
    )
    # Episodes start with extra frames (an obs, or a stack): a few percent more frame slots than rows;
    # the frame table grows if episodes are shorter than that allows.
    frame_slots = (capacity + slack) * 21 // 20 + 2 * num_envs * (stack_size + 1) + 64
    commit = Commit(
        transitions_added=0,
        frames_written=0,
        bytes_written=0,
        frame_tail=0,
        frame_table_generation=0,
        frame_slots=frame_slots,
        sampler_state={},
    )
    return layout, commit


def _body_checksum(body: dict[str, object]) -> int:
    return zlib.crc32(json.dumps(body, sort_keys=True).encode())


def write_header(directory: StoreDirectory | Path, layout: Layout, commit: Commit) -> None:
    """Replace the header atomically: write a temporary file, fsync it, rename it over, fsync the directory
    (all relative to the store's directory descriptor: ``store_directory``)."""
    if not isinstance(directory, StoreDirectory):
        opened = StoreDirectory.open(directory)
        try:
            write_header(opened, layout, commit)
        finally:
            opened.close()
        return
    layout_fields = asdict(layout)
    del layout_fields["format_version"]  # the header's own field
    if layout.frame_encoding == "lz4":
        for name in _ENCODING_FIELDS:
            del layout_fields[name]
    if layout.frame_dtype == UINT8_FRAMES:
        del layout_fields["frame_dtype"]
    if not layout.fields:
        del layout_fields["fields"]
    if layout.stack_padding == "first":
        del layout_fields["stack_padding"]
    body = {
        "magic": MAGIC,
        "format_version": layout.format_version,
        "layout": layout_fields,
        "commit": {name: value for name, value in asdict(commit).items() if name != "first_step" or value},
    }
    text = json.dumps({**body, "checksum": _body_checksum(body)}, indent=1, sort_keys=True)
    temporary = HEADER_NAME + ".tmp"
    directory.unlink(temporary, missing_ok=True)  # left by a crash; never opened through a link
    with os.fdopen(directory.open_file(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    directory.replace(temporary, HEADER_NAME)
    directory.sync()


def open_store_directory(path: Path) -> StoreDirectory:
    """The directory of the store at ``path`` (``StoreDirectory.open``), or ``StoreNotFoundError`` saying
    why there is none."""
    try:
        return StoreDirectory.open(path)
    except NotADirectoryError:
        raise StoreNotFoundError(f"no mmreplay store at {str(path)!r}: it is a file, and a store is a "
                                 f"directory (holding {HEADER_NAME})") from None
    except FileNotFoundError:
        raise StoreNotFoundError(f"no mmreplay store at {str(path)!r}: the path does not exist") from None


def read_header(directory: StoreDirectory | Path) -> tuple[Layout, Commit]:
    """Read and check the header: magic and format version first, then its checksum, then its fields."""
    layout, commit, _ = read_versioned_header(directory)
    return layout, commit


def read_versioned_header(directory: StoreDirectory | Path) -> tuple[Layout, Commit, int]:
    """``read_header``, and the format version the header gives."""
    if not isinstance(directory, StoreDirectory):
        opened = open_store_directory(directory)
        try:
            return read_versioned_header(opened)
        finally:
            opened.close()
    path = directory.path / HEADER_NAME
    try:
        descriptor = directory.open_file(HEADER_NAME)
    except (FileNotFoundError, NotADirectoryError):
        raise StoreNotFoundError(f"no mmreplay store at {str(directory)!r} (missing {HEADER_NAME})") from None
    with os.fdopen(descriptor, "rb") as file:
        raw = file.read(MAX_HEADER_BYTES + 1)  # a sparse or huge header.json is never read whole
    if len(raw) > MAX_HEADER_BYTES:
        raise CorruptStoreError(f"{path}: header is larger than {MAX_HEADER_BYTES:,} bytes; not an mmreplay header")
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorruptStoreError(f"{path}: header is not valid JSON ({error})") from None
    if not isinstance(document, dict) or document.get("magic") != MAGIC:
        raise CorruptStoreError(f"{path}: not an mmreplay header (magic is not {MAGIC!r})")
    version = document.get("format_version")
    if version not in READABLE_VERSIONS:
        raise FormatVersionError(
            f"{path}: format version {version!r}; this mmreplay reads format versions "
            f"{' and '.join(map(str, READABLE_VERSIONS))}"
        )
    checksum = document.pop("checksum", None)
    if checksum != _body_checksum(document):
        raise CorruptStoreError(f"{path}: header checksum mismatch (the header was modified or torn)")
    layout_fields = parse_layout_fields(path, document.get("layout"))
    assert isinstance(version, int)
    layout = Layout(**layout_fields, format_version=version)  # type: ignore[arg-type]
    commit = Commit(**parse_commit_fields(path, document.get("commit"), layout_fields))  # type: ignore[arg-type]
    if layout.frame_encoding not in FRAME_ENCODINGS:
        known = ", ".join(repr(name) for name in FRAME_ENCODINGS)
        raise FormatVersionError(
            f"{path}: frame encoding {layout.frame_encoding!r}; this mmreplay reads frame encodings {known}"
        )
    if layout.stack_padding not in STACK_PADDINGS:
        raise FormatVersionError(f"{path}: stack padding {layout.stack_padding!r}; this mmreplay reads stack "
                                 f"paddings {', '.join(repr(name) for name in STACK_PADDINGS)}")
    assert isinstance(version, int)
    return layout, commit, version
