"""A small model-parallel job for tests: a 2-stage MLP placed on two worker processes.

The same functions serve the in-process tests (workers as threads) and the multi-process
ones (``python -m parafluid.testing.node_job``):

- :func:`build` makes ``(main, startup, loss)`` of an MLP regressor (16 -> 32 -> 1) with
  stage 0 (the hidden layer) and stage 1 (the output layer, the loss) placed on
  ``/node:worker:0/cpu`` and ``/node:worker:1/cpu`` (``placed="nodes"``), with the optimizer
  on the parameter servers (``placed="ps"``: forward/backward on ``/node:worker/cpu``, the
  updates on ``/node:ps/cpu``), or unplaced (``placed=""``: the oracle);
- :func:`batch` gives each step's batch (every worker is fed the whole batch);
- :func:`run_worker` transpiles and trains one worker, :func:`run_pserver` serves one
  pserver; :func:`reference` trains the unplaced program in one process.

Random initializers draw from torch's default generator (``torch.manual_seed(SEED)`` in
every process), so the split startup programs must keep the draw order to match.

Example::

    python -m parafluid.testing.node_job worker --trainers 127.0.0.1:7000,127.0.0.1:7001 \\
        --trainer-id 0 --steps 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

import numpy as np

__all__ = ["build", "batch", "run_worker", "run_pserver", "reference", "PARAMS", "main"]

IN, HIDDEN, BATCH, SEED = 16, 32, 8, 7
PARAMS = ("fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0")
_BUILD_LOCK = threading.Lock()


def build(placed: str = "", optimizer: str = "sgd", seed: int = 0) -> tuple[Any, Any, Any]:
    """``(main, startup, loss)``; ``placed`` is "" (unplaced), "nodes", "hybrid" (the two
    stages on ``/node:worker:<i>/cpu:0-1``: 2-device data parallelism inside each), "ps" or
    "ps1" (only the output layer's updates on ``/node:ps``, the hidden layer's on the
    worker); ``seed``:
    the programs' ``random_seed`` (0: initializers draw from torch's default generator)."""
    import parafluid as fluid

    if placed not in ("", "nodes", "hybrid", "ps", "ps1"):
        raise ValueError(f"build: placed must be '', 'nodes', 'hybrid', 'ps' or 'ps1', got "
                         f"{placed!r}")
    worker = "/node:worker/cpu" if placed in ("ps", "ps1") else None
    devices = {"nodes": "cpu", "hybrid": "cpu:0-1"}.get(placed)
    stage0 = f"/node:worker:0/{devices}" if devices else worker
    stage1 = f"/node:worker:1/{devices}" if devices else worker
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    # NOTE: program_guard, unique_name.guard and place_guard switch process-wide defaults:
    # workers running as threads of one process must not build at the same time
    with _BUILD_LOCK, fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[IN], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        with _guard(stage0):
            h = fluid.layers.fc(x, size=HIDDEN, act="tanh")
        with _guard(stage1):
            pred = fluid.layers.fc(h, size=1)
            loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        opt = {"sgd": lambda: fluid.optimizer.SGD(0.1),
               "adam": lambda: fluid.optimizer.Adam(0.01)}[optimizer]()
        if placed == "ps1":
            with _guard(worker):
                params_grads = fluid.backward.append_backward(loss)
            with _guard("/node:ps/cpu"):
                opt.apply_gradients([pg for pg in params_grads if pg[0].name.startswith("fc_1")])
            with _guard(worker):
                opt.apply_gradients([pg for pg in params_grads if pg[0].name.startswith("fc_0")])
        else:
            with _guard("/node:ps/cpu" if placed == "ps" else None):
                opt.minimize(loss)
    return main, startup, loss


def _guard(place: str | None) -> Any:
    import contextlib

    import parafluid as fluid

    return fluid.place_guard(place) if place else contextlib.nullcontext()


def batch(step: int, part: int = 0, parts: int = 1) -> dict[str, np.ndarray]:
    """The batch of ``step``, or its rows ``part::parts`` (a data-parallel trainer's)."""
    rng = np.random.default_rng(100 + step)
    x = rng.standard_normal((BATCH, IN)).astype("float32")
    y = (x[:, :4].sum(1, keepdims=True) * 0.5).astype("float32")
    return {"x": x[part::parts], "y": y[part::parts]}


def _params(scope: Any, names: Any) -> dict[str, list]:
    out = {}
    for name in names:
        holder = scope.find_var(name)
        if holder is not None and holder.value is not None:
            out[name] = np.asarray(holder.get_tensor()).tolist()
    return out


def reference(steps: int, optimizer: str = "sgd", seed: int = 0) -> dict[str, Any]:
    """Losses and final parameters of the unplaced program in one process."""
    import torch

    import parafluid as fluid

    main, startup, loss = build("", optimizer, seed)
    torch.manual_seed(SEED)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    losses = []
    exe.run(startup, scope=scope)
    for s in range(steps):
        out, = exe.run(main, feed=batch(s), fetch_list=[loss], scope=scope)
        losses.append(float(np.asarray(out).reshape(-1)[0]))
    return {"losses": losses, "params": _params(scope, PARAMS)}


def run_worker(trainer_id: int, trainers: str, steps: int, optimizer: str = "sgd",
               pservers: str = "", placed: str = "nodes", die_at_step: int = -1,
               seed: int = 0, microbatches: int = 1, train_deadline_ms: int = 0,
               progress: bool = False, exit_at_step: int = -1, step_delay: float = 0.0
               ) -> dict[str, Any]:
    """Transpile and train worker ``trainer_id``; its losses (where the loss is), the
    parameters its scope holds, and what crossed (the node_send/node_recv ops' variables,
    what the transport carried). ``die_at_step``: the process exits at once (code 3) when
    that step starts, as a crashed stage would. With ``placed="ps"``, ``trainers`` is their
    number and trainer t trains on rows ``t::trainers`` of each batch. ``microbatches``:
    ``BuildStrategy.num_microbatches`` of a CompiledProgram running this worker's program.
    ``train_deadline_ms``: ``FLAGS_rpc_deadline`` once every worker is up (a short deadline
    for the steps that does not race the other process's start). ``progress``: a JSON
    line ``{"step": k}`` after each step; ``exit_at_step``: the script ends normally
    (``sys.exit(0)``) when that step starts; ``step_delay``: seconds before each step."""
    import torch

    import parafluid as fluid
    from parafluid.distributed.node_mailbox import carried

    main, startup, loss = build(placed, optimizer, seed)
    by_ps = placed in ("ps", "ps1")
    parts = int(trainers) if by_ps else 1
    part = trainer_id if by_ps else 0
    t = fluid.DistributeTranspiler()
    if by_ps:
        t.transpile(trainer_id, program=main, startup_program=startup, pservers=pservers,
                    trainers=int(trainers))
    else:
        t.transpile(trainer_id, program=main, startup_program=startup, trainers=trainers)
    prog = t.get_trainer_program()
    if train_deadline_ms:
        os.environ["FLAGS_rpc_deadline"] = str(train_deadline_ms)
    has_loss = any(loss.name in op.output_arg_names for op in prog.global_block().ops)
    run_prog: Any = prog
    devices = prog.meta.data_parallel_devices
    if devices:  # hybrid: this stage is data parallel over its device range
        run_prog = fluid.CompiledProgram(prog).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(len(devices)))
    elif microbatches > 1:
        bs = fluid.BuildStrategy()
        bs.num_microbatches = microbatches
        run_prog = fluid.CompiledProgram(prog, build_strategy=bs)
    torch.manual_seed(SEED)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    losses = []
    exe.run(startup, scope=scope)
    for s in range(steps):
        if s == die_at_step:
            os._exit(3)
        if s == exit_at_step:
            sys.exit(0)
        if step_delay:
            time.sleep(step_delay)
        out = exe.run(run_prog, feed=batch(s, part, parts),
                      fetch_list=[loss] if has_loss else [], scope=scope)
        if progress:
            print(json.dumps({"step": s}), flush=True)
        if has_loss:  # (one loss per replica: the mean of their equal shares)
            losses.append(float(np.mean(np.asarray(out[0]))))
    params = _params(scope, PARAMS)
    exe.close()
    ops = prog.global_block().ops
    return {"trainer_id": trainer_id, "losses": losses, "params": params,
            "sends": [op.input("X")[0] for op in ops if op.type == "node_send"],
            "recvs": [op.output("Out")[0] for op in ops if op.type == "node_recv"],
            "carried": {k: list(v) for k, v in carried().items()},
            "program": str(prog)}


def run_pserver(endpoint: str, pservers: str, trainers: int, optimizer: str = "sgd",
                seed: int = 0, placed: str = "ps") -> None:
    """Serve the ops placed on ``/node:ps`` at ``endpoint`` until every trainer is done."""
    import torch

    import parafluid as fluid

    main, startup, loss = build(placed, optimizer, seed)
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, startup_program=startup, pservers=pservers,
                trainers=trainers)
    prog, ps_startup = t.get_pserver_programs(endpoint)
    torch.manual_seed(SEED)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(ps_startup, scope=scope)
    exe.run(prog, scope=scope)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("role", choices=("worker", "pserver"))
    p.add_argument("--trainers", required=True,
                   help="workers' endpoints (placed=nodes) or the number of trainers (ps)")
    p.add_argument("--trainer-id", type=int, default=0)
    p.add_argument("--pservers", default="")
    p.add_argument("--endpoint", default="")
    p.add_argument("--placed", default="nodes", choices=("nodes", "hybrid", "ps", "ps1"))
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--optimizer", default="sgd", choices=("sgd", "adam"))
    p.add_argument("--die-at-step", type=int, default=-1)
    p.add_argument("--seed", type=int, default=0, help="the programs' random_seed")
    p.add_argument("--microbatches", type=int, default=1)
    p.add_argument("--train-deadline-ms", type=int, default=0)
    p.add_argument("--progress", action="store_true", help="a JSON line after each step")
    p.add_argument("--exit-at-step", type=int, default=-1)
    p.add_argument("--step-delay", type=float, default=0.0)
    args = p.parse_args(argv)
    if args.role == "pserver":
        run_pserver(args.endpoint, args.pservers, int(args.trainers), args.optimizer,
                    args.seed, args.placed)
        print(json.dumps({"pserver": args.endpoint, "done": True}), flush=True)
        return 0
    out = run_worker(args.trainer_id, args.trainers, args.steps, args.optimizer,
                     args.pservers, args.placed, args.die_at_step, args.seed,
                     args.microbatches, args.train_deadline_ms, args.progress,
                     args.exit_at_step, args.step_delay)
    out.pop("program")
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
