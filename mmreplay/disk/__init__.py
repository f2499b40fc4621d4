"""Disk: the files of a store, and how they change without losing anything.

File primitives (``files``: sparse files, block reservations, durable renames), the writer lock
(``writer_lock``), the header that commits and the store's file names (``header``), the header's fields
parsed with nothing trusted (``header_parsing``), all-or-nothing builds beside a target
(``atomic_builds``) and the atomic exchange of two directories behind ``clear()`` (``directory_swap``).
It may import the base modules only.
"""
