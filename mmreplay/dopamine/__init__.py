"""Dopamine replay checkpoints (the DQN Replay Dataset) into a store: ``import_dopamine``.

``checkpoints`` reads and checks the files, ``episodes`` rebuilds episodes from Dopamine's slots,
``importing`` writes the store.
"""

from mmreplay.dopamine.importing import STACK_PADDINGS, import_dopamine

__all__ = ["STACK_PADDINGS", "import_dopamine"]
