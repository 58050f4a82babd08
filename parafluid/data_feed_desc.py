"""``fluid.data_feed_desc``: Fluid's path of the DataFeedDesc; its home is
``parafluid/dataio/data_feed_desc.py``."""

from __future__ import annotations

from .dataio import data_feed_desc as _home
from .dataio.data_feed_desc import *  # noqa: F403
from .dataio.data_feed_desc import __all__  # noqa: F401


def __getattr__(name: str) -> object:
    return getattr(_home, name)  # the home's other names (and its error for unknown ones)
