"""The ``parafluid`` command (also ``python -m parafluid``).

With no arguments it runs ``parafluid train``: it trains a digit classifier with the
Executor, prints one line per epoch, saves the inference model and prints its test accuracy.

Commands are entries of ``COMMANDS``: a name, a one-line help, a longer description, a
function adding the command's options to its argparse sub-parser, and a function running it
(returning the exit status). A new command is one more entry.

Example::

    parafluid                         # = parafluid train
    parafluid train --epochs 5 --seed 1 --output /tmp/digits_model
    parafluid --help
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["main", "build_parser", "Command", "COMMANDS", "DEFAULT_COMMAND"]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 < value < 2**31:
        raise argparse.ArgumentTypeError(f"the seed must be in 1 .. 2**31-1, got {value}")
    return value


# ---------------------------------------------------------------------- train


def _train_arguments(p: argparse.ArgumentParser) -> None:
    from .digits import OPTIMIZERS, TrainConfig

    d = TrainConfig()
    p.add_argument("--epochs", type=_positive_int, default=d.epochs,
                   help="passes over the training images (default: %(default)s)")
    p.add_argument("--batch-size", type=_positive_int, default=d.batch_size,
                   help="images per training step (default: %(default)s)")
    p.add_argument("--lr", "--learning-rate", dest="learning_rate", type=_positive_float,
                   default=None, help="learning rate (default: per optimizer: " +
                   ", ".join(f"{k} {v}" for k, v in OPTIMIZERS.items()) + ")")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default=d.optimizer,
                   help="update rule (default: %(default)s)")
    p.add_argument("--hidden", type=_positive_int, nargs="+", default=list(d.hidden),
                   metavar="N", help="sizes of the hidden layers (default: %(default)s)")
    p.add_argument("--output", "-o", default=d.output, metavar="DIR",
                   help="directory for the saved inference model (default: ./%(default)s)")
    p.add_argument("--devices", type=_positive_int, default=d.devices, metavar="N",
                   help="train data-parallel on N CPU devices with the ParallelExecutor "
                        "(each batch is split between them; default: 1, the plain Executor)")
    p.add_argument("--keep-devices", action="store_true",
                   help="with --devices N: run every step on the N devices; by default the "
                        "run measures a few steps on N devices and a few on one, and goes on "
                        "with one device when a step is faster there (the same training: "
                        "BuildStrategy.fall_back_to_one_device)")
    p.add_argument("--nproc", type=_positive_int, default=1, metavar="N",
                   help="train as N cooperating processes on this machine (the nccl2 mode over "
                        "torch.distributed, started through 'parafluid launch'; each global "
                        "batch is split between them; default: 1)")
    p.add_argument("--pservers", type=_positive_int, default=None, metavar="N",
                   help="train in parameter-server mode: N pserver processes hold the "
                        "parameters and run the optimizer, --trainers trainer processes compute "
                        "gradients (started through 'parafluid launch'; see docs/pserver.md)")
    p.add_argument("--trainers", type=_positive_int, default=None, metavar="N",
                   help="trainer processes with --pservers (default: 2)")
    p.add_argument("--async", dest="async_mode", action="store_true",
                   help="with --pservers: asynchronous updates (no barriers; each gradient "
                        "is applied as it arrives)")
    p.add_argument("--compile", action="store_true",
                   help="compiled segments with tiered compilation (BuildStrategy."
                        "enable_compile and compile_in_background): training starts "
                        "interpreted at once while a low-priority worker process compiles the "
                        "program ahead of time, and switches to the compiled code when it is "
                        "ready (see docs/compiled.md)")
    p.add_argument("--threads", type=_positive_int, default=1,
                   help="torch intra-op threads (default: %(default)s; this model is too small "
                        "to gain from more, and extra threads hurt on a busy machine)")
    p.add_argument("--seed", type=_seed, default=None,
                   help="seed of the initial weights and the data order; the same seed "
                        "repeats a run exactly (default: a fresh one, printed)")
    p.add_argument("--profile", default=None, metavar="FILE",
                   help="profile every op of the run: print the per-op table at the end and "
                        "write a Chrome trace (timeline) to FILE; open it in chrome://tracing "
                        "or ui.perfetto.dev (see docs/profiler.md); with --nproc or "
                        "--pservers one file per process (FILE.rank<i>, FILE.pserver<i>) and "
                        "the command that merges them")


def _train(args: argparse.Namespace) -> int:
    import torch

    from .digits import TrainConfig, train

    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little") \
        % (2**31 - 1) + 1
    launched = "PADDLE_TRAINERS_NUM" in os.environ  # one process of a launched job
    if args.trainers is not None and args.pservers is None and not launched:
        return _usage("--trainers needs --pservers (it counts the trainer processes of a "
                      "parameter-server job); for N cooperating trainer processes without "
                      "parameter servers use --nproc N")
    if args.async_mode and args.pservers is None and \
            "PADDLE_PSERVER_ENDPOINTS" not in os.environ:
        return _usage("--async needs --pservers (it is the parameter-server mode's async "
                      "training)")
    if args.profile:
        problem = _unwritable(args.profile)  # NOTE: found now, not after the whole run
        if problem:
            return _fail(f"cannot write --profile {args.profile!r}: {problem}")
    if args.pservers is not None:
        return _train_processes(args, seed, pservers=args.pservers)
    if args.nproc > 1:
        return _train_processes(args, seed)
    torch.set_num_threads(args.threads)
    cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size,
                      learning_rate=args.learning_rate, optimizer=args.optimizer,
                      hidden=tuple(args.hidden), seed=seed, output=args.output,
                      devices=args.devices, async_mode=args.async_mode,
                      distributed="PADDLE_TRAINERS_NUM" in os.environ,
                      compile=args.compile, fall_back=not args.keep_devices)
    if cfg.batch_size < cfg.devices:
        return _usage(f"--batch-size {cfg.batch_size} is smaller than --devices "
                      f"{cfg.devices}: each batch is split between the devices, so it needs at "
                      "least one image per device")
    trainer = int(os.environ.get("PADDLE_TRAINER_ID", "0")) if cfg.distributed else 0
    pserver = os.environ.get("PADDLE_TRAINING_ROLE", "").upper() == "PSERVER"
    if pserver:
        trainer = -1  # says nothing but errors; returns when the trainers are done
    profiles: dict[str, str] = {}  # a multi-process job's timelines, by process
    profile = args.profile
    if profile and cfg.distributed:
        profiles = _per_process_profiles(profile)
        args.profile = profiles[_process_name(trainer)]
    hidden = "-".join(str(h) for h in cfg.hidden)
    # NOTE: check the output directory before training, not after minutes of it.
    try:
        os.makedirs(cfg.output, exist_ok=True)
        if not os.access(cfg.output, os.W_OK):
            raise PermissionError(f"{cfg.output} is not writable")
    except OSError as e:
        return _fail(f"cannot use --output {cfg.output!r}: {e}")
    epochs = f"{cfg.epochs} epoch" + ("" if cfg.epochs == 1 else "s")
    if trainer == 0:
        _say(f"parafluid train: digits (8x8 images, 10 classes), MLP 64-{hidden}-10, "
             f"{cfg.optimizer}, batch {cfg.batch_size}, {epochs}, seed {seed}"
             + (f", data-parallel on {cfg.devices} CPU devices" if cfg.devices > 1 else "")
             + (", compiled" if cfg.compile else "")
             + (f", trainer 0 of {os.environ['PADDLE_TRAINERS_NUM']} processes"
                if cfg.distributed else "")
             + (f" with {len(os.environ['PADDLE_PSERVER_ENDPOINTS'].split(','))} parameter "
                f"servers ({'async' if cfg.async_mode else 'sync'})"
                if "PADDLE_PSERVER_ENDPOINTS" in os.environ else ""))
    start = time.perf_counter()
    try:
        if args.profile:
            from .profiler import profiler

            with profiler("CPU", sorted_key="total", profile_path=args.profile):
                result = train(cfg, log=_say)
            _say(f"timeline written to {args.profile} (open it in chrome://tracing)")
            if trainer == 0 and len(profiles) > 1:
                _say(_merge_command(profile, profiles))
        else:
            result = train(cfg, log=_say)
    except (RuntimeError, OSError, ValueError) as e:
        return _fail(str(e))
    if trainer != 0:
        return 0
    _say(f"test accuracy {result.test_accuracy:.4f} on {result.test_samples} held-out images "
         f"({time.perf_counter() - start:.1f} s in all)")
    _say(f"inference model saved to {result.model_dir}")
    _say(f"  load it with: fluid.io.load_inference_model({result.model_dir!r}, exe)")
    return 0


def _train_processes(args: argparse.Namespace, seed: int, pservers: int | None = None) -> int:
    """``train --nproc N`` (N trainers, nccl2 mode) or ``train --pservers P --trainers N``
    (parameter-server mode): the same command as processes under the launcher."""
    from .distributed.launch import main as launch

    if pservers is not None:
        if args.nproc > 1 or args.devices > 1:
            return _usage("--pservers runs one device per trainer: use --trainers, not "
                          "--nproc or --devices")
        if args.trainers is None:
            args.trainers = 2
        if args.batch_size < args.trainers:
            return _usage(f"--batch-size {args.batch_size} is smaller than --trainers "
                          f"{args.trainers}: each batch is split between them")
    elif args.batch_size < args.nproc * args.devices:
        return _usage(f"--batch-size {args.batch_size} is smaller than --nproc {args.nproc} x "
                      f"--devices {args.devices}: each batch is split between them")
    # everything but the process options, with the seed fixed so that every trainer starts
    # equal
    launcher_opts = ("--nproc", "--pservers", "--trainers")
    child: list[str] = []
    skip = False
    for a in args.argv:
        if skip:
            skip = False
            continue
        if a in launcher_opts:
            skip = True
            continue
        if a.startswith(tuple(o + "=" for o in launcher_opts)):
            continue
        child.append(a)
    if not child or child[0] != "train":
        child = ["train", *child]
    if args.seed is None:
        child += ["--seed", str(seed)]
    os.environ["CPU_NUM"] = str(args.devices)  # each trainer's devices (inherited)
    if pservers is not None:
        return launch(["--server_num", str(pservers), "--worker_num", str(args.trainers),
                       "-m", "parafluid", *child])
    return launch(["--nproc_per_node", str(args.nproc), "-m", "parafluid", *child])


def _process_name(trainer: int) -> str:
    """``trainer<i>`` or, for a parameter server (trainer -1), ``pserver<i>``."""
    if trainer >= 0:
        return f"trainer{trainer}"
    pservers = os.environ.get("PADDLE_PSERVER_ENDPOINTS", "").split(",")
    me = os.environ.get("PADDLE_CURRENT_ENDPOINT", "")
    return f"pserver{pservers.index(me) if me in pservers else 0}"


def _per_process_profiles(path: str) -> dict[str, str]:
    """Each process's timeline file of this job, by process name: ``{rank}`` in ``path``
    becomes ``<i>`` for trainer i and ``pserver<i>`` for pserver i; without it, ``.rank<i>``
    / ``.pserver<i>`` go before the extension."""
    base, ext = os.path.splitext(path)
    trainers = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    pservers = [ep for ep in os.environ.get("PADDLE_PSERVER_ENDPOINTS", "").split(",") if ep]
    tags = {f"trainer{t}": (str(t), f".rank{t}") for t in range(trainers)}
    tags |= {f"pserver{i}": (f"pserver{i}", f".pserver{i}") for i in range(len(pservers))}
    return {name: path.replace("{rank}", tag) if "{rank}" in path else base + suffix + ext
            for name, (tag, suffix) in tags.items()}


def _merge_command(path: str, profiles: dict[str, str]) -> str:
    """The lines telling how to merge the job's timelines (``--profile path``) into one."""
    merged = path.replace("{rank}", "all")
    listed = ",".join(f"{n}={p}" for n, p in profiles.items())
    return (f"one timeline per process ({', '.join(profiles.values())}); merge them into one "
            f"with:\n  python -m parafluid.timeline --profile_path {listed} "
            f"--timeline_path {merged}")


def _unwritable(path: str) -> str | None:
    """Why a file cannot be written at ``path`` (its folder must exist and be writable), or
    None."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        return "it is a directory"
    if not os.path.isdir(folder):
        return f"the folder {folder} does not exist"
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"{path if os.path.exists(path) else folder} is not writable"
    return None


def _say(line: str) -> None:
    print(line, flush=True)


def _fail(message: str) -> int:
    """A run that cannot go on (exit status 1)."""
    print(f"parafluid train: error: {message}", file=sys.stderr)
    return 1


def _usage(message: str) -> int:
    """Options that do not go together (exit status 2, as argparse's own usage errors)."""
    print(f"parafluid train: error: {message}", file=sys.stderr)
    return 2


# ---------------------------------------------------------------------- launch


def _launch_arguments(p: argparse.ArgumentParser) -> None:
    from .distributed.launch import add_arguments

    add_arguments(p)


def _launch(args: argparse.Namespace) -> int:
    from .distributed.launch import run

    return run(args)


COMMANDS: list[Command] = [
    Command("train", "train a digit classifier with the Executor (the default command)",
            "Train an MLP on scikit-learn's digits data set (1,797 8x8 images; a fifth held "
            "out for testing) with parafluid's Executor. Prints one line per epoch with the loss, "
            "training accuracy and samples/s, then saves the inference model, loads it back "
            "and prints its accuracy on the held-out images.",
            _train_arguments, _train),
    Command("launch", "start the trainers of a multi-process job on this machine",
            "Start --nproc_per_node processes of a script (or -m module) with Fluid's "
            "PADDLE_TRAINER_ID / PADDLE_TRAINERS_NUM / PADDLE_TRAINER_ENDPOINTS / "
            "PADDLE_CURRENT_ENDPOINT environment, prefix their output with the rank, and stop "
            "them all when one fails or on Ctrl-C (the same as python -m "
            "parafluid.distributed.launch; see docs/distributed.md). With --server_num P "
            "--worker_num N it starts a parameter-server job instead: P pservers and N trainers "
            "with PADDLE_TRAINING_ROLE and PADDLE_PSERVER_ENDPOINTS (see docs/pserver.md).",
            _launch_arguments, _launch),
]
DEFAULT_COMMAND = "train"
EXAMPLES = """\
  parafluid                                 train with the defaults (= parafluid train)
  parafluid train --epochs 5 --seed 1       a shorter run that repeats exactly
  parafluid --optimizer momentum --lr 0.05  options without a command go to 'train'
  parafluid train --profile /tmp/prof.json  per-op table + a Chrome timeline of the run
  parafluid train --nproc 2                 the same job as 2 trainer processes
  parafluid train --pservers 2 --trainers 2 parameter-server mode (add --async for async)
  python -m parafluid train -o /tmp/model   the same, as a module
  parafluid launch --nproc_per_node 2 train.py   two trainer processes of train.py
  parafluid launch --server_num 2 --worker_num 2 train.py   2 pservers + 2 trainers"""


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with one sub-parser per entry of ``COMMANDS``."""
    from . import __version__

    details = "\n\n".join(textwrap.fill(f"{c.name}: {c.description}", 88,
                                          subsequent_indent="  ") for c in COMMANDS)
    parser = argparse.ArgumentParser(
        prog="parafluid",
        description="parafluid: Fluid 1.x static graphs on PyTorch tensors. With no command, "
                    f"runs '{DEFAULT_COMMAND}'.",
        epilog=f"{details}\n\nexamples:\n{EXAMPLES}\n\nRun 'parafluid <command> --help' for "
               f"the options of a command. Options given without a command go to "
               f"'{DEFAULT_COMMAND}'.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"parafluid {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>", title="commands")
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description)
        cmd.add_arguments(p)
        p.set_defaults(run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``parafluid`` command line; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or (args_list[0].startswith("-") and
                         args_list[0] not in ("-h", "--help", "--version")):
        args_list.insert(0, DEFAULT_COMMAND)
    args = build_parser().parse_args(args_list)
    args.argv = args_list
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        # NOTE: saves are atomic, so an interrupted run leaves any previous model intact.
        print(f"parafluid {args.command or DEFAULT_COMMAND}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
