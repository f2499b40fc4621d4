"""Writing a store: the writer (``writer``: the add paths, ``add_encoded``, ``update_priorities``, the
writer lock), its commits and room (``committer``), when it commits by itself (``autocommit``), a new
store's files (``creation``), ``add``'s argument checks (``add_arguments``), what an add writes, planned
before the write (``add_plans``), each env's episode in progress (``env_episodes``), ``add_encoded``'s
sends (``encoded_adds``) and priority updates (``priority_updates``). It may import the store's reading
family and what that may; never the feeds, nor the façade.
"""
