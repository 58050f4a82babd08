"""Which ops automatic mixed precision runs in float16 (white), keeps in float32 (black),
or decides by their inputs (gray), as Fluid 1.6 lists them."""

from __future__ import annotations

import copy
from collections.abc import Iterable

__all__ = ["AutoMixedPrecisionLists"]

# Fast and numerically safe in float16.
white_list = {"conv2d", "matmul", "mul"}

# Need float32's range or precision (reductions, exponentials, losses).
black_list = {"exp", "square", "log", "mean", "sum", "cos_sim", "softmax",
              "softmax_with_cross_entropy", "sigmoid_cross_entropy_with_logits",
              "cross_entropy", "cross_entropy2"}

# Float16 after a white op, float32 after a black one.
gray_list = {"elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div",
             "elementwise_max", "elementwise_min", "elementwise_pow", "elementwise_mod",
             "elementwise_floordiv", "batch_norm", "tanh", "sigmoid", "lookup_table", "top_k",
             "pool2d", "pool3d", "dropout", "relu", "relu6", "leaky_relu", "soft_relu",
             "flatten2", "stack", "unstack", "uniform_random_batch_size_like",
             "gaussian_random", "gaussian_random_batch_size_like", "slice", "rank", "scale",
             "transpose2", "reshape2", "gather", "fill_constant",
             "get_tensor_from_selected_rows", "sign", "cast"}

# Ops whose torch kernels have no float16 version on the CPU: they always run in float32
# (with casts around them), whatever the lists say. torch's CPU average 3-D pooling has no
# float16 kernel; the other ops of the lists above run in float16.
cpu_float32_only = {"pool3d"}


class AutoMixedPrecisionLists:
    """The white, black and gray op lists, with the caller's changes.

    Args:
        custom_white_list: op types to run in float16 (taken out of the black/gray lists).
        custom_black_list: op types to keep in float32 (taken out of the white/gray lists).

    Example::

        lists = fluid.contrib.mixed_precision.AutoMixedPrecisionLists(
            custom_black_list=["tanh"])
        opt = fluid.contrib.mixed_precision.decorate(fluid.optimizer.SGD(0.1), amp_lists=lists)
    """

    def __init__(self, custom_white_list: Iterable[str] | None = None,
                 custom_black_list: Iterable[str] | None = None) -> None:
        self._custom_white_list = set(custom_white_list or ())
        self._custom_black_list = set(custom_black_list or ())
        self.white_list = copy.copy(white_list)
        self.black_list = copy.copy(black_list)
        self.gray_list = copy.copy(gray_list)
        self._update_list()

    def _update_list(self) -> None:
        both = sorted(self._custom_white_list & self._custom_black_list)
        if both:
            raise ValueError(f"AutoMixedPrecisionLists: ops {both} are in both the custom "
                             f"white list and the custom black list")
        for op_type in self._custom_white_list:
            self.black_list.discard(op_type)
            self.gray_list.discard(op_type)
            self.white_list.add(op_type)
        for op_type in self._custom_black_list:
            self.white_list.discard(op_type)
            self.gray_list.discard(op_type)
            self.black_list.add(op_type)
