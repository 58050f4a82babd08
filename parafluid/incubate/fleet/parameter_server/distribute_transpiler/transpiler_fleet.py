"""Fleet over the DistributeTranspiler's parameter-server mode.

A script written for Fluid 1.6's fleet runs unchanged under ``python -m
parafluid.distributed.launch --server_num 2 --worker_num 2 script.py``::

    from parafluid.incubate.fleet.base import role_maker
    from parafluid.incubate.fleet.parameter_server.distribute_transpiler import fleet

    fleet.init(role_maker.PaddleCloudRoleMaker())
    optimizer = fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), strategy)
    optimizer.minimize(loss)            # transpiles: fleet.main_program, fleet.startup_program
    if fleet.is_server():
        fleet.init_server()             # runs the pserver's startup program
        fleet.run_server()              # serves until every worker stopped
    else:
        fleet.init_worker()
        exe.run(fleet.startup_program)  # pulls the initial parameters
        ... exe.run(fleet.main_program, feed=..., fetch_list=[loss]) ...
        fleet.stop_worker()             # tells the pservers this worker is done

``strategy`` is a ``DistributeTranspilerConfig`` (``sync_mode=False`` for async training;
``wait_port=False``: ``minimize`` does not wait for the pservers' ports).
"""

from __future__ import annotations

import os
from typing import Any

from .....executor import Executor
from .....framework import Program, default_main_program, default_startup_program
from .....io import load_persistables, save_inference_model, save_persistables
from .....optimizers.base import Optimizer
from .....transpiler import DistributeTranspiler, DistributeTranspilerConfig
from ...base.fleet_base import DistributedOptimizer, Fleet, Mode, check_save_args

__all__ = ["fleet", "DistributedTranspiler", "TranspilerOptimizer"]


class DistributedTranspiler(Fleet):
    """The pserver-mode fleet: ``minimize`` transpiles, the role picks the programs."""

    def __init__(self) -> None:
        super().__init__(Mode.TRANSPILER)
        self._transpile_config: DistributeTranspilerConfig | None = None
        self._transpiler: DistributeTranspiler | None = None
        self._origin_program: Program | None = None
        self.startup_program: Program | None = None
        self.main_program: Program | None = None

    def _need_programs(self, what: str) -> None:
        if self.main_program is None or self.startup_program is None:
            raise ValueError(f"fleet.{what}: no distributed program yet; call "
                             "fleet.distributed_optimizer(optimizer, strategy).minimize(loss) "
                             "first")

    def init_worker(self) -> None:
        """Before training: the programs must exist (the trainer's startup program then
        waits for the pservers and pulls the initial parameters)."""
        self._need_programs("init_worker")
        if not self.is_worker():
            raise ValueError("fleet.init_worker: this process is a server "
                             "(PADDLE_TRAINING_ROLE=PSERVER); call init_server / run_server")

    def init_server(self, model_dir: str | None = None) -> None:
        """Run the pserver's startup program; with ``model_dir``, load the persistables saved
        there (incremental training)."""
        self._need_programs("init_server")
        if not self.is_server():
            raise ValueError("fleet.init_server: this process is a worker; call init_worker")
        assert self._executor is not None
        self._executor.run(self.startup_program)
        if model_dir:
            if not os.path.isdir(model_dir):
                raise ValueError(f"fleet.init_server: model_dir {model_dir!r} is not a "
                                 "directory")
            load_persistables(self._executor, model_dir, self.main_program)

    def run_server(self) -> None:
        """Serve the pserver program until every worker called ``stop_worker`` (or exited)."""
        self._need_programs("run_server")
        if not self.is_server():
            raise ValueError("fleet.run_server: this process is a worker")
        assert self._executor is not None
        self._executor.run(self.main_program)

    def stop_worker(self) -> None:
        """Tell every pserver this worker is done (what ``Executor.close()`` does)."""
        from .....distributed.ps_registry import complete

        complete([self.worker_index()])
        if self._executor is not None:
            self._executor.close()

    def distributed_optimizer(self, optimizer: Optimizer, strategy: Any = None
                              ) -> TranspilerOptimizer:
        if not isinstance(optimizer, Optimizer):
            raise ValueError(f"fleet.distributed_optimizer: optimizer must be a "
                             f"fluid.optimizer optimizer, got {type(optimizer).__name__}")
        self._optimizer = TranspilerOptimizer(optimizer, strategy)
        return self._optimizer

    def save_inference_model(self, executor: Executor, dirname: str, feeded_var_names: Any,
                             target_vars: Any, main_program: Program | None = None,
                             export_for_deployment: bool = True) -> None:
        """The inference model of the program as written (before transpiling), with the
        parameters as the pservers hold them now."""
        check_save_args("save_inference_model", executor, main_program)
        program = main_program if main_program is not None else self._origin_program
        if program is None:
            raise ValueError("fleet.save_inference_model: call minimize first, or pass "
                             "main_program")
        save_inference_model(dirname, feeded_var_names, target_vars, executor, program,
                             export_for_deployment=export_for_deployment)

    def save_persistables(self, executor: Executor, dirname: str,
                          main_program: Program | None = None) -> None:
        """A checkpoint of the job (trainer 0 asks every pserver to write its part)."""
        check_save_args("save_persistables", executor, main_program)
        program = main_program if main_program is not None else self.main_program
        if program is None or not program._is_distributed:
            raise ValueError("fleet.save_persistables: main_program is not a distributed "
                             "program (call minimize first)")
        save_persistables(executor, dirname, program)

    def _transpile(self, config: DistributeTranspilerConfig) -> None:
        if not isinstance(config, DistributeTranspilerConfig):
            raise ValueError(f"fleet: strategy must be a DistributeTranspilerConfig, got "
                             f"{type(config).__name__}")
        self._origin_program = default_main_program().clone(for_test=False)
        self._transpile_config = config
        self._transpiler = DistributeTranspiler(config)
        servers = self.server_endpoints(to_string=True)
        if self.is_worker():
            self._transpiler.transpile(trainer_id=self.worker_index(), pservers=servers,
                                       trainers=self.worker_num(), sync_mode=config.sync_mode)
            # NOTE: as Fluid, the trainer program waits for the pservers' ports; a strategy
            # with wait_port=False skips that (building programs without a running job)
            self.main_program = self._transpiler.get_trainer_program(wait_port=config.wait_port)
            self.startup_program = default_startup_program()
        else:
            current = self.server_endpoints()[self.server_index()]
            self._transpiler.transpile(trainer_id=0, pservers=servers,
                                       trainers=self.worker_num(), sync_mode=config.sync_mode,
                                       current_endpoint=current)
            self.main_program, self.startup_program = \
                self._transpiler.get_pserver_programs(current)


fleet = DistributedTranspiler()


class TranspilerOptimizer(DistributedOptimizer):
    """``minimize`` appends backward and update ops, then transpiles for this role.

    Args:
        optimizer: a ``fluid.optimizer`` optimizer.
        strategy: a ``DistributeTranspilerConfig`` (None: the defaults, sync mode).
    """

    def __init__(self, optimizer: Optimizer, strategy: Any = None) -> None:
        super().__init__(optimizer, strategy)
        if strategy is None:
            strategy = DistributeTranspilerConfig()
        if not isinstance(strategy, DistributeTranspilerConfig):
            raise ValueError(f"in the pserver mode, strategy must be a "
                             f"DistributeTranspilerConfig, got {type(strategy).__name__}")
        self._strategy = strategy

    def minimize(self, loss: Any, scope: Any = None, startup_program: Any = None,
                 parameter_list: Any = None, no_grad_set: Any = None) -> tuple:
        if isinstance(loss, list):
            raise ValueError("fleet's pserver mode minimizes one loss, got a list")
        result = self._optimizer.minimize(loss, startup_program, parameter_list, no_grad_set)
        fleet._transpile(self._strategy)
        return result
