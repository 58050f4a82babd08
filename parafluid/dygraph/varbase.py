"""Variables of the imperative mode: ``VarBase`` (Fluid's dygraph Variable) and ``ParamBase``.

An imperative variable is a ``framework.Variable`` (so every layer accepts it) that holds
its value, a torch tensor, at once; its shape and dtype are the value's. A variable
computed from one that needs a gradient remembers the recorded op that wrote it
(``_node``), which ``backward()`` walks back. Math operators come from
``layers.math_op_patch`` like a static Variable's; in the imperative mode they run at once.

Example::

    with fluid.dygraph.guard():
        x = fluid.dygraph.to_variable(np.ones([2, 2], "float32"))
        x.stop_gradient = False
        y = fluid.layers.reduce_sum(x * x)
        y.backward()
        print(y.numpy(), x.gradient())     # [8.] [[2. 2.] [2. 2.]]
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from .. import framework, unique_name
from ..dtypes import convert_dtype
from ..framework import Parameter, Variable
from ..scope import LoDTensor, SelectedRows

__all__ = ["VarBase", "ParamBase", "as_numpy", "SetValueShapeError", "SetValueDtypeError"]


class SetValueShapeError(ValueError, AssertionError):
    """``set_value`` given a value of another shape: a ValueError, and the AssertionError
    Fluid 1.6's ``set_value`` raises (its callers catch that)."""


class SetValueDtypeError(TypeError, AssertionError):
    """``set_value`` given a value of another dtype: a TypeError, and Fluid 1.6's
    AssertionError."""


def as_numpy(value: Any) -> np.ndarray:
    """A tensor (or row-sparse value, made dense) as a numpy array."""
    if isinstance(value, SelectedRows):
        value = value.to_dense()
    return value.detach().cpu().numpy()


class _Eager:
    """What imperative variables add to a Variable: the value, its gradient, the recorded
    op that wrote it. Mixed in before ``Variable`` / ``Parameter``."""

    _value: Any = None
    _grad: Any = None
    _node: Any = None
    _record_freed = False  # backward() freed the recorded op that wrote it
    _declared_shape: tuple[int, ...] | None = None
    _declared_dtype: str | None = None

    # shape and dtype are the value's once there is one (a layer reads them to build the
    # next op, as it reads a static variable's inferred ones); a tensor array's (a list of
    # tensors) are the declared ones, as a static array variable's
    @property  # type: ignore[override]
    def shape(self) -> tuple[int, ...] | None:
        if self._value is not None and not isinstance(self._value, list):
            return tuple(self._value.shape)
        return self._declared_shape

    @shape.setter
    def shape(self, shape: Any) -> None:
        self._declared_shape = None if shape is None else tuple(shape)

    @property  # type: ignore[override]
    def dtype(self) -> str | None:
        if self._value is not None and not isinstance(self._value, list):
            return convert_dtype(self._value.dtype)
        return self._declared_dtype

    # NOTE: as Fluid 1.6's: whether an imperative variable is persistable is fixed when it
    # is created (a parameter, an optimizer's accumulator); setting it later only warns
    @property  # type: ignore[override]
    def persistable(self) -> bool:
        return self.__dict__.get("_persistable", False)

    @persistable.setter
    def persistable(self, value: bool) -> None:
        if "_persistable" in self.__dict__:
            warnings.warn("There will be no use to set persistable in Dygraph Mode, since you "
                          "can just do it by hold it as normal Python variable", stacklevel=2)
            return
        self.__dict__["_persistable"] = bool(value)

    @dtype.setter
    def dtype(self, dtype: Any) -> None:
        self._declared_dtype = None if dtype is None else convert_dtype(dtype)

    def _value_or_raise(self, what: str) -> Any:
        if self._value is None:
            raise ValueError(f"{what}: variable {self.name!r} holds no value yet (no op has "
                             "written it)")
        return self._value

    def numpy(self) -> np.ndarray:
        """The value as a numpy array (a copy)."""
        value = self._value_or_raise("numpy()")
        if isinstance(value, list):
            raise TypeError(f"numpy(): variable {self.name!r} is a tensor array of "
                            f"{len(value)} items; read an item with fluid.layers.array_read "
                            "(or join them with fluid.layers.tensor_array_to_tensor)")
        return as_numpy(value).copy()

    def value(self) -> _CoreVar:
        """Fluid's core variable of the value: ``value().get_tensor()`` is a ``LoDTensor`` on
        it (``np.array`` reads it, ``set`` writes it)."""
        self._value_or_raise("value()")
        return _CoreVar(self, "_value")

    @property
    def _ivar(self) -> _CoreVar:
        """Fluid's core variable behind this one: ``_ivar.value().get_tensor()`` is a
        ``LoDTensor`` on the value (``set`` writes it), ``_ivar._grad_ivar()`` the gradient's
        core variable, None when backward gave it none."""
        return _CoreVar(self, "_value")

    def set_value(self, value: Any) -> None:
        """Replace the value by ``value`` (numpy array, tensor or imperative variable) of the
        same shape and dtype."""
        if isinstance(value, _Eager):
            value = value._value_or_raise("set_value()")
        if isinstance(value, torch.Tensor):
            tensor = value.detach().clone()
        else:
            array = np.asarray(value)
            tensor = torch.from_numpy(np.array(array, order="C"))
        if self.shape is not None and tuple(tensor.shape) != tuple(self.shape):
            raise SetValueShapeError(f"set_value: variable {self.name!r} has shape "
                                     f"{list(self.shape)}, the value has shape "
                                     f"{list(tensor.shape)}")
        want = self.dtype
        if want is not None and convert_dtype(tensor.dtype) != want:
            raise SetValueDtypeError(f"set_value: variable {self.name!r} has dtype {want}, the "
                                     f"value has dtype {convert_dtype(tensor.dtype)} (convert "
                                     f"with .astype('{want}'))")
        device = self._value.device if self._value is not None else _tracer_device()
        self._value = tensor.to(device)

    def backward(self, backward_strategy: Any = None) -> None:
        """Compute the gradients of this variable (of the sum of its elements, if it has
        several, as Fluid's) with respect to every variable it was computed from
        (accumulated into their ``gradient()``); the recorded ops are freed afterwards."""
        tracer = framework._dygraph_tracer()
        if tracer is None:
            raise RuntimeError(f"backward(): variable {self.name!r} is an imperative variable; "
                               "call backward() inside fluid.dygraph.guard()")
        tracer.backward(self, backward_strategy)

    def gradient(self) -> np.ndarray | None:
        """The gradient accumulated by ``backward()`` as a numpy array (None if none)."""
        return None if self._grad is None else as_numpy(self._grad)

    def clear_gradient(self) -> None:
        """Forget the accumulated gradient (the next backward starts from zero)."""
        self._grad = None

    def detach(self) -> VarBase:
        """A copy of this value that needs no gradient and has no history (Fluid 1.6's is
        an ``assign``: a later in-place update of this variable, an optimizer step on a
        parameter, leaves the copy as it was)."""
        out = VarBase(self.block, name=unique_name.generate(f"{self.name}.detach"),
                      stop_gradient=True)
        value = self._value
        out._value = value.clone() if isinstance(value, torch.Tensor) else value
        return out

    def _describe(self) -> str:
        text = super()._describe()  # type: ignore[misc]
        return f"{text} (imperative)"

    def __str__(self) -> str:
        if self._value is None:
            return self._describe()
        if isinstance(self._value, list):
            return f"{self._describe()} of {len(self._value)} items"
        return f"{self._describe()}\n{self.numpy()}"


class _TensorSlot:
    """A ``LoDTensor`` holder on an imperative variable's value (or gradient) slot."""

    __slots__ = ("_owner", "_slot", "lod")

    def __init__(self, owner: _Eager, slot: str) -> None:
        self._owner, self._slot, self.lod = owner, slot, []

    @property
    def name(self) -> str:
        return self._owner.name + ("@GRAD" if self._slot == "_grad" else "")

    @property
    def value(self) -> Any:
        return getattr(self._owner, self._slot)

    @value.setter
    def value(self, tensor: Any) -> None:
        setattr(self._owner, self._slot, tensor)


class _CoreVar:
    """Fluid's ``VarBase._ivar`` (its C++ variable): ``value()`` and ``get_tensor()``
    (a ``LoDTensor`` on the slot), ``_grad_ivar()``."""

    __slots__ = ("_owner", "_slot")

    def __init__(self, owner: _Eager, slot: str) -> None:
        self._owner, self._slot = owner, slot

    @property
    def name(self) -> str:
        return _TensorSlot(self._owner, self._slot).name

    def value(self) -> _CoreVar:
        return self

    def get_tensor(self) -> Any:
        return LoDTensor(_TensorSlot(self._owner, self._slot))  # type: ignore[arg-type]

    def _grad_ivar(self) -> _CoreVar | None:
        if self._slot != "_value" or self._owner._grad is None:
            return None
        return _CoreVar(self._owner, "_grad")


def _tracer_device() -> torch.device:
    tracer = framework._dygraph_tracer()
    return tracer.device if tracer is not None else torch.device("cpu")


class VarBase(_Eager, Variable):
    """A Variable of the imperative mode: it holds its value (``numpy()``), its gradient
    (``gradient()``) and the op that computed it."""

    def __init__(self, block: Any, value: Any = None, **kwargs: Any) -> None:
        super().__init__(block, **kwargs)
        self._value = value


class ParamBase(_Eager, Parameter):
    """A Parameter of the imperative mode (a ``Layer``'s weights): holds its value."""

    def __init__(self, block: Any, shape: Any, dtype: Any, **kwargs: Any) -> None:
        super().__init__(block, shape=shape, dtype=dtype, **kwargs)

