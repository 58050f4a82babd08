"""Weight normalization (``fluid.WeightNormParamAttr``): the parameter a layer gets is
``w = g * v / norm(v)``, built of layers, so it lives here; ``LayerHelper.create_parameter``
calls it through ``layer_helper.register_weight_norm`` (the helper never imports the
layers).

Example::

    fc = fluid.layers.fc(x, size=4, param_attr=fluid.WeightNormParamAttr(dim=None))
"""

from __future__ import annotations

from typing import Any

from .. import unique_name
from ..framework import Variable, program_guard
from ..initializer import Constant
from ..layer_helper import LayerHelper, register_weight_norm
from ..param_attr import ParamAttr, WeightNormParamAttr
from .nn import elementwise_div, elementwise_mul
from .ops import sqrt, square
from .tensor import assign, reduce_sum, reshape

__all__: list[str] = []  # no layer of its own: fluid.WeightNormParamAttr reaches it


def weight_normalized_parameter(helper: LayerHelper, attr: WeightNormParamAttr,
                                shape: list[int], dtype: Any, is_bias: bool,
                                default_initializer: Any) -> Variable:
    """``w = g * v / norm(v)`` from parameters ``<name>_v`` (initialized as ``w`` would
    be) and ``<name>_g`` (set to ``norm(v)`` by the startup program)."""
    rank = len(shape)
    if attr.dim is not None and not -rank <= attr.dim < rank:
        raise ValueError(f"{helper.layer_type}: WeightNormParamAttr dim {attr.dim} is out of "
                         f"range for a parameter of shape {list(shape)}")
    dim = None if attr.dim is None else attr.dim % rank
    base = attr.name or unique_name.generate(f"{helper.name}.{'b' if is_bias else 'w'}")
    common = {k: v for k, v in vars(attr).items() if k not in ("dim", "name")}
    v = helper.create_parameter(ParamAttr(**{**common, "name": f"{base}_v"}), shape, dtype,
                                is_bias, default_initializer)
    g_shape = [shape[i] if i == dim else 1 for i in range(rank)]
    g = helper.create_parameter(ParamAttr(**{**common, "name": f"{base}_g",
                                             "initializer": Constant(1.0)}),
                                g_shape, dtype)
    axes = [i for i in range(rank) if i != dim]

    def norm(x: Variable) -> Variable:
        return reshape(sqrt(reduce_sum(square(x), dim=axes, keep_dim=True)), g_shape)

    startup = helper.startup_program.global_block()
    with program_guard(helper.startup_program, helper.startup_program):
        assign(norm(startup.var(v.name)), output=startup.var(g.name))
    return elementwise_mul(v, elementwise_div(g, norm(v)))


register_weight_norm(weight_normalized_parameter)
