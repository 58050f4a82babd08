"""Ops moving values between the worker processes of a model-parallel job.

``DistributeTranspiler`` splits a program placed on ``/node:worker:<i>`` into one program per
worker (``parafluid.transpiler.node_split``). Where a value made on one worker is read on
another, the producer's program gets a ``node_send`` right after the op that makes it and
the reader's program a ``node_recv`` right before the first op that reads it, both naming
the same variable: activations forward, activation gradients backward, each once per step.
The kernels use the workers' mailboxes (``parafluid.distributed.node_mailbox``): the
parameter servers' ZeroMQ transport and wire format, every wait bounded by
``FLAGS_rpc_deadline``, errors naming the peer worker, its endpoint and the variable.

Printed (worker 0 and worker 1 of a 2-stage MLP)::

    {} = node_send(X=[fc_0.tmp_2]) {endpoint='127.0.0.1:7000', peer=1,
                                     peer_endpoint='127.0.0.1:7001', worker_id=0}
    {Out=[fc_0.tmp_2]} = node_recv() {endpoint='127.0.0.1:7001', peer=0,
                                      peer_endpoint='127.0.0.1:7000', worker_id=1}
"""

from __future__ import annotations

from typing import Any

from .registry import register_op

__all__ = ["NODE_COMM_OP_TYPES"]

NODE_COMM_OP_TYPES = frozenset({"node_send", "node_recv"})

_ATTRS = {"worker_id": 0, "endpoint": "", "peer": 0, "peer_endpoint": ""}


def _no_shapes(ins: dict, attrs: dict) -> dict:
    return {}  # the received value keeps the shape the program declared


def _one_replica(ctx: Any) -> None:
    if ctx.device_index:
        raise ValueError(f"{ctx.op.type}: a worker program split by node runs on one device per "
                         "process (fluid.Executor); it was replicated over several "
                         "(ParallelExecutor or CompiledProgram.with_data_parallel)")


def _node_send(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..distributed.node_mailbox import client, mailbox

    _one_replica(ctx)
    me = int(attrs["worker_id"])
    mailbox(attrs["endpoint"], me)  # NOTE: a peer may send here later in this step
    name = ctx.op.input("X")[0]
    value = ins["X"][0]
    if value is None:
        raise ValueError(f"node_send: {name!r} (to worker {attrs['peer']}) has no value: the "
                         "op that computes it did not run")
    client(attrs["peer_endpoint"], me).send(name, value, int(attrs["peer"]), ctx.deadline_s)
    return {}


def _node_recv(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..distributed.node_mailbox import mailbox

    _one_replica(ctx)
    box = mailbox(attrs["endpoint"], int(attrs["worker_id"]))
    name = ctx.op.output("Out")[0]
    value = box.take(name, int(attrs["peer"]), attrs["peer_endpoint"], ctx.deadline_s)
    return {"Out": [value.to(ctx.device) if value.device != ctx.device else value]}


register_op("node_send", inputs=("X[]",), outputs=(), attrs=dict(_ATTRS),
            infer_shape=_no_shapes, kernel=_node_send, side_effect=True)
register_op("node_recv", inputs=(), outputs=("Out[]",), attrs=dict(_ATTRS),
            infer_shape=_no_shapes, kernel=_node_recv, side_effect=True)
