"""One trainer of a multi-process data-parallel job (run by test_multiprocess_dp.py).

    python dp_worker.py ENDPOINTS TRAINER_ID OUT_DIR CASE[,CASE...]

CASE is ``model/mode`` (models of tests/parallel/dp_models.py, ``mlp``, ``cnn``, ``embedding``,
or with another optimizer than SGD, ``mlp+momentum``, ``embedding+adam``, ...; modes
allreduce, reduce, allreduce-fused, reduce-fused, and any of them with ``-compiled``:
BuildStrategy.enable_compile, or ``-nooverlap``: BuildStrategy.overlap_communication off),
optionally ``@k`` for the k-th repetition of the same case.
Each case transpiles a fresh program in nccl2 mode, runs its startup program (the rendezvous
happens once, in the first one), then trains 5 steps on this trainer's half of each global
batch with a ParallelExecutor over CPU_NUM devices. Writes, per case, the merged losses and
the parameters as .npy files (no pickle) and a status JSON.
"""

from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "parallel"))

import dp_models  # noqa: E402
from dist_helpers import report_status  # noqa: E402

import parafluid as fluid  # noqa: E402

OPTIMIZERS = {"momentum": lambda: fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9),
              "adam": lambda: fluid.optimizer.Adam(learning_rate=0.02)}
MODELS = {"mlp": (dp_models.mlp(), dp_models.mlp_feeds),
          "cnn": (dp_models.cnn(), dp_models.cnn_feeds),
          "embedding": (dp_models.embedding_model(), dp_models.embedding_feeds)}
for _name, _opt in OPTIMIZERS.items():
    MODELS[f"mlp+{_name}"] = (dp_models.mlp(optimizer=_opt), dp_models.mlp_feeds)
    MODELS[f"embedding+{_name}"] = (dp_models.embedding_model(optimizer=_opt),
                                    dp_models.embedding_feeds)


def run_case(case: str, endpoints: str, trainer_id: int, out: str) -> None:
    model, mode = case.split("@")[0].split("/")
    build, feeds_of = MODELS[model]
    with fluid.unique_name.guard():
        main, startup, loss = build()
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    t = fluid.DistributeTranspiler(config=config)
    eps = endpoints.split(",")
    t.transpile(trainer_id, program=main, startup_program=startup, trainers=endpoints,
                current_endpoint=eps[trainer_id])
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    bs = fluid.BuildStrategy()
    if mode.startswith("reduce"):
        bs.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
    bs.fuse_all_reduce_ops = "fused" in mode.split("-")
    bs.enable_compile = "compiled" in mode.split("-")  # compiled segments on every device
    bs.overlap_communication = "nooverlap" not in mode.split("-")
    bs.sync_batch_norm = model == "cnn"  # statistics over every device of every trainer
    pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main,
                                build_strategy=bs, num_trainers=len(eps),
                                trainer_id=trainer_id, scope=scope)
    losses = []
    die_at = int(os.environ.get("DIE_AT_STEP", "-1"))
    for step, feed in enumerate(feeds_of()):
        if step == die_at and trainer_id == 1:
            os._exit(3)  # a crash: no goodbye to the others
        rows = len(next(iter(feed.values())))
        share = rows // len(eps)
        mine = {k: v[trainer_id * share:(trainer_id + 1) * share] for k, v in feed.items()}
        out_loss, = pe.run(fetch_list=[loss.name], feed=mine)
        losses.append(np.asarray(out_loss, dtype="float64"))
    tag = case.replace("/", "_").replace("@", "_")
    np.save(os.path.join(out, f"{tag}_t{trainer_id}_losses.npy"), np.stack(losses))
    for p in main.global_block().all_parameters():
        np.save(os.path.join(out, f"{tag}_t{trainer_id}_{p.name}.npy"),
                np.array(scope.find_var(p.name).get_tensor()))
    pe.close()


def main() -> None:
    endpoints, trainer_id, out, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    report_status(out, trainer_id, lambda: [run_case(case, endpoints, trainer_id, out)
                                            for case in cases.split(",")])


if __name__ == "__main__":
    main()
