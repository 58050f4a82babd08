"""Fleet over the collective (nccl2) mode: every process a worker, gradients all-reduced.

A script written for Fluid 1.6's collective fleet runs unchanged under ``python -m
parafluid.distributed.launch --nproc_per_node 2 script.py``::

    from parafluid.incubate.fleet.base import role_maker
    from parafluid.incubate.fleet.collective import fleet, DistributedStrategy

    fleet.init(role_maker.PaddleCloudRoleMaker(is_collective=True))
    optimizer = fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), DistributedStrategy())
    optimizer.minimize(loss)
    exe.run(fluid.default_startup_program())   # joins the other workers
    exe.run(fleet.main_program, feed=..., fetch_list=[loss])   # a data-parallel program

``fleet.main_program`` is a ``CompiledProgram`` with data parallelism over this worker's
devices (``CPU_NUM`` or its GPUs) and all workers: every step all-reduces the gradients
across the job. ``DistributedStrategy`` is a ``BuildStrategy`` with fleet's fields.
"""

from __future__ import annotations

import logging
from typing import Any

from ....executor import Executor
from ....framework import Program, default_startup_program
from ....io import save_inference_model, save_persistables
from ....parallel import BuildStrategy, CompiledProgram, ExecutionStrategy
from ....transpiler import DistributeTranspiler, DistributeTranspilerConfig
from ..base.fleet_base import DistributedOptimizer, Fleet, Mode, check_save_args

__all__ = ["fleet", "Collective", "DistributedStrategy", "CollectiveOptimizer",
           "LambConfig", "DistFCConfig"]

log = logging.getLogger("parafluid.fleet")


class LambConfig:
    """Fluid 1.6's placeholder for LAMB settings (it has no fields)."""


class DistFCConfig:
    """Fluid 1.6's placeholder for distributed-FC settings (it has no fields)."""


class Collective(Fleet):
    """The collective fleet: no servers; ``minimize`` makes ``fleet.main_program``."""

    def __init__(self) -> None:
        super().__init__(Mode.COLLECTIVE)
        self.startup_program: Program | None = None
        self._origin_program: Program | None = None
        self.main_program: CompiledProgram | Program | None = None

    # NOTE: as in Fluid, the server-side calls are no-ops that warn (a script written for
    # both modes calls them unconditionally)
    def init_worker(self) -> None:
        log.warning("You should not call 'init_worker' method for collective mode.")

    def run_worker(self, main_programs: Any = None, scopes: Any = None) -> None:
        log.warning("You should not call 'run_worker' method for collective mode.")

    def init_server(self, model_dir: str | None = None) -> None:
        log.warning("You should not call 'init_server' method for collective mode.")

    def run_server(self) -> None:
        log.warning("You should not call 'run_server' method for collective mode.")

    def stop_worker(self) -> None:
        log.warning("You should not call 'stop_worker' method for collective mode.")

    def distributed_optimizer(self, optimizer: Any, strategy: Any = None
                              ) -> CollectiveOptimizer:
        self._optimizer = CollectiveOptimizer(optimizer, strategy)
        return self._optimizer

    def save_inference_model(self, executor: Executor, dirname: str,
                             feeded_var_names: Any = None, target_vars: Any = None,
                             main_program: Program | None = None,
                             export_for_deployment: bool = True) -> None:
        check_save_args("save_inference_model", executor, main_program)
        program = main_program if main_program is not None else self._origin_program
        save_inference_model(dirname, feeded_var_names, target_vars, executor, program,
                             export_for_deployment=export_for_deployment)

    def save_persistables(self, executor: Executor, dirname: str,
                          main_program: Program | None = None) -> None:
        check_save_args("save_persistables", executor, main_program)
        program = main_program if main_program is not None else self._origin_program
        save_persistables(executor, dirname, program)


fleet = Collective()

_EXTRA = {"use_local_sgd": False, "use_dist_fc": False, "local_sgd_config": None,
          "dist_fc_config": None, "mode": "nccl2", "collective_mode": None,
          "exec_strategy": None}


class DistributedStrategy(BuildStrategy):
    """A ``BuildStrategy`` with fleet's fields: ``mode`` ("nccl2"), ``collective_mode``,
    ``use_local_sgd`` / ``local_sgd_config``, ``use_dist_fc`` / ``dist_fc_config`` and
    ``exec_strategy`` (an ``ExecutionStrategy``). Only ``mode="nccl2"`` without local SGD or
    distributed FC is provided: the others are refused by ``minimize`` naming the field."""

    def __init__(self) -> None:
        super().__init__()
        for name, default in _EXTRA.items():
            object.__setattr__(self, name, default)
        object.__setattr__(self, "exec_strategy", ExecutionStrategy())

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _EXTRA:
            super().__setattr__(name, value)
            return
        if name == "exec_strategy" and not isinstance(value, ExecutionStrategy):
            raise TypeError(f"DistributedStrategy.exec_strategy must be an ExecutionStrategy, "
                            f"got {type(value).__name__}")
        if name in ("use_local_sgd", "use_dist_fc") and not isinstance(value, bool):
            raise TypeError(f"DistributedStrategy.{name} must be a bool, got {value!r}")
        if name == "mode" and value not in ("nccl2", "collective"):
            raise ValueError(f"DistributedStrategy.mode must be 'nccl2' or 'collective', got "
                             f"{value!r}")
        object.__setattr__(self, name, value)


class CollectiveOptimizer(DistributedOptimizer):
    """``minimize`` appends backward and update ops, transpiles in nccl2 mode and makes the
    data-parallel ``fleet.main_program``."""

    def __init__(self, optimizer: Any, strategy: Any = None) -> None:
        strategy = DistributedStrategy() if strategy is None else strategy
        if not isinstance(strategy, DistributedStrategy):
            raise ValueError(f"the collective fleet's strategy must be a DistributedStrategy, "
                             f"got {type(strategy).__name__}")
        super().__init__(optimizer, strategy)
        self.print_config = False

    def _check(self) -> None:
        s = self._strategy
        unsupported = [f"{name}={getattr(s, name)!r}" for name, bad in
                       (("use_local_sgd", s.use_local_sgd), ("use_dist_fc", s.use_dist_fc),
                        ("mode", s.mode != "nccl2"), ("collective_mode", s.collective_mode))
                       if bad]
        if unsupported:
            raise NotImplementedError(
                f"fleet (collective): {', '.join(unsupported)} is not provided by parafluid "
                "(Fluid's local SGD, distributed FC and op-based collective mode); use "
                "DistributedStrategy() with mode='nccl2' (gradients all-reduced every step)")

    def minimize(self, loss: Any, startup_program: Program | None = None,
                 parameter_list: Any = None, no_grad_set: Any = None) -> tuple:
        self._check()
        main_program = loss.block.program
        startup_program = startup_program or default_startup_program()
        fleet.startup_program = startup_program
        result = self._optimizer.minimize(loss, startup_program, parameter_list, no_grad_set)
        fleet._origin_program = main_program
        fleet.main_program = self._compile(loss, startup_program, main_program)
        return result

    def _compile(self, loss: Any, startup_program: Program, main_program: Program
                 ) -> CompiledProgram:
        workers = fleet.worker_endpoints()
        trainer_id = fleet.worker_index()
        config = DistributeTranspilerConfig()
        config.mode = "nccl2"
        config.nccl_comm_num = self._strategy.nccl_comm_num
        if self.print_config:
            print(f"worker_endpoints:{workers} trainers_num:{len(workers)} "
                  f"current_endpoint:{workers[trainer_id]} trainer_id:{trainer_id}")
        DistributeTranspiler(config=config).transpile(
            trainer_id=trainer_id, trainers=",".join(workers), startup_program=startup_program,
            program=main_program, current_endpoint=workers[trainer_id])
        s = self._strategy
        s.num_trainers = fleet.worker_num()
        s.trainer_id = trainer_id
        s.trainers_endpoints = list(workers)
        compiled = CompiledProgram(main_program)
        compiled.with_data_parallel(loss_name=loss.name, build_strategy=s,
                                    exec_strategy=s.exec_strategy)
        return compiled
