"""Rows: the fixed-size records stored per transition, and the index arithmetic over them.

The transition table (``transitions``), the user-field table beside it (``fields``), the checksum that
binds a row to its step (``checksums``), stacks rebuilt from episode links (``stacking``) and windows of one
env's episode for n-step returns and sequences (``episode_windows``). It may import the base modules and
``disk``; nothing of frames' codecs, sampling or the store.
"""
