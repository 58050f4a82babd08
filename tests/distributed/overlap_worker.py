"""One trainer of a 2-trainer nccl2-mode job that reports how its all-reduces ran.

    python overlap_worker.py ENDPOINTS TRAINER_ID OUT_DIR MODE

Trains the MLP of tests/parallel/dp_models.py (MODE ``clip``: its gradients clipped by
global norm, so that ops before the updates read them; ``fused``: fused all-reduces) for 4
steps (CPU_NUM devices), the last one under the profiler (trainer 1 starts it late).
Writes ``overlap_t<id>.json`` with
``collectives`` (how many collectives the communicator issued in each of steps 2-4),
``allreduce_ops`` (all-reduce nodes of the graph), ``deferred`` (of them, those the plan
starts without waiting), ``records`` (the profiled step's op records: type, start, end,
thread), ``loss`` and ``params``.
"""

from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "parallel"))

import dp_models  # noqa: E402
import numpy as np  # noqa: E402
from dist_helpers import child_env, load_json, reap, report_status, start  # noqa: E402
from dist_helpers import endpoints as free_endpoints  # noqa: E402

import parafluid as fluid  # noqa: E402
from parafluid.engine.runtime import add_op_hook, remove_op_hook  # noqa: E402


def model(mode: str) -> dp_models.ProgramBuilder:
    def clipped_sgd() -> fluid.optimizer.SGD:
        fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm(0.5))
        return fluid.optimizer.SGD(learning_rate=0.1)
    return dp_models.mlp(optimizer=clipped_sgd if mode == "clip" else None)


def run(endpoints: str, trainer_id: int, out: str, mode: str) -> None:
    import json

    main, startup, loss = model(mode)()
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    eps = endpoints.split(",")
    fluid.DistributeTranspiler(config=config).transpile(
        trainer_id, program=main, startup_program=startup, trainers=endpoints,
        current_endpoint=eps[trainer_id])
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    bs = fluid.BuildStrategy()
    bs.fuse_all_reduce_ops = mode == "fused"
    pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main,
                                build_strategy=bs, num_trainers=2, trainer_id=trainer_id,
                                scope=scope)
    comm = pe._communicator
    feeds = dp_models.mlp_feeds(steps=4)
    counts, records = [], []
    for step, feed in enumerate(feeds):
        share = len(next(iter(feed.values()))) // 2
        mine = {k: v[trainer_id * share:(trainer_id + 1) * share] for k, v in feed.items()}
        before = comm._seq
        hook = records.append
        if step == 3:
            if trainer_id == 1:
                # late to the profiled step: trainer 0's all-reduces stay in flight until
                # this one joins them, so its backward ops that run meanwhile overlap them
                # whatever the machine's load (trainer 1 then finds them ready at once)
                time.sleep(0.3)
            add_op_hook(hook)
        try:
            out_loss, = pe.run(fetch_list=[loss.name], feed=mine)
        finally:
            if step == 3:
                remove_op_hook(hook)
        if step:
            counts.append(comm._seq - before)
    plan, = pe._plans.values()
    status = {
        "collectives": counts,
        "allreduce_ops": sum(n.type.startswith("c_allreduce") for n in plan.graph.nodes),
        "deferred": len(plan.deferred),
        "shared_memory": comm.shared_memory,
        "records": [(r.op_type, r.start_ns, r.end_ns, r.thread) for r in records],
        "loss": float(out_loss.ravel()[0]),
        "params": {p.name: np.array(scope.find_var(p.name).get_tensor()).tolist()
                   for p in main.global_block().all_parameters()},
    }
    with open(os.path.join(out, f"overlap_t{trainer_id}.json"), "w") as f:
        json.dump(status, f)
    pe.close()


def run_pair(out: str, mode: str, shared_mb: tuple[str, str] = ("0", "0")) -> list[dict]:
    """Run both trainers (trainer t with FLAGS_collective_shared_memory_mb=shared_mb[t]) and
    return their reports; the children are killed if they outlive the wait."""
    eps = free_endpoints(2)
    procs = []
    try:
        for t in (0, 1):
            env = child_env(CPU_NUM="1", FLAGS_rpc_deadline="30000",
                            FLAGS_collective_shared_memory_mb=shared_mb[t])
            procs.append(start([os.path.abspath(__file__), eps, str(t), out, mode], env))
        for p in procs:
            p.wait(timeout=100)
    finally:
        reap(procs)
    reports = []
    for t in (0, 1):
        status = load_json(os.path.join(out, f"status_t{t}.json"))
        assert status.get("ok"), f"trainer {t}: {status.get('traceback', status)}"
        reports.append(load_json(os.path.join(out, f"overlap_t{t}.json")))
    return reports


def main() -> None:
    eps, trainer_id, out, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    report_status(out, trainer_id, lambda: run(eps, trainer_id, out, mode))


if __name__ == "__main__":
    main()
