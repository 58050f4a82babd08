"""A pserver-mode job for the launcher tests (parafluid.testing.ps_job's model).

Usage (under the launcher, ``--server_num 2 --worker_num 2``): ps_launch_script.py RAISE_AT:
trainer 1 raises before step RAISE_AT (a trainer that fails); trainer 0 trains until it is
stopped. Every role prints its pid first.
"""

from __future__ import annotations

import os
import sys

import parafluid as fluid
from parafluid.testing import ps_job


def main() -> int:
    e = fluid.distributed.env()
    print(f"pid {os.getpid()} role {e.training_role}", flush=True)
    eps = ",".join(e.pserver_endpoints)
    if e.training_role == "PSERVER":
        ps_job.run_pserver(e.current_endpoint, eps, e.trainers)
    else:
        raise_at = int(sys.argv[1]) if e.trainer_id == 1 else None
        ps_job.run_trainer(e.trainer_id, eps, e.trainers, 100000, step_delay=0.05,
                           raise_at=raise_at)
    return 0


if __name__ == "__main__":
    sys.exit(main())
