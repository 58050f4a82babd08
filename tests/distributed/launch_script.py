"""A trainer script for the launcher tests: nccl2 transpile, startup, one all-reduce.

Usage (under the launcher): launch_script.py MODE, MODE one of
``ok`` (print the all-reduced value), ``fail`` (rank 1 raises; rank 0 waits to be stopped),
``sleep`` (both wait to be stopped).
"""

from __future__ import annotations

import os
import sys
import time

import torch

import parafluid as fluid
from parafluid.distributed.collective import get_collective


def main() -> int:
    mode = sys.argv[1]
    e = fluid.distributed.env()
    print(f"pid {os.getpid()} trainer {e.trainer_id} of {e.trainers} at {e.current_endpoint}")
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(e.trainer_id, workers=",".join(e.trainer_endpoints),
                current_endpoint=e.current_endpoint)
    fluid.Executor(fluid.CPUPlace()).run(fluid.default_startup_program())
    comm = get_collective(e.trainer_endpoints, e.trainer_id)
    if mode == "fail" and e.trainer_id == 1:
        raise ValueError(f"boom on rank {e.trainer_id}")
    if mode in ("fail", "sleep"):
        print("ready")
        time.sleep(60)
    total, = comm.all_reduce([torch.full((2,), float(e.trainer_id + 1))])
    print(f"sum {total.tolist()}")
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
