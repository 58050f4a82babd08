"""One trainer of a collective job whose store a stranger writes to (test_store_strangers.py).

    python store_worker.py ENDPOINTS TRAINER_ID OUT_DIR

Joins the job (the rendezvous: trainer 0 hosts the store), writes ``ready_t<id>.json`` with
its resident memory, waits for ``OUT_DIR/go`` (the stranger is done), writes
``after_t<id>.json`` with its resident memory again, then trains dp_worker's ``mlp/allreduce``
case (5 steps of its half of each batch) and writes its status.
"""

from __future__ import annotations

import json
import os
import sys
import time

from dist_helpers import report_status
from dp_worker import run_case

from parafluid.distributed.collective import init_collective, local_devices


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def main() -> None:
    eps, trainer_id, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    def work() -> None:
        init_collective(eps, trainer_id, local_devices(False))
        with open(os.path.join(out, f"ready_t{trainer_id}.json"), "w") as f:
            json.dump({"rss_mb": rss_mb()}, f)
        end = time.monotonic() + 120
        while not os.path.exists(os.path.join(out, "go")):
            if time.monotonic() > end:
                raise TimeoutError("the test never said go")
            time.sleep(0.02)
        with open(os.path.join(out, f"after_t{trainer_id}.json"), "w") as f:
            json.dump({"rss_mb": rss_mb()}, f)
        run_case("mlp/allreduce", eps, trainer_id, out)

    report_status(out, trainer_id, work)


if __name__ == "__main__":
    main()
