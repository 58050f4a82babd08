"""``fluid.reader``: Fluid's path of the reader decorators (``batch``, ``shuffle``, ...) and of
the loader classes Fluid 1.6 defines in ``fluid/reader.py``. Their home is
``parafluid/dataio/`` (``reader.py``, ``dataloader.py``)."""

from __future__ import annotations

from .dataio import reader as _home
from .dataio.dataloader import DataLoader, DataLoaderBase, GeneratorLoader, PyReader  # noqa: F401
from .dataio.reader import *  # noqa: F403
from .dataio.reader import __all__  # noqa: F401


def __getattr__(name: str) -> object:
    return getattr(_home, name)  # the home's other names (and its error for unknown ones)
