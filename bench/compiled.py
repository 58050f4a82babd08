"""Compiled execution: parafluid's compiled segments against hand-written PyTorch, eager and
under ``torch.compile``, side by side in one process.

Case ``mlp``: one training step (forward, backward, SGD) of the MLP 784-512-512-10, batch
128 (``bench/models.classifier``). Four sides, alternating: parafluid interpreted
(``Executor.run(main)``), parafluid compiled (``CompiledProgram(main, build_strategy)`` with
``enable_compile``), the same step hand-written in torch (``executor_overhead.build_mlp``:
no autograd), that hand-written step under ``torch.compile``, and the step as a PyTorch user
writes it (``nn.Module``, autograd, ``optim.SGD``), eager and with the module under
``torch.compile``. Prints compiled/nn.Module eager and compiled/nn.Module compiled (target
<= 0.85 each), and the ratios to the hand-written step.

Case ``chain``: 200 small elementwise ops on 16-element tensors, forward only. parafluid
compiled against the same 200 torch calls under ``torch.compile``: the difference over 200
is what the engine costs per op, amortized (target <= 0.1 us).

Case ``digits``: the ``parafluid train`` classifier (64-128-64-10, Adam, batch 32), one step
on one device interpreted and compiled, on two devices (ParallelExecutor) interpreted and
compiled, and on two devices with ``BuildStrategy.fall_back_to_one_device`` (timed after
its measuring steps, whichever it chose).

Case ``startup``: the first step of a fresh process with an empty Inductor cache, and with
the cache a first process left (``TORCHINDUCTOR_CACHE_DIR``): compile cost and cached start.

Medians over the repetitions, ratios of the medians and the median of per-repetition
ratios. Benchmarks are not tests: nothing here asserts on a time.

    python bench/compiled.py                     # mlp, chain, digits
    python bench/compiled.py --case startup
    python bench/compiled.py --case mlp --threads 1 --reps 9
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from executor_overhead import (  # noqa: E402
    CHAIN_OPS,
    CHAIN_WIDTH,
    build_chain,
    build_mlp,
    chain_program,
    interleaved,
)

import parafluid as fluid  # noqa: E402


def _compiled(program: fluid.Program) -> fluid.CompiledProgram:
    bs = fluid.BuildStrategy()
    bs.enable_compile = True
    return fluid.CompiledProgram(program, build_strategy=bs)


def _show(name: str, times: list[float], unit: float = 1e3, label: str = "ms/step") -> float:
    med = statistics.median(times)
    print(f"  {name:28s} {med * unit:9.3f} {label}   (min {min(times) * unit:.3f})")
    return med


def _ratio(name: str, a: list[float], b: list[float]) -> None:
    per = [x / y for x, y in zip(a, b)]
    print(f"  {name:40s} {statistics.median(a) / statistics.median(b):.3f} (medians)   "
          f"{statistics.median(per):.3f} (median of per-rep)")


# ---------------------------------------------------------------------- mlp


def mlp_case(reps: int, steps: int) -> None:
    pf_step, torch_step, _ = build_mlp()
    # the parafluid program again, compiled, from the same weights
    from executor_overhead import BATCH, LR, SIZES
    from models import classifier

    main, startup, loss = classifier("mlp", hidden=SIZES[1:-1],
                                     optimizer=fluid.optimizer.SGD(learning_rate=LR))
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    rng = np.random.RandomState(0)
    feed = {"x": rng.uniform(0, 1, (BATCH, SIZES[0])).astype("float32"),
            "label": rng.randint(0, SIZES[-1], (BATCH, 1)).astype("int64")}
    compiled = _compiled(main)

    def pf_compiled() -> None:
        exe.run(compiled, feed=feed, fetch_list=[loss], scope=scope)

    tc_step = torch.compile(torch_step)
    nn_eager, nn_compiled = _nn_step(feed, False), _nn_step(feed, True)
    start = time.perf_counter()
    pf_compiled()
    first_pf = time.perf_counter() - start
    start = time.perf_counter()
    tc_step()
    first_tc = time.perf_counter() - start
    print(f"\nMLP {'-'.join(map(str, SIZES))}, batch {BATCH}, one SGD step ({steps} steps x "
          f"{reps}); first step: parafluid compiled {first_pf:.1f} s, torch.compile "
          f"{first_tc:.1f} s")
    nn_compiled()
    ti, tcp, te, ttc, tne, tnc = interleaved(
        [pf_step, pf_compiled, torch_step, tc_step, nn_eager, nn_compiled], reps, steps,
        warmup=3)
    _show("parafluid interpreted", ti)
    _show("parafluid compiled", tcp)
    _show("torch eager (hand-written)", te)
    _show("torch.compile (hand-written)", ttc)
    _show("torch nn.Module+autograd+SGD", tne)
    _show("same, model torch.compile'd", tnc)
    _ratio("compiled / nn.Module eager (target <= 0.85)", tcp, tne)
    _ratio("compiled / nn.Module compiled (<= 0.85)", tcp, tnc)
    _ratio("compiled / hand-written eager", tcp, te)
    _ratio("compiled / hand-written torch.compile", tcp, ttc)
    _ratio("interpreted / hand-written eager", ti, te)
    _ratio("torch.compile / torch eager (hand-written)", ttc, te)


def _nn_step(feed: dict, compiled: bool) -> Callable[[], float]:
    """The MLP step as a PyTorch user writes it: an nn.Module, autograd and optim.SGD
    (``compiled``: the module under ``torch.compile``, backward and step as usual)."""
    from executor_overhead import LR, SIZES

    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for i in range(len(SIZES) - 1):
        layers.append(torch.nn.Linear(SIZES[i], SIZES[i + 1]))
        if i < len(SIZES) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    run = torch.compile(model) if compiled else model
    x, y = torch.from_numpy(feed["x"]), torch.from_numpy(feed["label"][:, 0])

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(run(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


# ---------------------------------------------------------------------- chain


def chain_case(reps: int, steps: int) -> None:
    _, torch_chain = build_chain()
    main, h = chain_program()
    rng = np.random.RandomState(0)
    xs = rng.uniform(0.5, 1.0, CHAIN_WIDTH).astype("float32")
    ys = rng.uniform(0.5, 1.0, CHAIN_WIDTH).astype("float32")
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    compiled = _compiled(main)
    tx, ty = torch.from_numpy(xs), torch.from_numpy(ys)

    def chain(t: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        for i in range(CHAIN_OPS):
            kind = i % 3
            t = torch.add(t, u) if kind == 0 else t * 0.5 if kind == 1 else torch.mul(t, u)
        return t

    tc_chain = torch.compile(chain)

    def pf() -> object:
        return exe.run(compiled, feed={"x": xs, "y": ys}, fetch_list=[h], scope=scope)[0]

    def tc() -> object:
        return tc_chain(torch.from_numpy(xs), torch.from_numpy(ys)).numpy().copy()

    np.testing.assert_allclose(pf(), torch_chain(), rtol=1e-5)
    tp, tt = interleaved([pf, tc], reps, steps, warmup=20)
    print(f"\nchain of {CHAIN_OPS} elementwise ops on {CHAIN_WIDTH}-element tensors, forward "
          f"({steps} runs x {reps}):")
    _show("parafluid compiled", tp, 1e6, "us/run")
    _show("torch.compile (same ops)", tt, 1e6, "us/run")
    per = [(a - b) * 1e6 / CHAIN_OPS for a, b in zip(tp, tt)]
    print(f"  engine time per op, amortized: "
          f"{(statistics.median(tp) - statistics.median(tt)) * 1e6 / CHAIN_OPS:.3f} us "
          f"(medians)   {statistics.median(per):.3f} us (median of per-rep; target <= 0.1)")
    del tx, ty


# ---------------------------------------------------------------------- digits


def digits_case(reps: int, steps: int) -> None:
    from parafluid.digits import TrainConfig, build_model, load_data
    from parafluid.parallel.device_fallback import TIMED_STEPS, WARM_STEPS

    x, y, _, _ = load_data()
    cfg = TrainConfig()
    feed = {"img": x[:cfg.batch_size], "label": y[:cfg.batch_size]}
    sides: list[Callable[[], object]] = []
    names = []
    for label, compile_, ndev, fall_back in (
            ("1 device, interpreted", False, 1, False),
            ("1 device, compiled", True, 1, False),
            ("2 devices, interpreted", False, 2, False),
            ("2 devices, compiled", True, 2, False),
            ("2 devices, interpreted, fall_back_to_one_device", False, 2, True),
            ("2 devices, compiled, fall_back_to_one_device", True, 2, True)):
        net = build_model(cfg)
        scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
        exe.run(net["startup"], scope=scope)
        bs = fluid.BuildStrategy()
        bs.enable_compile = compile_
        bs.fall_back_to_one_device = fall_back
        program: object = net["main"]
        if ndev > 1:
            program = fluid.CompiledProgram(net["main"]).with_data_parallel(
                loss_name=net["loss"].name, places=fluid.cpu_places(ndev), build_strategy=bs)
        elif compile_:
            program = fluid.CompiledProgram(net["main"], build_strategy=bs)
        fetch = [net["loss"], net["logits"]]

        def step(exe=exe, program=program, fetch=fetch, scope=scope) -> object:
            return exe.run(program, feed=feed, fetch_list=fetch, scope=scope)
        if fall_back:  # past its measuring (both sides' steps), as a run is after a moment
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for _ in range(2 * (WARM_STEPS + TIMED_STEPS) + 1):
                    step()
        sides.append(step)
        names.append(label)
    times = interleaved(sides, reps, steps, warmup=5)
    print(f"\ndigits classifier (parafluid train's model), batch {cfg.batch_size}, one step "
          f"({steps} steps x {reps}):")
    for name, t in zip(names, times):
        _show(name, t)
    _ratio("1 device: compiled / interpreted", times[1], times[0])
    _ratio("2 devices compiled / 1 device compiled", times[3], times[1])
    _ratio("2 devices interpreted / 1 device interpreted", times[2], times[0])
    _ratio("2 devices interpreted, fall_back_to_one_device / 1 device interpreted", times[4],
           times[0])
    _ratio("2 devices compiled, fall_back_to_one_device / 1 device compiled", times[5],
           times[1])
    # where two devices lose: the process's CPU time per step against the wall time. A
    # step whose devices overlapped would use more CPU than wall time (up to 2x)
    print("  CPU time of the process per step (best of 3 blocks):")
    for name, step in list(zip(names, sides))[:4]:
        best = None
        for _ in range(3):
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                step()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if best is None or wall < best[0]:
                best = (wall, cpu)
        print(f"    {name:28s} cpu {best[1] / steps * 1e3:6.3f} ms/step, cpu / wall "
              f"{best[1] / best[0]:.2f}")


# ---------------------------------------------------------------------- startup

_FIRST_STEP = """
import time, numpy as np, parafluid as fluid, sys
sys.path.insert(0, {bench!r})
from models import classifier
main, startup, loss = classifier("mlp", hidden=(512, 512))
exe = fluid.Executor(fluid.CPUPlace()); exe.run(startup)
bs = fluid.BuildStrategy(); bs.enable_compile = True
prog = fluid.CompiledProgram(main, build_strategy=bs)
feed = {{"x": np.random.rand(128, 784).astype("float32"),
        "label": np.random.randint(0, 10, (128, 1)).astype("int64")}}
t = time.perf_counter(); exe.run(prog, feed=feed, fetch_list=[loss])
first = time.perf_counter() - t
t = time.perf_counter(); exe.run(prog, feed=feed, fetch_list=[loss])
print(first, time.perf_counter() - t)
"""


def startup_case(reps: int) -> None:
    code = _FIRST_STEP.format(bench=os.path.dirname(os.path.abspath(__file__)))
    cold, warm = [], []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
            for out in (cold, warm):
                res = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                     capture_output=True, text=True)
                out.append(float(res.stdout.split()[0]))
    print(f"\nfirst step of a fresh process, MLP 784-512-512-10 batch 128 compiled "
          f"({reps} runs):")
    _show("empty Inductor cache", cold, 1, "s")
    _show("cache of a previous process", warm, 1, "s")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=("mlp", "chain", "digits", "startup", "all"),
                   default="all")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--reps", type=int, default=9, help="alternating repetitions (median)")
    p.add_argument("--steps", type=int, default=10, help="steps per repetition")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; python "
          f"{platform.python_version()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} intra-op thread(s)")
    if args.case in ("mlp", "all"):
        mlp_case(args.reps, args.steps)
    if args.case in ("chain", "all"):
        chain_case(args.reps, args.steps * 20)
    if args.case in ("digits", "all"):
        digits_case(args.reps, args.steps * 10)
    if args.case == "startup":
        startup_case(max(1, args.reps // 3))


if __name__ == "__main__":
    main()
