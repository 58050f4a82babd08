"""Helpers to check data-parallel training against the single-device Executor.

The specification of the ParallelExecutor is an equality: trained on the same data, N
devices give the losses and parameters of one device on the full batch.

Example::

    def build():
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup):
            ...
        return main, startup, loss

    feeds = [{"x": x_k, "y": y_k} for k in range(5)]
    single = run_single(build, feeds)
    parallel = run_parallel(build, feeds, ndev=2)
    assert_same_training(single, parallel, atol=1e-5)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import unique_name
from ..executor import Executor
from ..place import CPUPlace
from ..scope import Scope

__all__ = ["TrainResult", "run_single", "run_parallel", "assert_same_training"]

Build = Callable[[], tuple[Any, Any, Any]]


@dataclass
class TrainResult:
    """Per-step losses (one value per device) and the trained parameters (per device)."""

    losses: list[np.ndarray]
    device_params: list[dict[str, np.ndarray]]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def params(self) -> dict[str, np.ndarray]:
        return self.device_params[0]


def _param_values(program: Any, scope: Scope) -> dict[str, np.ndarray]:
    return {p.name: np.array(scope.find_var(p.name).get_tensor())
            for p in program.global_block().all_parameters()}


def _built(build: Build) -> tuple[Any, Any, Any]:
    with unique_name.guard():
        return build()


def run_single(build: Build, feeds: Sequence[dict[str, Any]]) -> TrainResult:
    """Train with ``fluid.Executor`` on CPU, one step per feed dict."""
    main, startup, loss = _built(build)
    scope = Scope()
    exe = Executor(CPUPlace())
    exe.run(startup, scope=scope)
    losses = [exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0] for f in feeds]
    return TrainResult(losses, [_param_values(main, scope)])


def run_parallel(build: Build, feeds: Sequence[Any], ndev: int, build_strategy: Any = None,
                 exec_strategy: Any = None, loss_name: bool = True) -> TrainResult:
    """Train with ``fluid.ParallelExecutor`` on ``ndev`` CPU devices, one step per feed."""
    from ..parallel import ParallelExecutor

    main, startup, loss = _built(build)
    scope = Scope()
    Executor(CPUPlace()).run(startup, scope=scope)
    pe = ParallelExecutor(False, loss_name=loss.name if loss_name else None,
                          main_program=main, build_strategy=build_strategy,
                          exec_strategy=exec_strategy, scope=scope,
                          places=[CPUPlace()] * ndev)
    losses = [pe.run([loss.name], feed=f)[0] for f in feeds]
    device_params = [_param_values(main, s) for s in pe._scopes.scopes]
    pe.close()
    return TrainResult(losses, device_params, {"executor": pe, "program": main})


def assert_same_training(single: TrainResult, parallel: TrainResult, atol: float = 1e-5,
                         reduce: str = "mean") -> None:
    """Losses (mean or sum over devices) and every device's parameters match ``single``."""
    assert len(single.losses) == len(parallel.losses)
    for step, (a, b) in enumerate(zip(single.losses, parallel.losses)):
        got = b.mean() if reduce == "mean" else b.sum()
        np.testing.assert_allclose(got, a.reshape(()), rtol=0, atol=atol,
                                   err_msg=f"loss of step {step}")
    for d, params in enumerate(parallel.device_params):
        assert params.keys() == single.params.keys()
        for name, value in single.params.items():
            np.testing.assert_allclose(params[name], value, rtol=0, atol=atol,
                                       err_msg=f"parameter {name} on device {d}")
