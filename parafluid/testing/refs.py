"""Reference implementations of Fluid image and box semantics in NumPy loops, and the one-layer
program builder that op and layer tests share.

Example::

    from parafluid.testing.refs import adaptive_pool_ref
    want = adaptive_pool_ref(x, {"ksize": [2, 3], "pooling_type": "avg"})["Out"]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..executor import Executor
from ..framework import Program, program_guard
from ..layers import data
from ..place import CPUPlace
from ..scope import Scope

__all__ = ["to_torch", "adaptive_pool_ref", "lrn_ref", "build_layer", "run_built", "box_iou",
           "nms_pixels", "anchor_grid"]


def to_torch(a: Any) -> torch.Tensor:
    """A NumPy array (or nested list) as a torch tensor sharing its memory."""
    return torch.from_numpy(np.asarray(a))


def adaptive_pool_ref(X: np.ndarray, attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    """Fluid's adaptive bins written as loops: [floor(i*H/o), ceil((i+1)*H/o))."""
    oh, ow = attrs["ksize"]
    n, c, h, w = X.shape
    out = np.zeros((n, c, oh, ow), X.dtype)
    for i in range(oh):
        for j in range(ow):
            hs, he = (i * h) // oh, -(-((i + 1) * h) // oh)
            ws, we = (j * w) // ow, -(-((j + 1) * w) // ow)
            win = X[:, :, hs:he, ws:we]
            out[:, :, i, j] = win.max((2, 3)) if attrs["pooling_type"] == "max" \
                else win.mean((2, 3))
    return {"Out": out}


def lrn_ref(X: np.ndarray, attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    """Fluid's lrn: each channel scaled by (k + alpha * sum of squares over n channels)^-beta."""
    n_, k, alpha, beta = attrs["n"], attrs["k"], attrs["alpha"], attrs["beta"]
    c = X.shape[1]
    pre = (n_ - 1) // 2
    mid = np.full(X.shape, k, dtype=X.dtype)
    for ch in range(c):
        for j in range(ch - pre, ch - pre + n_):
            if 0 <= j < c:
                mid[:, ch] += alpha * X[:, j] ** 2
    return {"Out": X * mid ** -beta, "MidOut": mid}


def build_layer(fn: Callable[[Any], Any], shape: list[int],
                dtype: str = "float32") -> tuple[Program, Program, Any]:
    """Build ``fn(x)`` on a data variable ``x`` of ``shape``; return (main, startup, out)."""
    main, startup = Program(), Program()
    with program_guard(main, startup):
        x = data(name="x", shape=shape, dtype=dtype)
        out = fn(x)
    return main, startup, out


def run_built(main: Program, startup: Program, out: Any,
              feed: dict[str, Any]) -> tuple[Any, Scope]:
    """Run ``startup`` then ``main`` once on ``feed`` in a fresh scope; return (out, scope)."""
    exe, scope = Executor(CPUPlace()), Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=[out], scope=scope)[0], scope


def box_iou(a: np.ndarray, b: np.ndarray, normalized: bool = True) -> float:
    """Fluid's IoU of two [x1, y1, x2, y2] boxes; pixel boxes (``normalized=False``) count
    both ends, so their width is x2 - x1 + 1."""
    pixel = 0.0 if normalized else 1.0
    iw = max(min(a[2], b[2]) - max(a[0], b[0]) + pixel, 0)
    ih = max(min(a[3], b[3]) - max(a[1], b[1]) + pixel, 0)
    inter = iw * ih
    area = (a[2] - a[0] + pixel) * (a[3] - a[1] + pixel) + (b[2] - b[0] + pixel) * \
        (b[3] - b[1] + pixel)
    return inter / (area - inter)


def nms_pixels(boxes: np.ndarray, scores: np.ndarray, thr: float) -> list[int]:
    """Greedy NMS on pixel boxes, highest score first (ties in input order); kept indices."""
    kept: list[int] = []
    for i in np.argsort(-scores, kind="stable"):
        if all(box_iou(boxes[i], boxes[k], normalized=False) <= thr for k in kept):
            kept.append(i)
    return kept


def anchor_grid(h: int, w: int, sizes: list[float], stride: float) -> np.ndarray:
    """Square anchors of each size centred on every cell of an h x w grid: (h, w, k, 4)."""
    out = np.zeros((h, w, len(sizes), 4), "float32")
    for y in range(h):
        for x in range(w):
            for k, sz in enumerate(sizes):
                cx, cy = (x + 0.5) * stride, (y + 0.5) * stride
                out[y, x, k] = [cx - sz / 2, cy - sz / 2, cx + sz / 2, cy + sz / 2]
    return out
