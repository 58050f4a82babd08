"""A child process of the collective tests: one trainer running one scenario.

Usage: python collective_worker.py SCENARIO ENDPOINTS TRAINER_ID NDEV OUT_DIR [SEED]
Results go to OUT_DIR as .npy files and a JSON status (never pickle).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch

from parafluid.distributed.collective import CollectiveError, init_collective
from parafluid.scope import SelectedRows


def inputs(rank: int, seed: int) -> torch.Tensor:
    """The value of global device ``rank`` (the test recomputes it in one process)."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randn(1000, 7, generator=g)


def sparse_inputs(rank: int) -> SelectedRows:
    rows = torch.arange(rank + 1, dtype=torch.int64) * 3 + rank  # rank r has r + 1 rows
    value = torch.full((rank + 1, 4), float(rank + 1)) + torch.arange(4.0)
    return SelectedRows(rows, value, 50)


def main() -> int:
    scenario, eps, tid, ndev, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
        int(sys.argv[4]), sys.argv[5]
    seed = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    deadline = float(os.environ.get("TEST_DEADLINE_S", "20"))
    comm = init_collective(eps, tid, [torch.device("cpu")] * ndev, deadline_s=deadline)
    ranks = [comm.rank_offset + i for i in range(ndev)]
    status: dict = {"nranks": comm.nranks, "rank_offset": comm.rank_offset}

    def save(name: str, t: torch.Tensor) -> None:
        np.save(os.path.join(out, f"{name}_t{tid}.npy"), t.numpy())

    try:
        if scenario == "dense":
            xs = [inputs(r, seed) for r in ranks]
            before = [x.clone() for x in xs]
            res = comm.all_reduce(xs)
            assert all(torch.equal(a, b) for a, b in zip(xs, before)), "input modified"
            for i, r in enumerate(res):
                save(f"allreduce_d{i}", r)
            root = comm.nranks - 1  # owned by the last trainer
            red = comm.reduce(xs, root)
            status["reduce_is_none"] = red is None
            if red is not None:
                save("reduce", red)
            red0 = comm.reduce(xs, 0)
            if red0 is not None:
                save("reduce0", red0)
            src = comm.nranks - 1
            mine = src // ndev == tid
            got = comm.broadcast(inputs(src, seed) * 2 if mine else None, src)
            for i, r in enumerate(got):
                save(f"bcast_d{i}", r)
            status["bcast_distinct"] = len({id(g) for g in got}) == len(got)
        elif scenario == "sparse":
            res = comm.all_reduce([sparse_inputs(r) for r in ranks])
            save("rows", res[0].rows)
            save("value", res[0].value)
            status["height"] = res[0].height
            src = 0
            got = comm.broadcast(sparse_inputs(7) if tid == 0 else None, src)
            save("brows", got[-1].rows)
            save("bvalue", got[-1].value)
        elif scenario == "size":
            comm.all_reduce([inputs(r, seed) for r in ranks])
            comm.all_reduce([torch.ones(10 + tid) for _ in ranks])
        elif scenario == "mismatch":
            comm.check_consistent("parameters", "fc_0.w_0 [4, 3]\nfc_0.b_0 [3]")
            comm.check_consistent("parameters", f"fc_0.w_0 [4, {3 + tid}]\nfc_0.b_0 [3]")
        elif scenario in ("kill", "kill0"):
            comm.all_reduce([inputs(r, seed) for r in ranks])
            # "kill": the transport notices (the signature check is turned off here);
            # "kill0": the store host dies while signatures are still verified.
            comm.verify_collectives = scenario == "kill0"
            if tid == (0 if scenario == "kill0" else 1):
                os.kill(os.getpid(), 9)
            time.sleep(0.3)
            status["start"] = time.time()
            comm.all_reduce([inputs(r, seed) for r in ranks])
        elif scenario == "stuck":
            comm.all_reduce([inputs(r, seed) for r in ranks])
            if tid == 1:
                time.sleep(deadline * 2)
                return 0
            status["start"] = time.time()
            comm.all_reduce([inputs(r, seed) for r in ranks])
        else:
            raise SystemExit(f"unknown scenario {scenario!r}")
    except (CollectiveError, ValueError) as e:
        status["error"] = f"{type(e).__name__}: {e}"
        status["end"] = time.time()
    with open(os.path.join(out, f"status_t{tid}.json"), "w") as f:
        json.dump(status, f)
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
