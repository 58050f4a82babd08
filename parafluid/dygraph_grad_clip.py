"""``fluid.dygraph_grad_clip``: gradient clipping for the imperative mode.

Names not provided (yet) import as stand-ins that fail on use (``parafluid.compat``).
"""

from __future__ import annotations

__all__: list[str] = []


def __getattr__(name: str) -> object:
    from .compat import missing_attribute

    return missing_attribute("dygraph_grad_clip", name, __all__)
