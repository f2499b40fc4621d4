"""The store's feeds: what ``ReplayStore.batches`` returns. The prefetch thread (``prefetch``), the
iterators of numpy batches (``batch_streams``), batches as tensors on a device: the slots a feed fills
in turn (``slots``), the thread, side stream and events, host decode (``device_batches``), and decode by
nvCOMP on the GPU (``device_decoded_feed``). A feed reaches the store only through its public properties
and the ``BatchSource`` it is given (``mmreplay.store.batch_source``), never the façade's private state.
"""
