"""Frames: how a store compresses, keeps and decodes its frames.

The lz4 codec of one frame per block (``lz4_codec``) and of frames compressed against an earlier one
(``reference_codec``), the rings of segment files and frame tables that hold them (``ring``,
``reference_ring``), the choice between the two made at create time (``encodings``), and the
compressed-frames wire format that crosses process boundaries (``wire``). It may import the base modules,
``disk`` (files, names) and ``rows.stacking`` (stack arithmetic); nothing of sampling or the store.
"""
