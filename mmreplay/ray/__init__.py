"""mmreplay on Ray: one replay sharded over actors, written by many acting processes, sampled exactly.

``pip install 'mmreplay[ray]'``. See ``sharded`` (the client and its sampling rules), ``draws`` (how the
client draws over its shards), ``shard_states`` (what it knows of them, from their answers), ``shard``
(the actor that owns one store), ``writer`` (the acting side) and ``rate_limit`` (Reverb's rate limiting).
"""

from mmreplay.extras import require

require("mmreplay.ray", extra="ray", modules=("ray",))

from mmreplay.ray.assembly import global_ids, split_ids  # noqa: E402  (after the check that names the extra)
from mmreplay.ray.rate_limit import RateLimit  # noqa: E402
from mmreplay.ray.sharded import ShardedReplay  # noqa: E402
from mmreplay.ray.writer import ShardWriter  # noqa: E402

__all__ = ["RateLimit", "ShardWriter", "ShardedReplay", "global_ids", "split_ids"]
