"""Keep the machine loaded: N busy processes, for a time limit, to run tests under load.

Each burner process spins in Python for ``--duty`` of every 100 ms period and sleeps the
rest, so ``--procs 4 --duty 0.5`` adds about 2 cores' worth of load (a load average near 4).
The burners end at the time limit, when this script gets SIGTERM or SIGINT, when it exits,
and on their own when this script is gone (killed with SIGKILL): none outlives it.

    python bench/cpu_burner.py --procs 2 --seconds 300          # load until the limit or ^C
    python bench/cpu_burner.py --procs 4 --seconds 1800 -- python -m pytest -q tests/distributed
        # runs the command under load, stops the burners when it ends, exits with its status
    python bench/cpu_burner.py --procs 4 --duty 0.5 --seconds 9000 --repeat 10 -- \
        python -m pytest -q -n 3 --dist worksteal
        # the test suite ten times in a row under load: each run's status, time and mean load

Not a benchmark and not a test: it measures nothing; it prints the load average at the
start and the end.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time

PERIOD_S = 0.1


def _burn(duty: float, until: float, parent: int) -> None:
    """Spin ``duty`` of each period until ``until`` (monotonic) or until ``parent`` is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    x = 0
    while time.monotonic() < until and os.getppid() == parent:
        start = time.monotonic()
        while time.monotonic() - start < duty * PERIOD_S:
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        rest = PERIOD_S - (time.monotonic() - start)
        if rest > 0:
            time.sleep(rest)


class _Sampler:
    """Appends the 1-minute load average to ``loads`` now and every ``SAMPLE_S`` seconds."""

    SAMPLE_S = 10.0

    def __init__(self, loads: list[float]) -> None:
        self._loads = loads
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                self._loads.append(os.getloadavg()[0])
            except OSError:
                return
            if self._done.wait(self.SAMPLE_S):
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def _load() -> str:
    try:
        return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        return "load average unknown"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1,
                    help="busy processes (default: one per core)")
    ap.add_argument("--duty", type=float, default=1.0,
                    help="busy fraction of each 100 ms period, 0 to 1 (default 1)")
    ap.add_argument("--seconds", type=float, required=True,
                    help="time limit: the burners stop then, whatever happens")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the command this many times in a row (default 1), printing each "
                         "run's exit status, time and mean load; exits with the first "
                         "non-zero status")
    args = ap.parse_args(argv)
    if args.procs < 1 or not 0 < args.duty <= 1 or args.seconds <= 0 or args.repeat < 1:
        ap.error(f"need --procs >= 1, 0 < --duty <= 1, --seconds > 0 and --repeat >= 1; got "
                 f"{args.procs}, {args.duty}, {args.seconds}, {args.repeat}")

    until = time.monotonic() + args.seconds
    ctx = mp.get_context("fork")
    burners = [ctx.Process(target=_burn, args=(args.duty, until, os.getpid()), daemon=True)
               for _ in range(args.procs)]

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    print(f"cpu_burner: {args.procs} processes at duty {args.duty:g} for at most "
          f"{args.seconds:g} s; {_load()}", file=sys.stderr, flush=True)
    rc = 0
    child: subprocess.Popen[bytes] | None = None
    try:
        for b in burners:
            b.start()
        if not command:
            for b in burners:
                b.join(max(0.0, until - time.monotonic()))
        for run in range(1, args.repeat + 1 if command else 1):
            if time.monotonic() >= until:
                print(f"cpu_burner: the time limit came before run {run}", file=sys.stderr,
                      flush=True)
                rc = rc or 124
                break
            loads: list[float] = []
            sampler = _Sampler(loads)
            start = time.monotonic()
            child = subprocess.Popen(command)
            try:
                code = child.wait(timeout=max(0.0, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"cpu_burner: {command[0]} still running at the time limit; the burners "
                      "stop, it goes on", file=sys.stderr, flush=True)
                for b in burners:
                    b.terminate()
                code = child.wait()
            child = None
            sampler.stop()
            mean = sum(loads) / len(loads) if loads else float("nan")
            print(f"cpu_burner: run {run} of {args.repeat}: exit status {code}, "
                  f"{time.monotonic() - start:.0f} s, mean 1-minute load {mean:.2f} "
                  f"({len(loads)} samples)", file=sys.stderr, flush=True)
            rc = rc or code
    except KeyboardInterrupt:
        rc = 130
    except SystemExit as e:
        rc = int(e.code or 0)
    finally:
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        for b in burners:
            if b.is_alive():
                b.terminate()
        for b in burners:
            b.join(5)
        print(f"cpu_burner: stopped; {_load()}", file=sys.stderr, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
