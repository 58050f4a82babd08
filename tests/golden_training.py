"""Reference training runs: what the engine computes, recorded so that a change that alters it
is caught.

``python tests/golden_training.py`` records, for a digits MLP (fc + dropout + Adam) and a
digits CNN (conv + batch_norm + pool + fc, Momentum), the losses of 6 steps and a SHA-256 of
every parameter after them, under the Executor and the ParallelExecutor (2 CPU devices:
AllReduce, Reduce, fused all-reduce), together with the key of the machine that made them
(:func:`platform`). ``tests/test_golden_training.py`` reruns them and compares with
:func:`compare`: bitwise where the key is this machine's, within ``RTOL``/``ATOL`` elsewhere
(another CPU model or vendor runs other kernel paths in torch's CPU backends, even at the same
ISA level, and rounds differently in the last bits).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform as _pyplatform
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


# Losses recorded on another machine must agree to this: rounding differences of float32
# kernels (about 1e-7 relative a step) grow over the 6 training steps but stay far below it,
# while any change of what is computed (an op, a gradient, an update rule) moves a loss by
# 1e-3 or more.
RTOL = 1e-5
ATOL = 1e-6


def _cpuinfo_fields(cpuinfo: str) -> dict[str, str]:
    """The ``key: value`` fields of the first processor listed in /proc/cpuinfo text."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:  # a blank line ends the first processor's block
                break
            continue
        fields.setdefault(key.strip(), value.strip())
    return fields


def platform(cpuinfo: str | None = None) -> dict[str, str]:
    """The key of the machine a run is made on: bitwise-equal results are promised only
    between runs with equal keys.

    It names the CPU (vendor, model name, family/model/stepping, a digest of its feature
    flags: two CPUs at the same ISA level still take different kernel paths in torch's CPU
    backends), torch's build (version, commit, a digest of ``torch.__config__.show()``: the
    compiler and MKL/oneDNN versions) and the ISA level torch dispatches to, and the torch
    thread count the runs are made with (conv and matmul split their sums by it).
    ``cpuinfo`` is /proc/cpuinfo's text (read when None; empty where there is none).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    cpu = _cpuinfo_fields(cpuinfo)
    flags = " ".join(sorted((cpu.get("flags") or cpu.get("Features", "")).split()))
    return {
        "torch": torch.__version__,
        "torch_commit": str(torch.version.git_version),
        "torch_config_sha256": hashlib.sha256(torch.__config__.show().encode()).hexdigest()[:16],
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": _pyplatform.machine(),
        "cpu_vendor": cpu.get("vendor_id") or cpu.get("CPU implementer", ""),
        "cpu_model": cpu.get("model name") or _pyplatform.processor(),
        "cpu_id": " ".join(f"{k} {cpu.get(k, '?')}" for k in ("cpu family", "model",
                                                               "stepping")),
        "cpu_flags_sha256": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "cores": str(os.cpu_count()),
        "torch_threads": str(THREADS),
    }


def load(path: Path = GOLDEN) -> dict[str, Any]:
    """The recording at ``path``: ``{"platform": key, "cases": {"model/mode": run}}``."""
    return json.loads(Path(path).read_text())


def compare(got: dict[str, Any], want: dict[str, Any], recorded_on: dict[str, str]) -> str:
    """Check the run ``got`` against the recorded run ``want``; return how it was compared.

    ``"bitwise"`` where ``recorded_on`` is this machine's key (same CPU, torch build and
    thread count: the same kernels add in the same order), losses and parameter digest
    equal; ``"tolerance"`` otherwise, losses within ``RTOL``/``ATOL`` (the digest of
    parameters rounded elsewhere says nothing). Raises AssertionError on a mismatch.
    """
    if recorded_on == platform():
        assert got["losses"] == want["losses"], (
            f"losses are not bitwise equal to the recording made on this machine: "
            f"got {got['losses']}, recorded {want['losses']}")
        assert got["params_sha256"] == want["params_sha256"], (
            "parameters are not bitwise equal to the recording made on this machine")
        return "bitwise"
    np.testing.assert_allclose(
        np.array(got["losses"]), np.array(want["losses"]), rtol=RTOL, atol=ATOL,
        err_msg=f"losses differ beyond the tolerance for a recording made on another machine "
                f"({recorded_on})")
    return "tolerance"


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


def run_case(model: str, mode: str, exec_threads: int = 0,
             torch_threads: int = THREADS) -> dict[str, Any]:
    """Train ``model`` for STEPS steps under ``mode``; return losses and a parameter digest.

    ``exec_threads`` is the ParallelExecutor's scheduler thread count (0: automatic; its
    workers set their own torch thread count, see ``parafluid.engine.scheduler``),
    ``torch_threads`` the calling thread's torch thread count (the recording's: THREADS).
    """
    # NOTE: conv and matmul sum in an order that depends on torch's thread count, which other
    # code in the process may have changed: pin it to what the record was made with.
    previous = torch.get_num_threads()
    torch.set_num_threads(torch_threads)
    try:
        return _run_case(model, mode, exec_threads)
    finally:
        torch.set_num_threads(previous)


def _run_case(model: str, mode: str, exec_threads: int) -> dict[str, Any]:
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
        es = fluid.ExecutionStrategy()
        es.num_threads = exec_threads
        target = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, build_strategy=bs, exec_strategy=es,
            places=fluid.cpu_places(2))
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
