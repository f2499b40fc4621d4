"""The frame encodings a benchmark's stores take, as its ``--encodings`` (or ``--frame-encoding``) names them:
``default`` (what ``ReplayStore.create`` picks: reference frames for uint8 frames of 64 bytes or more),
``lz4`` or ``lz4-reference``."""

from __future__ import annotations

import argparse

CHOICES = ("default", "lz4", "lz4-reference")


def parse_encodings(text: str) -> list[str]:
    """``--encodings``' comma-separated names, each one of CHOICES (argparse's ``type=``)."""
    names = text.split(",")
    for name in names:
        if name not in CHOICES:
            raise argparse.ArgumentTypeError(f"expected names of {', '.join(CHOICES)} separated by commas; got {name!r}")
    return names


def add_encodings_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--encodings", type=parse_encodings, default=["default"],
                        help="comma-separated frame encodings of the stores: default (the store's), lz4, lz4-reference")


def create_encoding(name: str) -> str | None:
    """``ReplayStore.create``'s ``frame_encoding`` for a name of CHOICES (None: its default)."""
    return None if name == "default" else name
