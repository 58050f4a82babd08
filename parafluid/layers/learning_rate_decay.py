"""Learning-rate decays of the imperative mode: an optimizer given one takes one step of it
per ``minimize`` (Fluid 1.6's formulas, the same numbers as the ``fluid.layers`` decays of
a Program). ``fluid.dygraph`` re-exports them; the ``fluid.layers`` decays return them in
the imperative mode, so they live here, beneath both.

Example::

    with fluid.dygraph.guard():
        lr = fluid.dygraph.ExponentialDecay(0.1, decay_steps=100, decay_rate=0.5)
        opt = fluid.optimizer.SGD(learning_rate=lr)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .. import framework, unique_name

__all__ = ["LearningRateDecay", "NoamDecay", "PiecewiseDecay", "NaturalExpDecay",
           "ExponentialDecay", "InverseTimeDecay", "PolynomialDecay", "CosineDecay"]


class LearningRateDecay:
    """Base class: ``decay()`` gives the learning rate of step ``step_num`` as a variable,
    then advances ``step_num`` by ``step``; subclasses define ``step()`` (a float)."""

    def __init__(self, begin: int = 0, step: int = 1, dtype: str = "float32") -> None:
        self.step_num = begin
        self.step_size = step
        self.dtype = dtype

    def __call__(self) -> Any:
        lr = self.step()
        if isinstance(lr, (int, float)):
            lr = self.create_lr_var(float(lr))
        self.step_num += self.step_size
        return lr

    def create_lr_var(self, lr: float) -> Any:
        """A one-element variable holding ``lr`` (in the imperative mode a plain variable:
        one is made per step, and the tracer keeps only persistable ones)."""
        tracer = framework._dygraph_tracer()
        if tracer is not None:  # what fluid.dygraph.to_variable makes of the value
            value = torch.from_numpy(np.array([lr], dtype=self.dtype)).to(tracer.device)
            return framework.default_main_program().current_block().create_var(
                name=unique_name.generate("learning_rate"), value=value, stop_gradient=True)
        from .tensor import create_global_var

        return create_global_var(name=unique_name.generate("learning_rate"), shape=[1],
                                 value=float(lr), dtype=self.dtype, persistable=True)

    def step(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define step()")


def _positive(owner: str, **values: Any) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise ValueError(f"{owner}: {name} must be a positive number, got {v!r}")


class PiecewiseDecay(LearningRateDecay):
    """``values[i]`` while ``step_num < boundaries[i]``, ``values[-1]`` after the last."""

    def __init__(self, boundaries: Sequence[int], values: Sequence[float], begin: int,
                 step: int = 1, dtype: str = "float32") -> None:
        super().__init__(begin, step, dtype)
        if len(values) != len(boundaries) + 1:
            raise ValueError(f"PiecewiseDecay: {len(boundaries)} boundaries need "
                             f"{len(boundaries) + 1} values, got {len(values)}")
        self.boundaries = list(boundaries)
        self.values = [float(v) for v in values]

    def step(self) -> float:
        for boundary, value in zip(self.boundaries, self.values):
            if self.step_num < boundary:
                return value
        return self.values[-1]


class _RateDecay(LearningRateDecay):
    def __init__(self, learning_rate: float, decay_steps: int, decay_rate: float,
                 staircase: bool = False, begin: int = 0, step: int = 1,
                 dtype: str = "float32") -> None:
        super().__init__(begin, step, dtype)
        _positive(type(self).__name__, decay_steps=decay_steps)
        self.learning_rate = float(learning_rate)
        self.decay_steps = decay_steps
        self.decay_rate = float(decay_rate)
        self.staircase = bool(staircase)

    def _ratio(self) -> float:
        ratio = self.step_num / self.decay_steps
        return math.floor(ratio) if self.staircase else ratio


class NaturalExpDecay(_RateDecay):
    """``learning_rate * exp(-decay_rate * step_num / decay_steps)`` (the ratio floored
    when ``staircase``)."""

    def step(self) -> float:
        return self.learning_rate * math.exp(-self.decay_rate * self._ratio())


class ExponentialDecay(_RateDecay):
    """``learning_rate * decay_rate ** (step_num / decay_steps)``."""

    def step(self) -> float:
        return self.learning_rate * self.decay_rate ** self._ratio()


class InverseTimeDecay(_RateDecay):
    """``learning_rate / (1 + decay_rate * step_num / decay_steps)``."""

    def step(self) -> float:
        return self.learning_rate / (1 + self.decay_rate * self._ratio())


class PolynomialDecay(LearningRateDecay):
    """``(learning_rate - end) * (1 - step/decay_steps) ** power + end``; with ``cycle`` the
    decay restarts every ``decay_steps * ceil(step/decay_steps)`` steps."""

    def __init__(self, learning_rate: float, decay_steps: int,
                 end_learning_rate: float = 0.0001, power: float = 1.0, cycle: bool = False,
                 begin: int = 0, step: int = 1, dtype: str = "float32") -> None:
        super().__init__(begin, step, dtype)
        _positive("PolynomialDecay", decay_steps=decay_steps)
        self.learning_rate = float(learning_rate)
        self.decay_steps = decay_steps
        self.end_learning_rate = float(end_learning_rate)
        self.power = float(power)
        self.cycle = bool(cycle)

    def step(self) -> float:
        step_num, decay_steps = float(self.step_num), float(self.decay_steps)
        if self.cycle:
            div = math.ceil(step_num / decay_steps) if step_num else 1.0
            decay_steps *= div
        else:
            step_num = min(step_num, decay_steps)
        return ((self.learning_rate - self.end_learning_rate)
                * (1 - step_num / decay_steps) ** self.power + self.end_learning_rate)


class CosineDecay(LearningRateDecay):
    """``learning_rate * 0.5 * (cos(epoch * pi / epochs) + 1)``, ``epoch =
    floor(step_num / step_each_epoch)``."""

    def __init__(self, learning_rate: float, step_each_epoch: int, epochs: int,
                 begin: int = 0, step: int = 1, dtype: str = "float32") -> None:
        super().__init__(begin, step, dtype)
        _positive("CosineDecay", step_each_epoch=step_each_epoch, epochs=epochs)
        self.learning_rate = float(learning_rate)
        self.step_each_epoch = step_each_epoch
        self.epochs = epochs

    def step(self) -> float:
        epoch = math.floor(self.step_num / self.step_each_epoch)
        return self.learning_rate * 0.5 * (math.cos(epoch * math.pi / self.epochs) + 1)


class NoamDecay(LearningRateDecay):
    """``d_model ** -0.5 * min(step_num ** -0.5, warmup_steps ** -1.5 * step_num)`` (the
    Transformer's warm-up; steps count from ``begin`` = 1)."""

    def __init__(self, d_model: int, warmup_steps: int, begin: int = 1, step: int = 1,
                 dtype: str = "float32") -> None:
        super().__init__(begin, step, dtype)
        _positive("NoamDecay", d_model=d_model, warmup_steps=warmup_steps)
        self.d_model = d_model
        self.warmup_steps = warmup_steps

    def step(self) -> float:
        if self.step_num <= 0:
            raise ValueError(f"NoamDecay: step {self.step_num} must be positive (begin at 1)")
        return self.d_model ** -0.5 * min(self.step_num ** -0.5,
                                          self.warmup_steps ** -1.5 * self.step_num)
