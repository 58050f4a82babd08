"""Ops moving values between the worker processes of a model-parallel job.

``DistributeTranspiler`` splits a program placed on ``/node:worker:<i>`` into one program per
worker (``parafluid.transpiler.node_split``). Where a value made on one worker is read on
another, the producer's program gets a ``node_send`` right after the op that makes it and
the reader's program a ``node_recv`` right before the first op that reads it, both naming
the same variable: activations forward, activation gradients backward, each once per step.
The kernels use the workers' mailboxes (``parafluid.distributed.node_mailbox``): the
parameter servers' ZeroMQ transport and wire format, every wait bounded by
``FLAGS_rpc_deadline``, errors naming the peer worker, its endpoint and the variable.

With hybrid parallelism (each stage data-parallel over a device range, run by a
ParallelExecutor), replica i of a stage exchanges values with replica i of the other
(``replicas`` attr; the value travels as ``<name>@replica<i>``).

Printed (worker 0 and worker 1 of a 2-stage MLP)::

    {} = node_send(X=[fc_0.tmp_2]) {endpoint='127.0.0.1:7000', peer=1,
                                     peer_endpoint='127.0.0.1:7001', replicas=1, worker_id=0}
    {Out=[fc_0.tmp_2]} = node_recv() {endpoint='127.0.0.1:7001', peer=0,
                                      peer_endpoint='127.0.0.1:7000', replicas=1, worker_id=1}
"""

from __future__ import annotations

import weakref
from typing import Any

from .registry import register_op

__all__ = ["NODE_COMM_OP_TYPES"]

NODE_COMM_OP_TYPES = frozenset({"node_send", "node_recv"})

_ATTRS = {"worker_id": 0, "endpoint": "", "peer": 0, "peer_endpoint": "", "replicas": 1}


def _no_shapes(ins: dict, attrs: dict) -> dict:
    return {}  # the received value keeps the shape the program declared


def _key(name: str, attrs: dict, ctx: Any) -> str:
    """The name a value travels under: replica i of a data-parallel stage (hybrid
    parallelism) exchanges values with replica i of the other stage."""
    replicas = int(attrs["replicas"])
    comm = getattr(ctx.services, "communicator", None)
    have = len(getattr(comm, "devices", None) or [None])  # this process's replicas
    if have != replicas:
        raise ValueError(
            f"{ctx.op.type} of {name!r}: this worker's program is placed on a device range of "
            f"{replicas} device(s) (data parallelism inside the stage) but runs on {have}; "
            f"run it with fluid.CompiledProgram(program).with_data_parallel(loss_name=..., "
            f"places=<{replicas} places>)" if replicas > 1 else
            f"{ctx.op.type} of {name!r}: this worker's program runs on one device (its place "
            f"has no device range) but was replicated over {have}; run it with fluid.Executor")
    return _replica_key(name, replicas, ctx.device_index)


def _replica_key(name: str, replicas: int, index: int) -> str:
    """The mailbox key of ``name`` on replica ``index`` (``name`` itself with one replica)."""
    return f"{name}@replica{index}" if replicas > 1 else name


# the programs whose node_recv ops a mailbox was told to expect, per endpoint
_DECLARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _mailbox(attrs: dict, ctx: Any) -> Any:
    """This worker's mailbox, expecting what every ``node_recv`` of this program receives
    (declared on the program's first node op: a value arriving earlier waits for it)."""
    from ..distributed.node_mailbox import mailbox
    from ..dtypes import convert_dtype, to_torch

    endpoint = attrs["endpoint"]
    box = mailbox(endpoint, int(attrs["worker_id"]))
    program = ctx.op.block.program
    seen = _DECLARED.setdefault(program, set())
    if endpoint not in seen:
        for block in program.blocks:
            for op in block.ops:
                if op.type != "node_recv" or op.attrs.get("endpoint") != endpoint:
                    continue
                name = op.output("Out")[0]
                var = block._find_var_recursive(name)
                replicas = int(op.attrs.get("replicas", 1))
                for i in range(max(replicas, 1)):
                    box.expect(_replica_key(name, replicas, i), int(op.attrs["peer"]),
                               op.attrs["peer_endpoint"],
                               shape=[-1 if d is None else int(d) for d in var.shape],
                               dtype=to_torch(convert_dtype(var.dtype)))
        seen.add(endpoint)
    return box


def _node_send(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..distributed.node_mailbox import client

    name = ctx.op.input("X")[0]
    key = _key(name, attrs, ctx)
    me = int(attrs["worker_id"])
    _mailbox(attrs, ctx)  # NOTE: a peer may send here later in this step
    value = ins["X"][0]
    if value is None:
        raise ValueError(f"node_send: {name!r} (to worker {attrs['peer']}) has no value: the "
                         "op that computes it did not run")
    client(attrs["peer_endpoint"], me).send(key, value, int(attrs["peer"]), ctx.deadline_s)
    return {}


def _node_recv(ins: dict, attrs: dict, ctx: Any) -> dict:
    key = _key(ctx.op.output("Out")[0], attrs, ctx)
    box = _mailbox(attrs, ctx)
    value = box.take(key, int(attrs["peer"]), attrs["peer_endpoint"], ctx.deadline_s)
    return {"Out": [value.to(ctx.device) if value.device != ctx.device else value]}


register_op("node_send", inputs=("X[]",), outputs=(), attrs=dict(_ATTRS),
            infer_shape=_no_shapes, kernel=_node_send, side_effect=True, comm=True)
register_op("node_recv", inputs=(), outputs=("Out[]",), attrs=dict(_ATTRS),
            infer_shape=_no_shapes, kernel=_node_recv, side_effect=True, comm=True)
