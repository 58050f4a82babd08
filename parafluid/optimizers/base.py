"""The optimizers' base class: ``minimize(loss)`` appends the backward pass and one update op
per parameter; a rule (``rules.py``: SGD, Momentum, Adam, ...) says which op and state.

Example::

    opt = fluid.optimizer.SGD(learning_rate=0.01)
    optimize_ops, params_grads = opt.minimize(avg_cost)

The learning rate is a persistable variable in the program (``learning_rate_0``), so an LR
schedule is ordinary ops that compute it. Optimizer state (moments, ...) lives in
persistable accumulators named ``<param>_<acc>_0``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

import numpy as np
import torch

from .. import unique_name
from ..backward import append_backward
from ..framework import (
    OpRole,
    Parameter,
    Program,
    Variable,
    _dygraph_tracer,
    default_main_program,
    default_startup_program,
    in_dygraph_mode,
    program_guard,
)
from ..initializer import Constant
from ..layer_helper import LayerHelper
from ..placement import follow_place, place_attrs
from ..regularizer import append_regularization_ops

__all__ = ["Optimizer", "State"]


class State(NamedTuple):
    """One accumulator of an optimizer's update op, per parameter (``Optimizer._state``)."""

    slot: str          # the update op's input slot ("Velocity")
    acc: str           # the accumulator's name ("velocity": <param>_velocity_0)
    out: str = ""      # the output slot writing it back ("VelocityOut"); "" = input only
    fill: float | str = 0.0  # initial value, or the name of the optimizer attr holding it
    scalar: bool = False     # a float32 [1] value (beta^t), not the parameter's shape


class Optimizer:
    """Base class. A subclass sets ``type`` (its update op), ``_state`` (the accumulators
    the op reads and writes, one ``State`` each) and ``_update_attrs``; one whose op does
    not fit that shape overrides ``_append_optimize_op``."""

    type = ""
    _state: tuple[State, ...] = ()

    def __init__(self, learning_rate: float | Variable, regularization: Any = None,
                 name: str | None = None, grad_clip: Any = None) -> None:
        if not isinstance(learning_rate, (int, float, Variable)) and \
                not _is_lr_decay(learning_rate):
            raise TypeError(f"{type(self).__name__}: learning_rate must be a float, a "
                            "Variable or (imperative mode) a fluid.dygraph learning-rate decay, "
                            f"got {type(learning_rate).__name__}")
        self._learning_rate = learning_rate
        self.regularization = regularization
        self._grad_clip = grad_clip
        self._name = name
        self._learning_rate_map: dict[Program, Variable] = {}
        self._accumulators: dict[str, dict[str, Variable]] = defaultdict(dict)
        self.helper: LayerHelper | None = None
        # imperative mode: the state given to load(), for accumulators not created yet
        self._loaded_state: dict[str, Any] = {}

    # ---- learning rate
    def _create_global_learning_rate(self) -> None:
        program = default_main_program()
        lr = self._learning_rate
        if _is_lr_decay(lr):
            if not in_dygraph_mode():
                raise TypeError(f"{type(self).__name__}: {type(lr).__name__} is a learning-rate "
                                "decay of the imperative mode; in a Program use the decay "
                                "layers (fluid.layers.exponential_decay, ...)")
            self._learning_rate_map[program] = lr()  # one step of the decay per minimize
            return
        if program in self._learning_rate_map:
            return
        if isinstance(lr, Variable):
            self._learning_rate_map[program] = lr
            return
        from ..layers.tensor import create_global_var

        self._learning_rate_map[program] = create_global_var(
            name=unique_name.generate("learning_rate"), shape=[1], value=float(lr),
            dtype="float32", persistable=True)

    def _global_learning_rate(self, program: Program | None = None) -> Variable:
        return self._learning_rate_map[program or default_main_program()]

    def _create_param_lr(self, param_and_grad: tuple[Parameter, Variable]) -> Variable:
        """The global learning rate, scaled by the parameter's ParamAttr learning_rate."""
        param = param_and_grad[0]
        factor = param.optimize_attr.get("learning_rate", 1.0)
        lr = self._global_learning_rate()
        if factor == 1.0:
            return lr
        block = default_main_program().global_block()
        out = block.create_var(name=unique_name.generate(f"{param.name}_lr"), dtype=lr.dtype)
        block.append_op("scale", inputs={"X": [lr]}, outputs={"Out": [out]},
                        attrs={"scale": float(factor)})
        return out

    # ---- accumulators
    def _add_accumulator(self, name: str, param: Parameter, dtype: Any = None,
                         fill_value: float = 0.0, shape: list[int] | None = None) -> Variable:
        if param.name in self._accumulators[name]:
            raise ValueError(f"{type(self).__name__}: accumulator {name!r} already exists for "
                             f"parameter {param.name!r}")
        assert self.helper is not None
        var = self.helper.create_global_variable(
            name=unique_name.generate(f"{param.name}_{name}"), persistable=True,
            dtype=dtype or param.dtype, shape=list(param.shape if shape is None else shape),
            stop_gradient=True)
        self.helper.set_variable_initializer(var, Constant(float(fill_value)))
        if var.name in self._loaded_state and in_dygraph_mode():
            var.set_value(self._loaded_state[var.name])
        self._accumulators[name][param.name] = var
        return var

    def get_opti_var_name_list(self) -> list[str]:
        """The names of the state variables (moments, accumulators) this optimizer created."""
        return [var.name for per_param in self._accumulators.values()
                for var in per_param.values()]

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state, name -> value: its accumulators (moments, beta powers),
        and in the imperative mode the step of its learning-rate decay
        (``global_step``, as Fluid names it)."""
        out: dict[str, Any] = {var.name: var for per_param in self._accumulators.values()
                               for var in per_param.values()}
        if _is_lr_decay(self._learning_rate):
            # as Fluid's: "global_step", an int32 [1] variable (an array outside a guard)
            step = np.array([self._learning_rate.step_num], dtype="int32")
            tracer = _dygraph_tracer()
            if tracer is not None:
                var = tracer.create_var(default_main_program().global_block(),
                                        name=_LR_STEP_KEY, stop_gradient=True)
                var._value = torch.from_numpy(step)
                out[_LR_STEP_KEY] = var
            else:
                out[_LR_STEP_KEY] = step
        return out

    def load(self, stat_dict: dict[str, Any]) -> None:
        """Imperative mode: take the state of ``stat_dict`` (from ``state_dict()``, saved
        and loaded with ``fluid.dygraph.save_dygraph`` / ``load_dygraph``); accumulators not
        created yet take their value when the first ``minimize`` creates them. Static
        programs load their optimizer state with the persistables."""
        if not in_dygraph_mode():
            raise TypeError(f"{type(self).__name__}.load(stat_dict) works only in dygraph mode "
                            "(inside fluid.dygraph.guard()); load a Program's optimizer "
                            "state with fluid.io.load_persistables(exe, dirname, main_program)")
        if not isinstance(stat_dict, dict):
            raise TypeError(f"{type(self).__name__}.load: expected a dict, got "
                            f"{type(stat_dict).__name__}")
        self._loaded_state = dict(stat_dict)
        for per_param in self._accumulators.values():
            for var in per_param.values():
                if var.name in stat_dict:
                    var.set_value(stat_dict[var.name])
        key = next((k for k in (_LR_STEP_KEY, _OLD_LR_STEP_KEY) if k in stat_dict), None)
        if key is not None and _is_lr_decay(self._learning_rate):
            step = stat_dict[key]
            step = step.numpy() if hasattr(step, "numpy") else step
            self._learning_rate.step_num = int(np.asarray(step).reshape(-1)[0])

    set_dict = load

    def _get_accumulator(self, name: str, param: Parameter) -> Variable:
        try:
            return self._accumulators[name][param.name]
        except KeyError:
            raise ValueError(f"{type(self).__name__}: no accumulator {name!r} for parameter "
                             f"{param.name!r}") from None

    def _create_accumulators(self, block: Any, parameters: list[Parameter]) -> None:
        """One accumulator per parameter and entry of ``_state``, in that order (in the
        imperative mode a parameter that has them, from an earlier minimize, keeps them)."""
        dygraph = in_dygraph_mode()
        for p in parameters:
            if dygraph and self._state and p.name in self._accumulators[self._state[0].acc]:
                continue
            for st in self._state:
                fill = getattr(self, st.fill) if isinstance(st.fill, str) else st.fill
                if st.scalar:
                    self._add_accumulator(st.acc, p, dtype="float32", fill_value=fill,
                                          shape=[1])
                else:
                    self._add_accumulator(st.acc, p, fill_value=fill)

    def _update_attrs(self, param: Parameter) -> dict[str, Any]:
        """The attrs of ``param``'s update op."""
        return {}

    def _finish_update(self, block: Any, params_grads: list[tuple[Any, Any]]) -> None:
        """Subclasses append ops that run once after all updates (e.g. Adam's beta powers)."""

    def _advance_powers(self, block: Any, params_grads: list[tuple[Any, Any]],
                        powers: tuple[tuple[str, float], ...]) -> None:
        """Multiply each ``(accumulator, beta)`` of every updated parameter by beta: the
        ``beta^t`` bias corrections of the Adam family, advanced once per step."""
        for param, grad in params_grads:
            if grad is None or not param.trainable:
                continue
            with block.program._optimized_guard([param, grad]):
                for acc, beta in powers:
                    var = self._get_accumulator(acc, param)
                    block.append_op("scale", inputs={"X": [var]}, outputs={"Out": [var]},
                                    attrs={"scale": beta})

    def _append_optimize_op(self, block: Any, param_and_grad: tuple[Any, Any]) -> Any:
        """The update op ``self.type``: Param, Grad, LearningRate and the ``_state``
        accumulators in; ParamOut and the accumulators it writes out (in place)."""
        param, grad = param_and_grad
        inputs = {"Param": [param], "Grad": [grad],
                  "LearningRate": [self._create_param_lr(param_and_grad)]}
        outputs = {"ParamOut": [param]}
        for st in self._state:
            acc = self._get_accumulator(st.acc, param)
            inputs[st.slot] = [acc]
            if st.out:
                outputs[st.out] = [acc]
        return block.append_op(self.type, inputs=inputs, outputs=outputs,
                               attrs=self._update_attrs(param))

    # ---- the passes
    def backward(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list: list[Any] | None = None, no_grad_set: Any = None,
                 callbacks: Any = None) -> list[tuple[Parameter, Variable]]:
        with program_guard(loss.block.program, startup_program or default_startup_program()):
            return append_backward(loss, parameter_list, no_grad_set, callbacks)

    def apply_gradients(self, params_grads: list[tuple[Any, Any]]) -> list[Any]:
        """Clip, regularize, then append the update ops; return them."""
        from ..clip import append_gradient_clip_ops

        params_grads = sorted(params_grads, key=lambda pg: pg[0].name)
        params_grads = append_gradient_clip_ops(params_grads, self._grad_clip)
        params_grads = append_regularization_ops(params_grads, self.regularization)
        return self._create_optimization_pass(params_grads)

    def _create_optimization_pass(self, params_grads: list[tuple[Any, Any]]) -> list[Any]:
        program = default_main_program()
        block = program.global_block()
        start = len(block.ops)
        self.helper = LayerHelper(type(self).__name__)
        params = [p for p, g in params_grads if g is not None and p.trainable]
        self._create_accumulators(block, params)
        self._create_global_learning_rate()
        for param, grad in params_grads:
            if grad is None or not param.trainable:
                continue
            # NOTE: with no guard around minimize, an update runs where its gradient is made
            # (nothing changes for an unplaced program: its ops carry no place)
            with program._optimized_guard([param, grad]), \
                    follow_place(_writer_place(block, grad)):
                self._append_optimize_op(block, (param, grad))
        with program._role_guard(OpRole.Optimize):
            self._finish_update(block, params_grads)
        # as Fluid's: every op this pass appended (a parameter's learning-rate scale, the
        # update, the bias-correction powers), in program order
        return list(block.ops[start:])

    def apply_optimize(self, loss: Variable, startup_program: Program | None,
                       params_grads: list[tuple[Any, Any]]) -> list[Any]:
        with program_guard(loss.block.program, startup_program or default_startup_program()):
            return self.apply_gradients(params_grads)

    def minimize(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list: list[Any] | None = None, no_grad_set: Any = None,
                 grad_clip: Any = None) -> tuple[list[Any], list[tuple[Any, Any]]]:
        """Append backward and update ops for ``loss``; return (optimize_ops, params_grads).

        In the imperative mode (``fluid.dygraph.guard()``) the gradients ``loss.backward()``
        accumulated are clipped by ``grad_clip`` and the parameters updated at once. As in
        Fluid 1.6, static programs ignore ``grad_clip`` and clip with
        ``fluid.clip.set_gradient_clip`` or a ParamAttr's ``gradient_clip``."""
        if in_dygraph_mode():
            return self._dygraph_minimize(parameter_list, no_grad_set, grad_clip)
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        return self.apply_optimize(loss, startup_program, params_grads), params_grads


    def _dygraph_minimize(self, parameter_list: list[Any] | None, no_grad_set: Any,
                          grad_clip: Any) -> tuple[list[Any], list[tuple[Any, Any]]]:
        """The imperative minimize: the gradients ``loss.backward()`` accumulated, clipped
        by ``grad_clip`` (a ``fluid.dygraph_grad_clip`` object), regularized, then the same
        update ops as in a Program, run at once."""
        tracer = _dygraph_tracer()
        params = tracer.all_parameters() if not parameter_list else list(parameter_list)
        skip = {v if isinstance(v, str) else v.name for v in (no_grad_set or ())}
        params_grads = []
        for p in params:
            if not isinstance(p, Parameter):
                raise TypeError(f"{type(self).__name__}.minimize: parameter_list holds a "
                                f"{type(p).__name__}, expected parameters")
            if not p.trainable or p.name in skip or getattr(p, "_grad", None) is None:
                continue
            grad = tracer.create_var(p.block, name=f"{p.name}@GRAD", stop_gradient=True)
            grad._value = p._grad
            params_grads.append((p, grad))
        with tracer._no_grad():
            from ..clip import BaseGradientClipAttr, append_gradient_clip_ops

            if grad_clip is not None and not isinstance(grad_clip, BaseGradientClipAttr):
                if not callable(grad_clip):
                    raise TypeError(f"{type(self).__name__}.minimize: grad_clip must be a "
                                    "fluid.dygraph_grad_clip object (GradClipByValue, "
                                    "GradClipByNorm, GradClipByGlobalNorm), got "
                                    f"{type(grad_clip).__name__}")
                params_grads = grad_clip(params_grads)
            else:
                params_grads = append_gradient_clip_ops(params_grads,
                                                        grad_clip or self._grad_clip)
            params_grads = append_regularization_ops(params_grads, self.regularization)
            ops = self._create_optimization_pass(params_grads)
        return ops, params_grads


_LR_STEP_KEY = "global_step"  # Fluid's key of the decay's step in a state dict
_OLD_LR_STEP_KEY = "@LR_DECAY_COUNTER@"  # the key files written by parafluid before hold


def _is_lr_decay(lr: Any) -> bool:
    """A ``fluid.dygraph`` learning-rate decay (``NoamDecay``, ...)."""
    return callable(lr) and hasattr(lr, "create_lr_var") and hasattr(lr, "step")


def _writer_place(block: Any, var: Any) -> dict[str, str]:
    """The place attrs of the last op of ``block`` writing ``var`` (empty if unplaced)."""
    name = var.name if isinstance(var, Variable) else var
    for op in reversed(block.ops):
        if name in op.output_arg_names:
            return place_attrs(op)
    return {}


def _check_number(owner: str, **values: Any) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{owner}: {name} must be a number, got {type(v).__name__}: {v!r}")

