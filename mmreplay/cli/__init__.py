"""The ``mmreplay`` command line: inspect, check, draw, export and import stores.

``commands`` parses the arguments and runs each subcommand, ``verification`` is ``mmreplay verify``
(every transition decoded and checked against the tables), ``drawing`` is ``mmreplay show``'s contact
sheets and animations. It reaches stores through the public store API and datasets through ``hdf5`` and
``dopamine``, never through a store's files.
"""

from mmreplay.cli.commands import build_parser, main
from mmreplay.cli.verification import verify_store

__all__ = ["build_parser", "main", "verify_store"]
