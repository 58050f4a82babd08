"""``fluid.install_check.run_check()``: train a tiny program once to show parafluid works.

Example::

    import parafluid as fluid
    fluid.install_check.run_check()   # prints "parafluid works: ..." or raises
"""

from __future__ import annotations

import numpy as np

__all__ = ["run_check"]


def run_check() -> None:
    """Build a one-layer regression, run a few SGD steps on the CPU and check that the loss
    falls; print a line saying so, or raise a RuntimeError saying what went wrong."""
    from . import layers, optimizer
    from .executor import Executor
    from .framework import Program, program_guard
    from .place import CPUPlace
    from .scope import Scope, scope_guard

    main, startup = Program(), Program()
    with program_guard(main, startup):
        x = layers.data(name="x", shape=[2], dtype="float32")
        y = layers.data(name="y", shape=[1], dtype="float32")
        loss = layers.mean(layers.square_error_cost(layers.fc(input=x, size=1), label=y))
        optimizer.SGD(learning_rate=0.1).minimize(loss)
    rng = np.random.RandomState(0)
    xs = rng.rand(16, 2).astype("float32")
    ys = xs @ np.array([[1.0], [-2.0]], "float32")
    exe = Executor(CPUPlace())
    with scope_guard(Scope()):
        exe.run(startup)
        losses = [float(exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[loss])[0])
                  for _ in range(10)]
    if not losses[-1] < losses[0]:
        raise RuntimeError(f"install check: the loss did not fall over 10 steps: {losses}")
    print(f"parafluid works: a one-layer regression trained on the CPU "
          f"(loss {losses[0]:.4f} -> {losses[-1]:.4f})")
