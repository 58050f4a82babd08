"""One trainer of a 2-trainer collective job that goes wrong (run by test_collective_faults.py).

    python fault_worker.py SCENARIO ENDPOINTS TRAINER_ID OUT_DIR

Scenarios (the MLP of tests/parallel/dp_models.py with Momentum, 5 steps):

- ``nan``: at step 3, trainer 0's batch holds a NaN and FLAGS_check_nan_inf stops its step;
  trainer 0 catches the error (as docs/robustness.md shows) and goes on training.
- ``swap``: each trainer runs two programs of the same shapes (A and B) alternately; at
  step 2 trainer 1 runs B before A, so that its collectives pair with others of the same size.
- ``crash_before``, ``error_before``: trainer 1 dies (``os._exit``) or raises once the
  rendezvous is done, before its first step.
- ``crash_in_setup``: trainer 1 dies after the rendezvous, as it starts setting up the
  process group (trainer 0 is then waiting in its own setup).
- ``crash_during``: trainer 1 dies during its first step, after the program check.
- ``random``: 40 steps of 0.1 s each, a JSON line ``{"step": k}`` on stdout after each
  (the test signals a trainer at a step it picks); with ``$EXIT_AT=k`` and ``$EXIT_WHO=t``
  trainer t ends its script normally (``sys.exit(0)``) when step k starts.

Writes ``status_t<id>.json``: ``caught`` (errors caught and survived), ``error`` (the error
that ended the run), ``start``/``end`` (time.time() around the run).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "parallel"))

import dp_models  # noqa: E402

import parafluid as fluid  # noqa: E402


def momentum() -> fluid.optimizer.Optimizer:
    return fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9)


def executor(main, startup, loss, eps: str, tid: int) -> tuple:
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(tid, program=main, startup_program=startup, trainers=eps,
                current_endpoint=eps.split(",")[tid])
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main,
                                num_trainers=2, trainer_id=tid, scope=scope)
    return pe, scope


def shard(feed: dict, tid: int) -> dict:
    rows = len(next(iter(feed.values()))) // 2
    return {k: v[tid * rows:(tid + 1) * rows] for k, v in feed.items()}


def main() -> None:
    scenario, eps, tid, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    status: dict = {"caught": []}
    feeds = dp_models.mlp_feeds()
    try:
        with fluid.unique_name.guard():
            main_a, startup_a, loss_a = dp_models.mlp(optimizer=momentum)()
            # the same shapes, other names (fc_3.w_0, ...): another program of the job
            main_b, startup_b, loss_b = dp_models.mlp(optimizer=momentum)()
        if tid == 1 and scenario == "crash_in_setup":
            from parafluid.distributed import collective

            def die(*args, **kwargs):
                os._exit(3)
            collective.make_process_group = die
        status["start"] = time.time()  # for a failure in the setup; reset after it
        pe_a, _ = executor(main_a, startup_a, loss_a, eps, tid)
        if scenario == "swap":
            pe_b, _ = executor(main_b, startup_b, loss_b, eps, tid)
        if tid == 1 and scenario == "crash_before":
            os._exit(3)
        if tid == 1 and scenario == "error_before":
            raise RuntimeError("the data of trainer 1 cannot be read")
        if tid == 1 and scenario == "crash_during":
            comm = pe_a._communicator
            check = comm.check_consistent

            def check_then_die(what: str, fingerprint: str) -> None:
                check(what, fingerprint)
                os._exit(3)
            comm.check_consistent = check_then_die
        status["start"] = time.time()
        if scenario == "random":
            exit_at = int(os.environ.get("EXIT_AT", "-1"))
            exit_who = int(os.environ.get("EXIT_WHO", "-1"))
            for step in range(40):
                if step == exit_at and tid == exit_who:
                    sys.exit(0)
                time.sleep(0.1)
                pe_a.run([loss_a.name], feed=shard(feeds[step % len(feeds)], tid))
                print(json.dumps({"step": step}), flush=True)
            feeds = []
        for step, feed in enumerate(feeds):
            mine = shard(feed, tid)
            if scenario == "nan" and tid == 0 and step == 2:
                mine["x"] = mine["x"].copy()
                mine["x"][0, 0] = np.nan
                os.environ["FLAGS_check_nan_inf"] = "1"
                try:
                    pe_a.run([loss_a.name], feed=mine)
                except Exception as e:  # noqa: BLE001 - the docs' pattern: catch, go on
                    status["caught"].append(f"{type(e).__name__}: {e}")
                finally:
                    del os.environ["FLAGS_check_nan_inf"]
                continue
            if scenario == "swap":
                order = [(pe_b, loss_b), (pe_a, loss_a)] if tid == 1 and step == 2 else \
                    [(pe_a, loss_a), (pe_b, loss_b)]
                for pe, loss in order:
                    pe.run([loss.name], feed=mine)
                continue
            pe_a.run([loss_a.name], feed=mine)
        status["ok"] = True
    except Exception as e:  # noqa: BLE001 - reported to the test
        status["error"] = f"{type(e).__name__}: {e}"
    status["end"] = time.time()
    with open(os.path.join(out, f"status_t{tid}.json"), "w") as f:
        json.dump(status, f)


if __name__ == "__main__":
    main()
