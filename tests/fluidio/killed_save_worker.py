"""A child that saves a checkpoint, copies it, trains on and is killed (SIGKILL, by itself)
halfway through writing a chosen file of its next save into the same folder.

    python killed_save_worker.py MODE CKPT REF [TARGET]

MODE: executor, fluid_save, parallel, collective, dygraph, dygraph_persistables, pserver.
REF receives a copy of CKPT as the first save committed it. TARGET (pserver mode): a part of
the name of the file whose second write is cut (``pserver_1``, ``__variables__``,
``__checkpoint__``); fluid_save cuts its ``.pdopt`` file; the other modes the first write of
the second save.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys

import numpy as np

import parafluid as fluid
from parafluid import atomic_write

_write_file = atomic_write._write_file


def arm(target: str = "", nth: int = 1) -> None:
    """Write half of the ``nth`` file whose name holds ``target``, flush it, then die."""
    seen = [0]

    def write(path: str, data: bytes) -> None:
        if target in os.path.basename(path):
            seen[0] += 1
            if seen[0] == nth:
                with open(path, "wb") as f:
                    f.write(data[: len(data) // 2])
                    f.flush()
                    os.fsync(f.fileno())
                os.kill(os.getpid(), signal.SIGKILL)
        _write_file(path, data)
    atomic_write._write_file = write


def static_model():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        y = fluid.layers.data(name="y", shape=[3], dtype="float32")
        pred = fluid.layers.fc(input=fluid.layers.fc(input=x, size=8), size=3)
        diff = fluid.layers.elementwise_sub(pred, y)
        loss = fluid.layers.mean(fluid.layers.elementwise_mul(diff, diff))
    return main, startup, loss


def batch():
    rng = np.random.RandomState(0)
    return {"x": rng.uniform(-1, 1, (8, 4)).astype("float32"),
            "y": rng.uniform(-1, 1, (8, 3)).astype("float32")}


def run_static(mode: str, ckpt: str, ref: str) -> None:
    main, startup, loss = static_model()
    save = fluid.io.save_persistables
    if mode == "fluid_save":  # fluid.save: .pdparams, .pdopt, .pdmodel
        save = lambda exe, d, p: fluid.save(p, os.path.join(d, "model"))  # noqa: E731
    with fluid.program_guard(main, startup):
        if mode == "collective":
            from parafluid.incubate.fleet.base import role_maker
            from parafluid.incubate.fleet.collective import DistributedStrategy, fleet

            fleet.init(role_maker.UserDefinedCollectiveRoleMaker(
                current_id=0, worker_endpoints=["127.0.0.1:6170"]))
            fleet.distributed_optimizer(fluid.optimizer.Momentum(0.05, 0.9),
                                        DistributedStrategy()).minimize(loss)
            program = fleet.main_program
            save = lambda exe, d, p: fleet.save_persistables(exe, d)  # noqa: E731
        else:
            fluid.optimizer.Momentum(0.05, 0.9).minimize(loss)
            program = main
    if mode == "parallel":
        program = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=[fluid.CPUPlace()] * 2)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    exe.run(program, feed=batch(), fetch_list=[loss])
    save(exe, ckpt, main)
    shutil.copytree(ckpt, ref)
    exe.run(program, feed=batch(), fetch_list=[loss])
    arm(".pdopt" if mode == "fluid_save" else "")  # fluid.save: its second file
    save(exe, ckpt, main)


def run_dygraph(mode: str, ckpt: str, ref: str) -> None:
    from parafluid.dygraph import FC, guard, to_variable

    with guard():
        fc = FC("fc", 3)
        opt = fluid.optimizer.Momentum(0.05, 0.9)
        data = batch()

        def train() -> None:
            out = fc(to_variable(data["x"]))
            diff = out - to_variable(data["y"])
            loss = fluid.layers.reduce_mean(diff * diff)
            loss.backward()
            opt.minimize(loss)
            fc.clear_gradients()

        def save() -> None:
            if mode == "dygraph":
                fluid.dygraph.save_dygraph(fc.state_dict(), os.path.join(ckpt, "model"))
            else:
                fluid.dygraph.save_persistables(fc.state_dict(), ckpt, opt)
        train()
        save()
        shutil.copytree(ckpt, ref)
        train()
        arm()
        save()


def run_pserver(ckpt: str, ref: str, target: str) -> None:
    from parafluid.distributed.launch import free_ports
    from parafluid.testing import ps_job

    save = fluid.io.save_persistables

    def save_and_copy(exe, dirname, program, **kw):
        save(exe, dirname, program, **kw)
        if not os.path.exists(ref):  # what the first save committed
            shutil.copytree(dirname, ref)
    fluid.io.save_persistables = save_and_copy
    arm(target, nth=2)
    eps = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    import threading

    threads = [threading.Thread(target=ps_job.run_pserver, args=(ep, eps, 2, "momentum"),
                                daemon=True) for ep in eps.split(",")]
    threads += [threading.Thread(target=ps_job.run_trainer, args=(t, eps, 2, 6, "momentum"),
                                 kwargs=dict(checkpoint_at=(2, 4), checkpoint_dir=ckpt),
                                 daemon=True) for t in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    sys.exit("the second save ended without the kill")


if __name__ == "__main__":
    mode, ckpt, ref = sys.argv[1:4]
    if mode == "pserver":
        run_pserver(ckpt, ref, sys.argv[4])
    elif mode.startswith("dygraph"):
        run_dygraph(mode, ckpt, ref)
    else:
        run_static(mode, ckpt, ref)
    sys.exit("the second save ended without the kill")
