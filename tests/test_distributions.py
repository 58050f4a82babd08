"""fluid.layers.distributions as Fluid 1.6's: parameters given as Variables with a batch
dimension (-1), numbers and arrays broadcast to one shape, the sample shapes."""

from __future__ import annotations

import math

import numpy as np

import parafluid as fluid
from parafluid.layers.distributions import Normal, Uniform


def _run(main, startup, feed, fetch):
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def test_parameters_with_a_batch_dimension_sample_and_score_per_row():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        loc = fluid.layers.data("loc", shape=[3])
        scale = fluid.layers.data("scale", shape=[3])
        low = fluid.layers.data("low", shape=[3])
        high = fluid.layers.data("high", shape=[3])
        value = fluid.layers.data("value", shape=[3])
        normal, uniform = Normal(loc, scale), Uniform(low, high)
        assert normal.batch_shape == [-1, 3]
        outs = [normal.sample([2, 3], seed=5), uniform.sample([2, 3], seed=5),
                normal.entropy(), uniform.entropy(), normal.log_prob(value),
                uniform.log_prob(value)]
    rng = np.random.RandomState(0)
    feed = {"loc": rng.rand(2, 3).astype("float32"),
            "scale": (rng.rand(2, 3) + 0.5).astype("float32"),
            "low": np.zeros((2, 3), "float32"), "high": np.full((2, 3), 2.0, "float32"),
            "value": rng.rand(2, 3).astype("float32")}
    ns, us, ne, ue, nlp, ulp = _run(main, startup, feed, outs)
    assert ns.shape == (2, 3, 2, 3) and us.shape == (2, 3, 2, 3)  # shape + batch_shape
    assert ((us >= 0) & (us < 2)).all()
    np.testing.assert_allclose(ne, 0.5 + 0.5 * math.log(2 * math.pi) + np.log(feed["scale"]),
                               rtol=1e-5)
    np.testing.assert_allclose(ue, np.full((2, 3), math.log(2.0)), rtol=1e-6)
    want = (-(feed["value"] - feed["loc"]) ** 2 / (2 * feed["scale"] ** 2)
            - np.log(feed["scale"]) - math.log(math.sqrt(2 * math.pi)))
    np.testing.assert_allclose(nlp, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ulp, np.full((2, 3), -math.log(2.0)), rtol=1e-6)


def test_numbers_and_arrays_broadcast_to_one_shape_and_floats_sample_the_shape_alone():
    main, startup = fluid.Program(), fluid.Program()
    scale = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "float32")
    with fluid.program_guard(main, startup):
        mixed = Normal(0.5, scale)
        floats = Uniform(1.0, 3.0)
        assert mixed.batch_shape == [2, 3]
        outs = [mixed.entropy(), mixed.sample([4]), floats.sample([5, 2]), floats.entropy()]
    ent, sample, fsample, fent = _run(main, startup, {}, outs)
    np.testing.assert_allclose(ent, 0.5 + 0.5 * math.log(2 * math.pi) + np.log(scale),
                               rtol=1e-6)
    assert sample.shape == (4, 2, 3)
    assert fsample.shape == (5, 2) and ((fsample >= 1) & (fsample < 3)).all()
    np.testing.assert_allclose(fent, [math.log(2.0)], rtol=1e-6)
