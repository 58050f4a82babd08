"""A training script written with Fluid 1.6's fleet API, in both of fleet's modes.

    python -m parafluid.distributed.launch --server_num 2 --worker_num 2 examples/fleet_train.py
    CPU_NUM=1 python -m parafluid.distributed.launch --nproc_per_node 2 \\
        examples/fleet_train.py --collective

The first is the parameter-server mode (2 pservers, 2 workers), the second the collective
(nccl2) mode with 2 workers. Each worker reads its own half of every batch; the job trains
what one process would train on the whole batch. ``--out DIR`` makes worker 0 write the
parameters before and after training (``<name>.initial.npy``, ``<name>.final.npy``), its
losses (``losses.npy``), the inference model (``infer/``) and a checkpoint of the job
(``ckpt/``; in the pserver mode the pservers write their parts, which needs ``DIR`` inside
their checkpoint root, ``PARAFLUID_CHECKPOINT_ROOT``).
"""

import argparse
import os
import sys

import numpy as np

import parafluid as fluid
from parafluid.incubate.fleet.base import role_maker

BATCH = 16  # rows per worker and step
FEATURES = 8


def network():
    x = fluid.layers.data(name="x", shape=[FEATURES], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    hidden = fluid.layers.fc(input=x, size=16, act="tanh")
    pred = fluid.layers.fc(input=hidden, size=1)
    return fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y)), pred


def batches(steps, workers):
    """The whole job's batches: ``steps`` of ``BATCH * workers`` rows."""
    rng = np.random.RandomState(0)
    w_true = np.linspace(-1, 1, FEATURES).astype("float32")[:, None]
    xs = rng.uniform(-1, 1, (steps, BATCH * workers, FEATURES)).astype("float32")
    return [(x, np.tanh(x @ w_true)) for x in xs]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collective", action="store_true", help="the collective mode")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", default=None, help="where worker 0 writes its parameters")
    args = parser.parse_args()
    if "PADDLE_TRAINER_ENDPOINTS" not in os.environ:
        print("examples/fleet_train.py is one process of a fleet job; start them all with the "
              "launcher:\n    python -m parafluid.distributed.launch --server_num 2 "
              "--worker_num 2 examples/fleet_train.py\n    CPU_NUM=1 python -m "
              "parafluid.distributed.launch --nproc_per_node 2 examples/fleet_train.py "
              "--collective", file=sys.stderr)
        sys.exit(2)

    loss, pred = network()
    optimizer = fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9)
    if args.collective:
        from parafluid.incubate.fleet.collective import DistributedStrategy, fleet

        fleet.init(role_maker.PaddleCloudRoleMaker(is_collective=True))
        optimizer = fleet.distributed_optimizer(optimizer, DistributedStrategy())
    else:
        from parafluid.incubate.fleet.parameter_server.distribute_transpiler import fleet

        fleet.init(role_maker.PaddleCloudRoleMaker())
        strategy = fluid.DistributeTranspilerConfig()
        strategy.sync_mode = True
        optimizer = fleet.distributed_optimizer(optimizer, strategy)
    optimizer.minimize(loss)

    if fleet.is_server():
        fleet.init_server()
        fleet.run_server()  # returns once every worker has stopped
        print(f"server {fleet.server_index()}: done")
        return

    fleet.init_worker()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fleet.startup_program)
    params = [p.name for p in fluid.default_main_program().global_block().all_parameters()]
    scope = fluid.global_scope()

    def values():
        return {p: np.array(scope.find_var(p).get_tensor()) for p in params}

    initial = values()
    me, workers = fleet.worker_index(), fleet.worker_num()
    losses = []
    for x, y in batches(args.steps, workers):
        rows = slice(me * BATCH, (me + 1) * BATCH)
        out, = exe.run(fleet.main_program, feed={"x": x[rows], "y": y[rows]},
                       fetch_list=[loss.name])
        losses.append(float(np.mean(out)))
    print(f"worker {me} of {workers}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    if args.out and fleet.is_first_worker():
        os.makedirs(args.out, exist_ok=True)
        for p, v in initial.items():
            np.save(os.path.join(args.out, f"{p}.initial.npy"), v)
        for p, v in values().items():
            np.save(os.path.join(args.out, f"{p}.final.npy"), v)
        np.save(os.path.join(args.out, "losses.npy"), np.array(losses))
        # the model as written (before transpiling) with the trained parameters, and a
        # checkpoint of the job (in the pserver mode the pservers write their blocks)
        fleet.save_inference_model(exe, os.path.join(args.out, "infer"), ["x"], [pred])
        fleet.save_persistables(exe, os.path.join(args.out, "ckpt"))
    fleet.stop_worker()


if __name__ == "__main__":
    main()
