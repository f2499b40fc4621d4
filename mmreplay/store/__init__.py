"""The store: ``ReplayStore``, the public face that opens a store and adds, samples and reads through it.

``replay_store`` is the façade, over one collaborator chosen when the store opens (``role``): the writer
(``writing/``, mode ``"r+"``: the add paths, commits and room) or a ``follower`` (mode ``"r"``: following
the writer's commits). Its families, in folders: ``reading/`` (the mapped files, the stored steps, the
transition reader, encoded batches, the episode list), ``writing/`` and ``feeds/`` (what ``batches()``
returns). Beside the façade: ``reads`` (sample, read and episodes as one consistent read),
``batch_source`` (the seam the feeds read through), ``passes`` (ordered passes, whole episodes),
``store_layout`` and ``internals`` (the tests' seam), ``damaged_store`` (a damaged store opened for what is
intact in it: what ``verify`` and ``salvage`` read through). Feeds import reading and the batch source, writing
imports reading, and reading no other part of the store (tests/test_layering.py). The store may import
``disk``, ``rows``, ``frames``, ``sampling``, ``gpu`` and the base modules; serialization, the command line
and the integrations import it, never the other way round.
"""

from mmreplay.store.damaged_store import DamagedStore
from mmreplay.store.reading.damage_scan import Damage, DamageScan
from mmreplay.store.replay_store import ReplayStore

__all__ = ["Damage", "DamageScan", "DamagedStore", "ReplayStore"]
