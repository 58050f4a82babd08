"""Seeded random ops draw the values of Fluid's CPU kernels (std::minstd_rand through
libstdc++'s distributions), the same on every run.

The expected values were printed by this C++ program, built with g++ (libstdc++):

    std::minstd_rand e; e.seed(10u);
    std::uniform_real_distribution<float> d(-5.0f, 10.0f);     // and likewise below
    for (...) printf("%.9g\\n", d(e));
    // uniform_real_distribution<double>(-1, 2) seeded (unsigned)-7,
    // normal_distribution<float>(1, 2) seeded 123, normal_distribution<double>(0, 1) seeded 5
"""

from __future__ import annotations

import numpy as np

import parafluid as fluid
from parafluid.ops import std_random


def test_the_engine_is_the_standards_minstd_rand():
    # the C++ standard: the 10000th draw of a default-seeded minstd_rand is 399268537
    assert std_random.MinstdRand(1).draw(10000)[-1] == 399268537
    # drawn in blocks or at once: one stream
    e = std_random.MinstdRand(77)
    parts = np.concatenate([e.draw(5), e.draw(9000), e.draw(3)])
    np.testing.assert_array_equal(parts, std_random.MinstdRand(77).draw(9008))
    # a seed is a C++ unsigned int taken modulo 2**31 - 1 (0 starts at 1)
    np.testing.assert_array_equal(std_random.MinstdRand(0).draw(4),
                                  std_random.MinstdRand(2**31 - 1).draw(4))
    np.testing.assert_array_equal(std_random.MinstdRand(-1).draw(4),
                                  std_random.MinstdRand(2**32 - 1).draw(4))


def test_distributions_match_libstdcxx():
    u32 = std_random.uniform(10, 100000, -5.0, 10.0, "float32")
    assert u32.dtype == np.float32
    np.testing.assert_array_equal(
        u32[:4], np.array([-4.99662828, 7.75486755, -4.79710913, 8.74169159], np.float32))
    assert u32[99999] == np.float32(3.16622162)
    u64 = std_random.uniform(-7, 3, -1.0, 2.0, "float64")
    np.testing.assert_array_equal(u64, [0.72451326365055957, 0.6258308446180878,
                                        -0.845346578494659])
    n32 = std_random.normal(123, 100001, 1.0, 2.0, "float32")
    np.testing.assert_allclose(n32[:4], [0.984735668, 0.814918816, 1.12507153, 1.34681404],
                               rtol=2e-7)
    np.testing.assert_allclose(n32[100000], -0.670474172, rtol=2e-7)
    n64 = std_random.normal(5, 1001, 0.0, 1.0, "float64")
    np.testing.assert_array_equal(n64[:3], [-1.2982187047894802, -2.3163423819424196,
                                            0.88173618332687498])
    assert n64[1000] == -0.56276550915067569


def _run_twice(build):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        outs = build()
    exe = fluid.Executor(fluid.CPUPlace())
    return [exe.run(main, fetch_list=outs) for _ in range(2)]


def test_seeded_ops_give_fluids_values_on_every_run():
    def build():
        u = fluid.layers.uniform_random([40, 30], min=-5.0, max=10.0, seed=10)
        g = fluid.layers.gaussian_random([7, 3], mean=1.0, std=2.0, seed=123)
        block = fluid.default_main_program().global_block()
        t = block.create_var(name="t", dtype="float32")
        block.append_op("truncated_gaussian_random", outputs={"Out": [t]},
                        attrs={"shape": [500], "mean": 0.5, "std": 2.0, "seed": 3})
        free = fluid.layers.uniform_random([50], seed=0)
        return [u, g, t, free]

    first, second = _run_twice(build)
    for a, b in zip(first[:3], second[:3]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(first[0].reshape(-1),
                                  std_random.uniform(10, 1200, -5.0, 10.0, "float32"))
    np.testing.assert_array_equal(first[1].reshape(-1),
                                  std_random.normal(123, 21, 1.0, 2.0, "float32"))
    t = first[2]
    assert t.min() >= 0.5 - 4.0 and t.max() <= 0.5 + 4.0 and abs(t.mean() - 0.5) < 0.2
    assert not np.array_equal(first[3], second[3])  # seed 0: fresh numbers each run


def test_a_seeded_initializer_gives_fluids_weights():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[6], dtype="float32")
        fluid.layers.fc(x, size=4, param_attr=fluid.ParamAttr(
            name="w", initializer=fluid.initializer.Uniform(-0.5, 0.5, seed=42)))
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    w = np.array(scope.find_var("w").get_tensor())
    np.testing.assert_array_equal(w.reshape(-1),
                                  std_random.uniform(42, 24, -0.5, 0.5, "float32"))
