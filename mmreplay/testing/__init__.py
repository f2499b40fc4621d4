"""Real ALE frame streams, recorded once and cached, for tests and benchmarks (as ``numpy.testing`` and
``torch.testing`` serve theirs).

``atari_frames`` records a game's observations with ALE the first time they are asked for and reads them
from a cache afterwards; ale-py, gymnasium and opencv (the ``demo`` extra) are imported only when a stream
is recorded. Nothing else in the package imports this family (``tests/test_layering.py``), and it imports
only the package's base modules.
"""
