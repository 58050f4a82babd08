"""Start the processes of a distributed job on this machine: Fluid 1.x's launcher.

    python -m parafluid.distributed.launch [--nproc_per_node N] [--cluster_node_ips IPS]
        [--node_ip IP] [--started_port P] [--log_dir DIR] [--selected_gpus IDS]
        [--grace_period S] (script.py | -m module) [args ...]
    python -m parafluid.distributed.launch (--server_num N | --servers EPS)
        (--worker_num M | --workers EPS) [--node_ip IP] [--log_dir DIR] script.py [args ...]

The second form starts a parameter-server job: the pservers run the script with
``PADDLE_TRAINING_ROLE=PSERVER``, ``PADDLE_CURRENT_ENDPOINT`` (and Fluid's ``PADDLE_PORT``,
``POD_IP``) set to their own endpoint; the trainers with ``PADDLE_TRAINING_ROLE=TRAINER`` and
``PADDLE_TRAINER_ID``; both get ``PADDLE_PSERVER_ENDPOINTS`` (= Fluid's
``PADDLE_PSERVERS_IP_PORT_LIST``), ``PADDLE_TRAINERS_NUM`` and ``PADDLE_TRAINER_ENDPOINTS``.
Output lines are prefixed ``[pserver 0]`` / ``[trainer 1]``; logs go to
``DIR/serverlog.<i>`` and ``DIR/workerlog.<i>``.

(also ``parafluid launch ...``). Each machine of the job runs the launcher with the same
``--cluster_node_ips`` and its own ``--node_ip``; it starts ``--nproc_per_node`` processes
with Fluid's environment: ``PADDLE_TRAINER_ID`` (node index x nproc_per_node + local index),
``PADDLE_TRAINERS_NUM``, ``PADDLE_CURRENT_ENDPOINT``, ``PADDLE_TRAINER_ENDPOINTS`` (every
node's IP with ports ``started_port``, ``started_port + 1``, ...), ``PADDLE_TRAINING_ROLE``
``TRAINER`` and, where GPUs exist, ``FLAGS_selected_gpus`` (one GPU per process). On one
machine without ``--started_port`` the ports are free ones picked by the system.

Output: every line of a process is printed with its rank in front (``[rank 1] ...``), or
goes to ``DIR/workerlog.<rank>`` with ``--log_dir``. When a process fails, the launcher stops
the others (SIGTERM, then SIGKILL after ``--grace_period`` seconds) and exits with its status,
naming the rank and its last error line. Ctrl-C (SIGINT) or SIGTERM stops every process.

The shared secret: every process gets ``PARAFLUID_RPC_SECRET``, the launcher's own if it has
one, else one generated for the job (32 random bytes, hex) when every process of the job runs
on this machine; pservers, trainers and mailboxes then refuse messages from anyone without
it. A job on several machines needs the same secret on each launcher (set it in the
environment); without one the launcher says that the job trusts every peer that can reach
its ports.

A test suite that starts many jobs can set ``$PARAFLUID_WARM_SERVER`` (see
``parafluid.distributed.warm_popen.warm_server_env``): the processes are then forked from that
server, which has imported torch and parafluid once, instead of each starting a fresh
interpreter (the same processes otherwise: environment, output, signals; each dies with the
launcher). Without it, nothing changes.

The process plan is built by ``plan(args)`` (a list of ``Proc``): ``plan_pserver`` for the
parameter-server mode.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from .endpoints import parse_endpoint, parse_endpoints
from .env import JOB_ID_ENV, job_id
from .warm_popen import SERVER_ENV as WARM_SERVER_ENV
from .warm_popen import WarmPopen, warm_eligible

__all__ = ["Proc", "add_arguments", "build_parser", "plan", "plan_pserver", "run", "main"]

_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b|Error\b|error:|"
                         r"[\w. ]*: error:)")


@dataclass
class Proc:
    """One process to start: its rank (for output and messages), command and extra env."""

    rank: int
    cmd: list[str]
    env: dict[str, str]
    label: str = ""
    log_name: str = ""
    popen: Any = None
    tail: deque = field(default_factory=lambda: deque(maxlen=200))
    reader: Any = None

    @property
    def name(self) -> str:
        return self.label or f"rank {self.rank}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The launcher's options (shared by ``python -m ...launch`` and ``parafluid launch``)."""
    p.add_argument("--nproc_per_node", type=int, default=None,
                   help="processes (trainers) on this machine (default: one per selected GPU, "
                        "else 1)")
    p.add_argument("--cluster_node_ips", default="127.0.0.1",
                   help="every machine's IP, comma separated, the same on every machine "
                        "(default: %(default)s)")
    p.add_argument("--node_ip", default="127.0.0.1",
                   help="this machine's IP, one of --cluster_node_ips (default: %(default)s)")
    p.add_argument("--started_port", type=int, default=None,
                   help="first trainer port on each machine (default: free ports on one "
                        "machine, 6170 on several)")
    p.add_argument("--log_dir", default=None,
                   help="write each process's output to DIR/workerlog.<rank> instead of the "
                        "terminal")
    p.add_argument("--selected_gpus", default=None,
                   help="GPU ids for the processes, e.g. 0,1 (default: every visible GPU)")
    p.add_argument("--grace_period", type=float, default=5.0,
                   help="seconds between SIGTERM and SIGKILL when stopping processes "
                        "(default: %(default)s)")
    ps = p.add_argument_group("parameter-server mode")
    ps.add_argument("--server_num", type=int, default=None,
                    help="start N pservers on this machine (free ports)")
    ps.add_argument("--servers", default=None,
                    help="the pservers' 'ip:port' list, comma separated (instead of "
                         "--server_num); those on --node_ip are started here")
    ps.add_argument("--worker_num", type=int, default=None,
                    help="start M trainers on this machine (pserver mode)")
    ps.add_argument("--workers", default=None,
                    help="the trainers' 'ip:port' list (instead of --worker_num); those on "
                         "--node_ip are started here")
    p.add_argument("-m", "--module", action="store_true",
                   help="the program is a module, run as python -m MODULE")
    p.add_argument("training_script", help="the script (or, with -m, the module) to run")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER,
                   help="its arguments")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m parafluid.distributed.launch",
                                description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return p


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports free on ``host`` now (bound to port 0, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _gpus(selected: str | None) -> list[str]:
    if selected:
        return [g.strip() for g in selected.split(",") if g.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [str(i) for i, g in enumerate(visible.split(",")) if g.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        return []


def _ps_endpoints(listed: str | None, count: int | None, what: str) -> list[str] | int:
    """The listed endpoints, or how many fresh ones to pick."""
    if listed is not None and count is not None:
        raise ValueError(f"give --{what}s or --{what}_num, not both")
    if listed is not None:
        return parse_endpoints(listed, f"--{what}s")
    if count is None or count < 1:
        raise ValueError(f"--{what}_num must be >= 1, got {count}")
    return count


def plan_pserver(args: argparse.Namespace) -> list[Proc]:
    """The pserver and trainer processes of this machine (parameter-server mode)."""
    servers = _ps_endpoints(args.servers, args.server_num, "server")
    workers = _ps_endpoints(args.workers, args.worker_num, "worker")
    # NOTE: the fresh ports of both roles are picked at once (every socket held until all
    # are bound), so that they differ from each other and from the listed ones
    listed = {e for group in (servers, workers) if isinstance(group, list) for e in group}
    wanted = sum(g for g in (servers, workers) if isinstance(g, int))
    fresh = [e for e in (f"{args.node_ip}:{p}"
                         for p in free_ports(wanted + len(listed), args.node_ip))
             if e not in listed][:wanted] if wanted else []
    if isinstance(servers, int):
        servers, fresh = fresh[:servers], fresh[servers:]
    if isinstance(workers, int):
        workers = fresh[:workers]
    if set(servers) & set(workers):
        raise ValueError(f"--servers and --workers share endpoints: "
                         f"{sorted(set(servers) & set(workers))}")
    base = [sys.executable, "-u", "-m", args.training_script] if args.module else \
        [sys.executable, "-u", args.training_script]
    common = {"PADDLE_PSERVER_ENDPOINTS": ",".join(servers),
              "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(servers),
              "PADDLE_TRAINERS_NUM": str(len(workers)),
              "PADDLE_TRAINER_ENDPOINTS": ",".join(workers), "PYTHONUNBUFFERED": "1"}
    procs = []
    for i, ep in enumerate(servers):
        host, port = parse_endpoint(ep)
        if host != args.node_ip:
            continue
        env = dict(common, PADDLE_TRAINING_ROLE="PSERVER", PADDLE_CURRENT_ENDPOINT=ep,
                   PADDLE_PORT=str(port), POD_IP=host, PADDLE_TRAINER_ID="0")
        procs.append(Proc(len(procs), base + list(args.training_script_args), env,
                          label=f"pserver {i}", log_name=f"serverlog.{i}"))
    for t, ep in enumerate(workers):
        if parse_endpoint(ep)[0] != args.node_ip:
            continue
        env = dict(common, PADDLE_TRAINING_ROLE="TRAINER", PADDLE_CURRENT_ENDPOINT=ep,
                   PADDLE_TRAINER_ID=str(t), POD_IP=args.node_ip)
        procs.append(Proc(len(procs), base + list(args.training_script_args), env,
                          label=f"trainer {t}", log_name=f"workerlog.{t}"))
    if not procs:
        raise ValueError(f"no pserver or trainer endpoint is on --node_ip {args.node_ip}")
    return procs


def _pserver_mode(args: argparse.Namespace) -> bool:
    return any(getattr(args, k, None) is not None
               for k in ("server_num", "servers", "worker_num", "workers"))


SECRET_ENV = "PARAFLUID_RPC_SECRET"


def job_secret(several_machines: bool) -> str | None:
    """The secret to hand to every process: the launcher's ``$PARAFLUID_RPC_SECRET``, else a
    new one when the whole job is on this machine, else None (see the module docstring)."""
    if os.environ.get(SECRET_ENV):
        return os.environ[SECRET_ENV]
    return None if several_machines else secrets.token_hex(32)


def _with_secret(procs: list[Proc], several_machines: bool) -> list[Proc]:
    secret = job_secret(several_machines)
    if secret is not None:
        for p in procs:
            p.env[SECRET_ENV] = secret
    # NOTE: the job's name keeps its emergency checkpoints apart from another job's: one is
    # made for a job of this machine alone; the launchers of several machines cannot agree
    # on one they make, so such a job gives its own (or its pservers' endpoints name it)
    if not job_id() and not several_machines:
        name = f"job-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        for p in procs:
            p.env[JOB_ID_ENV] = name
    return procs


def plan(args: argparse.Namespace) -> list[Proc]:
    """The processes of this machine, with their commands and environment."""
    if _pserver_mode(args):
        if not ((args.server_num is not None or args.servers is not None) and
                (args.worker_num is not None or args.workers is not None)):
            raise ValueError("parameter-server mode needs both the pservers (--server_num or "
                             "--servers) and the trainers (--worker_num or --workers)")
        procs = plan_pserver(args)
        hosts = {ep.rpartition(":")[0] for ep in procs[0].env["PADDLE_PSERVER_ENDPOINTS"]
                 .split(",") + procs[0].env["PADDLE_TRAINER_ENDPOINTS"].split(",")}
        return _with_secret(procs, hosts != {args.node_ip})
    ips = [ip.strip() for ip in args.cluster_node_ips.split(",") if ip.strip()]
    if not ips:
        raise ValueError("--cluster_node_ips is empty")
    if len(set(ips)) != len(ips):
        raise ValueError(f"--cluster_node_ips lists a machine twice: {args.cluster_node_ips}")
    if args.node_ip not in ips:
        raise ValueError(f"--node_ip {args.node_ip} is not one of --cluster_node_ips "
                         f"{','.join(ips)}")
    gpus = _gpus(args.selected_gpus)
    nproc = args.nproc_per_node if args.nproc_per_node is not None else max(len(gpus), 1)
    if nproc < 1:
        raise ValueError(f"--nproc_per_node must be >= 1, got {nproc}")
    if gpus and nproc > len(gpus):
        raise ValueError(f"--nproc_per_node {nproc} is more than the {len(gpus)} GPUs "
                         f"({','.join(gpus)}): one GPU per process")
    if args.started_port is None:
        if len(ips) > 1:
            ports = list(range(6170, 6170 + nproc))  # Fluid's default, known on every machine
        else:
            ports = free_ports(nproc, args.node_ip)
    else:
        if not 0 < args.started_port <= 65535 - nproc:
            raise ValueError(f"--started_port must leave room for {nproc} ports below 65536, "
                             f"got {args.started_port}")
        ports = list(range(args.started_port, args.started_port + nproc))
    endpoints = [f"{ip}:{port}" for ip in ips for port in ports]
    node = ips.index(args.node_ip)
    if args.module:
        base = [sys.executable, "-u", "-m", args.training_script]
    else:
        base = [sys.executable, "-u", args.training_script]
    procs = []
    for i in range(nproc):
        rank = node * nproc + i
        env = {"PADDLE_TRAINER_ID": str(rank), "PADDLE_TRAINERS_NUM": str(len(endpoints)),
               "PADDLE_CURRENT_ENDPOINT": endpoints[rank],
               "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints),
               "PADDLE_TRAINING_ROLE": "TRAINER", "PYTHONUNBUFFERED": "1"}
        if gpus:
            env["FLAGS_selected_gpus"] = gpus[i]
        procs.append(Proc(rank, base + list(args.training_script_args), env))
    return _with_secret(procs, len(ips) > 1)


class _Output:
    """Copies each process's lines to the terminal (prefixed) or to its log file."""

    def __init__(self, log_dir: str | None) -> None:
        self.log_dir = log_dir
        self.lock = threading.Lock()
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)

    def follow(self, proc: Proc) -> None:
        log: IO[str] | None = None
        if self.log_dir:
            log = open(os.path.join(self.log_dir, proc.log_name or f"workerlog.{proc.rank}"), "w",
                       encoding="utf-8")

        def pump() -> None:
            try:
                for raw in proc.popen.stdout:
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    proc.tail.append(line)
                    if log is not None:
                        log.write(line + "\n")
                        log.flush()
                    else:
                        with self.lock:
                            sys.stdout.write(f"[{proc.name}] {line}\n")
                            sys.stdout.flush()
            finally:
                if log is not None:
                    log.close()

        proc.reader = threading.Thread(target=pump, daemon=True)
        proc.reader.start()


def _last_error(proc: Proc) -> str:
    """The rank's exception: the last traceback's exception line, then that traceback
    (indented); without a traceback, its last error-like line, else its last line."""
    raw = [ln.rstrip() for ln in proc.tail]
    starts = [i for i, ln in enumerate(raw) if ln.strip() == "Traceback (most recent call last):"]
    if starts:
        block = raw[starts[-1]:]
        for j, ln in enumerate(block[1:], 1):
            if not ln.startswith(" ") and _ERROR_LINE.match(ln.strip()):
                return ln.strip() + "\n" + "\n".join("    " + b for b in block[:j] if b)
    lines = [ln.strip() for ln in raw if ln.strip()]
    for ln in reversed(lines):
        if _ERROR_LINE.match(ln):
            return ln
    return lines[-1] if lines else "(no output)"


def _die_with_parent() -> None:
    # NOTE: Linux only: if the launcher itself is killed (SIGKILL), its children follow.
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _signal_all(procs: Sequence[Proc], sig: int) -> None:
    for p in procs:
        if p.popen is not None and p.popen.poll() is None:
            try:
                os.killpg(p.popen.pid, sig)  # the child's process group: it and its own children
            except ProcessLookupError:
                pass


def _stop(procs: Sequence[Proc], grace: float) -> list[Proc]:
    """SIGTERM every live process, SIGKILL those still alive after ``grace`` seconds."""
    alive = [p for p in procs if p.popen is not None and p.popen.poll() is None]
    _signal_all(alive, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end and any(p.popen.poll() is None for p in alive):
        time.sleep(0.05)
    _signal_all(alive, signal.SIGKILL)
    for p in alive:
        p.popen.wait()
    return alive


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    """A process of the job: a fresh interpreter, or forked from the warm server that
    ``$PARAFLUID_WARM_SERVER`` names (the job's ``PYTHONUNBUFFERED=1`` then stands for
    ``-u``; the server kills the processes of a launcher that dies)."""
    if os.environ.get(WARM_SERVER_ENV) and cmd[1:2] == ["-u"] and \
            warm_eligible([cmd[0], *cmd[2:]], {"env": env}):
        return WarmPopen([cmd[0], *cmd[2:]], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_die_with_parent)


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    """Start the planned processes, follow them, stop them all on the first failure."""
    err = out or sys.stderr
    try:
        procs = plan(args)
    except ValueError as e:
        print(f"launch: error: {e}", file=err)
        return 2
    output = _Output(args.log_dir)
    interrupted: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        interrupted.append(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for p in procs:
            env = dict(os.environ)
            env.update(p.env)
            p.popen = _start(p.cmd, env)
            output.follow(p)
        if args.log_dir:
            print(f"launch: {len(procs)} processes, logs in {args.log_dir}/workerlog.<rank>",
                  file=err)
        if SECRET_ENV not in procs[0].env:
            print(f"launch: note: no ${SECRET_ENV} on a job across several machines: its "
                  "processes accept messages from every peer that can reach their ports; set "
                  "the same secret in every launcher's environment", file=err)
        failed: Proc | None = None
        while not interrupted:
            running = False
            for p in procs:
                rc = p.popen.poll()
                if rc is None:
                    running = True
                elif rc != 0 and failed is None:
                    failed = p
            if failed is not None or not running:
                break
            time.sleep(0.05)
        if interrupted:
            stopped = _stop(procs, args.grace_period)
            name = signal.Signals(interrupted[0]).name
            print(f"launch: {name} received: stopped "
                  f"{', '.join(p.name for p in stopped) or 'no running process'}", file=err)
            return 128 + interrupted[0]
        if failed is not None:
            stopped = _stop(procs, args.grace_period)
            for p in procs:
                if p.reader is not None:
                    p.reader.join(timeout=2)
            rc = failed.popen.returncode
            how = f"was killed by {signal.Signals(-rc).name}" if rc < 0 else \
                f"exited with status {rc}"
            print(f"launch: {failed.name} (pid {failed.popen.pid}) {how}; last error: "
                  f"{_last_error(failed)}"
                  + (f"; stopped {', '.join(p.name for p in stopped)}" if stopped else ""),
                  file=err)
            return rc if rc > 0 else 1
        for p in procs:
            if p.reader is not None:
                p.reader.join(timeout=2)
        return 0
    finally:
        _stop(procs, 0.5)
        for s, h in old.items():
            signal.signal(s, h)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
