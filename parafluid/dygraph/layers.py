"""``fluid.dygraph.Layer``: the base class of imperative-mode models.

A Layer owns parameters and sublayers (found by attribute assignment, as Fluid 1.6's) and
computes ``forward``. It works in both modes: inside ``fluid.dygraph.guard()`` its ops run
at once; outside, ``forward`` appends ops to the current Program and ``create_parameter``
makes Program parameters with their initializers in the startup program.

Example::

    class MLP(fluid.dygraph.Layer):
        def __init__(self, name_scope):
            super().__init__(name_scope)
            self.w = self.create_parameter(attr=None, shape=[4, 2], dtype="float32")

        def forward(self, x):
            return fluid.layers.matmul(x, self.w)

    with fluid.dygraph.guard():
        mlp = MLP("mlp")
        y = mlp(fluid.dygraph.to_variable(np.ones([3, 4], "float32")))
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterator
from typing import Any

from .. import framework, unique_name
from ..framework import Parameter, Variable
from ..layer_helper import LayerHelper
from .varbase import _Eager

__all__ = ["Layer"]


def _camel_to_snake(name: str) -> str:
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


class Layer:
    """Parameters, sublayers and a ``forward``; ``layer(*inputs)`` calls ``forward``.

    Args:
        name_scope: the prefix of the layer's full name ``<name_scope>/<ClassName>_<n>``,
            which prefixes its parameters' names (None: the class name in snake case).
        dtype: the default dtype of the layer's parameters.
    """

    def __init__(self, name_scope: str | None = None, dtype: Any = "float32") -> None:
        if name_scope is None:
            scope = _camel_to_snake(type(self).__name__)
        elif isinstance(name_scope, str):
            # NOTE: Fluid 1.6's naming: "<name_scope>/<ClassName>_<n>", so that a sublayer
            # made with its parent's full_name() is named under it
            scope = f"{name_scope}/{type(self).__name__}"
        else:
            raise TypeError(f"{type(self).__name__}: name_scope must be a str, got "
                            f"{type(name_scope).__name__}")
        object.__setattr__(self, "_full_name", unique_name.generate(scope))
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_sub_layers", collections.OrderedDict())
        object.__setattr__(self, "_loaddict_holder", collections.OrderedDict())
        self._helper = LayerHelper(self._full_name, name=self._full_name)
        self._built = False
        self._dtype = dtype
        self.training = True

    # ---- names and modes
    def full_name(self) -> str:
        """The layer's unique name (``<name_scope>/<ClassName>_<n>``), the prefix of its
        parameters."""
        return self._full_name

    def train(self) -> None:
        """Training mode (dropout and batch norm in their training form)."""
        for layer in self._self_and_sublayers():
            object.__setattr__(layer, "training", True)
        tracer = framework._dygraph_tracer()
        if tracer is not None:
            tracer.train_mode()

    def eval(self) -> None:
        """Inference mode (``is_test`` ops: dropout passes through, batch norm uses its
        moving statistics)."""
        for layer in self._self_and_sublayers():
            object.__setattr__(layer, "training", False)
        tracer = framework._dygraph_tracer()
        if tracer is not None:
            tracer.eval_mode()

    # ---- parameters and variables
    def create_parameter(self, attr: Any, shape: list[int], dtype: Any = None,
                         is_bias: bool = False, default_initializer: Any = None) -> Parameter:
        """A parameter named ``<full_name>.w_<n>`` (``.b_<n>`` for a bias) unless ``attr``
        names it; in static mode its initializer goes to the startup program."""
        return self._helper.create_parameter(attr, list(shape), dtype or self._dtype, is_bias,
                                             default_initializer)

    def create_variable(self, name: str | None = None, persistable: bool | None = None,
                        dtype: Any = None, type: str = "lod_tensor") -> Variable:
        """A variable ``<full_name>.<name>`` (a generated name if ``name`` is None)."""
        if name is not None:
            var_name = f"{self._full_name}.{name}"
        else:
            var_name = unique_name.generate(f"{self._full_name}._generated_var")
        block = framework.default_main_program().current_block()
        return block.create_var(name=var_name, persistable=bool(persistable), dtype=dtype,
                                type=type)

    def add_parameter(self, name: str, parameter: Parameter) -> Parameter:
        """Register ``parameter`` under attribute ``name`` (a value loaded by ``load_dict``
        before is given to it)."""
        if not isinstance(parameter, Parameter):
            raise TypeError(f"{type(self).__name__}.add_parameter({name!r}): expected a "
                            f"Parameter, got {type(parameter).__name__}")
        self._take_loaded_value(parameter)
        self._parameters[name] = parameter
        return parameter

    def add_sublayer(self, name: str, sublayer: Layer) -> Layer:
        """Register ``sublayer`` under attribute ``name``."""
        if not isinstance(sublayer, Layer):
            raise TypeError(f"{type(self).__name__}.add_sublayer({name!r}): expected a Layer, "
                            f"got {type(sublayer).__name__}")
        self._sub_layers[name] = sublayer
        return sublayer

    def parameters(self, include_sublayers: bool = True) -> list[Parameter]:
        """This layer's parameters, then (recursively) its sublayers'."""
        out = [p for p in self._parameters.values() if p is not None]
        if include_sublayers:
            for layer in self._sub_layers.values():
                if layer is not None:
                    out.extend(layer.parameters(include_sublayers))
        return out

    def sublayers(self, include_sublayers: bool = True) -> list[Layer]:
        """The sublayers, each followed by its own when ``include_sublayers``."""
        out = []
        for layer in self._sub_layers.values():
            if layer is None:
                continue
            out.append(layer)
            if include_sublayers:
                out.extend(layer.sublayers(include_sublayers))
        return out

    def _self_and_sublayers(self) -> Iterator[Layer]:
        yield self
        yield from self.sublayers()

    def clear_gradients(self) -> None:
        """Clear the gradient of every trainable parameter (imperative mode)."""
        for p in self.parameters():
            if p.trainable and isinstance(p, _Eager):
                p.clear_gradient()

    # ---- calling
    def _build_once(self, *args: Any, **kwargs: Any) -> None:
        """Create what depends on the first input (overridden by layers that need it)."""

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        if not self._built:
            self._build_once(*inputs, **kwargs)
            self._built = True
            _on_build(self.parameters())
        return self.forward(*inputs, **kwargs)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        """The computation; subclasses define it."""
        raise NotImplementedError(f"{type(self).__name__} must define forward(*inputs)")

    def backward(self, *inputs: Any) -> Any:
        raise ValueError(f"{type(self).__name__}: a Layer has no backward of its own; call "
                         "loss.backward() on the loss its forward computed")

    # ---- state
    def state_dict(self, destination: dict[str, Any] | None = None,
                   include_sublayers: bool = True) -> collections.OrderedDict:
        """Parameter name -> parameter, this layer's then its sublayers'."""
        out = collections.OrderedDict() if destination is None else destination
        for p in self._parameters.values():
            if p is not None:
                out[p.name] = p
        if include_sublayers:
            for layer in self._sub_layers.values():
                if layer is not None:
                    layer.state_dict(out, include_sublayers)
        return out

    def set_dict(self, stat_dict: dict[str, Any], include_sublayers: bool = True) -> None:
        """Same as ``load_dict``."""
        self.load_dict(stat_dict, include_sublayers)

    def load_dict(self, stat_dict: dict[str, Any], include_sublayers: bool = True) -> None:
        """Set every parameter from ``stat_dict`` (parameter name -> numpy array, tensor or
        parameter); a parameter missing from it is an error. Parameters created later
        (``_build_once``) take their values from it when they are added."""
        if not isinstance(stat_dict, dict):
            raise TypeError(f"{type(self).__name__}.load_dict: expected a dict of parameter "
                            f"name -> value, got {type(stat_dict).__name__}")
        object.__setattr__(self, "_loaddict_holder", stat_dict)
        for p in self._parameters.values():
            if p is None:
                continue
            if p.name not in stat_dict:
                raise RuntimeError(f"{type(self).__name__}.load_dict: parameter {p.name!r} is "
                                   f"not in the state dict (it holds {sorted(stat_dict)[:8]})")
            _set_parameter_value(p, stat_dict[p.name])
        if include_sublayers:
            for layer in self._sub_layers.values():
                if layer is not None:
                    layer.load_dict(stat_dict, include_sublayers)

    def _take_loaded_value(self, parameter: Parameter) -> None:
        holder = self.__dict__.get("_loaddict_holder")
        if holder:
            if parameter.name not in holder:
                raise RuntimeError(f"{type(self).__name__}: parameter {parameter.name!r} is "
                                   "not in the state dict given to load_dict")
            _set_parameter_value(parameter, holder[parameter.name])

    # ---- attributes: parameters and sublayers are registered by assignment
    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(getattr(type(self), name, None), property):
            object.__setattr__(self, name, value)
            return
        params = self.__dict__.get("_parameters")
        layers = self.__dict__.get("_sub_layers")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError(f"{type(self).__name__}: call super().__init__() before "
                                     f"assigning parameter {name!r}")
            self._take_loaded_value(value)
            params[name] = value
            layers.pop(name, None)
            self.__dict__.pop(name, None)
        elif isinstance(value, Layer):
            if layers is None:
                raise AttributeError(f"{type(self).__name__}: call super().__init__() before "
                                     f"assigning sublayer {name!r}")
            layers[name] = value
            params.pop(name, None)
            self.__dict__.pop(name, None)
        else:
            if params is not None and name in params:
                if value is not None:
                    raise TypeError(f"{type(self).__name__}.{name} is a parameter: assign a "
                                    f"Parameter or None, not {type(value).__name__}")
                params[name] = None
                return
            if layers is not None and name in layers:
                if value is not None:
                    raise TypeError(f"{type(self).__name__}.{name} is a sublayer: assign a "
                                    f"Layer or None, not {type(value).__name__}")
                layers[name] = None
                return
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails
        d = self.__dict__
        if "_parameters" in d and name in d["_parameters"]:
            return d["_parameters"][name]
        if "_sub_layers" in d and name in d["_sub_layers"]:
            return d["_sub_layers"][name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._sub_layers:
            del self._sub_layers[name]
        else:
            object.__delattr__(self, name)


def _on_build(params: list[Parameter]) -> None:
    """Hand parameters a layer has just made to the tracer's build hook (data parallel:
    they get trainer 0's values before any op reads them)."""
    tracer = framework._dygraph_tracer()
    if tracer is not None and tracer._on_build is not None:
        tracer._on_build(params)


def _set_parameter_value(param: Parameter, value: Any) -> None:
    """Give ``param`` ``value``: the imperative parameter itself, or, in static mode, the
    parameter's variable in the global scope."""
    if isinstance(param, _Eager):
        param.set_value(value)
        return
    import numpy as np

    from ..scope import global_scope

    array = value.numpy() if isinstance(value, _Eager) else np.asarray(value)
    if param.shape is not None and tuple(array.shape) != tuple(param.shape):
        raise ValueError(f"load_dict: parameter {param.name!r} has shape {list(param.shape)}, "
                         f"the value given has shape {list(array.shape)}")
    global_scope().var(param.name).get_tensor().set(array.astype(param.dtype or array.dtype))
