"""fluid.layers functions on imperative variables: the same outputs and input gradients as
the same layer in a Program run by the Executor (parameters given the Program's values)."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid

L = fluid.layers
RNG = np.random.RandomState(0)
X = RNG.rand(4, 6).astype("float32") + 0.1
IMG = RNG.rand(2, 3, 8, 8).astype("float32")

# name -> (layer applied to the input, input)
CASES = {
    "fc": (lambda x: L.fc(x, 3, act="relu"), X),
    "softmax": (L.softmax, X),
    "sigmoid": (L.sigmoid, X),
    "tanh": (L.tanh, X),
    "log": (L.log, X),
    "exp": (L.exp, X),
    "relu6": (L.relu6, X),
    "leaky_relu": (L.leaky_relu, X),
    "elu": (L.elu, X),
    "sqrt": (L.sqrt, X),
    "softplus": (L.softplus, X),
    "reduce_mean": (lambda x: L.reduce_mean(x, dim=1), X),
    "reduce_max": (lambda x: L.reduce_max(x, dim=0), X),
    "reshape": (lambda x: L.reshape(x, [2, 12]), X),
    "transpose": (lambda x: L.transpose(x, [1, 0]), X),
    "concat": (lambda x: L.concat([x, x * 2.0], axis=0), X),
    "split": (lambda x: L.split(x, 2, dim=1)[1], X),
    "stack": (lambda x: L.stack([x, x], axis=1), X),
    "expand": (lambda x: L.expand(x, [2, 1]), X),
    "clip": (lambda x: L.clip(x, 0.3, 0.6), X),
    "l2_normalize": (lambda x: L.l2_normalize(x, 1), X),
    "layer_norm": (L.layer_norm, X),
    "matmul_transposed": (lambda x: L.matmul(x, x, transpose_y=True), X),
    "cumsum": (lambda x: L.cumsum(x, axis=1), X),
    "pad": (lambda x: L.pad(x, [1, 1, 0, 2]), X),
    "bilinear_tensor_product": (lambda x: L.bilinear_tensor_product(x, x, 3), X),
    "sum": (lambda x: L.sum([x, x, x]), X),
    "elementwise_pow": (lambda x: L.elementwise_pow(x, x), X),
    "topk": (lambda x: L.topk(x, 2)[0], X),
    "gather": (lambda x: L.gather(x, L.assign(np.array([2, 0], "int32"))), X),
    "smooth_l1": (lambda x: L.smooth_l1(x, x * 0.3), X),
    "huber_loss": (lambda x: L.huber_loss(x, x * 0.3, 0.2), X),
    "kldiv_loss": (lambda x: L.kldiv_loss(L.log(x), x), X),
    "conv2d": (lambda x: L.conv2d(x, 4, 3, act="relu"), IMG),
    "conv2d_transpose": (lambda x: L.conv2d_transpose(x, 2, filter_size=3), IMG),
    "pool2d": (lambda x: L.pool2d(x, 2, "avg", 2), IMG),
    "batch_norm": (L.batch_norm, IMG),
    "group_norm": (lambda x: L.group_norm(x, 3), IMG),
    "instance_norm": (L.instance_norm, IMG),
    "resize_bilinear": (lambda x: L.resize_bilinear(x, out_shape=[5, 5]), IMG),
    "pad2d": (lambda x: L.pad2d(x, [1, 1, 1, 1]), IMG),
    "prelu": (lambda x: L.prelu(x, "channel"), IMG),
    "lrn": (L.lrn, IMG),
    "maxout": (lambda x: L.maxout(x, 3), IMG),
    "flatten": (L.flatten, IMG),
}


def _static(fn, arr):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = L.data("x", shape=list(arr.shape[1:]))
        x.stop_gradient = False
        out = fn(x)
        grad, = fluid.backward.gradients(L.mean(out), [x])
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        params = {p.name: np.array(scope.find_var(p.name).get_tensor())
                  for p in main.all_parameters()}
        out_v, grad_v = exe.run(main, feed={"x": arr}, fetch_list=[out, grad])
    return params, out_v, grad_v


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_runs_imperatively_as_in_a_program(name):
    fn, arr = CASES[name]
    params, expected, expected_grad = _static(fn, arr)
    with fluid.dygraph.guard():
        x = fluid.dygraph.to_variable(arr)
        x.stop_gradient = False
        fn(x)  # creates the parameters (their own initial values) ...
        for p in fluid.framework._dygraph_tracer().all_parameters():
            p.set_value(params[p.name])  # ... given the Program's
        with fluid.unique_name.guard():  # the same names again: the parameters are reused
            out = fn(x)
        L.mean(out).backward()
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(x.gradient(), expected_grad, rtol=1e-4, atol=1e-5)
