"""``fluid.layers.metric_op``: Fluid 1.6's module of the metric layers ``accuracy`` and ``auc``.

Example::

    from parafluid.layers.metric_op import accuracy
    acc = accuracy(input=prob, label=label, k=1)
"""

from __future__ import annotations

from .loss import accuracy, auc

__all__ = ["accuracy", "auc"]
