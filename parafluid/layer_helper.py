"""LayerHelper: what every layer function uses to create parameters, outputs and ops."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from . import unique_name
from .framework import (
    Parameter,
    Variable,
    default_main_program,
    default_startup_program,
    in_dygraph_mode,
)
from .initializer import Constant, Xavier
from .param_attr import ParamAttr, WeightNormParamAttr

__all__ = ["LayerHelper", "parameter_source"]

# NOTE: while a fluid.dygraph layer object (dygraph/nn.py) calls the fluid.layers function
# of its name, the parameters that function asks for come from the object (made on its first
# call, the same ones on every later call): one implementation of each layer for both.
# An entry None lets the source itself create parameters the ordinary way.
_PARAMETER_SOURCES: list[Callable[..., Any] | None] = []


@contextlib.contextmanager
def parameter_source(source: Callable[..., Any]) -> Iterator[None]:
    """Within the ``with`` body, ``LayerHelper.create_parameter(attr, shape, dtype, is_bias,
    default_initializer)`` returns ``source(attr, shape, dtype, is_bias,
    default_initializer)`` instead of creating a parameter (``attr`` False still gives
    None)."""
    _PARAMETER_SOURCES.append(source)
    try:
        yield
    finally:
        _PARAMETER_SOURCES.pop()


# NOTE: a WeightNormParamAttr parameter is built of layers (``w = g * v / norm(v)``), so its
# maker lives in layers/weight_norm.py, which registers it here when the layers load (the
# layers use this helper; it never imports them).
_WEIGHT_NORM: Callable[..., Variable] | None = None


def register_weight_norm(maker: Callable[..., Variable]) -> None:
    """Install ``maker(helper, attr, shape, dtype, is_bias, default_initializer)``: the
    parameter ``create_parameter`` returns for a ``WeightNormParamAttr``."""
    global _WEIGHT_NORM
    _WEIGHT_NORM = maker


class LayerHelper:
    """Names a layer instance (``fc_0``) and appends its parameters and ops."""

    def __init__(self, layer_type: str, **kwargs: Any) -> None:
        self.layer_type = layer_type
        self.kwargs = kwargs
        name = kwargs.get("name")
        self.name = name if name is not None else unique_name.generate(layer_type)

    @property
    def main_program(self) -> Any:
        return default_main_program()

    @property
    def startup_program(self) -> Any:
        return default_startup_program()

    def append_op(self, *args: Any, **kwargs: Any) -> Any:
        return self.main_program.current_block().append_op(*args, **kwargs)

    # ---- inputs
    def multiple_input(self, input_param_name: str = "input") -> list[Variable]:
        inputs = self.kwargs.get(input_param_name)
        if isinstance(inputs, Variable):
            return [inputs]
        if isinstance(inputs, (list, tuple)) and inputs and \
                all(isinstance(i, Variable) for i in inputs):
            return list(inputs)
        raise TypeError(f"{self.layer_type}: {input_param_name} must be a Variable or a list of "
                        f"Variables, got {type(inputs).__name__}")

    def input(self, input_param_name: str = "input") -> Variable:
        inputs = self.multiple_input(input_param_name)
        if len(inputs) != 1:
            raise ValueError(f"{self.layer_type}: expected one {input_param_name}, "
                             f"got {len(inputs)}")
        return inputs[0]

    def input_dtype(self, input_param_name: str = "input") -> str:
        dtypes = {v.dtype for v in self.multiple_input(input_param_name)}
        if len(dtypes) != 1:
            raise TypeError(f"{self.layer_type}: inputs have different dtypes {sorted(dtypes)}")
        return dtypes.pop()

    @property
    def param_attr(self) -> Any:
        return ParamAttr._to_attr(self.kwargs.get("param_attr"))

    @property
    def bias_attr(self) -> Any:
        return ParamAttr._to_attr(self.kwargs.get("bias_attr"))

    def iter_inputs_and_params(self, input_param_name: str = "input") -> Any:
        inputs = self.multiple_input(input_param_name)
        attrs = self.kwargs.get("param_attr")
        if isinstance(attrs, (list, tuple)):
            if len(attrs) != len(inputs):
                raise ValueError(f"{self.layer_type}: {len(inputs)} inputs but "
                                 f"{len(attrs)} param_attr entries")
            attrs = [ParamAttr._to_attr(a) for a in attrs]
        else:
            first = ParamAttr._to_attr(attrs)
            # Several inputs with one named ParamAttr would share a name: suffix it.
            attrs = [first] + [
                type(first)(**{**vars(first), "name": None if first.name is None
                               else f"{first.name}_{i}"}) if first else first
                for i in range(1, len(inputs))]
        return zip(inputs, attrs)

    # ---- creation
    def create_parameter(self, attr: Any, shape: list[int], dtype: Any, is_bias: bool = False,
                         default_initializer: Any = None) -> Parameter | None:
        """Create a parameter in the main program and its initializer in the startup program."""
        if attr is False:
            return None
        if _PARAMETER_SOURCES and _PARAMETER_SOURCES[-1] is not None:
            source = _PARAMETER_SOURCES[-1]
            _PARAMETER_SOURCES.append(None)
            try:
                return source(attr, list(shape), dtype, is_bias, default_initializer)
            finally:
                _PARAMETER_SOURCES.pop()
        attr = ParamAttr._to_attr(attr)
        for d in shape:
            if not isinstance(d, int) or d <= 0:
                raise ValueError(f"{self.layer_type} {self.name}: parameter shape must be "
                                 f"positive ints, got {list(shape)} (is an input dim unknown?)")
        if isinstance(attr, WeightNormParamAttr):
            if _WEIGHT_NORM is None:
                raise RuntimeError(f"{self.layer_type}: WeightNormParamAttr needs "
                                   "parafluid.layers (import parafluid)")
            return _WEIGHT_NORM(self, attr, shape, dtype, is_bias, default_initializer)
        kwargs = attr._to_kwargs()
        if kwargs["name"] is None:
            kwargs["name"] = unique_name.generate(f"{self.name}.{'b' if is_bias else 'w'}")
        init = attr.initializer or default_initializer or (Constant(0.0) if is_bias else Xavier())
        startup_block = self.startup_program.global_block()
        if in_dygraph_mode():  # the parameter holds its value: its initializer runs at once
            param = self.main_program.global_block().create_parameter(shape=shape, dtype=dtype,
                                                                      **kwargs)
            if param._value is None:  # a shared one (same ParamAttr name) keeps its value
                init(param, startup_block)
            return param
        if not startup_block.has_var(kwargs["name"]):
            svar = startup_block.create_var(name=kwargs["name"], shape=shape, dtype=dtype,
                                            persistable=True)
            init(svar, startup_block)
        return self.main_program.global_block().create_parameter(shape=shape, dtype=dtype,
                                                                 **kwargs)

    def create_variable_for_type_inference(self, dtype: Any = None,
                                           stop_gradient: bool = False) -> Variable:
        """A fresh temporary ``<layer>.tmp_<n>``; its shape is set by the op that writes it."""
        return self.main_program.current_block().create_var(
            name=unique_name.generate_with_ignorable_key(f"{self.name}.tmp"), dtype=dtype,
            stop_gradient=stop_gradient)

    create_tmp_variable = create_variable_for_type_inference

    def create_variable(self, **kwargs: Any) -> Variable:
        return self.main_program.current_block().create_var(**kwargs)

    def create_global_variable(self, persistable: bool = False, **kwargs: Any) -> Variable:
        kwargs.setdefault("name", unique_name.generate(f"{self.name}.global"))
        return self.main_program.global_block().create_var(persistable=persistable, **kwargs)

    def set_variable_initializer(self, var: Variable, initializer: Any) -> None:
        """Give a persistable non-parameter variable (a counter, a moving mean) a start value."""
        startup_block = self.startup_program.global_block()
        if in_dygraph_mode():
            initializer(var, startup_block)
            return
        if not startup_block.has_var(var.name):
            svar = startup_block.create_var(name=var.name, shape=var.shape, dtype=var.dtype,
                                            persistable=True)
            initializer(svar, startup_block)

    # ---- common tails of layers
    def append_bias_op(self, input_var: Variable, dim_start: int = 1,
                       dim_end: int | None = None) -> Variable:
        size = list(input_var.shape[dim_start:dim_end])
        bias_attr = self.bias_attr
        if not bias_attr:
            return input_var
        b = self.create_parameter(bias_attr, size, input_var.dtype, is_bias=True)
        out = self.create_variable_for_type_inference(input_var.dtype)
        self.append_op("elementwise_add", inputs={"X": [input_var], "Y": [b]},
                       outputs={"Out": [out]}, attrs={"axis": dim_start})
        return out

    def append_activation(self, input_var: Variable, act: Any = None,
                          use_cudnn: bool | None = None) -> Variable:
        """``act`` (a name or ``{"type": name, attrs...}``; default: the layer's ``act``
        argument) applied to ``input_var``; ``input_var`` itself when there is none. A
        ``fluid.dygraph.Layer``'s ``self._helper.append_activation(x, act="tanh")`` names it,
        as Fluid's layer-object helper takes it (``use_cudnn`` is accepted, for CUDA)."""
        if act is None:
            act = self.kwargs.get("act")
        if act is None:
            return input_var
        if isinstance(act, str):
            act = {"type": act}
        act = dict(act)
        act_type = act.pop("type")
        out = self.create_variable_for_type_inference(input_var.dtype)
        self.append_op(act_type, inputs={"X": [input_var]}, outputs={"Out": [out]}, attrs=act)
        return out
