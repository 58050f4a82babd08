"""Benchmark of the pserver RPC (not a test: it prints numbers, asserts nothing).

Push + pull of one float32 parameter (4 MiB by default) between a trainer and a server in
another process on 127.0.0.1, side by side with bare pyzmq moving the same bytes:

* ``bare REQ/REP echo, zero-copy``: one round trip, REQ sends the buffer with ``copy=False``
  and REP echoes the frame (the fastest way to move the bytes there and back).
* ``bare REQ/REP echo, copying``: the same with pyzmq's defaults (bytes in, bytes out).
* ``bare push, then pull``: the pserver's message pattern with raw frames and no checks: a
  push answered by "ok", then a get answered by the stored frame (2 round trips). The
  server sends back the very zmq.Frame it received, which libzmq shares by reference count.
* ``pserver async``: ``send`` (the server stores the gradient) then ``recv`` (the server
  answers with the stored tensor without a copy: a view of its memory, tracked so that an
  update waits until ZeroMQ has sent it, as async mode does): 2 round trips, every message
  validated. Sending a tensor's memory without a copy makes pyzmq register it with its
  garbage-collector thread, which the bare server's reused frame does not.
* ``pserver sync``: ``send``, ``send_barrier`` (runs the optimize callback), ``recv``,
  ``fetch_barrier``: 4 round trips, what a sync-mode trainer does per parameter and step.
* with ``--secret``: ``pserver async`` with an HMAC-SHA256 over every message.

All servers start first; each run then times every variant in turn (median of ``--iters``
repetitions), so that load from other processes hits them alike. Printed: the median over
``--runs`` runs of each variant's wall time, the median of its per-run ratio to both bare
baselines, and the CPU time of this process per push+pull. With ``--inproc`` the servers run
on threads of the bench process, so that CPU column covers both sides: the software overhead
itself, which load from other processes barely changes.

Run::

    PYTHONPATH=$PWD python bench/rpc.py [--mbytes 4] [--runs 7] [--iters 20] [--secret] [--inproc]
    PYTHONPATH=$PWD python bench/rpc.py --per-message    # encode / decode of each message
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch
import zmq

from parafluid.distributed.ps_client import PServerClient
from parafluid.distributed.pserver import ParameterServer
from parafluid.distributed.rpc import wait_for_server

Fn = Callable[[], None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


INPROC = False  # --inproc: servers on threads of this process (CPU time covers both sides)


def _spawn(target: Callable[..., None], *args: object) -> mp.Process | threading.Thread:
    if INPROC:
        th = threading.Thread(target=target, args=args, daemon=True)
        th.start()
        return th
    proc = mp.get_context("spawn").Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


def _end(proc: mp.Process | threading.Thread) -> None:
    proc.join(10)
    if isinstance(proc, mp.Process) and proc.is_alive():
        proc.kill()
        proc.join(5)


# -- servers (child processes) --------------------------------------------------------------


def _echo_server(port: int, copy: bool) -> None:
    ctx = zmq.Context()
    s = ctx.socket(zmq.REP)
    s.bind(f"tcp://127.0.0.1:{port}")
    while True:
        msg = s.recv(copy=copy)
        if len(msg) == 4 and bytes(msg) == b"stop":
            s.send(b"ok")
            break
        s.send(msg, copy=copy)
    s.close()
    ctx.term()


def _store_server(port: int) -> None:
    ctx = zmq.Context()
    s = ctx.socket(zmq.ROUTER)
    s.bind(f"tcp://127.0.0.1:{port}")
    stored: object = b""
    while True:
        ident, *frames = s.recv_multipart(copy=False)
        if len(frames) == 2:
            stored = frames[1]
            s.send_multipart([ident, b"ok"])
        elif frames[0].bytes == b"get":
            s.send_multipart([ident, b"val", stored], copy=False)
        else:
            s.send_multipart([ident, b"ok"])
            break
    s.close()
    ctx.term()


def _pserver(endpoint: str, sync: bool, secret: str | None) -> None:
    torch.set_num_threads(1)
    params: dict[str, torch.Tensor] = {}

    def optimize(grads: dict[str, list[torch.Tensor]]) -> None:
        for name, blocks in grads.items():
            params[name] = blocks[0]

    ParameterServer(endpoint, 1, sync, optimize=optimize, get=params.__getitem__,
                    deadline_s=3600, secret=secret).serve()


# -- clients (this process) ------------------------------------------------------------------


@contextlib.contextmanager
def bare_echo(payload: np.ndarray, copy: bool) -> Iterator[Fn]:
    port = _free_port()
    proc = _spawn(_echo_server, port, copy)
    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(f"tcp://127.0.0.1:{port}")
    data = payload if not copy else payload.tobytes()

    def round_trip() -> None:
        s.send(data, copy=copy)
        assert len(s.recv(copy=copy)) == payload.nbytes

    try:
        yield round_trip
    finally:
        s.send(b"stop")
        s.recv()
        s.close()
        ctx.term()
        _end(proc)


@contextlib.contextmanager
def bare_push_pull(payload: np.ndarray) -> Iterator[Fn]:
    port = _free_port()
    proc = _spawn(_store_server, port)
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(f"tcp://127.0.0.1:{port}")

    def push_pull() -> None:
        s.send_multipart([b"send", payload], copy=False)
        s.recv_multipart(copy=False)
        s.send(b"get")
        assert len(s.recv_multipart(copy=False)[1]) == payload.nbytes

    try:
        yield push_pull
    finally:
        s.send(b"stop")
        s.recv_multipart()
        s.close()
        ctx.term()
        _end(proc)


@contextlib.contextmanager
def pserver(payload: np.ndarray, sync: bool, secret: str | None) -> Iterator[Fn]:
    ep = f"127.0.0.1:{_free_port()}"
    proc = _spawn(_pserver, ep, sync, secret)
    c = PServerClient(ep, 0, deadline_s=120, secret=secret)
    w = torch.from_numpy(payload)

    def push_pull() -> None:
        c.send("w", w)
        if sync:
            c.send_barrier()
        back = c.recv("w")
        if sync:
            c.fetch_barrier()
        assert back.numel() == w.numel()

    try:
        wait_for_server(ep, 120, secret=secret)
        yield push_pull
    finally:
        c.complete()
        c.close()
        _end(proc)


def _median_time(fn: Fn, iters: int) -> tuple[float, float]:
    """(median wall time, mean CPU time of this process) per call."""
    out = []
    c0 = time.process_time()
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out), (time.process_time() - c0) / iters


def per_message(payload: np.ndarray, reps: int) -> None:
    """--per-message: the wire format's encode and decode of each message of a push + pull,
    with the caches evicted before each call (a 32 MiB copy), as a message finds them after
    a 4 MiB transfer, and warm (the call repeated), in microseconds (medians)."""
    from parafluid.distributed import wire
    from parafluid.distributed.wire import Kind

    ctx = zmq.Context()
    a, b = ctx.socket(zmq.DEALER), ctx.socket(zmq.ROUTER)
    port = b.bind_to_random_port("tcp://127.0.0.1")
    a.connect(f"tcp://127.0.0.1:{port}")
    w = torch.from_numpy(payload)

    def received(frames: list) -> list:  # over TCP, as zmq.Frames of their own
        a.send_multipart(frames, copy=False)
        return b.recv_multipart(copy=False)[1:]

    send = received(wire.encode(Kind.SEND, "w", w, trainer_id=0, seq=1, step=0))
    get = received(wire.encode(Kind.GET, "w", trainer_id=0, seq=2, step=0))
    ok = received(wire.encode(Kind.REPLY_OK, seq=1, step=0))
    big, scratch = np.ones(32 << 20, np.uint8), np.empty(32 << 20, np.uint8)
    calls = {
        "encode SEND (the gradient)": lambda: wire.encode(Kind.SEND, "w", w, trainer_id=0,
                                                           seq=1, step=0),
        "decode SEND": lambda: wire.decode(send),
        "encode REPLY_OK": lambda: wire.encode(Kind.REPLY_OK, seq=1, step=0, split=False),
        "decode REPLY_OK": lambda: wire.decode(ok),
        "encode GET": lambda: wire.encode(Kind.GET, "w", trainer_id=0, seq=2, step=0),
        "decode GET": lambda: wire.decode(get),
        "encode REPLY_VALUE (the parameter)": lambda: wire.encode(
            Kind.REPLY_VALUE, "w", w, seq=2, step=0, split=False),
        "decode REPLY_VALUE": lambda: wire.decode(send),  # the same frames as a SEND
    }
    print(f"== wire format per message, {payload.nbytes / (1 << 20):.1f} MiB payload, "
          f"median of {reps} calls ==")
    print(f"{'':36} {'caches evicted':>15} {'warm':>9}")
    for name, fn in calls.items():
        cold, warm = [], []
        for _ in range(reps):
            np.copyto(scratch, big)
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            fn()
            cold.append(t1 - t0)
            warm.append(time.perf_counter() - t1)
        print(f"{name:36} {statistics.median(cold) * 1e6:12.1f} us "
              f"{statistics.median(warm) * 1e6:6.1f} us")
    a.close(linger=0)
    b.close(linger=0)
    ctx.term()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mbytes", type=float, default=4.0)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--secret", action="store_true", help="also time with an HMAC secret")
    p.add_argument("--inproc", action="store_true",
                   help="servers on threads of this process: the CPU column then covers both "
                        "sides, a figure that load from other processes barely moves")
    p.add_argument("--per-message", action="store_true",
                   help="only time the wire format's encode and decode of each message, "
                        "with the caches evicted and warm")
    args = p.parse_args()
    global INPROC
    INPROC = args.inproc
    torch.set_num_threads(1)
    nbytes = int(args.mbytes * (1 << 20)) // 4 * 4
    payload = np.random.default_rng(0).standard_normal(nbytes // 4, dtype=np.float32)
    if args.per_message:
        per_message(payload, max(50, args.runs * args.iters))
        return
    variants = {
        "bare REQ/REP echo, zero-copy": lambda: bare_echo(payload, False),
        "bare REQ/REP echo, copying": lambda: bare_echo(payload, True),
        "bare push, then pull": lambda: bare_push_pull(payload),
        "pserver async: send + recv": lambda: pserver(payload, False, None),
        "pserver sync: send, barrier, recv, barrier": lambda: pserver(payload, True, None),
    }
    if args.secret:
        variants["pserver async, HMAC secret"] = lambda: pserver(payload, False, "bench")
    where = "a thread of this process" if INPROC else "another process"
    print(f"== push+pull of one {nbytes / (1 << 20):.1f} MiB float32 parameter, server in "
          f"{where} on 127.0.0.1; {args.runs} runs x {args.iters} reps, interleaved; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} ==")
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    with contextlib.ExitStack() as stack:
        fns = {name: stack.enter_context(make()) for name, make in variants.items()}
        for fn in fns.values():
            fn()  # warm-up: connections, first allocations
        for _ in range(args.runs):
            for name, fn in fns.items():
                wall, cpu_s = _median_time(fn, args.iters)
                times[name].append(wall)
                cpu[name].append(cpu_s)
    echo, push_pull = times["bare REQ/REP echo, zero-copy"], times["bare push, then pull"]
    print(f"{'':44} {'wall':>9}   {'vs echo':>7}   {'vs push/pull':>12}   "
          f"{'CPU' + (' (both sides)' if INPROC else ' (client)'):>18}")
    for name, ts in times.items():
        r_echo = statistics.median(t / b for t, b in zip(ts, echo))
        r_pp = statistics.median(t / b for t, b in zip(ts, push_pull))
        print(f"{name:<44} {statistics.median(ts) * 1e3:6.2f} ms   {r_echo:6.2f}x   "
              f"{r_pp:11.2f}x   {statistics.median(cpu[name]) * 1e3:15.2f} ms")
    print(f"(load average at the end: {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
