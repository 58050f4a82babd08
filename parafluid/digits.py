"""The classifier that ``parafluid train`` builds: an MLP on scikit-learn's digits data set.

The data set (1,797 8x8 images of handwritten digits) ships inside scikit-learn, so nothing
is downloaded. The split into train and test images is fixed; ``seed`` sets the initial
weights and the order of the training images.

Example::

    from parafluid.digits import TrainConfig, train
    result = train(TrainConfig(epochs=5, seed=1))
    print(result.test_accuracy, result.model_dir)
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import parafluid as fluid
from parafluid.parallel.device_fallback import OneDeviceWarning

__all__ = ["TrainConfig", "TrainResult", "EpochStats", "load_data", "build_model", "train",
           "OPTIMIZERS"]

# Learning rates that train this model well in ~10 epochs, per optimizer.
OPTIMIZERS = {"sgd": 0.1, "momentum": 0.05, "adam": 0.003}
_SPLIT_SEED = 0  # NOTE: fixed, so that test accuracies of different seeds are comparable
TEST_FRACTION = 0.2


@dataclass
class TrainConfig:
    """What to train and how; the defaults are the ``parafluid train`` defaults."""

    epochs: int = 20
    batch_size: int = 32
    learning_rate: float | None = None  # None: the optimizer's entry in OPTIMIZERS
    optimizer: str = "adam"
    hidden: tuple[int, ...] = (128, 64)
    seed: int = 1
    output: str = "parafluid_output"
    devices: int = 1  # > 1: data-parallel over that many CPU devices (ParallelExecutor)
    distributed: bool = False  # one trainer of a multi-process job (PADDLE_* environment)
    async_mode: bool = False  # parameter-server jobs: asynchronous updates
    compile: bool = False  # compiled segments (BuildStrategy.enable_compile)
    # devices > 1 in one process: go on with one device when a step is faster there
    # (BuildStrategy.fall_back_to_one_device); False keeps every device
    fall_back: bool = True


@dataclass
class EpochStats:
    epoch: int
    loss: float
    train_accuracy: float
    samples_per_s: float
    seconds: float


@dataclass
class TrainResult:
    test_accuracy: float
    test_samples: int
    model_dir: str
    history: list[EpochStats] = field(default_factory=list)


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels); images float32 [N, 64] in [0, 1],
    labels int64 [N, 1]."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise RuntimeError("the digits data set comes with scikit-learn, which is not "
                           "installed: pip install 'parafluid[examples]'") from None
    digits = load_digits()
    images = (digits.data / 16.0).astype("float32")
    labels = digits.target.astype("int64").reshape(-1, 1)
    order = np.random.RandomState(_SPLIT_SEED).permutation(len(images))
    n_test = int(round(len(images) * TEST_FRACTION))
    test, tr = order[:n_test], order[n_test:]
    return images[tr], labels[tr], images[test], labels[test]


def build_model(cfg: TrainConfig) -> dict[str, Any]:
    """Build the main and startup programs; returns them with the img/label/logits/loss vars."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = cfg.seed
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        img = fluid.layers.data(name="img", shape=[64], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        h = img
        for size in cfg.hidden:
            h = fluid.layers.fc(input=h, size=size, act="relu")
        logits = fluid.layers.fc(input=h, size=10)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        _make_optimizer(cfg).minimize(loss)
    return {"main": main, "startup": startup, "img": img, "label": label, "logits": logits,
            "loss": loss}


def _join_job(net: dict[str, Any]) -> Any:
    """Transpile the programs in nccl2 mode for this trainer of the launched job."""
    job = fluid.distributed.env()
    if job.trainers > 1:
        config = fluid.DistributeTranspilerConfig()
        config.mode = "nccl2"
        fluid.DistributeTranspiler(config=config).transpile(
            job.trainer_id, program=net["main"], startup_program=net["startup"],
            trainers=",".join(job.trainer_endpoints), current_endpoint=job.current_endpoint)
    return job


def _pserver_job(net: dict[str, Any], cfg: TrainConfig) -> tuple[Any, Any]:
    """Transpile in pserver mode for this process of the launched job: ``(job, program)``,
    where ``program`` is the trainer program, or None for a pserver (which then serves)."""
    job = fluid.distributed.env()
    config = fluid.DistributeTranspilerConfig()
    config.sync_mode = not cfg.async_mode
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(job.trainer_id, program=net["main"], startup_program=net["startup"],
                pservers=",".join(job.pserver_endpoints), trainers=job.trainers,
                sync_mode=not cfg.async_mode)
    if job.training_role == "PSERVER":
        prog, startup = t.get_pserver_programs(job.current_endpoint)
        exe = fluid.Executor(fluid.CPUPlace())
        scope = fluid.Scope()
        exe.run(startup, scope=scope)
        exe.run(prog, scope=scope)  # returns when every trainer is done
        return job, None
    return job, t.get_trainer_program()


def _make_optimizer(cfg: TrainConfig) -> Any:
    lr = cfg.learning_rate if cfg.learning_rate is not None else OPTIMIZERS[cfg.optimizer]
    if cfg.optimizer == "sgd":
        return fluid.optimizer.SGD(learning_rate=lr)
    if cfg.optimizer == "momentum":
        return fluid.optimizer.Momentum(learning_rate=lr, momentum=0.9)
    if cfg.optimizer == "adam":
        return fluid.optimizer.Adam(learning_rate=lr)
    raise ValueError(f"unknown optimizer {cfg.optimizer!r}; choose one of {sorted(OPTIMIZERS)}")


def one_device_step_seconds(net: dict[str, Any], x: np.ndarray, y: np.ndarray,
                            batch_size: int, steps: int = 30, compile: bool = False) -> float:
    """Seconds per training step of ``net`` on one device with the plain Executor (or, with
    ``compile``, as compiled segments), fed and fetched as ``train`` does; measured in a
    scratch scope (the trained one is untouched)."""
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(net["startup"], scope=scope)
    feed = {"img": x[:batch_size], "label": y[:batch_size]}
    fetch = [net["loss"], net["logits"]]
    program = net["main"]
    if compile:
        program = fluid.CompiledProgram(program, build_strategy=_build_strategy(compile))
    for _ in range(5):  # warm up: the first runs build and cache the plan
        exe.run(program, feed=feed, fetch_list=fetch, scope=scope)
    start = time.perf_counter()
    for _ in range(steps):
        exe.run(program, feed=feed, fetch_list=fetch, scope=scope)
    return (time.perf_counter() - start) / steps


def _build_strategy(compile: bool, trainers: int = 1, trainer_id: int = 0) -> Any:
    bs = fluid.BuildStrategy()
    bs.num_trainers, bs.trainer_id = trainers, trainer_id
    bs.enable_compile = compile
    # tiered: training starts at once, interpreted, and each segment switches to compiled
    # code when the background thread has it (a short run never waits for the compiler)
    bs.compile_in_background = compile
    return bs


def _data_parallel_note(net: dict[str, Any], x: np.ndarray, y: np.ndarray, cfg: TrainConfig,
                        parallel_step: float, processes: int = 1,
                        pservers: bool = False) -> str | None:
    """A line saying that data parallelism did not pay, when a step of the job (the last
    epoch's mean: ``cfg.devices`` devices, or ``processes`` trainer processes) took longer
    than one on a single device in one process (measured now)."""
    single = one_device_step_seconds(net, x, y, cfg.batch_size, compile=cfg.compile)
    if parallel_step <= single:
        return None
    if processes > 1:
        where = f"{processes} trainer processes" + (
            f" x {cfg.devices} devices" if cfg.devices > 1 else "") + (
            " and parameter servers" if pservers else "")
        return (f"note: distributed training does not pay for a model this small: a step "
                f"took {parallel_step * 1e3:.2f} ms with {where} vs {single * 1e3:.2f} ms in "
                f"one process on 1 device ({parallel_step / single:.1f}x; measured on this "
                "machine): the messages between the processes cost more per step than "
                "splitting the batch saves. Drop " + ("--pservers" if pservers else "--nproc")
                + ", or use a larger model or batch")
    return (f"note: data parallelism does not pay for a model this small: a step took "
            f"{parallel_step * 1e3:.2f} ms on {cfg.devices} devices vs "
            f"{single * 1e3:.2f} ms on 1 ({parallel_step / single:.1f}x; measured on this "
            f"machine): running {cfg.devices} replicas in one process costs more per step "
            "than splitting the batch saves. Use --devices 1, or a larger model or batch")


def _fallback_note(program: Any) -> tuple[bool, str | None]:
    """Whether the data-parallel executor chose its devices (the fallback measured both),
    and its note when it went on with one device."""
    fallback = getattr(getattr(program, "_executor", None), "_fallback", None)
    if fallback is None:
        return True, None
    return fallback.decided, fallback.note


_STATS = "parafluid_train_epoch_stats"  # what trainers tell trainer 0 after each epoch


def _job_totals(job: Any, pserver_mode: bool, ndev: int, totals: list[float]) -> list[float]:
    """``totals`` (loss sum, correct, images) summed over the trainers of the job: trainer 0
    gets the sums (the others get theirs, or their own numbers in pserver mode)."""
    import torch

    if job is None or job.trainers == 1:
        return totals
    value = torch.tensor(totals, dtype=torch.float64)
    if not pserver_mode:  # the collective job's communicator: one all-reduce per epoch
        from .distributed.collective import get_collective

        comm = get_collective(job.trainer_endpoints, job.trainer_id)
        assert comm is not None, "the nccl2 job's first step joined the collective"
        return comm.all_reduce([value] + [torch.zeros_like(value)] * (ndev - 1))[0].tolist()
    # pserver mode: the trainers share no collective; they send their numbers to trainer 0's
    # mailbox (its trainer endpoint, unused otherwise)
    from .distributed.node_mailbox import client, mailbox

    eps = job.trainer_endpoints
    if job.trainer_id != 0:
        client(eps[0], job.trainer_id).send(_STATS, value, receiver=0)
        return totals
    box = mailbox(eps[0], 0)
    for t in range(1, job.trainers):
        box.expect(_STATS, t, eps[t], shape=(3,), dtype=torch.float64)
    for t in range(1, job.trainers):
        value += box.take(_STATS, t, eps[t])
    return value.tolist()


def train(cfg: TrainConfig, log: Callable[[str], None] = print) -> TrainResult:
    """Train, report one line per epoch through ``log``, save and re-load the model, test it."""
    if cfg.batch_size < cfg.devices:
        raise ValueError(f"train: batch_size {cfg.batch_size} is smaller than devices "
                         f"{cfg.devices}; each batch is split between the devices")
    x_train, y_train, x_test, y_test = load_data()
    net = build_model(cfg)
    pserver_mode = cfg.distributed and bool(fluid.distributed.env().pserver_endpoints)
    program = net["main"]
    if pserver_mode:
        if cfg.devices > 1:
            raise ValueError("train: a parameter-server trainer runs on one device; "
                             f"got devices={cfg.devices}")
        job, program = _pserver_job(net, cfg)
        if program is None:  # this process was a pserver: it served until the trainers ended
            return TrainResult(float("nan"), 0, os.path.abspath(cfg.output), [])
    else:
        job = _join_job(net) if cfg.distributed else None
    rank, ntrainers = (job.trainer_id, job.trainers) if job is not None else (0, 1)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(net["startup"], scope=scope)  # pserver mode: also pulls the initial parameters
    rng = np.random.RandomState(cfg.seed)
    history = []
    fetch = [net["loss"], net["logits"]]
    probing = False  # until the data-parallel executor chose its devices
    if not pserver_mode and (cfg.devices > 1 or ntrainers > 1):
        # Each batch is split over the devices; logits come back concatenated in batch order.
        bs = _build_strategy(cfg.compile, ntrainers, rank)
        bs.fall_back_to_one_device = probing = cfg.fall_back and ntrainers == 1
        program = fluid.CompiledProgram(net["main"]).with_data_parallel(
            loss_name=net["loss"].name, places=fluid.cpu_places(cfg.devices),
            build_strategy=bs)
    elif cfg.compile:  # one device (a pserver-mode trainer too): compiled segments
        program = fluid.CompiledProgram(program, build_strategy=_build_strategy(True))
    split = cfg.devices * ntrainers
    steps = 0
    for epoch in range(1, cfg.epochs + 1):
        order = rng.permutation(len(x_train))
        start = time.perf_counter()
        loss_sum = correct = seen = 0.0
        steps = 0
        for i in range(0, len(order), cfg.batch_size):
            idx = order[i:i + cfg.batch_size]
            if len(idx) < split:
                continue  # a last batch with fewer images than devices cannot be split
            if ntrainers > 1:  # every trainer takes its share of the same global batch
                share = len(idx) // ntrainers
                idx = idx[rank * share:(rank + 1) * share]
            feed = {"img": x_train[idx], "label": y_train[idx]}
            if probing:  # the fallback's choice is a line of the log, not a warning
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", OneDeviceWarning)
                    loss, logits = exe.run(program, feed=feed, fetch_list=fetch, scope=scope)
                decided, note = _fallback_note(program)
                probing = not decided
                if note is not None:
                    log("note: " + note.removeprefix("ParallelExecutor: ") +
                        f" (--keep-devices keeps all {cfg.devices})")
            else:
                loss, logits = exe.run(program, feed=feed, fetch_list=fetch, scope=scope)
            loss_sum += float(loss.mean()) * len(idx)
            correct += int((logits.argmax(axis=1) == y_train[idx][:, 0]).sum())
            seen += len(idx)
            steps += 1
        seconds = time.perf_counter() - start
        # the job's numbers: loss and accuracy over every trainer's images, samples/s of all
        loss_sum, correct, seen = _job_totals(job, pserver_mode, cfg.devices,
                                              [loss_sum, correct, seen])
        stats = EpochStats(epoch, loss_sum / seen, correct / seen, seen / seconds, seconds)
        history.append(stats)
        if rank != 0:
            continue  # trainer 0 reports the job's numbers
        log(f"epoch {epoch:>{len(str(cfg.epochs))}}/{cfg.epochs}  loss {stats.loss:.4f}  "
            f"train acc {stats.train_accuracy:.4f}  {stats.samples_per_s:,.0f} samples/s")

    if pserver_mode:
        exe.close()  # tells the pservers this trainer is done
    if (cfg.devices > 1 or ntrainers > 1) and rank == 0 and steps and \
            _fallback_note(program)[1] is None:
        # NOTE: a distributed job's programs talk to the other processes: time an
        # untranspiled copy (same names, same seed)
        plain = build_model(cfg) if ntrainers > 1 else net
        note = _data_parallel_note(plain, x_train, y_train, cfg, history[-1].seconds / steps,
                                   processes=ntrainers, pservers=pserver_mode)
        if note:
            log(note)
    model_dir = os.path.abspath(cfg.output)
    main = net["main"]
    if pserver_mode:
        exe = fluid.Executor(fluid.CPUPlace())
        main = build_model(cfg)["main"]  # untranspiled (no send/recv), same names
    if rank != 0:  # the trainers hold the same parameters: trainer 0 saves and tests
        return TrainResult(float("nan"), 0, model_dir, history)
    fluid.io.save_inference_model(model_dir, ["img"], [net["logits"]], exe, main,
                                  scope=scope)
    # NOTE: the test accuracy comes from the model as saved, loaded into a fresh scope: it
    # proves the files on disk are complete, not just that training worked.
    test_scope = fluid.Scope()
    program, feeds, fetches = fluid.io.load_inference_model(model_dir, exe, scope=test_scope)
    logits, = exe.run(program, feed={feeds[0]: x_test}, fetch_list=fetches, scope=test_scope)
    accuracy = float((logits.argmax(axis=1) == y_test[:, 0]).mean())
    return TrainResult(accuracy, len(x_test), model_dir, history)
