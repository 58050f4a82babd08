"""Reference training runs: what the engine computes, recorded so that a change that alters it
is caught.

``python tests/golden_training.py`` records, for a digits MLP (fc + dropout + Adam) and a
digits CNN (conv + batch_norm + pool + fc, Momentum), the losses of 6 steps and a SHA-256 of
every parameter after them, under the Executor and the ParallelExecutor (2 CPU devices:
AllReduce, Reduce, fused all-reduce). ``tests/test_golden_training.py`` reruns them and
compares: bitwise on the platform the file was recorded on (same torch version and CPU
kernel capability), within 1e-5 elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

import parafluid as fluid

GOLDEN = Path(__file__).parent / "data" / "golden_training.json"
STEPS = 6
BATCH = 32
THREADS = 2


def platform() -> dict[str, str]:
    return {"torch": torch.__version__, "cpu": torch.backends.cpu.get_cpu_capability(),
            "cores": str(os.cpu_count())}


def _data() -> tuple[np.ndarray, np.ndarray]:
    from parafluid.digits import load_data

    x, y, _, _ = load_data()
    return x[: STEPS * BATCH], y[: STEPS * BATCH]


def _mlp() -> tuple[Any, Any, Any]:
    img = fluid.layers.data(name="img", shape=[8, 8], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    h = fluid.layers.fc(input=img, size=32, act="relu")
    h = fluid.layers.dropout(h, dropout_prob=0.2, seed=5)
    h = fluid.layers.fc(input=h, size=32, act="tanh")
    logits = fluid.layers.fc(input=h, size=10)
    loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits=logits, label=label))
    fluid.optimizer.Adam(learning_rate=0.01).minimize(loss)
    return img, label, loss


def _cnn() -> tuple[Any, Any, Any]:
    img = fluid.layers.data(name="img", shape=[1, 8, 8], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    c = fluid.layers.conv2d(img, num_filters=4, filter_size=3, padding=1)
    c = fluid.layers.batch_norm(c, act="relu")
    c = fluid.layers.pool2d(c, pool_size=2, pool_type="max", pool_stride=2)
    logits = fluid.layers.fc(input=c, size=10)
    loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits=logits, label=label))
    fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(loss)
    return img, label, loss


MODELS = {"mlp": _mlp, "cnn": _cnn}
MODES = ("executor", "allreduce", "reduce", "fused")


def run_case(model: str, mode: str) -> dict[str, Any]:
    """Train ``model`` for STEPS steps under ``mode``; return losses and a parameter digest."""
    # NOTE: conv and matmul sum in an order that depends on torch's thread count, which other
    # code in the process may have changed: pin it to what the record was made with.
    previous = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        return _run_case(model, mode)
    finally:
        torch.set_num_threads(previous)


def _run_case(model: str, mode: str) -> dict[str, Any]:
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 11
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        _, _, loss = MODELS[model]()
    x, y = _data()
    x = x.reshape(-1, 1, 8, 8) if model == "cnn" else x.reshape(-1, 8, 8)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    target: Any = main
    if mode != "executor":
        bs = fluid.BuildStrategy()
        if mode == "reduce":
            bs.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
        bs.fuse_all_reduce_ops = mode == "fused"
        target = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, build_strategy=bs, places=fluid.cpu_places(2))
    losses = []
    for step in range(STEPS):
        sl = slice(step * BATCH, (step + 1) * BATCH)
        out, = exe.run(target, feed={"img": x[sl], "label": y[sl]}, fetch_list=[loss],
                       scope=scope)
        losses.append([float(v) for v in np.asarray(out).ravel()])
    digest = hashlib.sha256()
    for var in sorted(main.global_block().all_parameters(), key=lambda v: v.name):
        digest.update(var.name.encode())
        digest.update(np.ascontiguousarray(scope.find_var(var.name).get_tensor()).tobytes())
    return {"losses": losses, "params_sha256": digest.hexdigest()}


def record() -> dict[str, Any]:
    return {"platform": platform(),
            "cases": {f"{m}/{mode}": run_case(m, mode) for m in MODELS for mode in MODES}}


if __name__ == "__main__":
    os.environ.setdefault("CPU_NUM", "2")
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(record(), indent=1) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)
