"""The base of ``fluid.dygraph.nn``'s layer classes: a ``Layer`` whose forward is one
``fluid.layers`` function, the parameters that function asks for made on the first call and
handed back on every later one (``layer_helper.parameter_source``).

Example::

    class Scale(FunctionLayer):
        _param_names = ("weight",)
        def forward(self, x):
            return self._call_function(fluid.layers.prelu, x, "all")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..framework import Variable
from ..layer_helper import parameter_source
from ..param_attr import WeightNormParamAttr
from .layers import Layer, _on_build

__all__ = ["FunctionLayer"]


class FunctionLayer(Layer):
    """A Layer whose forward is one ``fluid.layers`` function; ``_param_names`` are the
    attribute names of the parameters it makes, in the order the function asks for them."""

    _param_names: tuple[str, ...] = ("weight", "bias")
    # Fluid 1.6's private attribute names of these parameters (``fc._w``,
    # ``conv._filter_param``) that programs read: aliases of ``_param_names``
    _fluid_names: dict[str, str] = {}
    # parameters that read as None once the first call has made none (``bias_attr=False``),
    # as the properties of Fluid 1.6's layers that have them
    _optional: tuple[str, ...] = ()
    # the function of a one-input layer whose keywords are ``_args`` (the default forward)
    _function: Callable[..., Any]

    def __getattr__(self, name: str) -> Any:
        alias = type(self)._fluid_names.get(name)
        target = alias if alias is not None else name
        try:
            return super().__getattr__(target)
        except AttributeError:
            if target in type(self)._optional and self.__dict__.get("_supplied") is not None:
                return None
            raise

    def __init__(self, name_scope: str | None, dtype: Any = "float32") -> None:
        super().__init__(name_scope, dtype)
        self._supplied: list[Any] | None = None

    def forward(self, input: Variable) -> Variable:  # noqa: A002
        return self._call_function(type(self)._function, input, **self._args)

    def _call_function(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        first = self._supplied is None
        made: list[Any] = []
        queue = [] if first else list(self._supplied)  # type: ignore[arg-type]

        def source(attr: Any, shape: list[int], dtype: Any, is_bias: bool,
                   default_initializer: Any) -> Any:
            if isinstance(attr, WeightNormParamAttr):
                raise ValueError(f"{type(self).__name__} {self.full_name()}: a "
                                 f"WeightNormParamAttr makes a computed weight, not a "
                                 f"parameter the layer object can hold; use ParamAttr")
            if first:
                p = self.create_parameter(attr, shape, dtype, is_bias, default_initializer)
                made.append(p)
                if p is not None:  # as Layer does for the parameters of _build_once
                    _on_build([p])
                return p
            if not queue:
                raise ValueError(f"{type(self).__name__} {self.full_name()}: "
                                 f"{fn.__name__} asks for more parameters than its first "
                                 f"call made ({len(self._supplied or [])})")
            p = queue.pop(0)
            if p is not None and list(p.shape) != list(shape):
                raise ValueError(f"{type(self).__name__} {self.full_name()}: parameter "
                                 f"{p.name!r} has shape {list(p.shape)} but this input needs "
                                 f"{list(shape)}: call a layer object only on inputs of the "
                                 f"shape it was first called with")
            return p

        with parameter_source(source):
            out = fn(*args, **kwargs)
        if first:
            self._supplied = made
            for i, p in enumerate(made):
                if p is None:
                    continue
                name = self._param_names[i] if i < len(self._param_names) else f"param_{i}"
                self.add_parameter(name, p)
        return out
