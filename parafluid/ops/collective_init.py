"""``gen_nccl_id``: the startup-program op of the collective (nccl2) mode.

The transpiler appends it to the startup program (Fluid's name and attrs: ``endpoint``, this
trainer's "ip:port"; ``endpoint_list``, the *other* trainers' endpoints in trainer order;
``trainer_id``). Its kernel performs the rendezvous (trainer 0 hosts at its endpoint, the
others join) and registers the process-wide communicator that the ParallelExecutor then
finds with ``parafluid.distributed.collective.get_collective``. It has no outputs (Fluid's
``NCCLID`` variable carried the id to the executor; here the registry does) and is a side
effect, so no pruning removes it.

Example (what ``DistributeTranspiler`` in nccl2 mode appends on trainer 1 of 2)::

    {} = gen_nccl_id() {endpoint=127.0.0.1:6171, endpoint_list=['127.0.0.1:6170'], trainer_id=1}
"""

from __future__ import annotations

from typing import Any

from .registry import register_op

__all__ = ["trainer_endpoints"]


def trainer_endpoints(attrs: dict[str, Any]) -> list[str]:
    """Every trainer's endpoint in trainer order, from the op's attrs."""
    tid, ep, others = attrs["trainer_id"], attrs["endpoint"], list(attrs["endpoint_list"])
    if not isinstance(tid, int) or not 0 <= tid <= len(others):
        raise ValueError(f"gen_nccl_id: trainer_id must be in 0..{len(others)} for "
                         f"{len(others) + 1} trainers, got {tid!r}")
    if not ep:
        raise ValueError("gen_nccl_id: attr 'endpoint' (this trainer's 'ip:port') is empty")
    if ep in others:
        raise ValueError(f"gen_nccl_id: 'endpoint_list' must list the other trainers only, "
                         f"but it contains this trainer's endpoint {ep}")
    return others[:tid] + [ep] + others[tid:]


def _gen_nccl_id(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..distributed.collective import init_collective, local_devices

    use_cuda = getattr(ctx.device, "type", "cpu") == "cuda"
    init_collective(trainer_endpoints(attrs), attrs["trainer_id"], local_devices(use_cuda))
    return {}


register_op("gen_nccl_id", inputs=(), outputs=(),
            attrs={"endpoint": "", "endpoint_list": [], "trainer_id": 0, "nccl_comm_num": 1,
                   "use_hierarchical_allreduce": False,
                   "hierarchical_allreduce_inter_nranks": 0},
            infer_shape=lambda ins, attrs: {}, kernel=_gen_nccl_id, side_effect=True, comm=True)
