"""Learning-rate schedules: layers that compute this step's learning rate in the program.

Each schedule reads a global step counter (the persistable int64 ``@LR_DECAY_COUNTER@``,
advanced by one ``increment`` op at the start of every run; the first run sees step 0) and
returns a one-element Variable to pass as an optimizer's ``learning_rate``::

    lr = fluid.layers.exponential_decay(learning_rate=0.1, decay_steps=1000,
                                        decay_rate=0.5, staircase=True)
    fluid.optimizer.SGD(learning_rate=lr).minimize(avg_cost)

The ops carry ``op_role`` LRSched, so ``Program.clone(for_test=True)`` drops them and the
DistributeTranspiler moves them to the parameter servers.
"""

from __future__ import annotations

import math
from typing import Any

from .. import unique_name
from ..framework import Variable, default_main_program, in_dygraph_mode
from ..initializer import Constant
from ..layer_helper import LayerHelper
from . import learning_rate_decay
from .nn import _simple

__all__ = ["exponential_decay", "natural_exp_decay", "inverse_time_decay", "polynomial_decay",
           "piecewise_decay", "noam_decay", "cosine_decay", "linear_lr_warmup",
           "autoincreased_step_counter"]

LR_DECAY_COUNTER = "@LR_DECAY_COUNTER@"


def autoincreased_step_counter(counter_name: str | None = None, begin: int = 1,
                               step: int = 1) -> Variable:
    """A persistable int64 counter, advanced by ``step`` at the start of every run.

    The first run sees ``begin``. Calling it again with the same name returns the same
    counter (the first call's ``begin`` and ``step`` stay in force).

    Example::

        step = fluid.layers.autoincreased_step_counter(begin=0)  # 0, 1, 2, ... per run
    """
    helper = LayerHelper("global_step_counter")
    name = counter_name or "@STEP_COUNTER@"
    program = default_main_program()
    block = program.global_block()
    if block.has_var(name):
        return block.var(name)
    counter = helper.create_global_variable(name=name, dtype="int64", shape=[1],
                                            persistable=True, stop_gradient=True)
    helper.set_variable_initializer(counter, Constant(int(begin) - int(step), force_cpu=True))
    with program._lr_schedule_guard():
        # NOTE: prepended so that every op of the step, wherever it was built, sees the new
        # value.
        block._prepend_op("increment", inputs={"X": [counter]}, outputs={"Out": [counter]},
                          attrs={"step": float(step)})
    return counter


def _decay_step_counter(begin: int = 0) -> Variable:
    return autoincreased_step_counter(LR_DECAY_COUNTER, begin=begin, step=1)


def _check_lr(layer: str, learning_rate: Any) -> None:
    if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float, Variable)):
        raise TypeError(f"{layer}: learning_rate must be a float or a Variable, "
                        f"got {type(learning_rate).__name__}")


def _check_positive(layer: str, **values: Any) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{layer}: {name} must be a positive number, got {v!r}")


# NOTE: the schedules build Fluid 1.6's programs op for op (its layers write them with
# Variable operators: a Python number next to a Variable is a ``scale`` op, a number raised to
# a Variable's power a ``fill_constant`` then ``elementwise_pow``), so a transpiled program
# and a saved one hold the ops Fluid's hold. The helpers below emit what those operators emit.


def _float_step(begin: int = 0) -> Variable:
    """The decay counter as float32 (Fluid's ``_decay_step_counter``: increment, cast)."""
    from .tensor import cast

    return cast(_decay_step_counter(begin), "float32")


def _scale(x: Variable, scale: float, bias: float = 0.0) -> Variable:
    return _simple("scale", {"X": [x]}, {"scale": float(scale), "bias": float(bias)})


def _const(value: float, dtype: Any = "float32") -> Variable:
    from .tensor import fill_constant

    return fill_constant(shape=[1], dtype=dtype, value=float(value))


def _binary(op_type: str, x: Variable, y: Variable) -> Variable:
    return _simple(op_type, {"X": [x], "Y": [y]}, {"axis": -1})


def _times(factor: float | Variable, x: Variable) -> Variable:
    """``factor * x``: a Variable factor multiplies, a number scales."""
    if isinstance(factor, Variable):
        return _binary("elementwise_mul", factor, x)
    return _scale(x, float(factor))


def _global_rate(name: str, dtype: Any) -> Variable:
    """The persistable rate a Switch assigns (Fluid names it ``name``)."""
    from .tensor import create_global_var

    if default_main_program().global_block().has_var(name):
        name = unique_name.generate(name)
    return create_global_var(shape=[1], value=0.0, dtype=dtype, persistable=True, name=name)


def _ops() -> Any:
    from . import ops

    return ops


def _imperative(name: str, *args: Any) -> Any:
    """In the imperative mode a decay layer returns the schedule object of
    ``fluid.dygraph`` (``learning_rate_decay.py``) that the optimizer advances one step per
    ``minimize``, as Fluid 1.6's layers do there (a variable would hold the first step's
    rate for ever)."""
    return getattr(learning_rate_decay, name)(*args)


def exponential_decay(learning_rate: float | Variable, decay_steps: int, decay_rate: float,
                      staircase: bool = False) -> Variable:
    """``learning_rate * decay_rate ** (step / decay_steps)`` (the exponent floored when
    ``staircase``).

    Example::

        lr = fluid.layers.exponential_decay(0.1, decay_steps=100, decay_rate=0.9,
                                            staircase=True)
        fluid.optimizer.SGD(learning_rate=lr).minimize(avg_cost)
    """
    if in_dygraph_mode():
        return _imperative("ExponentialDecay", learning_rate, decay_steps, decay_rate,
                           staircase)
    _check_lr("exponential_decay", learning_rate)
    _check_positive("exponential_decay", decay_steps=decay_steps, decay_rate=decay_rate)
    with default_main_program()._lr_schedule_guard():
        div = _scale(_float_step(), 1.0 / decay_steps)
        if staircase:
            div = _ops().floor(div)
        return _times(learning_rate, _binary("elementwise_pow", _const(decay_rate), div))


def natural_exp_decay(learning_rate: float | Variable, decay_steps: int, decay_rate: float,
                      staircase: bool = False) -> Variable:
    """``learning_rate * exp(-decay_rate * step / decay_steps)`` (floored when ``staircase``).

    Example::

        lr = fluid.layers.natural_exp_decay(0.1, decay_steps=100, decay_rate=0.5)
    """
    if in_dygraph_mode():
        return _imperative("NaturalExpDecay", learning_rate, decay_steps, decay_rate,
                           staircase)
    _check_lr("natural_exp_decay", learning_rate)
    _check_positive("natural_exp_decay", decay_steps=decay_steps)
    with default_main_program()._lr_schedule_guard():
        div = _scale(_float_step(), 1.0 / decay_steps)
        if staircase:
            div = _ops().floor(div)
        return _times(learning_rate, _ops().exp(_scale(div, -1 * decay_rate)))


def inverse_time_decay(learning_rate: float | Variable, decay_steps: int, decay_rate: float,
                       staircase: bool = False) -> Variable:
    """``learning_rate / (1 + decay_rate * step / decay_steps)`` (floored when ``staircase``).

    Example::

        lr = fluid.layers.inverse_time_decay(0.1, decay_steps=100, decay_rate=0.5)
    """
    if in_dygraph_mode():
        return _imperative("InverseTimeDecay", learning_rate, decay_steps, decay_rate,
                           staircase)
    _check_lr("inverse_time_decay", learning_rate)
    _check_positive("inverse_time_decay", decay_steps=decay_steps)
    with default_main_program()._lr_schedule_guard():
        div = _scale(_float_step(), 1.0 / decay_steps)
        if staircase:
            div = _ops().floor(div)
        denom = _scale(_scale(div, decay_rate), 1.0, 1.0)
        lr = learning_rate if isinstance(learning_rate, Variable) else _const(learning_rate)
        return _binary("elementwise_div", lr, denom)


def polynomial_decay(learning_rate: float | Variable, decay_steps: int,
                     end_learning_rate: float = 0.0001, power: float = 1.0,
                     cycle: bool = False) -> Variable:
    """Decay from ``learning_rate`` to ``end_learning_rate`` over ``decay_steps``::

        t = min(step, decay_steps)        (cycle: decay_steps *= max(1, ceil(step/decay_steps)))
        lr = (learning_rate - end_learning_rate) * (1 - t/decay_steps) ** power
             + end_learning_rate

    Example::

        lr = fluid.layers.polynomial_decay(0.01, decay_steps=5000, end_learning_rate=0.0)
    """
    if in_dygraph_mode():
        return _imperative("PolynomialDecay", learning_rate, decay_steps, end_learning_rate,
                           power, cycle)
    _check_lr("polynomial_decay", learning_rate)
    _check_positive("polynomial_decay", decay_steps=decay_steps)
    from . import control_flow, index
    from .nn import elementwise_min
    from .tensor import assign

    with default_main_program()._lr_schedule_guard():
        step = _float_step()
        if cycle:
            div = _ops().ceil(_scale(step, 1.0 / decay_steps))
            zero, one = _const(0.0), _const(1.0)
            with control_flow.Switch() as switch:
                with switch.case(index.equal(step, zero)):
                    assign(one, div)
            steps: float | Variable = _scale(div, decay_steps)
        else:
            step = elementwise_min(x=step, y=_const(decay_steps))
            steps = decay_steps
        # Python evaluates the left factor first: a Variable rate's op comes first
        factor = _scale(learning_rate, 1.0, -end_learning_rate) \
            if isinstance(learning_rate, Variable) else learning_rate - end_learning_rate
        ratio = _binary("elementwise_div", step, steps) if isinstance(steps, Variable) \
            else _scale(step, 1.0 / steps)
        decayed = _binary("elementwise_pow", _scale(ratio, -1.0, 1.0), _const(power))
        return _scale(_times(factor, decayed), 1.0, end_learning_rate)


def piecewise_decay(boundaries: list[int], values: list[float]) -> Variable:
    """``values[i]`` while ``step < boundaries[i]`` (first such i), else ``values[-1]``.

    Example::

        lr = fluid.layers.piecewise_decay(boundaries=[100, 200], values=[1.0, 0.5, 0.1])
        fluid.optimizer.Momentum(learning_rate=lr, momentum=0.9).minimize(avg_cost)
    """
    if in_dygraph_mode():
        return _imperative("PiecewiseDecay", boundaries, values, 0)
    boundaries, values = list(boundaries), list(values)
    if len(values) - len(boundaries) != 1:
        raise ValueError(f"piecewise_decay: values must have one more entry than boundaries, "
                         f"got {len(boundaries)} boundaries and {len(values)} values")
    if any(b2 < b1 for b1, b2 in zip(boundaries, boundaries[1:])):
        raise ValueError(f"piecewise_decay: boundaries must be increasing, got {boundaries}")
    # Fluid's program: the float32 step, then a Switch assigning values[i] to a persistable
    # rate in the first case with step < boundaries[i] (its conditional_block sub-blocks go
    # to the pservers with the LR block)
    from . import control_flow, tensor

    program = default_main_program()
    with program._lr_schedule_guard():
        step = tensor.cast(_decay_step_counter(), "float32")
        name = "learning_rate"
        if program.global_block().has_var(name):
            name = unique_name.generate(name)
        lr = tensor.create_global_var(shape=[1], value=0.0, dtype="float32", persistable=True,
                                      name=name)
        with control_flow.Switch() as switch:
            for boundary, value in zip(boundaries, values):
                boundary_val = tensor.fill_constant(shape=[1], dtype="float32",
                                                    value=float(boundary), force_cpu=True)
                value_var = tensor.fill_constant(shape=[1], dtype="float32", value=float(value))
                with switch.case(step < boundary_val):
                    tensor.assign(value_var, lr)
            last_value = tensor.fill_constant(shape=[1], dtype="float32", value=float(values[-1]))
            with switch.default():
                tensor.assign(last_value, lr)
    return lr


def noam_decay(d_model: float, warmup_steps: int,
               learning_rate: float | Variable = 1.0) -> Variable:
    """``learning_rate * d_model**-0.5 * min(step**-0.5, warmup_steps**-1.5 * step)``, from
    step 1 ("Attention is all you need").

    Example::

        lr = fluid.layers.noam_decay(d_model=512, warmup_steps=4000)
    """
    if in_dygraph_mode():
        if learning_rate != 1.0:
            raise ValueError("noam_decay: in the imperative mode the schedule is "
                             "fluid.dygraph.NoamDecay, which has no learning_rate factor; "
                             f"got learning_rate={learning_rate!r}")
        return _imperative("NoamDecay", d_model, warmup_steps)
    _check_lr("noam_decay", learning_rate)
    _check_positive("noam_decay", d_model=d_model, warmup_steps=warmup_steps)
    from .nn import elementwise_min

    with default_main_program()._lr_schedule_guard():
        step = _float_step(1)
        a = _binary("elementwise_pow", step, _const(-0.5))
        b = _scale(step, warmup_steps ** -1.5)
        if isinstance(learning_rate, Variable):
            factor: float | Variable = _scale(learning_rate, d_model ** -0.5)
        else:
            factor = learning_rate * d_model ** -0.5
        return _times(factor, elementwise_min(a, b))


def cosine_decay(learning_rate: float | Variable, step_each_epoch: int,
                 epochs: int) -> Variable:
    """``learning_rate * 0.5 * (cos(epoch * pi / epochs) + 1)``, ``epoch =
    floor(step / step_each_epoch)``.

    Example::

        lr = fluid.layers.cosine_decay(0.1, step_each_epoch=100, epochs=120)
    """
    if in_dygraph_mode():
        return _imperative("CosineDecay", learning_rate, step_each_epoch, epochs)
    _check_lr("cosine_decay", learning_rate)
    _check_positive("cosine_decay", step_each_epoch=step_each_epoch, epochs=epochs)
    with default_main_program()._lr_schedule_guard():
        epoch = _ops().floor(_scale(_float_step(), 1.0 / step_each_epoch))
        factor = _scale(learning_rate, 0.5) if isinstance(learning_rate, Variable) \
            else learning_rate * 0.5
        cos = _ops().cos(_scale(_scale(epoch, math.pi), 1.0 / epochs))
        return _times(factor, _scale(cos, 1.0, 1.0))


def linear_lr_warmup(learning_rate: float | Variable, warmup_steps: int, start_lr: float,
                     end_lr: float) -> Variable:
    """Ramp linearly from ``start_lr`` to ``end_lr`` over ``warmup_steps``, then follow
    ``learning_rate`` (a float or another schedule).

    Example::

        lr = fluid.layers.linear_lr_warmup(
            fluid.layers.piecewise_decay([1000], [0.1, 0.01]),
            warmup_steps=100, start_lr=0.0, end_lr=0.1)
    """
    if in_dygraph_mode():
        raise NotImplementedError("linear_lr_warmup builds a schedule for programs; in the "
                                  "imperative mode subclass fluid.dygraph.LearningRateDecay "
                                  "(its step() returns the rate of step self.step_num)")
    _check_lr("linear_lr_warmup", learning_rate)
    _check_positive("linear_lr_warmup", warmup_steps=warmup_steps)
    from . import control_flow, index
    from .tensor import assign

    dtype = learning_rate.dtype if isinstance(learning_rate, Variable) else "float32"
    with default_main_program()._lr_schedule_guard():
        lr = _global_rate("learning_rate_warmup", dtype)
        step = _float_step()
        with control_flow.Switch() as switch:
            with switch.case(index.less_than(step, _const(warmup_steps))):
                ramp = _scale(_scale(_scale(step, 1.0 / float(warmup_steps)),
                                     float(end_lr) - float(start_lr)), 1.0, float(start_lr))
                assign(ramp, lr)
            with switch.default():
                after = learning_rate if isinstance(learning_rate, Variable) \
                    else _const(learning_rate, dtype)
                assign(after, lr)
    return lr


def __getattr__(name: str) -> object:
    # Fluid 1.6 spells the layers it defined here as fluid.layers.learning_rate_scheduler.<name>
    from .fluid_paths import resolve

    return resolve("learning_rate_scheduler", name)
