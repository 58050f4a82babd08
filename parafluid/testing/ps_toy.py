"""A toy parameter-server job for multi-process tests: one SGD parameter, no programs.

Each trainer ``t`` at its step ``s`` (0-based) sends the gradient ``t + 1 + s`` (every
element) for parameter ``w``; the pserver averages the gradients of the trainers still
training and applies ``w -= lr * mean``. :func:`expected_w` computes the result the job must
reach, so a test checks numbers, not only exit codes.

Run::

    python -m parafluid.testing.ps_toy pserver --endpoint 127.0.0.1:6174 --trainers 2
    python -m parafluid.testing.ps_toy trainer --endpoint 127.0.0.1:6174 --trainer-id 0 --steps 6

Each process prints one JSON line ``{"role": ..., "w": [...], "steps": n}`` when it ends
normally; errors go to stderr and the exit status is 1. ``--vanish-after K`` makes a trainer
exit after K steps without telling the pserver (a trainer that died).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

import torch

from ..distributed.ps_client import PServerClient
from ..distributed.pserver import ParameterServer, PServerError
from ..distributed.rpc import RPCError

__all__ = ["expected_w", "main"]

LR = 0.1
SIZE = 4


def expected_w(steps: list[int]) -> float:
    """The final value of every element of ``w`` when trainer ``t`` runs ``steps[t]`` steps."""
    w = 0.0
    for s in range(max(steps)):
        grads = [t + 1 + s for t, n in enumerate(steps) if s < n]
        w -= LR * sum(grads) / len(grads)
    return w


def _pserver(args: argparse.Namespace) -> int:
    params = {"w": torch.zeros(SIZE, dtype=torch.float64)}

    def optimize(grads: dict[str, list[torch.Tensor]]) -> None:
        for grad_name, blocks in grads.items():
            params[grad_name.removesuffix("@GRAD")] -= LR * torch.stack(blocks).mean(0)

    ps = ParameterServer(args.endpoint, args.trainers, sync_mode=not args.async_mode,
                         optimize=optimize, get=params.__getitem__, deadline_s=args.deadline)
    def ready() -> None:
        print(json.dumps({"role": "pserver", "listening": ps.endpoint}), flush=True)
    try:
        ps.serve(on_ready=ready)
    except PServerError as e:
        print(f"pserver error: {e}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps({"role": "pserver", "w": params["w"].tolist(), "steps": ps.step,
                      "stopped_by": ps.stopped_by}), flush=True)
    return 0


def _trainer(args: argparse.Namespace) -> int:
    t = args.trainer_id
    c = PServerClient(args.endpoint, t, deadline_s=args.deadline)
    try:
        w = c.recv("w")
        c.fetch_barrier()
        for s in range(args.steps):
            if args.vanish_after is not None and s == args.vanish_after:
                os._exit(0)  # NOTE: no complete(): the pserver must notice on its own
            c.send(f"w@GRAD.trainer_{t}", torch.full((SIZE,), float(t + 1 + s),
                                                     dtype=torch.float64))
            c.send_barrier()
            w = c.recv("w")
            c.fetch_barrier()
            print(json.dumps({"role": "trainer", "trainer_id": t, "step": s}), flush=True)
            if args.step_sleep:
                time.sleep(args.step_sleep)
        c.complete()
    except RPCError as e:
        print(f"trainer {t} error: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        c.close()
    print(json.dumps({"role": "trainer", "trainer_id": t, "w": w.tolist(),
                      "steps": args.steps}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m parafluid.testing.ps_toy")
    p.add_argument("role", choices=["pserver", "trainer"])
    p.add_argument("--endpoint", required=True)
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--trainer-id", type=int, default=0)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--deadline", type=float, default=None, help="seconds")
    p.add_argument("--async", dest="async_mode", action="store_true")
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--vanish-after", type=int, default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    return _pserver(args) if args.role == "pserver" else _trainer(args)


if __name__ == "__main__":
    sys.exit(main())
