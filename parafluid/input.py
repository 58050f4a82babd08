"""``fluid.input``: the module where Fluid 1.6 defines ``fluid.embedding`` and
``fluid.one_hot`` (the layers without the ``[-1, 1]`` trailing-dimension convention)."""

from __future__ import annotations

from .data_layer import embedding, one_hot

__all__ = ["one_hot", "embedding"]
