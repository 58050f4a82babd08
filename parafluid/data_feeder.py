"""``fluid.data_feeder``: Fluid's path of the DataFeeder; its home is
``parafluid/dataio/data_feeder.py``."""

from __future__ import annotations

from .dataio import data_feeder as _home
from .dataio.data_feeder import *  # noqa: F403
from .dataio.data_feeder import __all__  # noqa: F401


def __getattr__(name: str) -> object:
    return getattr(_home, name)  # the home's other names (and its error for unknown ones)
