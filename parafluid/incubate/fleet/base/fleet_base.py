"""The fleet base class: the role queries, ``init`` and the distributed optimizer wrapper.

The two implementations are ``fleet.parameter_server.distribute_transpiler.fleet`` (pserver
mode) and ``fleet.collective.fleet`` (nccl2 mode).
"""

from __future__ import annotations

from typing import Any

from ....executor import Executor
from ....optimizers.base import Optimizer
from ....place import CPUPlace
from .role_maker import PaddleCloudRoleMaker, RoleMakerBase

__all__ = ["Mode", "Fleet", "DistributedOptimizer"]


class Mode:
    """The fleet implementations (``PSLIB`` is Fluid's C++ parameter server: not provided)."""

    TRANSPILER = 1
    PSLIB = 2
    COLLECTIVE = 3


class Fleet:
    """What every fleet knows: its role maker, and through it this process's place.

    ``init(role_maker)`` must come first; without a role maker the launcher's variables are
    read (``PaddleCloudRoleMaker``).
    """

    def __init__(self, mode: int) -> None:
        self._is_initialized = False
        self._mode = mode
        self._optimizer: DistributedOptimizer | None = None
        self._role_maker: RoleMakerBase | None = None
        self._executor: Executor | None = None

    def _roles(self) -> RoleMakerBase:
        if self._role_maker is None:
            raise RuntimeError(f"{type(self).__name__}: call fleet.init(role_maker) first")
        return self._role_maker

    def is_first_worker(self) -> bool:
        return self._roles().is_first_worker()

    def worker_index(self) -> int:
        return self._roles().worker_index()

    def worker_num(self) -> int:
        return self._roles().worker_num()

    def is_worker(self) -> bool:
        return self._roles().is_worker()

    def worker_endpoints(self, to_string: bool = False) -> list[str] | str:
        eps = self._roles().get_trainer_endpoints()
        return ",".join(eps) if to_string else eps

    def server_num(self) -> int:
        return len(self._roles().get_pserver_endpoints())

    def server_index(self) -> int:
        return self._roles().server_index()

    def server_endpoints(self, to_string: bool = False) -> list[str] | str:
        eps = self._roles().get_pserver_endpoints()
        return ",".join(eps) if to_string else eps

    def is_server(self) -> bool:
        return self._roles().is_server()

    def split_files(self, files: list[str]) -> list[str]:
        """This worker's contiguous share of ``files``: the first ``len % workers`` workers
        get one more (files [a, b, c, d, e] on 2 workers: [a, b, c] and [d, e])."""
        if not isinstance(files, list):
            raise TypeError(f"split_files: files must be a list, got {type(files).__name__}")
        trainers, me = self.worker_num(), self.worker_index()
        size, extra = divmod(len(files), trainers)
        begin = me * size + min(me, extra)
        return files[begin:begin + size + (1 if me < extra else 0)]

    def init(self, role_maker: RoleMakerBase | None = None) -> None:
        """Find this process's role (``role_maker.generate_role()``); call once, first."""
        if role_maker is None:
            role_maker = PaddleCloudRoleMaker(is_collective=self._mode == Mode.COLLECTIVE)
        if not isinstance(role_maker, RoleMakerBase):
            raise ValueError(f"fleet.init: role_maker must be a RoleMakerBase (e.g. "
                             f"PaddleCloudRoleMaker()), got {type(role_maker).__name__}")
        self._executor = Executor(CPUPlace())
        self._role_maker = role_maker
        role_maker.generate_role()
        self._is_initialized = True

    # the mode's own part
    def init_worker(self) -> None:
        raise NotImplementedError

    def init_server(self, model_dir: str | None = None) -> None:
        raise NotImplementedError

    def run_server(self) -> None:
        raise NotImplementedError

    def stop_worker(self) -> None:
        raise NotImplementedError

    def distributed_optimizer(self, optimizer: Optimizer, strategy: Any = None
                              ) -> DistributedOptimizer:
        raise NotImplementedError

    def save_inference_model(self, executor: Executor, dirname: str, feeded_var_names: Any,
                             target_vars: Any, main_program: Any = None,
                             export_for_deployment: bool = True) -> None:
        raise NotImplementedError

    def save_persistables(self, executor: Executor, dirname: str,
                          main_program: Any = None) -> None:
        raise NotImplementedError


def check_save_args(where: str, executor: Any, main_program: Any) -> None:
    """Fluid's checks of ``fleet.save_inference_model`` / ``save_persistables``: an
    Executor, and a Program (not a CompiledProgram) when one is given."""
    from ....framework import Program

    if not isinstance(executor, Executor):
        raise TypeError(f"fleet.{where}: executor must be a fluid.Executor, got "
                        f"{type(executor).__name__}")
    if main_program is not None and not isinstance(main_program, Program):
        raise TypeError(f"fleet.{where}: main_program must be a fluid.Program (a "
                        f"CompiledProgram is not allowed), got {type(main_program).__name__}")


class DistributedOptimizer:
    """Wraps a ``fluid.optimizer`` optimizer: ``minimize`` also makes the distributed
    programs, which the fleet then holds (``fleet.main_program``, ``fleet.startup_program``).
    """

    def __init__(self, optimizer: Optimizer, strategy: Any = None) -> None:
        if not isinstance(optimizer, Optimizer):
            raise ValueError(f"distributed_optimizer: optimizer must be a fluid.optimizer "
                             f"optimizer, got {type(optimizer).__name__}")
        self._optimizer = optimizer
        self._strategy = strategy

    def backward(self, loss: Any, startup_program: Any = None, parameter_list: Any = None,
                 no_grad_set: Any = None, callbacks: Any = None) -> list:
        return self._optimizer.backward(loss, startup_program, parameter_list, no_grad_set,
                                        callbacks)

    def apply_gradients(self, params_grads: list) -> list:
        return self._optimizer.apply_gradients(params_grads)

    def minimize(self, loss: Any, startup_program: Any = None, parameter_list: Any = None,
                 no_grad_set: Any = None) -> tuple:
        raise NotImplementedError
