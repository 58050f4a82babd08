"""The imperative mode's tracer: ops run at once, and are recorded for ``backward()``.

Inside ``fluid.dygraph.guard()`` every ``Block.append_op`` (so every ``fluid.layers``
function, initializer and optimizer) comes here: the op is built and checked as in a
Program (slots, attr defaults, shape rule), bound to its registered kernel with
``engine.runtime.bind_op`` (the binding every executor uses) and run against the values of
its imperative variables. When an input needs a gradient the op is recorded: the op, the
values it read and wrote, and its variables.

``backward(loss)`` walks the recorded ops from the loss back, newest first, asks each op's
registered gradient maker for its gradient ops (the ``GradContext`` protocol of the static
backward pass) and runs them at once; a variable used by several ops gets the sum of their
contributions, added in that fixed order. The recorded ops are freed afterwards.

Example::

    with fluid.dygraph.guard():
        x = fluid.dygraph.to_variable(np.ones([2, 3], "float32"))
        x.stop_gradient = False
        loss = fluid.layers.mean(fluid.layers.relu(x))
        loss.backward()
"""

from __future__ import annotations

import collections
import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import torch

from .. import framework
from ..backward import prune_missing_grads
from ..dtypes import convert_dtype
from ..engine.runtime import bind_op, op_error
from ..framework import GRAD_SUFFIX, Operator, Parameter, Variable
from ..ops.registry import EMPTY, GradContext, get_op_def, prepare_op
from ..scope import SelectedRows
from .varbase import ParamBase, VarBase

__all__ = ["Tracer"]


class _Node:
    """One recorded op: the op (slots hold per-occurrence keys), the values it read and
    wrote by key, the variables behind the keys, and the recorded ops that wrote the
    values it read (``parents``: taken when it ran, before it rebinds what it writes)."""

    __slots__ = ("seq", "op", "env", "ins", "outs", "parents")

    def __init__(self, seq: int, op: Operator, env: dict[str, Any],
                 ins: list[tuple[str, Any]], outs: list[tuple[str, Any]]) -> None:
        self.seq = seq
        self.op = op
        self.env = env
        self.ins = ins
        self.outs = outs
        self.parents = [v._node for _, v in ins if v._node is not None]


class _OpView:
    """What an eagerly run op sees as its block: its own variables by key (for the shape
    rule), the block it was appended to otherwise."""

    __slots__ = ("vars", "block", "idx", "program")

    def __init__(self, block: Any, variables: dict[str, Any]) -> None:
        self.vars = variables
        self.block = block
        self.idx = block.idx
        self.program = block.program

    def _find_var_recursive(self, name: str) -> Any:
        return self.vars.get(name)

    def create_var(self, name: str, **kwargs: Any) -> Any:  # a shape rule's spare output
        var = VarBase(self.block, name=name, **kwargs)
        self.vars[name] = var
        return var


def _no_sub_blocks(*args: Any) -> set[str]:
    raise NotImplementedError("the imperative mode runs control flow in Python (if / for on "
                              "numpy values); ops with sub-blocks (While, IfElse, "
                              "StaticRNN, DynamicRNN) have no imperative gradient")


_GRAD_CONTEXT = GradContext(append_grad_ops=_no_sub_blocks)


class Tracer:
    """Runs and records the ops of the imperative mode (the current one:
    ``fluid.framework._dygraph_tracer()``).

    Args:
        block: the block whose ops are traced (the guard's program's global block).
    """

    def __init__(self, block: Any = None, device: Any = None) -> None:
        self._block = block
        self.device = torch.device("cpu") if device is None else device
        self._vars: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._train_mode = True
        self._has_grad = True
        self._seq = itertools.count()
        # data parallel (prepare_context): called with the parameters of a Layer that has
        # just built itself, to give them trainer 0's values
        self._on_build: Any = None
        # dygraph.jit.trace: (op type, inputs, outputs, attrs) of every op run, when set
        self._recorder: list[tuple[str, dict, dict, dict]] | None = None

    # ---- modes
    def train_mode(self) -> None:
        """Ops record gradients; ``is_test`` ops run in their training form."""
        self._train_mode = True

    def eval_mode(self) -> None:
        """Ops record nothing and ops with an ``is_test`` attr run as at inference."""
        self._train_mode = False

    @contextlib.contextmanager
    def _no_grad(self) -> Iterator[None]:
        old, self._has_grad = self._has_grad, False
        try:
            yield
        finally:
            self._has_grad = old

    # ---- variables
    def trace_var(self, name: str, var: Any) -> None:
        """Keep persistable ``var`` (a parameter, an optimizer's accumulator) by name."""
        self._vars[name] = var

    def all_parameters(self) -> list[Parameter]:
        """Every parameter created in this tracer's mode, in creation order."""
        return [v for v in self._vars.values() if isinstance(v, Parameter)]

    def create_var(self, block: Any, **kwargs: Any) -> VarBase:
        """``Block.create_var`` in the imperative mode: a variable owned by no block."""
        kwargs.pop("initializer", None)
        var = VarBase(block, **kwargs)
        if var.persistable:
            self.trace_var(var.name, var)
        return var

    def create_parameter(self, block: Any, **kwargs: Any) -> ParamBase:
        """``Block.create_parameter`` in the imperative mode (its initializer runs next,
        unless the parameter exists: as in a Program, two layers given one ParamAttr name
        share it)."""
        existing = self._vars.get(kwargs.get("name"))
        if isinstance(existing, Parameter):
            shape, dtype = tuple(kwargs.get("shape") or ()), kwargs.get("dtype")
            if shape != tuple(existing.shape) or (dtype is not None and
                                                  convert_dtype(dtype) != existing.dtype):
                raise ValueError(f"parameter {existing.name!r} was created before with shape "
                                 f"{list(existing.shape)} {existing.dtype}; now asked for "
                                 f"shape {list(shape)} {dtype}: a shared parameter must keep "
                                 "its shape and dtype (or give the layers different ParamAttr "
                                 "names)")
            return existing
        param = ParamBase(block, **kwargs)
        self.trace_var(param.name, param)
        return param

    # ---- ops
    def trace_op(self, type: Any, inputs: Any = None, outputs: Any = None,  # noqa: A002
                 attrs: dict[str, Any] | None = None, stop_gradient: bool = False,
                 block: Any = None) -> Operator:
        """Run op ``type`` (a type name, or an Operator) at once on the values of ``inputs``
        (slot -> imperative variables), writing ``outputs``; record it if an input needs a
        gradient (and ``stop_gradient`` is False). Fluid's argument order."""
        op = type
        if isinstance(op, Operator):
            attrs = dict(op.attrs) if attrs is None else attrs
            op = op.type
        block = block if block is not None else self._block
        ins = self._slot_vars(op, inputs, "input")
        outs = self._slot_vars(op, outputs, "output")
        attrs = {k: framework._normalize_attr(v) for k, v in (attrs or {}).items()}
        opdef = get_op_def(op)
        if not self._train_mode and "is_test" in opdef.attrs:
            attrs["is_test"] = True
        # NOTE: every occurrence of a variable gets its own key, so that the gradient op
        # writes one gradient per occurrence (x * x: X@GRAD and Y@GRAD both for x) and the
        # pre-op value of a variable the op overwrites stays apart from the new one
        keys: set[str] = set()
        in_keys, out_keys = _keyed(ins, keys), _keyed(outs, keys)
        in_pairs = [(k, v) for pairs in in_keys.values() for k, v in pairs]
        out_pairs = [(k, v) for pairs in out_keys.values() for k, v in pairs]
        fop = Operator(_OpView(block, dict(in_pairs + out_pairs)), op,
                       {s: [k for k, _ in pairs] for s, pairs in in_keys.items()},
                       {s: [k for k, _ in pairs] for s, pairs in out_keys.items()},
                       attrs, callsite=framework._user_callsite())
        prepare_op(fop)
        env: dict[str, Any] = {}
        for k, v in in_pairs:
            if v._value is None:
                raise ValueError(f"op {op!r} (created at {fop.callsite}): input variable "
                                 f"{v.name!r} holds no value; write it with an op (or "
                                 "fluid.dygraph.to_variable) before using it")
            env[k] = v._value
        if opdef.grad is not None:
            _check_float_dtypes(fop, in_keys, opdef)
        seq = next(self._seq)
        try:
            bind_op(fop, self.device, None, env)()
        except Exception as exc:
            raise op_error(fop, seq, exc) from exc
        # NOTE: as Fluid 1.6's tracer, the outputs of an op reading a variable that needs a
        # gradient need one too, even when the op has no gradient (one_hot, argmax): the
        # graph behind such an op is cut, the variables after it still get gradients
        needs = (self._has_grad and self._train_mode and not stop_gradient
                 and any(not v.stop_gradient for _, v in in_pairs))
        record = needs and opdef.grad is not None
        for k, v in out_pairs:
            if k in env:
                v._value = env[k]
        if self._recorder is not None:
            self._recorder.append((op, ins, outs, dict(attrs)))
        node = _Node(seq, fop, env, in_pairs, out_pairs) if record else None
        for _, v in out_pairs:
            v._node, v._record_freed = node, False
            if not isinstance(v, Parameter) and not v.persistable:
                v.stop_gradient = not needs
        return fop

    def trace(self, op_type: str, inputs: Any, outputs: Any, attrs: dict[str, Any],
              stop_gradient: bool = False) -> Operator:
        """``trace_op`` with Fluid's C++ tracer's argument order."""
        return self.trace_op(op_type, inputs, outputs, attrs, stop_gradient)

    def _slot_vars(self, op: str, slots: Any, what: str) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for slot, items in (slots or {}).items():
            if items is None:
                continue
            if isinstance(items, (Variable, str)):
                items = [items]
            vs = []
            for item in items:
                if isinstance(item, str):
                    var = self._vars.get(item)
                    if var is None:
                        raise ValueError(f"op {op!r}: {what} {slot}={item!r} names no "
                                         "variable of the imperative mode; pass the "
                                         "variable itself")
                    item = var
                if not isinstance(item, VarBase | ParamBase):
                    raise TypeError(f"op {op!r}: {what} {slot} must hold imperative variables "
                                    f"(made inside fluid.dygraph.guard()), got "
                                    f"{type(item).__name__}: {item!r}")
                vs.append(item)
            if vs:
                out[slot] = vs
        return out

    # ---- backward
    def backward(self, loss: Any, strategy: Any = None) -> None:
        """Run the gradient ops of every recorded op between ``loss`` and the variables
        that need gradients; accumulate into their ``gradient()``; free the record."""
        # NOTE: as Fluid's imperative engine, the backward of a variable of any shape
        # starts from a gradient of ones (the gradients of the sum of its elements).
        value = loss._value_or_raise("backward()")
        # NOTE: as Fluid 1.6's engine, a loss with stop_gradient=True, or computed from no
        # variable that needs a gradient (under no_grad, or from stop_gradient inputs only),
        # has nothing to differentiate: backward() does nothing
        if loss.stop_gradient:
            return
        if loss._node is None and loss._record_freed:
            raise ValueError(f"backward(): the ops that computed {loss.name!r} were freed by "
                             "an earlier backward() through it; compute the loss again "
                             "(run the forward pass) before another backward()")
        if loss._node is None:
            return
        nodes: dict[int, _Node] = {}
        stack = [loss._node]
        while stack:
            node = stack.pop()
            if node is None or id(node) in nodes:
                continue
            nodes[id(node)] = node
            stack.extend(node.parents)
        order = sorted(nodes.values(), key=lambda n: n.seq, reverse=True)
        grads: dict[int, Any] = {id(loss): torch.ones_like(value)}
        owners: dict[int, Any] = {id(loss): loss}
        done: dict[int, Any] = {}  # gradients of values whose recorded op has run backward
        zeroed: set[int] = set()  # variables given a zero gradient whatever stop_gradient says
        try:
            for node in order:
                self._backward_node(node, grads, owners, done, zeroed)
        finally:
            for node in order:  # the record is freed, used or not
                for _, v in node.outs:
                    if v._node is node:
                        v._node = None
                        v._record_freed = True
                node.env, node.parents = {}, []
        grads.update(done)  # a variable an op overwrote reports its latest value's gradient
        for key, g in grads.items():
            var = owners[key]
            if var.stop_gradient and key not in zeroed:
                continue
            var._grad = g if var._grad is None else _add(var._grad, g)

    def _backward_node(self, node: _Node, grads: dict[int, Any], owners: dict[int, Any],
                       done: dict[int, Any], zeroed: set[int]) -> None:
        env = dict(node.env)
        produced = set()
        missing: dict[str, Any] = {}
        for k, v in node.outs:
            # NOTE: the gradient of the value this op wrote is complete (its readers were
            # recorded later, and ran first); taking it out lets an op that overwrote its
            # input (x = 3 * x) start the gradient of the earlier value afresh
            g = grads.pop(id(v), None)
            if g is not None:
                env[k + GRAD_SUFFIX] = g
                produced.add(k + GRAD_SUFFIX)
                done.setdefault(id(v), g)
            else:
                missing[k + GRAD_SUFFIX] = v
        if not produced:
            return
        op = node.op
        # NOTE: as Fluid 1.6's tracer, a stop_gradient input alone in its slot gets no
        # gradient and cuts what lies behind it; one of several in a slot (concat's X, sum's
        # X) gets a gradient of zeros, and the ops behind it run on those zeros
        stopped = [k for k, v in node.ins if v.stop_gradient]
        blocked: set[str] = set()
        zero_ins: set[str] = set()
        if stopped:  # the slot sizes only matter for a stopped input (most ops have none)
            slot_sizes = {k: len(keys) for keys in op.inputs.values() for k in keys}
            for k in stopped:
                (blocked if slot_sizes.get(k, 1) == 1 else zero_ins).add(k)
        for spec in get_op_def(op.type).grad(op, blocked, _GRAD_CONTEXT):
            self._zero_missing(spec, missing, env, produced, owners, done, zeroed)
            ok, zero_fills = prune_missing_grads(spec, produced)
            if not ok:
                continue
            for s in (*zero_fills, spec):
                self._run_spec(s, env, op)
                produced.update(n for names in s["outputs"].values() for n in names
                                if n != EMPTY)
        for k, v in node.ins:
            g = env.get(k + GRAD_SUFFIX)
            if g is None or (v.stop_gradient and k not in zero_ins):
                continue
            key = id(v)
            if k in zero_ins:
                g = _zeros_like(g)
                zeroed.add(key)
            owners[key] = v
            # NOTE: contributions are added in the order the ops are walked (newest first),
            # so the sum does not depend on anything but the program
            grads[key] = g if key not in grads else _add(grads[key], g)

    @staticmethod
    def _zero_missing(spec: dict[str, Any], missing: dict[str, Any], env: dict[str, Any],
                      produced: set[str], owners: dict[int, Any], done: dict[int, Any],
                      zeroed: set[int]) -> None:
        """As Fluid 1.6's engine: the gradient of an output that nothing downstream used
        (split's unused part), read by a gradient op, is zeros, and is that output's
        ``gradient()``."""
        for names in spec["inputs"].values():
            for name in names:
                var = missing.get(name)
                value = env.get(name[: -len(GRAD_SUFFIX)])
                if var is None or name in produced or not isinstance(value, torch.Tensor):
                    continue
                env[name] = torch.zeros_like(value)
                produced.add(name)
                owners[id(var)] = var
                done.setdefault(id(var), env[name])
                zeroed.add(id(var))

    def _run_spec(self, spec: dict[str, Any], env: dict[str, Any], fwd: Operator) -> None:
        gop = Operator(fwd.block, spec["type"], spec["inputs"], spec["outputs"],
                       dict(spec["attrs"]), callsite=fwd.callsite)
        prepare_op(gop, infer=False)
        try:
            bind_op(gop, self.device, None, env)()
        except Exception as exc:
            raise op_error(gop, -1, exc) from exc


_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})


def _check_float_dtypes(op: Operator, in_keys: dict[str, list[tuple[str, Any]]],
                        opdef: Any) -> None:
    """A differentiable op's float inputs share one dtype (torch would promote silently,
    Fluid's kernels refuse): the usual cause is a float64 numpy array given to a float32
    model."""
    seen: list[tuple[str, Any]] = []
    for slot, pairs in in_keys.items():
        if slot in opdef.no_grad_inputs:
            continue
        for _, v in pairs:
            if v.dtype in _FLOATS:
                seen.append((slot, v))
    if len({v.dtype for _, v in seen}) > 1:
        (s0, v0), (s1, v1) = seen[0], next(p for p in seen if p[1].dtype != seen[0][1].dtype)
        raise TypeError(f"op {op.type!r} (created at {op.callsite}): input {s0}={v0.name!r} is "
                        f"{v0.dtype} but {s1}={v1.name!r} is {v1.dtype}; give both the same "
                        f"dtype (e.g. numpy_array.astype('{v0.dtype}') before to_variable, "
                        "or fluid.layers.cast)")


def _keyed(slots: dict[str, list[Any]], keys: set[str]) -> dict[str, list[tuple[str, Any]]]:
    out = {}
    for slot, vs in slots.items():
        pairs = []
        for v in vs:
            key = v.name
            n = 0
            while key in keys:
                n += 1
                key = f"{v.name}@USE{n}"
            keys.add(key)
            pairs.append((key, v))
        out[slot] = pairs
    return out


def _zeros_like(g: Any) -> Any:
    """Zeros in the place of gradient ``g`` (a row-sparse one keeps its rows)."""
    if isinstance(g, torch.Tensor):
        return torch.zeros_like(g)
    return SelectedRows(g.rows, torch.zeros_like(g.value), g.height)


def _add(a: Any, b: Any) -> Any:
    """``a + b`` of two gradient parts (row-sparse ones through the ``sum`` op's kernel)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a + b
    return get_op_def("sum").kernel({"X": [a, b]}, {}, None)["Out"]
