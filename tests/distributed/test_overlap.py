"""Collective mode: the all-reduces overlap the backward pass and carry their own check.

Two trainers train the MLP (tests/distributed/overlap_worker.py). Over gloo (the trainers'
shared memory turned off, as between machines) every gradient all-reduce is started without
waiting (only the updates read it), the backward ops keep running while it is in flight
(profiled), and a step issues exactly one collective per all-reduce: the signature check
travels in the data. Through shared memory (the default on one machine) the same step
issues the same collectives, each done where the backward pass issues it. The numbers
against the one-process oracle, overlap on and off, are in test_collective_matrix.py; a
desynchronised collective in test_collective_faults.py.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from dist_helpers import HERE
from overlap_worker import run_pair

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "parallel"))

import dp_models  # noqa: E402

pytestmark = [pytest.mark.slow]


def _run(tmp_path, mode: str, shared_mb: str = "0") -> list[dict]:
    return run_pair(str(tmp_path), mode, (shared_mb, shared_mb))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fused", [0, 1])
def test_all_reduces_start_at_once_and_overlap_the_backward(tmp_path, fused) -> None:
    for t, got in enumerate(_run(tmp_path, "fused" if fused else "plain")):
        n = got["allreduce_ops"]
        assert n == (1 if fused else 6), got["allreduce_ops"]  # 3 fc layers: w and b each
        assert got["deferred"] == n, got
        # one collective per all-reduce, no separate signature check
        assert got["collectives"] == [n] * 3, got["collectives"]
        records = got["records"]
        flights = [r for r in records if r[0].endswith(" in flight")]
        assert len(flights) == n, [r[0] for r in records]
        if not fused and t == 0:
            # a backward op started while an all-reduce was in flight (trainer 1 joins the
            # profiled step late, so trainer 0's all-reduces wait for it in flight; trainer
            # 1 finds them ready at once, and its backward may start after they ended)
            compute = [r for r in records if r[0].endswith("_grad")]
            assert any(c[1] >= f[1] and c[1] < f[2] for f in flights for c in compute), \
                records


@pytest.mark.timeout(120)
def test_through_shared_memory_each_all_reduce_is_one_collective_done_at_once(tmp_path) -> None:
    for got in _run(tmp_path, "plain", shared_mb="8"):
        n = got["allreduce_ops"]
        assert got["shared_memory"] is True
        assert got["deferred"] == n == 6, got
        assert got["collectives"] == [n] * 3, got["collectives"]
        assert not [r for r in got["records"] if r[0].endswith(" in flight")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shared_mb", ["0", "8"])
def test_ops_before_the_updates_that_read_a_gradient_wait_for_its_all_reduce(tmp_path,
                                                                            shared_mb) -> None:
    # clipping by global norm reads every gradient before the updates: the all-reduces still
    # start at once, the first clip op waits for them, and the numbers are the one-process
    # run's on the full batch
    sys.path.insert(0, HERE)
    from overlap_worker import model

    from parafluid.testing.data_parallel import run_single

    want = run_single(model("clip"), dp_models.mlp_feeds(steps=4)).params
    for got in _run(tmp_path, "clip", shared_mb):
        assert got["deferred"] == got["allreduce_ops"] == 6, got
        assert got["collectives"] == [6] * 3, got["collectives"]
        for name, value in want.items():
            np.testing.assert_allclose(np.array(got["params"][name]), value, rtol=1e-5,
                                       atol=1e-5, err_msg=name)
