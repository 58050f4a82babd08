"""A fleet job (parameter-server mode, the network of examples/fleet_train.py) for the
randomized fault test under the launcher (``--server_num 2 --worker_num 2``).

Every role prints ``{"pid": ..., "role": ..., "index": ..., "endpoint": ...}`` first; a
worker then trains 40 steps of 0.1 s and prints ``{"step": k}`` after each. With ``$EXIT_AT=k`` and
``$EXIT_WHO=t``, worker t's script ends (``sys.exit(0)``, without ``stop_worker``) when
step k starts: its data ran out.
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

import fleet_train  # noqa: E402

import parafluid as fluid  # noqa: E402
from parafluid.incubate.fleet.base import role_maker  # noqa: E402
from parafluid.incubate.fleet.parameter_server.distribute_transpiler import fleet  # noqa: E402

STEPS = 40


def build(role: object) -> object:
    """The job's network and fleet's programs for ``role`` (a role maker); the loss."""
    loss, _ = fleet_train.network()
    fleet.init(role)
    strategy = fluid.DistributeTranspilerConfig()
    strategy.sync_mode = True
    fleet.distributed_optimizer(fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9),
                                strategy).minimize(loss)
    return loss


def main() -> None:
    loss = build(role_maker.PaddleCloudRoleMaker())
    server = fleet.is_server()
    index = fleet.server_index() if server else fleet.worker_index()
    print(json.dumps({"pid": os.getpid(), "role": "pserver" if server else "trainer",
                      "index": index, "endpoint": os.environ.get("PADDLE_CURRENT_ENDPOINT", "")}),
          flush=True)
    if server:
        fleet.init_server()
        fleet.run_server()
        return
    fleet.init_worker()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fleet.startup_program)
    exit_at = int(os.environ.get("EXIT_AT", "-1"))
    exit_who = int(os.environ.get("EXIT_WHO", "-1"))
    rows = slice(index * fleet_train.BATCH, (index + 1) * fleet_train.BATCH)
    for step, (x, y) in enumerate(fleet_train.batches(STEPS, fleet.worker_num())):
        if step == exit_at and index == exit_who:
            sys.exit(0)
        time.sleep(0.1)
        exe.run(fleet.main_program, feed={"x": x[rows], "y": y[rows]}, fetch_list=[loss.name])
        print(json.dumps({"step": step}), flush=True)
    fleet.stop_worker()


if __name__ == "__main__":
    main()
