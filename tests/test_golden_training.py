"""Training computes what the reference runs of tests/golden_training.py recorded: the same
losses and parameters under every executor and gradient-aggregation mode."""

from __future__ import annotations

import json

import numpy as np
import pytest
from golden_training import GOLDEN, MODELS, MODES, platform, run_case

pytest.importorskip("sklearn.datasets")
pytestmark = pytest.mark.timeout(120)

_RECORDED = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("case", [f"{m}/{mode}" for m in MODELS for mode in MODES])
def test_training_matches_the_recorded_run(case: str) -> None:
    model, mode = case.split("/")
    want = _RECORDED["cases"][case]
    got = run_case(model, mode)
    if _RECORDED["platform"] == platform():
        assert got["losses"] == want["losses"], "losses are not bitwise equal"
        assert got["params_sha256"] == want["params_sha256"], "parameters are not bitwise equal"
    else:  # other kernels (CPU capability, torch build): equal up to rounding
        np.testing.assert_allclose(np.array(got["losses"]), np.array(want["losses"]),
                                   rtol=1e-5, atol=1e-6)
