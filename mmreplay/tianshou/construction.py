"""The arguments an mmreplay Tianshou buffer is built with, checked before anything is made, and the
frames object it gets; the options of Tianshou's that the stores make unneeded are refused, with why."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mmreplay.tianshou.buffer_frames import BufferFrames
from mmreplay.tianshou.frame_stores import FrameStores, prepare_directory
from mmreplay.validation import parse_number, parse_positive_int

# Tianshou's memory options, and why a buffer over stores takes none of them.
REFUSED_OPTIONS = {
    "ignore_obs_next": "the stores keep each frame once and obs_next exact at every slot (Tianshou's option "
    "hands out the episode's last obs again at its end)",
    "save_only_last_obs": "the stores keep each frame once already; pass stack_size= for frame stacks",
}


def parse_sizes(total_size: object, buffer_num: object) -> tuple[int, int]:
    total = parse_positive_int(total_size, "total_size")
    number = parse_positive_int(buffer_num, "buffer_num")
    return total, number


def check_tianshou_options(owner: str, options: dict[str, Any]) -> None:
    """Refuse Tianshou's ``stack_num`` above 1 and its memory options (``ValueError``, naming why)."""
    for name, why in REFUSED_OPTIONS.items():
        if options.get(name):
            raise ValueError(f"{owner} takes no {name}=True: {why}")
    stack_num = options.get("stack_num", 1)
    if stack_num != 1:
        raise ValueError(
            f"{owner} takes stack_num=1 only; got stack_num={stack_num!r}: frame stacks come from the env "
            "(FrameStackObservation) and are stored frame by frame: pass stack_size= their depth"
        )


def build_frames(
    path: object,
    *,
    maxsize: int,
    buffer_num: int,
    size: int,
    stack_size: object,
    frame_encoding: str | None,
    if_exists: str,
    commit_interval_s: float | None,
) -> BufferFrames:
    """The frames of a new buffer: its directory checked (``if_exists``), its stores made at the first add."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike naming the buffer's directory; got {type(path).__name__}")
    depth = parse_positive_int(stack_size, "stack_size")
    if commit_interval_s is not None:
        commit_interval_s = parse_number(commit_interval_s, "commit_interval_s", low=0.0)
    directory = Path(os.path.realpath(os.fspath(path)))
    prepare_directory(directory, if_exists)
    stores = FrameStores(
        directory, buffer_num=buffer_num, size=size, stack_size=depth, frame_encoding=frame_encoding,
        commit_interval_s=commit_interval_s,
    )
    return BufferFrames(maxsize, stores)
