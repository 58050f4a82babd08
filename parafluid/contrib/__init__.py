"""``fluid.contrib``: Fluid 1.6's contributed layers, decoders and tools.

Names not provided (yet) import as stand-ins that fail on use (``parafluid.compat``).
"""

from __future__ import annotations

__all__: list[str] = []

# -- recurrent units and their static functions ------------------------------------------
from .rnn_impl import BasicGRUUnit, BasicLSTMUnit, basic_gru, basic_lstm  # noqa: E402

__all__ += ["BasicGRUUnit", "BasicLSTMUnit", "basic_gru", "basic_lstm"]

# -- decoders, mixed precision, optimizer extensions, layers, statistics ----------------

# -- quantization, compression, HDFS, distributed helpers ---------------------------------


def __getattr__(name: str) -> object:
    from ..compat import missing_attribute

    return missing_attribute("contrib", name, __all__)
