"""``fluid.input``: Fluid 1.6's module of the full-shape input layers ``one_hot`` (op
``one_hot_v2``) and ``embedding`` (op ``lookup_table_v2``); their home is ``data_layer``.

Example::

    import parafluid as fluid
    label = fluid.data(name="label", shape=[None], dtype="int64")
    onehot = fluid.input.one_hot(label, depth=10)
"""

from __future__ import annotations

from .data_layer import embedding, one_hot

__all__ = ["one_hot", "embedding"]
