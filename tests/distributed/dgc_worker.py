"""One trainer of a two-process DGC job, run under the launcher by test_dgc_procs.py.

    python -m parafluid.distributed.launch --nproc_per_node 2 dgc_worker.py OUT_DIR STEPS

Transpiles the DGC model of tests/dgc_models.py in nccl2 mode, trains STEPS steps on this
trainer's half of each global batch with a ParallelExecutor (CPU_NUM devices), and writes
its parameters as .npy files (no pickle) and a status JSON.
"""

from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from dgc_models import dgc, feeds, linear  # noqa: E402
from dist_helpers import report_status  # noqa: E402

import parafluid as fluid  # noqa: E402


def train(out: str, steps: int) -> None:
    e = fluid.distributed.env()
    with fluid.unique_name.guard():
        main, startup, loss = linear(dgc(begin=2, use_nesterov=True,
                                         regularization=fluid.regularizer.L2Decay(0.01)))()
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(e.trainer_id, program=main, startup_program=startup,
                trainers=",".join(e.trainer_endpoints), current_endpoint=e.current_endpoint)
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main,
                                num_trainers=e.trainers, trainer_id=e.trainer_id, scope=scope)
    for feed in feeds(steps, seed=1):
        share = len(feed["x"]) // e.trainers
        mine = {k: v[e.trainer_id * share:(e.trainer_id + 1) * share] for k, v in feed.items()}
        pe.run(fetch_list=[loss.name], feed=mine)
    for name in ("w", "b"):
        np.save(os.path.join(out, f"t{e.trainer_id}_{name}.npy"),
                np.array(scope.find_var(name).get_tensor()))
    pe.close()


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2])
    trainer_id = fluid.distributed.env().trainer_id
    report_status(out, trainer_id, lambda: train(out, steps))


if __name__ == "__main__":
    main()
