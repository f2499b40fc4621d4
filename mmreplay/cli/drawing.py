"""Drawing an episode's frames for ``mmreplay show``: a labelled contact sheet (PNG) or an animation (GIF).

Pillow is imported only here and only when drawing (``pip install 'mmreplay[show]'``). Frames are
single frames ``(N, H, W)`` or ``(N, H, W, 3)`` uint8; ``steps`` labels each with the step of the
transition whose obs ends with it (the last frame is the final next_obs: labelled ``final``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

GAP = 4  # pixels between contact-sheet cells (and around the sheet), so neighbouring frames never merge
BACKGROUND = 255  # white: Atari frames are mostly dark
LABEL_HEIGHT = 12  # a line of Pillow's default bitmap font under each cell
ALE_HZ = 60.0  # frames per second of the emulator; an agent step lasts frame_skip of them


def pillow() -> Any:
    try:
        from PIL import Image, ImageDraw  # noqa: PLC0415
    except ImportError:
        raise ImportError("show needs Pillow: pip install 'mmreplay[show]'") from None
    return Image, ImageDraw


def _rgb(frames: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    return np.repeat(frames[..., None], 3, axis=-1) if frames.ndim == 3 else frames


def contact_sheet(frames: npt.NDArray[np.uint8], labels: list[str], *, columns: int, scale: int) -> Any:
    """One image of ``frames`` in ``columns`` columns, each scaled by ``scale``, with gaps and labels."""
    image_module, draw_module = pillow()
    cells = _rgb(frames).repeat(scale, axis=1).repeat(scale, axis=2)
    columns = min(columns, len(cells))
    rows = -(-len(cells) // columns)
    height, width = cells.shape[1:3]
    cell_height = height + LABEL_HEIGHT
    sheet = np.full((GAP + rows * (cell_height + GAP), GAP + columns * (width + GAP), 3), BACKGROUND, np.uint8)
    origins = []
    for i, cell in enumerate(cells):
        row, column = divmod(i, columns)
        top, left = GAP + row * (cell_height + GAP), GAP + column * (width + GAP)
        sheet[top : top + height, left : left + width] = cell
        origins.append((left, top + height))
    image = image_module.fromarray(sheet)
    draw = draw_module.Draw(image)
    for (left, top), label in zip(origins, labels):
        draw.text((left + 1, top + 1), label, fill=(0, 0, 0))
    return image


def animation(frames: npt.NDArray[np.uint8], *, scale: int) -> list[Any]:
    image_module, _ = pillow()
    scaled = frames.repeat(scale, axis=1).repeat(scale, axis=2)
    return [image_module.fromarray(frame) for frame in scaled]


def save_animation(images: list[Any], path: Path, *, fps: float) -> None:
    # GIF delays are whole hundredths of a second (Pillow truncates milliseconds to them): round to the
    # nearest; browsers treat delays under 20 ms as 100 ms, so none is shorter.
    images[0].save(path, save_all=True, append_images=images[1:], loop=0, duration=max(2, round(100 / fps)) * 10)


def default_fps(frame_skip: int | None) -> float:
    """Real time for an Atari agent: 60 Hz over the frame skip (4, the usual one, when not known)."""
    return ALE_HZ / (frame_skip or 4)
