"""The PyTorch side of mmreplay: batches handed to a learner as tensors on its device.

Nothing here is imported until ``ReplayStore.batches(..., device=...)`` asks for it, and torch only then:
mmreplay itself needs neither torch nor a GPU. ``devices`` parses the device and imports torch,
``staging`` lays out a batch's arrays in one block of (page-locked) host memory and its device copy,
``tensor_batches`` holds the records the learner receives. Decoding on the GPU, where NVIDIA's nvCOMP is
installed: ``block_plan`` (where each stored block goes, on the host), ``crc_parity`` (the frames'
CRC-32 checked as a parity matrix product), ``nvcomp_lz4`` and ``nvcomp_crc32`` (the library's batched
LZ4 decoder and CRC-32 kernel through its C API) and ``device_decode`` (them together on a CUDA stream).
"""
