"""The model and data of the deep gradient compression tests (tests/test_dgc.py and the
two-process job of tests/distributed/test_dgc_procs.py)."""

from __future__ import annotations

import numpy as np

import parafluid as fluid

N, D = 8, 128  # the weight is D x D = 16384 elements: compressed; the bias is not
LR, MU = 0.5, 0.9


def linear(opt_factory):
    """out = x @ w + b; loss = mean(out * z): the gradients do not depend on w, so the
    reference needs only DGC's own state."""
    def build():
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 5
        with fluid.program_guard(main, startup):
            x = fluid.layers.data(name="x", shape=[D], dtype="float32")
            z = fluid.layers.data(name="z", shape=[D], dtype="float32")
            out = fluid.layers.fc(x, size=D, param_attr=fluid.ParamAttr(name="w"),
                                  bias_attr=fluid.ParamAttr(name="b"))
            loss = fluid.layers.mean(fluid.layers.elementwise_mul(out, z))
            opt_factory().minimize(loss)
        return main, startup, loss
    return build


def feeds(steps, seed=0):
    rng = np.random.RandomState(seed)
    return [{"x": rng.uniform(-1, 1, (N, D)).astype("float32"),
             "z": rng.uniform(-1, 1, (N, D)).astype("float32")} for _ in range(steps)]


def dgc(begin, rampup_step=2, sparsity=(0.9, 0.99), **kw):
    return lambda: fluid.optimizer.DGCMomentumOptimizer(
        learning_rate=LR, momentum=MU, rampup_begin_step=begin, rampup_step=rampup_step,
        sparsity=list(sparsity), **kw)
