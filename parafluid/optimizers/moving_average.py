"""Averaged weights of Fluid's optimizer module: ``ExponentialMovingAverage`` (shadow copies
of the parameters that follow them with a decay, swapped in for evaluation with ``apply``
and back with ``restore``) and ``LookaheadOptimizer`` (slow weights pulled towards the fast
ones every ``k`` steps) and ``ModelAverage`` (the average over a sliding window of steps).

Each ``update()`` (ops appended to the main program after ``minimize``) computes
``ema = decay * ema + (1 - decay) * param`` and ``decay_pow *= decay``; ``apply`` runs a
program that saves the parameters and writes the bias-corrected averages
``ema / (1 - decay_pow)`` into them, ``restore`` one that puts the saved values back. With
``thres_steps`` (a step counter Variable) the decay of each step is
``min(decay, (thres_steps + 1) / (thres_steps + 10))``.

Example::

    opt.minimize(loss)
    ema = fluid.optimizer.ExponentialMovingAverage(0.999)
    ema.update()
    ...                                   # train with exe.run(main)
    with ema.apply(exe):
        exe.run(test_program)             # evaluated with the averaged parameters
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from .. import unique_name
from ..framework import Program, Variable, default_main_program, program_guard
from .base import Optimizer

__all__ = ["ExponentialMovingAverage", "LookaheadOptimizer", "ModelAverage"]


class _SwappedAverages:
    """What ExponentialMovingAverage and ModelAverage share: per parameter a backup variable
    and an average computed from persistable accumulators; ``apply_program`` saves each
    parameter in its backup and writes the average into it, ``restore_program`` copies the
    backup back. Subclasses set ``_params`` and provide ``_backup_of`` and ``_average``."""

    _params: list[Variable]

    def _backup_of(self, p: Variable) -> Variable:
        raise NotImplementedError

    def _average(self, p: Variable, declare: Callable[[Variable], Variable]) -> Variable:
        """Ops computing ``p``'s average, appended to the swap program; ``declare`` makes a
        main-program variable visible in it."""
        raise NotImplementedError

    def _build_swap_programs(self) -> None:
        self.apply_program = self._swap_program(to_average=True)
        self.restore_program = self._swap_program(to_average=False)

    def _swap_program(self, to_average: bool) -> Program:
        from ..layers import assign

        program = Program()
        block = program.global_block()

        def declare(v: Variable) -> Variable:
            return block.create_var(name=v.name, shape=list(v.shape), dtype=v.dtype,
                                    persistable=True)

        with program_guard(program, Program()):
            for p in self._params:
                param, backup = declare(p), declare(self._backup_of(p))
                if to_average:
                    assign(param, output=backup)
                    assign(self._average(p, declare), output=param)
                else:
                    assign(backup, output=param)
        return program

    @contextlib.contextmanager
    def apply(self, executor: Any, need_restore: bool = True) -> Iterator[None]:
        """Swap the averages in for the block's duration (and back after, with
        ``need_restore``)."""
        executor.run(self.apply_program)
        try:
            yield
        finally:
            if need_restore:
                self.restore(executor)

    def restore(self, executor: Any) -> None:
        """Put back the parameters ``apply`` replaced."""
        executor.run(self.restore_program)


class ExponentialMovingAverage(_SwappedAverages):
    """Moving averages of every parameter whose ``ParamAttr(do_model_average=...)`` is not
    False, in the default main program when it is constructed."""

    def __init__(self, decay: float = 0.999, thres_steps: Variable | None = None,
                 name: str | None = None) -> None:
        from ..layers import create_global_var

        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or \
                not 0.0 < decay < 1.0:
            raise ValueError(f"ExponentialMovingAverage: decay must be a number in (0, 1), "
                             f"got {decay!r}")
        if thres_steps is not None and not isinstance(thres_steps, Variable):
            raise TypeError(f"ExponentialMovingAverage: thres_steps must be a step-counter "
                            f"Variable or None, got {type(thres_steps).__name__}")
        self._decay, self._thres_steps = float(decay), thres_steps
        self._name = name or ""
        self._params = [p for p in default_main_program().global_block().all_parameters()
                        if p.do_model_average is not False]
        if not self._params:
            raise ValueError("ExponentialMovingAverage: the default main program has no "
                             "parameters to average; build the model first")
        self._ema: dict[str, Variable] = {}
        self._backup: dict[str, Variable] = {}
        for p in self._params:
            self._ema[p.name] = create_global_var(
                shape=list(p.shape), value=0.0, dtype=p.dtype, persistable=True,
                name=unique_name.generate(f"{self._name}{p.name}_ema"))
            self._backup[p.name] = create_global_var(
                shape=list(p.shape), value=0.0, dtype=p.dtype, persistable=True,
                name=unique_name.generate(f"{self._name}{p.name}_ema_backup"))
        self._decay_pow = create_global_var(
            shape=[1], value=1.0, dtype="float32", persistable=True,
            name=unique_name.generate(f"{self._name}ema_decay_pow"))
        self._build_swap_programs()

    def _backup_of(self, p: Variable) -> Variable:
        return self._backup[p.name]

    def _average(self, p: Variable, declare: Callable[[Variable], Variable]) -> Variable:
        from ..layers import elementwise_div, fill_constant, scale

        # bias correction: ema / (1 - decay_pow)
        one_minus = scale(declare(self._decay_pow), scale=-1.0, bias=1.0)
        return elementwise_div(declare(self._ema[p.name]),
                               fill_constant(list(p.shape), p.dtype, 0.0) + one_minus)

    def update(self) -> None:
        """Append the averaging ops to the default main program (after ``minimize``)."""
        from ..layers import assign, cast, elementwise_min, fill_constant

        decay: Any = fill_constant([1], "float32", self._decay)
        if self._thres_steps is not None:
            # NOTE: the documented (1 + steps) / (10 + steps) in float: an int64 step counter
            # divided as itself would truncate to 0 (elementwise_div on integers is C++'s)
            steps = cast(self._thres_steps, "float32")
            warm = (steps + 1.0) / (steps + 10.0)
            decay = elementwise_min(decay, warm)
        for p in self._params:
            ema = self._ema[p.name]
            assign(ema * decay + p * (1.0 - decay), output=ema)
        assign(self._decay_pow * decay, output=self._decay_pow)

class LookaheadOptimizer:
    """Lookahead (Zhang et al.): ``inner_optimizer`` updates the fast weights every step;
    every ``k`` steps the slow weights move ``alpha`` of the way to them and the fast
    weights restart from there::

        slow = alpha * fast + (1 - alpha) * slow;  fast = slow

    Example::

        sgd = fluid.optimizer.SGD(learning_rate=0.1)
        fluid.optimizer.LookaheadOptimizer(sgd, alpha=0.5, k=5).minimize(loss)
    """

    def __init__(self, inner_optimizer: Any, alpha: float = 0.5, k: int = 5) -> None:
        if inner_optimizer is None or not hasattr(inner_optimizer, "minimize"):
            raise TypeError(f"LookaheadOptimizer: inner_optimizer must be an optimizer, got "
                            f"{inner_optimizer!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or \
                not 0.0 <= alpha <= 1.0:
            raise ValueError(f"LookaheadOptimizer: alpha must be in [0, 1], got {alpha!r}")
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise ValueError(f"LookaheadOptimizer: k must be a positive int, got {k!r}")
        self.inner_optimizer, self.alpha, self.k = inner_optimizer, float(alpha), k

    def minimize(self, loss: Variable, startup_program: Program | None = None) -> Any:
        """The inner optimizer's ``minimize``, then the slow weights (copied from the
        parameters by the startup program) and their every-``k``-steps update."""
        from ..framework import default_startup_program
        from ..layers import (
            Switch,
            assign,
            create_global_var,
            elementwise_mod,
            equal,
            fill_constant,
            increment,
        )

        result = self.inner_optimizer.minimize(loss, startup_program=startup_program)
        main = loss.block.program
        startup = startup_program or default_startup_program()
        params = [p for p in main.global_block().all_parameters() if p.trainable]
        slow: dict[str, Variable] = {}
        with program_guard(main, startup):
            for p in params:
                slow[p.name] = create_global_var(
                    shape=list(p.shape), value=0.0, dtype=p.dtype, persistable=True,
                    name=unique_name.generate(f"{p.name}@SLOW"))
        sblock = startup.global_block()
        for p in params:  # after the initializers: slow starts equal to the parameter
            sblock.append_op("assign", inputs={"X": [sblock.var(p.name)]},
                             outputs={"Out": [sblock.var(slow[p.name].name)]})
        with program_guard(main, startup):
            step = create_global_var([1], 0.0, "int64", persistable=True,
                                     name=unique_name.generate("lookahead_step"))
            increment(step, 1.0, in_place=True)
            k = fill_constant([1], "int64", self.k)
            sync = equal(elementwise_mod(step, k), fill_constant([1], "int64", 0))
            with Switch() as switch:
                with switch.case(sync):
                    for p in params:
                        mixed = p * self.alpha + slow[p.name] * (1.0 - self.alpha)
                        assign(mixed, output=slow[p.name])
                        assign(mixed, output=p)
        return result


class ModelAverage(_SwappedAverages, Optimizer):
    """Fluid's ModelAverage (an ``Optimizer`` there too, whose methods it inherits): the
    parameters averaged over a sliding window of recent steps, swapped in for evaluation by
    ``apply`` and back by ``restore``.

    Construct it after ``minimize``: every trainable parameter (``do_model_average`` not
    False) gets the accumulators of op ``average_accumulates`` (``sum_1``, ``sum_2``,
    ``sum_3`` and three int64 counters), updated each step. ``apply`` writes
    ``(sum_1 + sum_2 + sum_3) / (num_accumulates + old_num_accumulates)`` into the
    parameters. The window holds at least ``min_average_window`` steps, and restarts once it
    holds ``min(max_average_window, steps * average_window_rate)``.

    Example::

        opt.minimize(loss)
        model_average = fluid.optimizer.ModelAverage(0.15, min_average_window=10000,
                                                     max_average_window=20000)
        ...
        with model_average.apply(exe):
            exe.run(test_program)
    """

    def __init__(self, average_window_rate: float, min_average_window: int = 10000,
                 max_average_window: int = 10000, regularization: Any = None,
                 name: str | None = None) -> None:
        from ..layers import create_global_var

        super().__init__(0.0, regularization, name)
        self.average_window = float(average_window_rate)
        self.min_average_window = int(min_average_window)
        self.max_average_window = int(max_average_window)
        prefix = name or ""
        main = default_main_program()
        self._params = [p for p in main.global_block().all_parameters()
                        if p.trainable and p.do_model_average is not False]
        if not self._params:
            raise ValueError("ModelAverage: the default main program has no trainable "
                             "parameters to average; build the model and minimize first")
        self._acc: dict[str, dict[str, Variable]] = {}
        for p in self._params:
            acc = {}
            for slot in ("sum_1", "sum_2", "sum_3", "backup"):
                acc[slot] = create_global_var(list(p.shape), 0.0, p.dtype, persistable=True,
                                              name=unique_name.generate(f"{prefix}{p.name}_{slot}"))
            for slot in ("num_accumulates", "old_num_accumulates", "num_updates"):
                acc[slot] = create_global_var([1], 0.0, "int64", persistable=True,
                                              name=unique_name.generate(f"{prefix}{p.name}_{slot}"))
            self._acc[p.name] = acc
            block = main.global_block()
            block.append_op(
                "average_accumulates",
                inputs={"param": [p], **{f"in_{k}": [acc[k]] for k in (
                    "sum_1", "sum_2", "sum_3", "num_accumulates", "old_num_accumulates",
                    "num_updates")}},
                outputs={f"out_{k}": [acc[k]] for k in (
                    "sum_1", "sum_2", "sum_3", "num_accumulates", "old_num_accumulates",
                    "num_updates")},
                attrs={"average_window": self.average_window,
                       "min_average_window": self.min_average_window,
                       "max_average_window": self.max_average_window})
        self._build_swap_programs()

    def _backup_of(self, p: Variable) -> Variable:
        return self._acc[p.name]["backup"]

    def _average(self, p: Variable, declare: Callable[[Variable], Variable]) -> Variable:
        from ..layers import cast, elementwise_div, sums

        acc = {k: declare(v) for k, v in self._acc[p.name].items() if k != "backup"}
        total = sums([acc["sum_1"], acc["sum_2"], acc["sum_3"]])
        count = cast(sums([acc["num_accumulates"], acc["old_num_accumulates"]]), p.dtype)
        return elementwise_div(total, count)
