"""``DistributeTranspiler``: turns a single-process program into a distributed one.

Mode "pserver" (the default: parameter servers hold the parameters and run the optimizer,
see ``pserver_mode`` and docs/pserver.md) and mode "nccl2" (collective all-reduce between
trainers).

Example, pserver mode (the same script runs as every trainer and every pserver)::

    t = fluid.DistributeTranspiler()
    t.transpile(trainer_id, pservers="127.0.0.1:6174,127.0.0.1:6175", trainers=2)
    if role == "PSERVER":
        prog, startup = t.get_pserver_programs(current_endpoint)
        exe.run(startup)
        exe.run(prog)                          # returns when every trainer is done
    else:
        main = t.get_trainer_program()         # waits for the pservers' ports
        exe.run(fluid.default_startup_program())   # pulls the initial parameters

Model parallelism (a program placed on ``/node:worker:<i>``, see ``node_split`` and
docs/placement.md): worker ``trainer_id`` gets the ops placed on it and the ``node_send`` /
``node_recv`` ops of the values crossing to and from the other workers::

    t.transpile(1, trainers="127.0.0.1:7000,127.0.0.1:7001")   # every worker's ip:port
    main = t.get_trainer_program()     # starts this worker's mailbox, waits for the others
    exe.run(fluid.default_startup_program())   # this worker's parameters only

Example, nccl2 mode (trainer 1 of 2; run the same script on both machines with its own id)::

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
from .node_split import NodeSplit, has_numbered_workers
from .pserver_mode import PServerTranspile

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
        self._ps: PServerTranspile | None = None
        self._nodes: NodeSplit | None = None
        # pserver mode: the distributed lookup table (Fluid's attributes of the same names)
        self.table_name: str | None = None
        self.has_distributed_lookup_table = False

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
            trainers: pserver mode: the number of trainers; nccl2 mode, and a program placed
                on numbered workers (``/node:worker:<i>``, split by node): every trainer's
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
        if self.config.mode == "pserver" and has_numbered_workers(program):
            self._split_by_node(program, startup_program, trainer_id, trainers)
            return
        mode = self.config.mode
        if mode == "nccl2":
            if not isinstance(trainers, (str, list, tuple)):
                raise TypeError(f"transpile: in nccl2 mode trainers must be the trainer "
                                f"endpoints 'ip:port,ip:port', got {trainers!r}")
            transpile_nccl2(program, startup_program, trainer_id, trainers, current_endpoint,
                            self.config.nccl_comm_num, self.config.use_hierarchical_allreduce,
                            self.config.hierarchical_allreduce_inter_nranks)
            self.trainer_num = program.meta.num_trainers
            return
        if mode == "collective":
            raise NotImplementedError("DistributeTranspiler: mode 'collective' (Fluid 1.6's "
                                      "grad_allreduce/local_sgd) is not available; use mode "
                                      "'nccl2' with a ParallelExecutor")
        if isinstance(trainers, str):
            raise TypeError(f"transpile: in pserver mode trainers is the number of trainers, "
                            f"got the string {trainers!r}")
        sync = bool(sync_mode) and self.config.sync_mode
        self._ps = PServerTranspile(self.config, program, startup_program, trainer_id,
                                    pservers, trainers, sync)
        self._ps.build_trainer()
        self.table_name = self._ps.table_name
        self.has_distributed_lookup_table = self.table_name is not None
        self.trainer_num = trainers
        self.sync_mode = sync
        self.pserver_endpoints = list(self._ps.eps)

    def _split_by_node(self, program: Any, startup: Any, trainer_id: int, trainers: Any
                       ) -> None:
        """Model parallelism: ops placed on ``/node:worker:<i>`` run on worker i's process."""
        if not isinstance(trainers, (str, list, tuple)):
            raise TypeError(f"transpile: this program places ops on numbered workers "
                            f"(/node:worker:<i>); trainers must list every worker's "
                            f"'ip:port' (where the values other workers send it arrive), "
                            f"got {trainers!r}")
        self._nodes = NodeSplit(program, startup, trainer_id, trainers)
        self._nodes.build()
        self.trainer_num = self._nodes.workers

    def get_trainer_program(self, wait_port: bool = True) -> Any:
        """The trainer's main program.

        pserver mode: the transpiled main program (sends gradients, receives parameters);
        with ``wait_port`` it first waits, up to ``FLAGS_rpc_deadline``, until every pserver
        answers. nccl2 mode: the main program itself (the executor adds the all-reduces).
        """
        if self.origin_program is None:
            raise RuntimeError("DistributeTranspiler: call transpile() first")
        if self._nodes is not None:
            if wait_port and self.config.wait_port:
                self._wait_for_workers()
            return self.origin_program
        if self.config.mode == "pserver" and wait_port and self.config.wait_port:
            from ..distributed.rpc import wait_for_server

            for ep in self._pserver().eps:
                wait_for_server(ep)
        return self.origin_program

    def _wait_for_workers(self) -> None:
        """Start this worker's mailbox, then wait (``FLAGS_rpc_deadline``) until every other
        worker's answers."""
        from ..distributed.deadline import Deadline, rpc_deadline_seconds
        from ..distributed.node_mailbox import NodeTransferError, mailbox
        from ..distributed.rpc import RPCTimeoutError, wait_for_server

        nodes = self._nodes
        mailbox(nodes.endpoint, nodes.trainer_id)
        deadline = Deadline(rpc_deadline_seconds())
        for i, ep in enumerate(nodes.endpoints):
            if i == nodes.trainer_id:
                continue
            try:
                wait_for_server(ep, deadline)
            except RPCTimeoutError:
                raise NodeTransferError(
                    f"worker {nodes.trainer_id}: worker {i} at {ep} did not answer within "
                    f"{deadline.seconds:.1f} s (FLAGS_rpc_deadline); start every worker of "
                    "the job (each calls get_trainer_program())") from None

    def _pserver(self) -> PServerTranspile:
        if self._ps is None:
            raise RuntimeError("DistributeTranspiler: call transpile() in pserver mode first "
                               f"(config.mode is {self.config.mode!r})")
        return self._ps

    def get_pserver_program(self, endpoint: str) -> Any:
        """The program of the pserver at ``endpoint``: one ``listen_and_serv`` op holding an
        optimize sub-block per parameter block it owns (and the LR schedule's block).

        ``exe.run(program)`` serves until every trainer's ``Executor.close()``.
        """
        prog = self._pserver().pserver(endpoint)[0]
        # the job's pservers: a pserver whose barrier times out pings the others to name a
        # dead one (listen_and_serv reads them here)
        prog.meta.pserver_endpoints = list(self._pserver().eps)
        # Fluid copies the trainer program's distributed marks onto the pserver program
        # (Program._copy_dist_param_info_from), _parameters_on_pservers included
        trainer = self.origin_program.meta
        prog.meta.is_distributed = trainer.is_distributed
        prog.meta.is_chief = trainer.is_chief
        prog.meta.distributed_lookup_table = trainer.distributed_lookup_table
        prog.meta.parameters_on_pservers = [dict(r) for r in trainer.parameters_on_pservers]
        return prog

    def get_pserver_programs(self, endpoint: str) -> tuple[Any, Any]:
        """``(pserver main program, pserver startup program)`` of ``endpoint``."""
        return self.get_pserver_program(endpoint), self.get_startup_program(endpoint)

    def get_startup_program(self, endpoint: str, pserver_program: Any = None,
                            startup_program: Any = None) -> Any:
        """The startup program of the pserver at ``endpoint``: the initializers of its
        blocks only, sliced variables resized to their block (Fluid's deprecated
        ``pserver_program`` / ``startup_program`` arguments are accepted and not needed)."""
        return self._pserver().pserver_startup(endpoint)
