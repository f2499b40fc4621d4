"""Reading a store: the files one open store maps (``mapped_files``), which steps are stored
(``stored_steps``), rows, stacks and pixels assembled into batches (``transition_reader``), encoded
batches (``encoded_batches``) and the episode list (``episode_list``). It may import ``disk``, ``rows``, ``frames``, ``sampling``, ``gpu`` and the base
modules; never the store's writing or feeds, nor its façade.
"""
