"""Child Python processes forked from a warm interpreter: the multi-process tests' ``Popen``.

A multi-process test starts its pservers, trainers and workers as ``python -m module ...`` or
``python script.py ...``. Most of such a child's CPU time is its start: importing torch and
parafluid takes seconds of CPU, more than the few steps the child then runs, and a test
suite starts hundreds of them. :class:`WarmPopen` is a :class:`subprocess.Popen` whose
child is instead forked from a server process that imported torch, numpy, zmq and parafluid
once (and has run nothing: no thread, no ZeroMQ context, no torch op).

The child is a real process with its own pid, environment, working directory, setsid state and
standard streams (the ``stdout=PIPE`` etc. of the caller, passed over a Unix socket), so
everything a test does with a ``Popen`` works on it: ``communicate``, ``wait`` with a timeout,
``poll``, ``kill``/``send_signal`` by pid (SIGKILL, SIGSTOP, SIGSEGV...), ``killpg`` when it
was started with ``start_new_session``. It is the server's child, not the caller's: the
server reaps it and writes its return code (``-N`` for a signal, as Popen gives) into a pipe
that the caller's ``wait``/``poll`` read. Every forked child dies with the server
(``PR_SET_PDEATHSIG``), and the server dies with the process that started it, so nothing is
left running when a test process ends.

What a fresh interpreter does and a forked child must do too: the child clears and sets its
environment, changes directory, runs the module or script as ``__main__`` with ``runpy``
(with ``sys.argv`` and ``sys.path[0]`` as ``python`` sets them), reseeds numpy's global
generator (Python's ``random`` reseeds itself at fork), and at the end joins its non-daemon
threads and runs its ``atexit`` functions before it exits with the code ``python`` would.

Only the plain forms ``[sys.executable, "-m", module, *args]`` and ``[sys.executable,
script, *args]`` are forked; any other command (interpreter options, another program, a
different ``executable``) starts cold, as plain Popen does. Set
``PARAFLUID_TEST_COLD_CHILDREN=1`` to start every child cold.

Other processes can share a server: :func:`warm_server_env` names this process's server in
``$PARAFLUID_WARM_SERVER`` (a Unix socket of this machine, open to this user only); a
process whose environment holds it (the launcher a test starts, with its own children) asks
that server instead of starting one. Such a child dies with the process that asked for it
(its connection closing), as the launcher's children die with the launcher.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from typing import Any

__all__ = ["WarmPopen", "warm_eligible", "warm_server_env", "SERVER_ENV"]

# NOTE: libraries only, never a module a child runs as __main__ (runpy would warn that it is
# already imported, and run it from the copy in sys.modules' shadow)
_PRELOAD = ("numpy", "torch", "zmq", "parafluid", "parafluid.distributed.rpc",
            "parafluid.distributed.collective")
_COLD_ENV = "PARAFLUID_TEST_COLD_CHILDREN"
SERVER_ENV = "PARAFLUID_WARM_SERVER"
_PR_SET_PDEATHSIG = 1
_MAX_REQUEST = 1 << 20


def warm_eligible(args: Any, kwargs: dict) -> bool:
    """Whether ``Popen(args, **kwargs)`` is a plain Python command that can be forked warm."""
    if os.environ.get(_COLD_ENV) or sys.platform != "linux":
        return False
    if isinstance(args, (str, bytes)) or not args or kwargs.get("shell"):
        return False
    if any(kwargs.get(k) for k in ("executable", "preexec_fn", "pass_fds", "user", "group",
                                   "extra_groups")) or kwargs.get("umask", -1) != -1:
        return False
    argv = [str(a) for a in args]
    if argv[0] != sys.executable or len(argv) < 2:
        return False
    try:
        ours = _Server.get().start_env
    except OSError:  # NOTE: a shared server whose owner has gone: start cold
        return False
    if not _same_start(kwargs.get("env"), ours):
        return False
    if argv[1] == "-m":
        return len(argv) >= 3
    return not argv[1].startswith("-") and argv[1].endswith(".py")


# what an interpreter or its native libraries read once, at start: a child whose value of
# one differs from the server's must start cold to see it
_START_PREFIXES = ("PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "LD_", "MALLOC_", "TORCH",
                   "OPENBLAS_", "CUDA_", "NCCL_")
_PER_CHILD = ("PYTHONPATH", "PYTHONUNBUFFERED")
# read when a process group is made or a function compiled, not at start (torch.compile sets
# TORCHINDUCTOR_CACHE_DIR in its own process, the transport TORCH_NCCL_ASYNC_ERROR_HANDLING):
# a child's value is seen as a cold child's would be
_RUN_TIME_PREFIXES = ("TORCH_NCCL_", "NCCL_", "TORCHINDUCTOR_")
# parafluid's own start-up settings (read when it is imported)
_START_NAMES = ("PARAFLUID_TUNE_MALLOC",)


def _server_env() -> dict[str, str]:
    """The environment the server starts with (and so the start-up settings it has)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PADDLE_", "FLAGS_", "PARAFLUID_"))}
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _path_entries(value: str) -> list[str]:
    """The entries of a ``PYTHONPATH`` value, absolute, in order, each once."""
    out: list[str] = []
    for p in value.split(os.pathsep):
        p = os.path.abspath(p) if p else ""
        if p and p not in out:
            out.append(p)
    return out


def _same_start(env: dict | None, ours: dict[str, str]) -> bool:
    """Whether a child with environment ``env`` (None: this process's) starts as the server
    (whose environment is ``ours``) started: same start-up variables, and a module path that
    the server's covers or extends (its own entries first, then the child's others)."""
    env = {os.fsdecode(k): os.fsdecode(v) for k, v in
           (env if env is not None else os.environ).items()}
    keys = {k for k in (*env, *ours) if (k.startswith(_START_PREFIXES) or k in _START_NAMES)
            and k not in _PER_CHILD and not k.startswith(_RUN_TIME_PREFIXES)}
    if any(env.get(k) != ours.get(k) for k in keys):
        return False
    have = _path_entries(ours.get("PYTHONPATH", ""))
    want = _path_entries(env.get("PYTHONPATH", ""))
    # NOTE: entries after the server's ones are added to the child's sys.path (see _child);
    # one before them could shadow a module the server imported from its own path
    return set(want) <= set(have) or want[:len(have)] == have


# ------------------------------------------------------------------------ the caller's side


class _Server:
    """The warm server of this process: started on first use, one per process (or the one
    ``$PARAFLUID_WARM_SERVER`` names, shared with the process that set it)."""

    _lock = threading.Lock()
    _instance: _Server | None = None

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.proc: subprocess.Popen | None = None
        self._io = threading.Lock()  # one request and its answer at a time
        shared = os.environ.get(SERVER_ENV)
        if shared:
            self.name = shared
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect("\0" + shared)
        else:
            # NOTE: a name in Linux's abstract namespace: no file to clean up
            self.name = f"parafluid-warm-{os.getpid()}-{secrets.token_hex(8)}"
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            env = _server_env()
            root = env["PYTHONPATH"].split(os.pathsep)[0]
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from parafluid.distributed.warm_popen "
                 "import _serve; _serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])",
                 str(theirs.fileno()), str(os.getpid()), self.name],
                pass_fds=(theirs.fileno(),), env=env, cwd=root, stdin=subprocess.DEVNULL)
            theirs.close()
            self.sock = ours
            atexit.register(self._close)
        self.start_env: dict[str, str] = self._ask({"hello": True}, [])["env"]

    def _close(self) -> None:
        """At exit: end the server and reap it (its children's CPU time then counts in this
        process's, as a cold child's does)."""
        if self.pid != os.getpid() or self.proc is None:
            return
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    @classmethod
    def get(cls) -> _Server:
        with cls._lock:
            s = cls._instance
            if s is None or s.pid != os.getpid() or (s.proc is not None and
                                                    s.proc.poll() is not None):
                s = cls._instance = _Server()
            return s

    def _ask(self, request: dict, fds: list[int]) -> dict:
        data = json.dumps(request).encode()
        with self._io:
            socket.send_fds(self.sock, [struct.pack("!I", len(data)) + data], fds)
            reply = _recv_exact(self.sock, 4)
            (n,) = struct.unpack("!I", reply)
            return json.loads(_recv_exact(self.sock, n))

    def fork(self, request: dict, fds: list[int]) -> int:
        """Ask for a child; its pid (an error of the server's side is raised here)."""
        answer = self._ask(request, fds)
        if "error" in answer:
            raise OSError(f"the warm child server could not start {request['argv']}: "
                          f"{answer['error']}")
        return int(answer["pid"])


def warm_server_env() -> dict[str, str]:
    """``{"PARAFLUID_WARM_SERVER": name}`` of this process's warm server (started if need
    be): in a child's environment, it makes that child's own ``WarmPopen`` children (and the
    launcher's, see ``parafluid.distributed.launch``) forks of this server. Empty where
    children start cold."""
    if os.environ.get(_COLD_ENV) or sys.platform != "linux":
        return {}
    return {SERVER_ENV: _Server.get().name}


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OSError("the warm child server closed its socket (it died)")
        buf += chunk
    return buf


class WarmPopen(subprocess.Popen):
    """``subprocess.Popen`` for plain Python commands, forked from a warm interpreter.

    Takes Popen's arguments; a command that :func:`warm_eligible` refuses starts cold."""

    def __init__(self, args: Any, *pargs: Any, **kwargs: Any) -> None:
        self._warm = not pargs and warm_eligible(args, kwargs)
        self._status_fd = -1
        super().__init__(args, *pargs, **kwargs)

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread,
                       c2pwrite, errread, errwrite, restore_signals, *rest):
        if not self._warm:
            return super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds,
                                          cwd, env, startupinfo, creationflags, shell, p2cread,
                                          p2cwrite, c2pread, c2pwrite, errread, errwrite,
                                          restore_signals, *rest)
        # NOTE: Popen's trailing arguments: gid, gids, uid, umask, start_new_session (and
        # process_group from 3.11); only start_new_session is honoured (warm_eligible refused the
        # others)
        start_new_session = bool(rest[4]) if len(rest) > 4 else False
        process_group = rest[5] if len(rest) > 5 else -1
        argv = [os.fsdecode(a) for a in args]
        status_r, status_w = os.pipe()
        own = []  # fds this process opened only to hand to the child
        stdio = []
        for fd, inherit in ((p2cread, 0), (c2pwrite, 1), (errwrite, 2)):
            if fd == -1:  # the child inherits ours
                fd = os.dup(inherit)
                own.append(fd)
            stdio.append(fd)
        request = {"argv": argv, "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
                   "env": {os.fsdecode(k): os.fsdecode(v) for k, v in
                           (env if env is not None else os.environ).items()},
                   "new_session": start_new_session,
                   "process_group": process_group if process_group is not None else -1}
        try:
            self.pid = _Server.get().fork(request, [*stdio, status_w])
        finally:
            os.close(status_w)
            for fd in own:
                os.close(fd)
            # the pipe ends this Popen made for the child, as Popen closes them after a fork
            # (not the caller's own files, nor the shared /dev/null)
            devnull = getattr(self, "_devnull", None)
            if p2cread != -1 and p2cwrite != -1 and p2cread != devnull:
                os.close(p2cread)
            if c2pwrite != -1 and c2pread != -1 and c2pwrite != devnull:
                os.close(c2pwrite)
            if errwrite != -1 and errread != -1 and errwrite != devnull:
                os.close(errwrite)
            if devnull is not None:
                os.close(devnull)
        self._status_fd = status_r
        self._child_created = True

    # the child is the server's: its exit status arrives on the status pipe
    def _read_status(self, timeout: float | None) -> bool:
        if self._status_fd < 0:
            return False
        ready, _, _ = select.select([self._status_fd], [], [], timeout)
        if not ready:
            return False
        data = b""
        while len(data) < 4:
            chunk = os.read(self._status_fd, 4 - len(data))
            if not chunk:  # the server died before the child: treat as killed
                data = struct.pack("!i", -signal.SIGKILL)
                break
            data += chunk
        os.close(self._status_fd)
        self._status_fd = -1
        self.returncode = struct.unpack("!i", data)[0]
        return True

    def _internal_poll(self, _deadstate=None, **kwargs):
        if not self._warm:
            return super()._internal_poll(_deadstate=_deadstate, **kwargs)
        if self.returncode is None:
            self._read_status(0)
        return self.returncode

    def _wait(self, timeout):
        if not self._warm:
            return super()._wait(timeout)
        if self.returncode is not None:
            return self.returncode
        if not self._read_status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

# ------------------------------------------------------------------------- the server's side


def _set_pdeathsig() -> None:
    """Die (SIGKILL) when the parent process dies: nothing forked outlives the test."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _serve(fd: int, owner_pid: int, name: str) -> None:
    """The server's loop: preload, then fork a child per request and report its status.

    Requests come from the owner (over ``fd``) and from the processes that connect to the
    socket ``name`` (see :func:`warm_server_env`); a child asked for by a connection that
    closes is killed, as it would die with its parent."""
    _set_pdeathsig()
    if os.getppid() != owner_pid:  # the owner died before we set the signal
        os._exit(0)
    start_env = dict(os.environ)  # before an import could change it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(16)
    import importlib

    for mod in _PRELOAD:
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    owner = socket.socket(fileno=fd)
    peers: list[socket.socket] = []
    children: dict[int, tuple[int, socket.socket]] = {}  # pid -> (status fd, asked by)
    while True:
        ready, _, _ = select.select([owner, listener, *peers], [], [], 0.05)
        _reap(children)
        if listener in ready:
            conn, _ = listener.accept()
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      struct.calcsize("3i")))[1]
            if uid == os.getuid():  # NOTE: another user could run code as ours
                peers.append(conn)
            else:
                conn.close()
        for conn in [c for c in ready if c is not listener]:
            if _handle(conn, start_env, children, [owner, listener, *peers]):
                continue
            if conn is owner:
                for pid in children:  # the owner is gone: so are its children
                    _kill(pid)
                # NOTE: reaped, so that their CPU time counts in the owner's (time, rusage)
                # once the owner has reaped this server
                for pid in children:
                    try:
                        os.waitpid(pid, 0)
                    except ChildProcessError:
                        pass
                os._exit(0)
            peers.remove(conn)
            for pid, (_, asker) in children.items():
                if asker is conn:
                    _kill(pid)
            conn.close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _handle(conn: socket.socket, start_env: dict[str, str],
            children: dict[int, tuple[int, socket.socket]],
            socks: list[socket.socket]) -> bool:
    """Answer one request of ``conn``; False when it closed (or broke the protocol)."""
    try:
        header, fds, _, _ = socket.recv_fds(conn, 4, 8)
    except OSError:
        return False
    if not header:
        return False
    try:
        if len(header) < 4:
            header += _recv_exact(conn, 4 - len(header))
        (n,) = struct.unpack("!I", header)
        if n > _MAX_REQUEST:
            raise OSError("request too long")
        # NOTE: the fds arrive with the first bytes of the message
        request = json.loads(_recv_exact(conn, n))
    except (OSError, ValueError):
        for f in fds:
            os.close(f)
        return False
    if request.get("hello"):
        _answer(conn, {"env": start_env})
        return True
    if len(fds) != 4:
        for f in fds:
            os.close(f)
        _answer(conn, {"error": f"expected 4 file descriptors, got {len(fds)}"})
        return True
    try:
        pid = os.fork()
    except Exception as e:  # noqa: BLE001 (reported to the caller)
        for f in fds:
            os.close(f)
        _answer(conn, {"error": f"{type(e).__name__}: {e}"})
        return True
    if pid == 0:
        for s in socks:
            s.close()
        for f, _ in children.values():
            os.close(f)
        _child(request, fds, start_env.get("PYTHONPATH", ""))  # never returns
    children[pid] = (fds[3], conn)
    for f in fds[:3]:
        os.close(f)
    _answer(conn, {"pid": pid})
    return True


def _answer(sock: socket.socket, answer: dict) -> None:
    data = json.dumps(answer).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _reap(children: dict[int, tuple[int, socket.socket]]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        entry = children.pop(pid, None)
        if entry is None:
            continue
        fd = entry[0]
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            os.write(fd, struct.pack("!i", code))
        except OSError:
            pass
        os.close(fd)


def _child(request: dict, fds: list[int], server_path: str) -> None:
    """In the forked child: become ``python ARGV`` and exit as it would."""
    code = 1
    try:
        _set_pdeathsig()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if request["new_session"]:
            os.setsid()
        elif request.get("process_group", -1) >= 0:
            os.setpgid(0, request["process_group"])
        for target, f in zip((0, 1, 2), fds[:3]):
            os.dup2(f, target)
            os.close(f)
        os.close(fds[3])
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        # NOTE: the streams anew over the new fds 0-2, buffered as a fresh interpreter's
        line = bool(request["env"].get("PYTHONUNBUFFERED")) or os.isatty(1)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", closefd=False, buffering=1 if line else -1)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
        try:
            import numpy as np

            np.random.seed(None)
        except ImportError:
            pass
        code = _run(request["argv"], _path_entries(request["env"].get("PYTHONPATH", "")),
                    _path_entries(server_path))
    except BaseException:  # noqa: BLE001 (a fresh interpreter prints it too)
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)


def _run(argv: list[str], path: list[str], server_path: list[str]) -> int:
    import atexit
    import runpy

    # NOTE: the child's own PYTHONPATH entries after the server's, where a fresh interpreter
    # puts them (before the standard library)
    extra = [p for p in path if p not in server_path]
    if extra:
        at = max((i + 1 for i, p in enumerate(sys.path) if p in server_path), default=1)
        sys.path[at:at] = extra

    code = 0
    try:
        try:
            if argv[1] == "-m":
                sys.argv = [argv[2], *argv[3:]]
                sys.path[0] = os.getcwd()
                runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
            else:
                sys.argv = argv[1:]
                sys.path[0] = os.path.dirname(os.path.abspath(argv[1]))
                runpy.run_path(argv[1], run_name="__main__")
        except SystemExit as e:
            code = _exit_code(e.code)
        except BaseException as e:  # noqa: BLE001 (reported as the interpreter reports it)
            # NOTE: as the interpreter does with an uncaught exception: record it in sys.last_*
            # (atexit functions read them) and print it through sys.excepthook
            sys.last_type, sys.last_value, sys.last_traceback = type(e), e, e.__traceback__
            if sys.version_info >= (3, 12):
                sys.last_exc = e
            sys.excepthook(type(e), e, e.__traceback__)
            code = -signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1
        threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads joined
    finally:
        atexit._run_exitfuncs()
    return code


def _exit_code(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1
