"""``python -m parafluid``: the same as the ``parafluid`` command (see ``parafluid.cli``)."""

import sys

from .cli import main

sys.exit(main())
