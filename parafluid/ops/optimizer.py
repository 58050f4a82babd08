"""Optimizer ops. Each updates its parameter in place and returns it as ``ParamOut``.

In-place updates are safe because every executor orders an op that rewrites a variable after
all readers of its previous value (the ParallelExecutor through write-after-read edges).
Sparse (SelectedRows) gradients update only their rows.
"""

from __future__ import annotations

from typing import Any

from ..scope import SelectedRows
from .registry import register_op, same_as


def _sgd(ins: dict, attrs: dict, ctx: Any) -> dict:
    param, grad, lr = ins["Param"], ins["Grad"], ins["LearningRate"]
    if isinstance(grad, SelectedRows):
        param.index_add_(0, grad.rows, grad.value, alpha=-float(lr))
    else:
        param.addcmul_(grad, lr, value=-1.0)
    return {"ParamOut": param}


register_op("sgd", inputs=("Param", "Grad", "LearningRate"), outputs=("ParamOut",),
            infer_shape=same_as("Param", "ParamOut"), kernel=_sgd)
