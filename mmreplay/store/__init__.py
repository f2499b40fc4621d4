"""The store: ``ReplayStore``, the public face that opens a store and adds, samples and reads through it.

``replay_store`` is the façade, over one collaborator chosen when the store opens (``role``): a
``writer`` (mode ``"r+"``: the add paths, with ``committer`` for commits and room) or a ``follower``
(mode ``"r"``: following the writer's commits). Beside them: ``mapped_files`` (the files one open store
maps), ``reads`` (sample, read and episodes as one consistent read), ``stored_steps``, ``creation`` (a new
store's files), ``add_arguments`` and ``env_episodes`` (what an add writes), ``encoded_adds``
(``add_encoded``), ``autocommit`` (when a writer commits by itself), ``reading`` (rows, stacks and pixels
into batches), ``encoded_batches``, ``prefetch``, ``passes`` (ordered passes, whole episodes) and
``episode_list``. It may import ``disk``, ``rows``, ``frames``, ``sampling`` and the base modules;
serialization, the command line and the integrations import it, never the other way round.
"""

from mmreplay.store.replay_store import ReplayStore

__all__ = ["ReplayStore"]
