"""``fluid.dataset``: Fluid's path of the Dataset family (``DatasetFactory``,
``InMemoryDataset``, ``QueueDataset``); its home is ``parafluid/dataio/dataset.py``."""

from __future__ import annotations

from .dataio import dataset as _home
from .dataio.dataset import *  # noqa: F403
from .dataio.dataset import __all__  # noqa: F401


def __getattr__(name: str) -> object:
    return getattr(_home, name)  # the home's other names (and its error for unknown ones)
