"""A small parameter-server training job for tests: one model, its data, and the roles.

The same functions serve the in-process tests (pservers and trainers as threads, one scope
and one Executor each) and the multi-process ones (``python -m parafluid.testing.ps_job``):

- :func:`build` makes the (main, startup, loss) of an MLP regressor (20 -> 40 -> 1, so with
  ``min_block_size=100`` its first weight, 800 elements, is split over two pservers) with
  SGD, Momentum, Adam or Adagrad, optionally with an LR decay (any of :data:`LR_DECAYS`) and
  L2 decay;
- :func:`data` gives each step's full batch; trainer ``t`` of ``n`` trains on rows
  ``t::n`` of it (or a step count of its own: uneven data);
- :func:`run_pserver` / :func:`run_trainer` transpile and run one role;
- :func:`reference` runs the untranspiled program in one process on the batches the
  trainers' average corresponds to, from given initial parameters: what the job must equal.

Example::

    python -m parafluid.testing.ps_job pserver --pservers 127.0.0.1:6174,127.0.0.1:6175 \\
        --endpoint 127.0.0.1:6174 --trainers 2
    python -m parafluid.testing.ps_job trainer --pservers ... --trainer-id 0 --trainers 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["build", "data", "batches", "run_pserver", "run_trainer", "reference", "evaluate",
           "PARAMS", "LR_DECAYS", "main"]

IN, HIDDEN = 20, 40
VOCAB, EMB = 50, 8  # the embedding variant's table ("emb": 400 elements, 2 shards)
BATCH = 8  # rows per trainer per step
_BUILD_LOCK = threading.Lock()
PARAMS = ("fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0")


def _lr_schedule(name: str) -> Any:
    """The learning rate of the LR decay ``name`` (Fluid 1.6's schedules), starting near 0.05
    and changing within a few steps."""
    from parafluid import layers

    return {
        "exponential": lambda: layers.exponential_decay(0.05, decay_steps=2, decay_rate=0.5),
        "natural_exp": lambda: layers.natural_exp_decay(0.05, decay_steps=2, decay_rate=0.5),
        "inverse_time": lambda: layers.inverse_time_decay(0.05, decay_steps=2, decay_rate=0.5),
        "polynomial": lambda: layers.polynomial_decay(0.05, decay_steps=4,
                                                      end_learning_rate=0.01),
        "piecewise": lambda: layers.piecewise_decay([2, 4], [0.05, 0.02, 0.01]),
        "noam": lambda: layers.noam_decay(d_model=64, warmup_steps=3),
        "cosine": lambda: layers.cosine_decay(0.05, step_each_epoch=2, epochs=4),
        "linear_lr_warmup": lambda: layers.linear_lr_warmup(
            layers.exponential_decay(0.05, decay_steps=2, decay_rate=0.5),
            warmup_steps=3, start_lr=0.01, end_lr=0.05),
    }[name]()


# every LR decay of Fluid 1.6 (``lr_decay=`` of build and the roles)
LR_DECAYS = ("exponential", "natural_exp", "inverse_time", "polynomial", "piecewise", "noam",
             "cosine", "linear_lr_warmup")


def build(optimizer: str = "sgd", lr_decay: bool | str = False, l2: float = 0.0,
          embedding: str = "", clip: float = 0.0) -> tuple[Any, ...]:
    """``(main, startup, loss)`` of the test model; names are the same in every call.

    ``embedding``: "" (none), "local" (a sparse embedding of ids fed as ``ids``) or
    "distributed" (the same table with ``is_distributed=True``), concatenated to ``x``.
    ``clip``: clip every gradient element to ``[-clip, clip]`` (GradientClipByValue).
    ``lr_decay``: False (a constant 0.05), True ("exponential") or a name in LR_DECAYS.
    """
    import parafluid as fluid

    main, startup = fluid.Program(), fluid.Program()
    # a fixed initialization: Adam's update of a near-zero gradient amplifies rounding, and
    # a test must not pass or fail with the draw
    main.random_seed = startup.random_seed = 5
    # NOTE: program_guard and unique_name.guard switch process-wide defaults: roles running
    # as threads of one process must not build at the same time
    with _BUILD_LOCK, fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[IN], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        if embedding:
            ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
            table = np.random.default_rng(3).standard_normal((VOCAB, EMB)).astype("float32")
            emb = fluid.layers.embedding(
                ids, size=[VOCAB, EMB], is_sparse=True,
                is_distributed=embedding == "distributed",
                param_attr=fluid.ParamAttr(
                    name="emb", initializer=fluid.initializer.NumpyArrayInitializer(table)))
            x = fluid.layers.concat([x, emb], axis=1)
        h = fluid.layers.fc(x, size=HIDDEN, act="tanh")
        pred = fluid.layers.fc(h, size=1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        lr: Any = 0.05
        if lr_decay:
            lr = _lr_schedule("exponential" if lr_decay is True else lr_decay)
        reg = fluid.regularizer.L2Decay(l2) if l2 else None
        if clip:
            fluid.clip.set_gradient_clip(fluid.clip.GradientClipByValue(clip), program=main)
        opt = {"sgd": lambda: fluid.optimizer.SGD(lr, regularization=reg),
               "momentum": lambda: fluid.optimizer.Momentum(lr, momentum=0.9,
                                                            regularization=reg),
               "adam": lambda: fluid.optimizer.Adam(lr, regularization=reg),
               "adagrad": lambda: fluid.optimizer.Adagrad(lr, regularization=reg),
               "decayed_adagrad": lambda: fluid.optimizer.DecayedAdagrad(lr, regularization=reg),
               "ftrl": lambda: fluid.optimizer.Ftrl(lr, regularization=reg),
               "adamax": lambda: fluid.optimizer.Adamax(lr, regularization=reg),
               "adadelta": lambda: fluid.optimizer.Adadelta(lr, regularization=reg),
               }[optimizer]()
        opt.minimize(loss)
    return main, startup, loss


def batches(steps: int, trainers: int, seed: int = 7
            ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The full batch of every step (``trainers * BATCH`` rows), made as they are needed."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((IN, 1)).astype("float32")
    for _ in range(steps):
        x = rng.standard_normal((trainers * BATCH, IN)).astype("float32")
        yield x, np.tanh(x @ w / 3).astype("float32")


def ids_of(steps: int, trainers: int) -> list[np.ndarray]:
    """The ids of every step's full batch (the embedding variant), ``[rows, 1]`` int64."""
    rng = np.random.default_rng(11)
    # NOTE: ids from half the vocabulary only, so some rows (and a shard's part) get no
    # gradient at all: the sparse path must leave them untouched
    return [rng.integers(0, VOCAB // 2 + 5, (trainers * BATCH, 1)).astype("int64")
            for _ in range(steps)]


def data(steps: int, trainers: int, seed: int = 7) -> list[tuple[np.ndarray, np.ndarray]]:
    """The full batch of every step, as a list."""
    return list(batches(steps, trainers, seed))


def _config(split_method: str, min_block_size: int, sync: bool) -> Any:
    import parafluid as fluid

    config = fluid.DistributeTranspilerConfig()
    config.split_method = {"round_robin": fluid.transpiler.RoundRobin,
                           "hash_name": fluid.transpiler.HashName}[split_method]
    config.min_block_size = min_block_size
    config.sync_mode = sync
    return config


def run_pserver(endpoint: str, pservers: str, trainers: int, optimizer: str = "sgd",
                lr_decay: bool | str = False, l2: float = 0.0, split_method: str = "round_robin",
                min_block_size: int = 100, sync: bool = True, load_dir: str | None = None,
                embedding: str = "") -> None:
    """Transpile as the pserver at ``endpoint`` and serve until every trainer is done
    (``load_dir``: first load the blocks a checkpoint saved there)."""
    import parafluid as fluid

    main, startup, _ = build(optimizer, lr_decay, l2, embedding)
    t = fluid.DistributeTranspiler(_config(split_method, min_block_size, sync))
    t.transpile(0, program=main, startup_program=startup, pservers=pservers,
                trainers=trainers, sync_mode=sync)
    prog, pstartup = t.get_pserver_programs(endpoint)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(pstartup, scope=scope)
    if load_dir is not None:
        fluid.io.load_persistables(exe, load_dir, prog, scope=scope)
    exe.run(prog, scope=scope)


def run_trainer(trainer_id: int, pservers: str, trainers: int, steps: int,
                optimizer: str = "sgd", lr_decay: bool | str = False, l2: float = 0.0,
                split_method: str = "round_robin", min_block_size: int = 100,
                sync: bool = True, progress: bool = False, first_step: int = 0,
                checkpoint_at: int | Sequence[int] | None = None,
                checkpoint_dir: str | None = None, embedding: str = "",
                compile: bool = False, step_delay: float = 0.0,
                close: bool = True, checkpoint_every: int = 0,
                raise_at: int | None = None) -> dict[str, Any]:
    """Train steps ``first_step .. steps-1`` as trainer ``trainer_id``; return its losses and
    parameters (initial and final, as lists). ``progress`` prints a JSON line after each
    step; trainer 0 saves a checkpoint into ``checkpoint_dir`` after ``checkpoint_at``
    steps (a number or several), or into ``checkpoint_dir/step_<k>`` after every
    ``checkpoint_every`` steps (k: the steps done); ``step_delay`` seconds pass between
    steps. ``compile``: run the trainer program as compiled segments (a CompiledProgram with
    ``BuildStrategy.enable_compile``). ``close=False`` returns without ``exe.close()``,
    as a script that just ends (the process's exit then tells the pservers);
    ``raise_at``: raise a RuntimeError before step ``raise_at`` (a trainer that fails)."""
    import time

    import parafluid as fluid

    main, startup, loss = build(optimizer, lr_decay, l2, embedding)
    t = fluid.DistributeTranspiler(_config(split_method, min_block_size, sync))
    t.transpile(trainer_id, program=main, startup_program=startup, pservers=pservers,
                trainers=trainers, sync_mode=sync)
    prog = t.get_trainer_program()
    run_prog: Any = prog
    if compile:
        bs = fluid.BuildStrategy()
        bs.enable_compile = True
        run_prog = fluid.CompiledProgram(prog, build_strategy=bs)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    initial = {p: np.array(scope.find_var(p).get_tensor()).tolist() for p in PARAMS}
    if progress:
        print(json.dumps({"trainer_id": trainer_id, "initial": initial}), flush=True)
    losses = []
    all_ids = ids_of(steps, trainers) if embedding else None
    save_after = {checkpoint_at} if isinstance(checkpoint_at, int) else set(checkpoint_at or ())
    for step, (x, y) in enumerate(batches(steps, trainers)):
        if step < first_step:
            continue
        if step == raise_at:
            raise RuntimeError(f"trainer {trainer_id}: the data of step {step} cannot be read")
        if step_delay:
            time.sleep(step_delay)
        feed = {"x": x[trainer_id::trainers], "y": y[trainer_id::trainers]}
        if all_ids is not None:
            feed["ids"] = all_ids[step][trainer_id::trainers]
        out, = exe.run(run_prog, feed=feed, fetch_list=[loss], scope=scope)
        losses.append(float(np.asarray(out).reshape(-1)[0]))
        if progress:
            print(json.dumps({"trainer_id": trainer_id, "step": step}), flush=True)
        if trainer_id == 0 and step + 1 in save_after:
            fluid.io.save_persistables(exe, checkpoint_dir, prog, scope=scope)
        if trainer_id == 0 and checkpoint_every and (step + 1) % checkpoint_every == 0:
            fluid.io.save_persistables(exe, os.path.join(checkpoint_dir, f"step_{step + 1}"),
                                       prog, scope=scope)
    names = PARAMS + (("emb",) if embedding == "local" else ())
    final = {p: np.array(scope.find_var(p).get_tensor()).tolist() for p in names}
    if embedding == "distributed":  # the table never comes whole: read its shards
        from ..distributed.ps_registry import client_pool

        op = next(op for op in prog.global_block().ops if op.type == "distributed_lookup_table")
        pool = client_pool(trainer_id)
        final["emb"] = np.concatenate([
            pool.get(ep).prefetch(name, np.arange(rows)).numpy()
            for name, ep, rows in zip(op.attr("table_names"), op.attr("epmap"),
                                      op.attr("height_sections"))]).tolist()
    if close:
        exe.close()
    return {"trainer_id": trainer_id, "losses": losses, "initial": initial, "final": final}


def reference(initial: dict[str, Any], steps: Sequence[int], optimizer: str = "sgd",
              lr_decay: bool | str = False, l2: float = 0.0, embedding: str = "") -> dict[str, Any]:
    """One process: step s trains on the rows of the trainers whose ``steps[t] > s``."""
    import parafluid as fluid

    trainers = len(steps)
    main, startup, loss = build(optimizer, lr_decay, l2, "local" if embedding else "")
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    all_ids = ids_of(max(steps), trainers) if embedding else None
    for p, v in initial.items():
        scope.find_var(p).get_tensor().set(np.asarray(v, dtype="float32"), fluid.CPUPlace())
    losses = []
    for s, (x, y) in enumerate(batches(max(steps), trainers)):
        live = [t for t in range(trainers) if steps[t] > s]
        rows = np.concatenate([np.arange(t, len(x), trainers) for t in live])
        rows.sort()
        feed = {"x": x[rows], "y": y[rows]}
        if all_ids is not None:
            feed["ids"] = all_ids[s][rows]
        out, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        losses.append(float(out[0]))
    names = PARAMS + (("emb",) if embedding else ())
    final = {p: np.array(scope.find_var(p).get_tensor()).tolist() for p in names}
    return {"losses": losses, "final": final}


def evaluate(params: dict[str, Any], seed: int = 99) -> float:
    """The loss of ``params`` on a fixed batch of 256 rows (the same task as :func:`data`)."""
    import parafluid as fluid

    main, startup, loss = build("sgd")
    test = main.clone(for_test=True)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    for p, v in params.items():
        scope.find_var(p).get_tensor().set(np.asarray(v, dtype="float32"), fluid.CPUPlace())
    x, y = data(1, 256 // BATCH, seed=7)[0]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x.shape).astype("float32")
    w = np.random.default_rng(7).standard_normal((IN, 1)).astype("float32")
    out, = exe.run(test, feed={"x": x, "y": np.tanh(x @ w / 3).astype("float32")},
                   fetch_list=[loss.name], scope=scope)
    return float(out[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m parafluid.testing.ps_job")
    p.add_argument("role", choices=["pserver", "trainer"])
    p.add_argument("--pservers", required=True)
    p.add_argument("--endpoint", default="")
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--trainer-id", type=int, default=0)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--split-method", default="round_robin")
    p.add_argument("--async", dest="sync", action="store_false")
    p.add_argument("--progress", action="store_true", help="a JSON line after each step")
    p.add_argument("--first-step", type=int, default=0, help="trainer: resume at this step")
    p.add_argument("--checkpoint-at", type=int, default=None,
                   help="trainer 0: save a checkpoint after this many steps")
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--step-delay", type=float, default=0.0, help="trainer: seconds per step")
    p.add_argument("--load-dir", default=None, help="pserver: load a checkpoint first")
    p.add_argument("--raise-at", type=int, default=None,
                   help="trainer: fail with an uncaught exception before this step")
    p.add_argument("--no-close", dest="close", action="store_false",
                   help="trainer: end without exe.close() (the exit tells the pservers)")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="trainer 0: save a checkpoint into --checkpoint-dir/step_<k> every "
                        "k steps")
    a = p.parse_args(argv)
    if a.role == "pserver":
        run_pserver(a.endpoint, a.pservers, a.trainers, a.optimizer,
                    split_method=a.split_method, sync=a.sync, load_dir=a.load_dir)
        print(json.dumps({"role": "pserver", "endpoint": a.endpoint}), flush=True)
    else:
        out = run_trainer(a.trainer_id, a.pservers, a.trainers, a.steps, a.optimizer,
                          split_method=a.split_method, sync=a.sync, progress=a.progress,
                          first_step=a.first_step, checkpoint_at=a.checkpoint_at,
                          checkpoint_dir=a.checkpoint_dir, step_delay=a.step_delay,
                          close=a.close, checkpoint_every=a.checkpoint_every,
                          raise_at=a.raise_at)
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
