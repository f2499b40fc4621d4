"""``python -m mmreplay``: the same command line as ``mmreplay``."""

import sys

from mmreplay.cli import main

sys.exit(main())
