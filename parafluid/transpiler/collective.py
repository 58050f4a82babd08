"""The nccl2 (collective) mode: the startup program gets the op that joins the trainers.

``transpile_nccl2`` appends ``gen_nccl_id`` (attrs ``endpoint``, ``endpoint_list``: the other
trainers, ``trainer_id``) to the startup program and records the trainer endpoints, their
number and this trainer's id in the main program's record (``program.meta``:
``trainers_endpoints``, ``num_trainers``, ``trainer_id``), where the ParallelExecutor and
``CompiledProgram`` find them. The main
program's ops are not changed: the data-parallel graph builder inserts the all-reduces.

Example::

    transpile_nccl2(main, startup, 1, ["127.0.0.1:6170", "127.0.0.1:6171"], "127.0.0.1:6171")
    print(startup)   # ... {} = gen_nccl_id() {endpoint=127.0.0.1:6171, ...}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..distributed.endpoints import parse_endpoint, parse_endpoints
from ..framework import OpRole

__all__ = ["transpile_nccl2"]


def transpile_nccl2(program: Any, startup_program: Any, trainer_id: int,
                    trainers: str | Sequence[str], current_endpoint: str,
                    nccl_comm_num: int = 1, use_hierarchical_allreduce: bool = False,
                    hierarchical_allreduce_inter_nranks: int = 0) -> None:
    """Append ``gen_nccl_id`` to ``startup_program``; record the trainers on ``program``."""
    eps = parse_endpoints(trainers, "trainers")
    parse_endpoint(current_endpoint, "current_endpoint")
    if not isinstance(trainer_id, int) or isinstance(trainer_id, bool) or \
            not 0 <= trainer_id < len(eps):
        raise ValueError(f"transpile: trainer_id must be in 0..{len(eps) - 1} for the "
                         f"{len(eps)} trainer endpoints {eps}, got {trainer_id!r}")
    if eps[trainer_id] != current_endpoint:
        where = f"it is trainer {eps.index(current_endpoint)}'s" if current_endpoint in eps \
            else "it is not in the list"
        raise ValueError(f"transpile: current_endpoint {current_endpoint} must be entry "
                         f"{trainer_id} (trainer_id) of trainers {eps}, but {where}")
    startup_program.global_block().append_op(
        type="gen_nccl_id", inputs={}, outputs={},
        attrs={"endpoint": current_endpoint,
               "endpoint_list": [e for e in eps if e != current_endpoint],
               "trainer_id": trainer_id, "nccl_comm_num": nccl_comm_num,
               "use_hierarchical_allreduce": use_hierarchical_allreduce,
               "hierarchical_allreduce_inter_nranks": hierarchical_allreduce_inter_nranks,
               "op_role": OpRole.Forward})
    for prog in (program, startup_program):
        prog.meta.trainers_endpoints = list(eps)
        prog.meta.num_trainers = len(eps)
        prog.meta.trainer_id = trainer_id


def __getattr__(name: str) -> object:
    # Fluid 1.6's GradAllReduce / LocalSGD import and fail on use, saying what to use instead
    from ..compat import missing_attribute

    return missing_attribute("transpiler.collective", name, __all__)
