"""Variables of the Program IR: ``Variable`` and ``Parameter`` (re-exported by framework).

A Variable is a named, typed value in a Block: shape (-1 where only the run knows the
size), dtype, kind (dense tensor or row-sparse), and flags (persistable, stop_gradient,
is_data). A Parameter is a persistable, trainable Variable that carries its optimizer
settings.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from . import unique_name
from .dtypes import VarType, convert_dtype

if TYPE_CHECKING:
    from .framework import Block

__all__ = ["Variable", "Parameter", "var_name", "var_names", "lookup_vars", "unknown_name_message"]


class Variable:
    """A named, typed value in a Block. ``shape`` uses -1 for sizes known only at run time.

    Fluid's other keyword arguments (``error_clip``, ``capacity``, ...) are accepted so that
    ported code builds, and have no effect.
    """

    # NOTE: Fluid's parameter order; capacity, error_clip and belong_to_optimizer are
    # accepted as Fluid's are (error_clip is kept for the clip module to find)
    def __init__(self, block: Block, type: str = VarType.LOD_TENSOR,  # noqa: A002
                 name: str | None = None, shape: Sequence[int] | None = None,
                 dtype: Any = None, lod_level: int | None = None, capacity: int | None = None,
                 persistable: bool | None = None, error_clip: Any = None,
                 stop_gradient: bool = False, is_data: bool = False,
                 need_check_feed: bool = False, belong_to_optimizer: bool = False,
                 **_ignored: Any) -> None:
        self.block = block
        self.name = name if name is not None else unique_name.generate("_generated_var")
        self.shape: tuple[int, ...] | None = None if shape is None else _as_shape(shape, self.name)
        self.dtype: str | None = None if dtype is None else convert_dtype(dtype)
        # NOTE: a VarType member (a str with an int value) is stored as its plain name
        self.type = str.__str__(type) if isinstance(type, str) else type
        self.lod_level = 0 if lod_level is None else lod_level
        self.persistable = bool(persistable)
        if error_clip is not None:
            self.error_clip = error_clip
        self.belong_to_optimizer = belong_to_optimizer
        self.stop_gradient = stop_gradient
        self.is_data = is_data
        self.need_check_feed = need_check_feed

    # Fluid exposes these as read-only-ish properties; plain attributes keep it simple.
    @property
    def ndim(self) -> int:
        return len(self.shape or ())

    @property
    def op(self) -> Any:
        """The last op of the variable's block that writes it (Fluid's ``var.op``), None if
        none does."""
        for op in reversed(getattr(self.block, "ops", ())):
            if self.name in op.output_arg_names:
                return op
        return None

    def _to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": None if self.shape is None else list(self.shape),
                "dtype": self.dtype, "type": self.type, "lod_level": self.lod_level,
                "persistable": self.persistable, "stop_gradient": self.stop_gradient,
                "is_data": self.is_data, "need_check_feed": self.need_check_feed}

    def _describe(self) -> str:
        shape = "?" if self.shape is None else "[" + ", ".join(map(str, self.shape)) + "]"
        flags = [f for f, on in (("persistable", self.persistable), ("data", self.is_data),
                                 ("stop_gradient", self.stop_gradient and not self.is_data
                                  and not self.persistable),
                                 (self.type, self.type != VarType.LOD_TENSOR)) if on]
        kind = "param" if isinstance(self, Parameter) else "var"
        tail = f" ({', '.join(flags)})" if flags else ""
        return f"{kind} {self.name} : {self.dtype or '?'}{shape}{tail}"

    def __repr__(self) -> str:
        return f"<{self._describe()}>"

    __str__ = __repr__

    def to_string(self, throw_on_error: bool = True, with_details: bool = False) -> str:
        return self._describe()

    # Fluid's imperative-only methods: on a variable of a static program they fail as
    # Fluid's do (an AssertionError with Fluid's words); the imperative VarBase has them.
    def detach(self) -> Any:
        _dygraph_only("detach")

    def numpy(self) -> Any:
        _dygraph_only("numpy")

    def set_value(self, value: Any) -> None:
        _dygraph_only("set_value")

    def backward(self, backward_strategy: Any = None) -> None:
        _dygraph_only("backward")

    def gradient(self) -> Any:
        _dygraph_only("gradient")

    def clear_gradient(self) -> None:
        _dygraph_only("clear_gradient")


def _dygraph_only(method: str) -> None:
    raise AssertionError(f"We Only support {method} in Dygraph mode, please use "
                         "fluid.dygraph.guard() as context to run it in Dygraph Mode")


class Parameter(Variable):
    """A persistable, trainable Variable created by a layer; carries optimizer settings."""

    def __init__(self, block: Block, shape: Sequence[int], dtype: Any, name: str | None = None,
                 trainable: bool = True, optimize_attr: dict[str, float] | None = None,
                 regularizer: Any = None, gradient_clip_attr: Any = None,
                 do_model_average: bool | None = None, **kwargs: Any) -> None:
        # NOTE: as Fluid 1.6's Parameter: a shape and a dtype are required, and a scalar
        # (shape []) is no parameter
        if shape is None:
            raise ValueError(f"Parameter {name!r}: the shape of a Parameter must not be None")
        if dtype is None:
            raise ValueError(f"Parameter {name!r}: the dtype of a Parameter must not be None")
        if len(shape) == 0:
            raise ValueError(f"Parameter {name!r}: the shape of a Parameter needs at least one "
                             "dimension, got []")
        for dim in shape:
            if dim is None or dim < 0:
                raise ValueError(f"Parameter {name!r}: every dimension must be known and >= 0, "
                                 f"got shape {list(shape)}")
        kwargs.setdefault("persistable", True)
        super().__init__(block, name=name, shape=shape, dtype=dtype, **kwargs)
        self.trainable = trainable
        self.stop_gradient = not trainable
        self.optimize_attr = optimize_attr or {"learning_rate": 1.0}
        self.regularizer = regularizer
        self.gradient_clip_attr = gradient_clip_attr
        self.do_model_average = do_model_average

    def _to_dict(self) -> dict[str, Any]:
        d = super()._to_dict()
        # Regularizer and clip objects are Python-side build helpers; their effect is already
        # ops in the program, so only the plain settings travel.
        d.update(parameter=True, trainable=self.trainable, optimize_attr=self.optimize_attr,
                 do_model_average=self.do_model_average)
        return d


def _as_shape(shape: Sequence[int], name: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise TypeError(f"variable {name!r}: shape must be a sequence of ints, got {shape!r}") \
            from None
    for d in dims:
        if d < -1:
            raise ValueError(f"variable {name!r}: shape dimensions must be >= -1, got {list(dims)}")
    return dims


# --------------------------------------------------------------------------- Variable or name
# NOTE: the one place that turns "a Variable or a name" into a name: every API that accepts
# either (fetch lists, feeds, prune targets, io var lists, loss_name) goes through these.


def var_name(item: Any, what: str) -> str:
    """The name of a Variable or a str; TypeError naming ``what`` for anything else."""
    if isinstance(item, Variable):
        return item.name
    if isinstance(item, str):
        return item
    raise TypeError(f"{what} must be a Variable or a name, got {type(item).__name__}: {item!r}")


def var_names(items: Any, what: str) -> list[str]:
    """Names of one item or an iterable of Variables/names (``what`` names the argument)."""
    if items is None:
        return []
    if isinstance(items, (Variable, str)):
        return [var_name(items, what)]
    if not isinstance(items, Iterable):
        raise TypeError(f"{what} must be a Variable, a name or a list of them, got "
                        f"{type(items).__name__}: {items!r}")
    names = []
    for item in items:
        if not isinstance(item, (Variable, str)):
            raise TypeError(f"{what} items must be Variables or names, got "
                            f"{type(item).__name__}: {item!r}")
        names.append(item if isinstance(item, str) else item.name)
    return names


def lookup_vars(block: Block, items: Any, what: str) -> list[Variable]:
    """The Variables of ``block`` (or its parents) for Variables/names; ValueError if unknown."""
    out = []
    for item in [items] if isinstance(items, (Variable, str)) else list(items):
        if isinstance(item, Variable):
            out.append(item)
            continue
        name, = var_names([item], what)
        var = block._find_var_recursive(name)
        if var is None:
            raise ValueError(unknown_name_message(what, name, block))
        out.append(var)
    return out


def unknown_name_message(what: str, name: str, block: Block) -> str:
    """``"<what> 'x' is not a variable of the program; did you mean ...?"``"""
    moved = block.program.meta.renamed_away(name)
    if moved is not None:
        return (f"{what} {name!r} is not a variable of the program any more: memory_optimize "
                f"renamed it to {moved!r} to reuse that buffer; pass skip_opt_set={{{name!r}}} "
                "to memory_optimize to keep it")
    close = difflib.get_close_matches(name, list(block.vars), n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    return f"{what} {name!r} is not a variable of the program{hint}"
