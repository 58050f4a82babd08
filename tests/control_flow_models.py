"""Model pieces shared by the control-flow gradient tests: parameters initialized from
given arrays, a tanh RNN cell, and a two-way branch written with IfElse or with masks."""

from collections.abc import Callable

import numpy as np

import parafluid as fluid

L = fluid.layers


def param_attr(params: dict[str, np.ndarray], name: str) -> fluid.ParamAttr:
    """A parameter called ``name`` initialized to ``params[name]``."""
    return fluid.ParamAttr(name=name,
                           initializer=fluid.initializer.NumpyArrayInitializer(params[name]))


def rnn_cell(params: dict[str, np.ndarray], x, h):
    """tanh(x wx + h wh + b), its weights taken from ``params``."""
    return L.fc(input=[x, h], size=3, act="tanh",
                param_attr=[param_attr(params, "wx"), param_attr(params, "wh")],
                bias_attr=param_attr(params, "b"))


def two_branches(cond, v, fc: Callable, dtype: str, control_flow: bool):
    """``fc(v, "a")`` where ``cond`` holds, ``fc(v, "b")`` elsewhere: an IfElse when
    ``control_flow``, else the same model as a masked sum of both branches."""
    if control_flow:
        ie = L.IfElse(cond)
        with ie.true_block():
            ie.output(fc(ie.input(v), "a"))
        with ie.false_block():
            ie.output(fc(ie.input(v), "b"))
        out, = ie()
        return out
    m = L.cast(cond, dtype)
    return L.elementwise_add(L.elementwise_mul(fc(v, "a"), m),
                             L.elementwise_mul(fc(v, "b"), L.scale(m, scale=-1.0, bias=1.0)))
