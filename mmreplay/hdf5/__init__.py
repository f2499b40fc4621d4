"""HDF5 datasets: ``export_hdf5`` and ``import_hdf5``, in two layouts (``LAYOUTS``).

``conversion`` exports and imports; ``mmreplay_layout`` and ``minari_layout`` are the two layouts,
``datasets`` what they share, ``checks`` what an input may hold, ``replay`` the order transitions are
replayed in. These are the only modules of the package that import h5py.
"""

from mmreplay.hdf5.conversion import LAYOUTS, export_hdf5, import_hdf5

__all__ = ["LAYOUTS", "export_hdf5", "import_hdf5"]
