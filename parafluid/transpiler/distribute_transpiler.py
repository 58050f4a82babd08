"""``DistributeTranspiler``: turns a single-process program into a distributed one.

Mode "nccl2" (collective all-reduce between trainers) is here; mode "pserver" (parameter
servers) is being built and raises ``NotImplementedError`` for now.

Example (trainer 1 of 2; run the same script on both machines with its own id)::

    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(1, trainers="127.0.0.1:6170,127.0.0.1:6171",
                current_endpoint="127.0.0.1:6171")
    exe = fluid.ParallelExecutor(False, loss_name=loss.name, num_trainers=2, trainer_id=1)
"""

from __future__ import annotations

from typing import Any

from ..framework import default_main_program, default_startup_program
from .collective import transpile_nccl2
from .config import DistributeTranspilerConfig

__all__ = ["DistributeTranspiler"]


class DistributeTranspiler:
    """Fluid's distribute transpiler (see the module docstring).

    Args:
        config: a ``DistributeTranspilerConfig`` (default: a fresh one, mode "pserver").
    """

    def __init__(self, config: DistributeTranspilerConfig | None = None) -> None:
        if config is None:
            config = DistributeTranspilerConfig()
        if not isinstance(config, DistributeTranspilerConfig):
            raise TypeError(f"DistributeTranspiler: config must be a DistributeTranspilerConfig, "
                            f"got {type(config).__name__}")
        self.config = config
        self.trainer_id = 0
        self.trainer_num = 1
        self.origin_program: Any = None
        self.startup_program: Any = None

    def transpile(self, trainer_id: int, program: Any = None,
                  pservers: str = "127.0.0.1:6174", trainers: int | str = 1,
                  sync_mode: bool = True, startup_program: Any = None,
                  current_endpoint: str = "127.0.0.1:6174", workers: str | None = None) -> None:
        """Rewrite ``program`` and ``startup_program`` for distributed training.

        Args:
            trainer_id: this trainer's index, 0..n-1.
            program, startup_program: default ``fluid.default_main_program()`` /
                ``default_startup_program()``; changed in place (as in Fluid).
            pservers: pserver mode: the parameter servers' "ip:port,ip:port".
            trainers: pserver mode: the number of trainers; nccl2 mode: every trainer's
                "ip:port,ip:port" in trainer order (``workers=`` is accepted as its alias).
            sync_mode: synchronous training.
            current_endpoint: nccl2 mode: this trainer's "ip:port" (entry ``trainer_id`` of
                ``trainers``).
        """
        if workers is not None:
            if trainers not in (1, workers):
                raise ValueError(f"transpile: give the trainer endpoints once, as trainers= or "
                                 f"workers=, not both ({trainers!r} vs {workers!r})")
            trainers = workers
        program = default_main_program() if program is None else program
        startup_program = default_startup_program() if startup_program is None \
            else startup_program
        self.origin_program, self.startup_program = program, startup_program
        self.trainer_id = trainer_id
        mode = self.config.mode
        if mode == "nccl2":
            if not isinstance(trainers, (str, list, tuple)):
                raise TypeError(f"transpile: in nccl2 mode trainers must be the trainer "
                                f"endpoints 'ip:port,ip:port', got {trainers!r}")
            transpile_nccl2(program, startup_program, trainer_id, trainers, current_endpoint,
                            self.config.nccl_comm_num, self.config.use_hierarchical_allreduce,
                            self.config.hierarchical_allreduce_inter_nranks)
            self.trainer_num = program._num_trainers
            return
        if mode == "collective":
            raise NotImplementedError("DistributeTranspiler: mode 'collective' (Fluid 1.6's "
                                      "grad_allreduce/local_sgd) is not available; use mode "
                                      "'nccl2' with a ParallelExecutor")
        raise NotImplementedError("DistributeTranspiler: the pserver mode is being built; "
                                  "use config.mode = 'nccl2' for collective data parallelism")

    def get_trainer_program(self, wait_port: bool = True) -> Any:
        """nccl2 mode: the main program itself (the all-reduces come from the executor)."""
        if self.origin_program is None:
            raise RuntimeError("DistributeTranspiler: call transpile() first")
        if self.config.mode != "nccl2":
            raise NotImplementedError("DistributeTranspiler: the pserver mode is being built")
        return self.origin_program
