"""``fluid.optimizer.DGCMomentumOptimizer``: momentum SGD with deep gradient compression.

The ops and what they compute are in ``parafluid.ops.dgc``; this module appends them as
Fluid 1.6 does (docs/optimizers.md). ``backward`` appends, after the gradients, for every
parameter that is float32, dense and has at least 16384 elements: the local clip
(``dgc_clip_by_norm``, with ``local_grad_clip_norm``), ``dgc`` and the gradient's
all-reduce ``c_dgc_allreduce`` (dense before ``rampup_begin_step``, the top-k encoded
values after; with one device it only adds the encoded values back); ``apply_gradients``
then clips and regularizes every gradient as any optimizer does (after the all-reduce, as
Fluid orders it) and appends ``dgc_momentum`` for the compressed parameters, ``momentum``
for the others. The step counter ``__g_dgc_counter__`` starts at -1 and is incremented by
the first op of the program.
"""

from __future__ import annotations

from typing import Any

from ..framework import OpRole, Parameter, Program, Variable, default_main_program, in_dygraph_mode
from ..layer_helper import LayerHelper
from .base import Optimizer, State, _check_number

__all__ = ["DGCMomentumOptimizer", "DGCMomentum", "DGC_COUNTER_NAME"]

DGC_COUNTER_NAME = "__g_dgc_counter__"
_ENCODED_SUFFIX = "__dgc_encoded__"
_K_SUFFIX = "__dgc_k__"
_MIN_NUMEL = 16384


class DGCMomentumOptimizer(Optimizer):
    """Momentum with deep gradient compression: after ``rampup_begin_step`` each device
    sends only the largest ``1 - sparsity`` fraction of its accumulated gradient.

    Args:
        learning_rate: a float or a learning-rate Variable.
        momentum: the momentum ``m``.
        rampup_begin_step: the step (0 = the first run) from which gradients are compressed;
            before it the optimizer is ``Momentum`` with a dense all-reduce.
        rampup_step: how many steps the ``sparsity`` list is walked over.
        sparsity: the sparsities of the ramp-up, each in [0, 1); 0.999 after its end.
        use_nesterov: Nesterov momentum (in the momentum correction after the ramp-up too).
        local_grad_clip_norm: clip each device's gradient to this norm divided by
            ``num_trainers**2`` after the ramp-up begins (needs ``num_trainers``).
        num_trainers: the number of trainers (for ``local_grad_clip_norm``).
        regularization: a regularizer, applied to the all-reduced gradient.

    Parameters that are not float32, dense, with at least 16384 elements get plain
    ``momentum`` with the same ``U`` velocity.

    Example::

        opt = fluid.optimizer.DGCMomentumOptimizer(
            learning_rate=0.01, momentum=0.9, rampup_begin_step=100, rampup_step=50,
            sparsity=[0.75, 0.9375, 0.99, 0.999])
        opt.minimize(avg_cost)
    """

    type = "dgc_momentum"
    _u_velocity_acc_str = "_dgc_u_"
    _v_velocity_acc_str = "_dgc_v_"
    _state = (State("Velocity", _u_velocity_acc_str, "VelocityOut"),)

    def __init__(self, learning_rate: float | Variable, momentum: float,
                 rampup_begin_step: int, rampup_step: int = 1,
                 sparsity: list[float] | tuple[float, ...] = (0.999,),
                 use_nesterov: bool = False, local_grad_clip_norm: float | None = None,
                 num_trainers: int | None = None, regularization: Any = None,
                 name: str | None = None) -> None:
        owner = "DGCMomentumOptimizer"
        if in_dygraph_mode():
            raise TypeError(f"{owner} builds a Program (its ops are all-reduced by a "
                            "ParallelExecutor); in dygraph mode use fluid.optimizer.Momentum")
        _check_number(owner, momentum=momentum, rampup_begin_step=rampup_begin_step,
                      rampup_step=rampup_step)
        if rampup_begin_step < 0 or int(rampup_begin_step) != rampup_begin_step:
            raise ValueError(f"{owner}: rampup_begin_step must be an integer >= 0, got "
                             f"{rampup_begin_step!r}")
        if rampup_step < 1:
            raise ValueError(f"{owner}: rampup_step must be >= 1, got {rampup_step!r}")
        if isinstance(sparsity, (int, float)) or not isinstance(sparsity, (list, tuple)) or \
                not sparsity:
            raise TypeError(f"{owner}: sparsity must be a non-empty list of numbers in [0, 1), "
                            f"got {sparsity!r}")
        for s in sparsity:
            _check_number(owner, sparsity=s)
            if not 0.0 <= s < 1.0:
                raise ValueError(f"{owner}: every sparsity must be in [0, 1) (the fraction of "
                                 f"the gradient not sent), got {s!r} in {list(sparsity)}")
        self._clip_norm = None
        if local_grad_clip_norm is not None:
            _check_number(owner, local_grad_clip_norm=local_grad_clip_norm)
            if isinstance(num_trainers, bool) or not isinstance(num_trainers, int) or \
                    num_trainers < 1:
                raise ValueError(f"{owner}: local_grad_clip_norm needs num_trainers, an "
                                 f"integer >= 1, got {num_trainers!r}")
            if local_grad_clip_norm <= 0:
                raise ValueError(f"{owner}: local_grad_clip_norm must be > 0, got "
                                 f"{local_grad_clip_norm!r}")
            self._clip_norm = float(local_grad_clip_norm) / (num_trainers * num_trainers)
        super().__init__(learning_rate, regularization, name)
        self._momentum = float(momentum)
        self._use_nesterov = bool(use_nesterov)
        self._rampup_begin_step = int(rampup_begin_step)
        self._rampup_step = int(rampup_step)
        self._sparsity = [float(s) for s in sparsity]
        self._global_step_var: Variable | None = None

    @staticmethod
    def _is_use_dgc(param: Any, grad: Any) -> bool:
        """Fluid's choice: float32, dense, at least 16384 elements."""
        numel = 1
        for d in param.shape:
            numel *= abs(int(d))
        return (numel >= _MIN_NUMEL and param.type != "selected_rows"
                and getattr(grad, "type", None) != "selected_rows"
                and str(param.dtype) in ("float32", "VarType.FP32"))

    # ---- the step counter
    def _step_counter(self) -> Variable:
        program = default_main_program()
        block = program.global_block()
        counter = block.vars.get(DGC_COUNTER_NAME)
        if counter is None:
            from ..layers.tensor import create_global_var

            counter = create_global_var(shape=[1], value=-1.0, dtype="float32",
                                        persistable=True, force_cpu=True,
                                        name=DGC_COUNTER_NAME)
            counter.stop_gradient = True
            with program._role_guard(OpRole.Forward):
                block._prepend_op("increment", inputs={"X": [counter]},
                                  outputs={"Out": [counter]}, attrs={"step": 1.0})
        return counter

    # ---- backward: the compression ops after the gradients
    def backward(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list: list[Any] | None = None, no_grad_set: Any = None,
                 callbacks: Any = None) -> list[tuple[Parameter, Variable]]:
        params_grads = super().backward(loss, startup_program, parameter_list, no_grad_set,
                                        callbacks)
        from ..framework import default_startup_program, program_guard

        with program_guard(loss.block.program, startup_program or default_startup_program()):
            self._append_dgc_ops(params_grads)
        return params_grads

    def _append_dgc_ops(self, params_grads: list[tuple[Any, Any]]) -> None:
        block = default_main_program().global_block()
        self._global_step_var = self._step_counter()
        self.helper = LayerHelper(type(self).__name__)
        from ..layers.tensor import create_global_var

        for param, grad in params_grads:
            if grad is None or not param.trainable:
                continue
            if param.name not in self._accumulators[self._u_velocity_acc_str]:
                self._add_accumulator(self._u_velocity_acc_str, param)
            if not self._is_use_dgc(param, grad):
                continue
            u = self._get_accumulator(self._u_velocity_acc_str, param)
            v = self._add_accumulator(self._v_velocity_acc_str, param)
            k = create_global_var(shape=[1], value=0.0, dtype=param.dtype, persistable=True,
                                  force_cpu=True, name=param.name + _K_SUFFIX)
            encoded = block.create_var(name=param.name + _ENCODED_SUFFIX, dtype=param.dtype,
                                       type="selected_rows", shape=[-1], stop_gradient=True)
            role = {"op_role": OpRole.Backward, "op_role_var": [param.name, grad.name]}
            step = self._global_step_var
            if self._clip_norm is not None:
                block.append_op("dgc_clip_by_norm", inputs={"X": [grad], "current_step": [step]},
                                outputs={"Out": [grad]},
                                attrs={"max_norm": self._clip_norm,
                                       "rampup_begin_step": float(self._rampup_begin_step),
                                       "op_role": OpRole.Backward})
            block.append_op("dgc", inputs={"U": [u], "V": [v], "Grad": [grad],
                                           "current_step": [step]},
                            outputs={"U_out": [u], "V_out": [v], "EncodeGrad": [encoded],
                                     "k": [k], "Grad_out": [grad]},
                            attrs={"m": self._momentum, "sparsity": self._sparsity,
                                   "use_nesterov": self._use_nesterov,
                                   "rampup_begin_step": float(self._rampup_begin_step),
                                   "rampup_step": float(self._rampup_step), **role})
            block.append_op("c_dgc_allreduce",
                            inputs={"X": [grad], "EncodeGrad": [encoded],
                                    "current_step": [step]},
                            outputs={"Out": [grad]},
                            attrs={"rampup_begin_step": float(self._rampup_begin_step), **role})

    # ---- the update ops
    def _create_accumulators(self, block: Any, parameters: list[Parameter]) -> None:
        for p in parameters:  # U exists for the parameters backward saw
            if p.name not in self._accumulators[self._u_velocity_acc_str]:
                self._add_accumulator(self._u_velocity_acc_str, p)

    def _append_optimize_op(self, block: Any, param_and_grad: tuple[Any, Any]) -> Any:
        param, grad = param_and_grad
        u = self._get_accumulator(self._u_velocity_acc_str, param)
        inputs = {"Param": [param], "Grad": [grad], "Velocity": [u],
                  "LearningRate": [self._create_param_lr(param_and_grad)]}
        attrs: dict[str, Any] = {"mu": self._momentum, "use_nesterov": self._use_nesterov}
        op_type = "momentum"
        if param.name in self._accumulators[self._v_velocity_acc_str]:
            op_type = "dgc_momentum"
            inputs["current_step"] = [self._global_step_var]
            attrs["rampup_begin_step"] = float(self._rampup_begin_step)
        return block.append_op(op_type, inputs=inputs,
                               outputs={"ParamOut": [param], "VelocityOut": [u]}, attrs=attrs)


DGCMomentum = DGCMomentumOptimizer
