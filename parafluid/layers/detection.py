"""``fluid.layers.detection``: Fluid 1.6's detection layers (``prior_box``, ``box_coder``,
``multiclass_nms``, ``yolov3_loss``, ...).

They are not provided yet: each name imports and fails on use with a ``NotProvidedError``
(see ``parafluid.compat.NOT_PROVIDED`` and docs/fluid_compat.md).

Example::

    from parafluid.layers.detection import prior_box   # imports; calling it says why not
"""

from __future__ import annotations

__all__: list[str] = []


def __getattr__(name: str) -> object:
    from .fluid_paths import resolve

    return resolve("detection", name)
