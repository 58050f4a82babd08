"""Collective mode: the all-reduces overlap the backward pass and carry their own check.

Two trainers train the MLP (tests/distributed/overlap_worker.py). Every gradient all-reduce
is started without waiting (only the updates read it), the backward ops keep running while
it is in flight (profiled), and a step issues exactly one collective per all-reduce: the
signature check travels in the data. The numbers against the one-process oracle, overlap
on and off, are in test_collective_matrix.py; a desynchronised collective in
test_collective_faults.py.
"""

from __future__ import annotations

import os

import pytest
from dist_helpers import HERE, child_env, endpoints, load_json, reap, start

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fused", [0, 1])
def test_all_reduces_start_at_once_and_overlap_the_backward(tmp_path, fused) -> None:
    eps = endpoints(2)
    env = child_env(CPU_NUM="1", FLAGS_rpc_deadline="30000")
    worker = os.path.join(HERE, "overlap_worker.py")
    procs = []
    try:
        procs = [start([worker, eps, str(t), str(tmp_path), str(fused)], env) for t in (0, 1)]
        for p in procs:
            p.wait(timeout=100)
    finally:
        reap(procs)
    for t in (0, 1):
        status = load_json(str(tmp_path / f"status_t{t}.json"))
        assert status.get("ok"), f"trainer {t}: {status.get('traceback', status)}"
        got = load_json(str(tmp_path / f"overlap_t{t}.json"))
        n = got["allreduce_ops"]
        assert n == (1 if fused else 6), got["allreduce_ops"]  # 3 fc layers: w and b each
        assert got["deferred"] == n, got
        # one collective per all-reduce, no separate signature check
        assert got["collectives"] == [n] * 3, got["collectives"]
        records = got["records"]
        flights = [r for r in records if r[0].endswith(" in flight")]
        assert len(flights) == n, [r[0] for r in records]
        if not fused:
            # a backward op started while an all-reduce was in flight
            compute = [r for r in records if r[0].endswith("_grad")]
            assert any(c[1] >= f[1] and c[1] < f[2] for f in flights for c in compute), \
                records
