"""Shared model for the fluid.io tests: a small two-layer regressor trained with SGD."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid


class Model:
    """Programs, scope and executor of a tiny model; ``step()`` runs one training step."""

    def __init__(self, hidden: int = 8, seed: int = 1, dtype: str = "float32") -> None:
        self.main, self.startup = fluid.Program(), fluid.Program()
        self.main.random_seed = self.startup.random_seed = seed
        with fluid.unique_name.guard(), fluid.program_guard(self.main, self.startup):
            self.x = fluid.layers.data(name="x", shape=[4], dtype=dtype)
            self.y = fluid.layers.data(name="y", shape=[3], dtype=dtype)
            h = fluid.layers.fc(input=self.x, size=hidden)
            self.pred = fluid.layers.fc(input=h, size=3)
            diff = fluid.layers.elementwise_sub(self.pred, self.y)
            self.loss = fluid.layers.mean(fluid.layers.elementwise_mul(diff, diff))
            fluid.optimizer.SGD(learning_rate=0.05).minimize(self.loss)
        self.scope = fluid.Scope()
        self.exe = fluid.Executor(fluid.CPUPlace())
        self.exe.run(self.startup, scope=self.scope)
        rng = np.random.RandomState(0)
        self.xs = rng.uniform(-1, 1, (6, 4)).astype(dtype)
        self.ys = rng.uniform(-1, 1, (6, 3)).astype(dtype)

    def step(self) -> float:
        loss, = self.exe.run(self.main, feed={"x": self.xs, "y": self.ys},
                             fetch_list=[self.loss], scope=self.scope)
        return float(loss[0])

    def value(self, name: str) -> np.ndarray:
        return np.array(self.scope.find_var(name).get_tensor())

    def params(self) -> dict[str, np.ndarray]:
        return {p.name: self.value(p.name) for p in self.main.all_parameters()}


@pytest.fixture
def model() -> Model:
    m = Model()
    for _ in range(3):
        m.step()
    return m
