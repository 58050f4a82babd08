"""Programs built with the activation, reduction and tensor layers: listing, shapes, runs."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.layers import ops as act_layers


def _build_mlp():
    prog, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(prog, startup):
        x = fluid.layers.data("x", shape=[4], dtype="float32")
        label = fluid.layers.data("label", shape=[1], dtype="int64")
        h = fluid.layers.fc(input=x, size=8, act="relu")
        prob = fluid.layers.fc(input=h, size=3, act="softmax")
        onehot = fluid.layers.one_hot(label, depth=3)
        ce = fluid.layers.reduce_sum(onehot * fluid.layers.log(prob), dim=1)
        loss = fluid.layers.mean(-ce)
        pred = fluid.layers.argmax(prob, axis=1)
    return prog, startup, {"h": h, "prob": prob, "ce": ce, "loss": loss, "pred": pred}


def _data(n=12, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1, 1, (n, 4)).astype("float32")
    label = (np.argmax(x[:, :3], axis=1)).astype("int64").reshape(n, 1)
    return x, label


def test_mlp_program_listing_and_shapes():
    prog, _, v = _build_mlp()
    text = str(prog)
    assert "{Out=[fc_0.tmp_2]} = relu(X=[fc_0.tmp_1])" in text
    # (a backend switch such as softmax's use_cudnn is listed only when not its default)
    assert "{Out=[fc_1.tmp_2]} = softmax(X=[fc_1.tmp_1]) {axis=-1, is_test=False}" in text
    assert "= one_hot(X=[label]) {allow_out_of_range=False, depth=3, dtype='float32'}" in text
    assert "= reduce_sum(X=[elementwise_mul_0.tmp_0]) {dim=[1], keep_dim=False, " \
           "reduce_all=False}" in text
    assert v["h"].shape == (-1, 8) and v["prob"].shape == (-1, 3)
    assert v["ce"].shape == (-1,) and v["loss"].shape == (1,)
    assert v["pred"].shape == (-1,) and v["pred"].dtype == "int64" and v["pred"].stop_gradient
    prog.verify()
    # attrs are plain data: the program survives serialization unchanged
    assert str(fluid.Program.parse_from_string(prog.serialize_to_string())) == text


def test_mlp_forward_matches_numpy():
    prog, startup, v = _build_mlp()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    x, label = _data()
    prob, loss, pred, w0, b0, w1, b1 = exe.run(
        prog, feed={"x": x, "label": label},
        fetch_list=[v["prob"], v["loss"], v["pred"], "fc_0.w_0", "fc_0.b_0", "fc_1.w_0",
                    "fc_1.b_0"], scope=scope)
    logits = np.maximum(x @ w0 + b0, 0) @ w1 + b1
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(prob, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss, [-np.log(want[np.arange(12), label[:, 0]]).mean()],
                               rtol=1e-5)
    np.testing.assert_array_equal(pred, want.argmax(axis=1))


def test_mlp_trains_with_sgd():
    prog, startup, v = _build_mlp()
    with fluid.program_guard(prog, startup):
        fluid.optimizer.SGD(learning_rate=0.5).minimize(v["loss"])
    prog.verify()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    x, label = _data(n=32)
    losses = [float(exe.run(prog, feed={"x": x, "label": label}, fetch_list=[v["loss"]],
                            scope=scope)[0][0]) for _ in range(30)]
    assert losses[-1] < 0.6 * losses[0], losses


@pytest.mark.parametrize("act", [n for n in act_layers.__all__ if n not in ("clip", "softmax")]
                         + ["softmax", {"type": "leaky_relu", "alpha": 0.1}])
def test_every_activation_works_as_fc_act(act):
    prog, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(prog, startup):
        x = fluid.layers.data("x", shape=[3], dtype="float32")
        y = fluid.layers.fc(input=x, size=2, act=act)
    name = act if isinstance(act, str) else act["type"]
    assert prog.global_block().ops[-1].type == name
    assert y.shape == (-1, 2)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    (out,) = exe.run(prog, feed={"x": np.full((2, 3), 0.5, "float32")}, fetch_list=[y],
                     scope=scope)
    assert out.shape == (2, 2) and out.dtype == np.float32


def test_tensor_layers_build_shapes_and_run():
    prog, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(prog, startup):
        x = fluid.layers.data("x", shape=[6], dtype="float32")
        r = fluid.layers.reshape(x, shape=[0, 2, 3])
        t = fluid.layers.transpose(r, perm=[0, 2, 1])
        parts = fluid.layers.split(t, num_or_sections=[1, -1], dim=1)
        c = fluid.layers.concat([parts[1], parts[0]], axis=1)
        u = fluid.layers.unsqueeze(c, axes=[1])
        s = fluid.layers.squeeze(u, axes=[1])
        e = fluid.layers.expand(s, expand_times=[1, 1, 2])
        m = fluid.layers.reduce_mean(e)
        mx = fluid.layers.reduce_max(x, dim=-1, keep_dim=True)
        values, indices = fluid.layers.topk(x, k=2)
        as_int = fluid.layers.cast(x, "int32")
        ones = fluid.layers.fill_constant_batch_size_like(x, shape=[-1, 5], dtype="float32",
                                                          value=1.0)
        clipped = fluid.layers.clip(x, min=-0.5, max=0.5)
    assert (r.shape, t.shape, [p.shape for p in parts], c.shape) == \
        ((-1, 2, 3), (-1, 3, 2), [(-1, 1, 2), (-1, 2, 2)], (-1, 3, 2))
    assert (u.shape, s.shape, e.shape, m.shape, mx.shape) == \
        ((-1, 1, 3, 2), (-1, 3, 2), (-1, 3, 4), (1,), (-1, 1))
    assert values.shape == indices.shape == (-1, 2) and indices.dtype == "int64"
    assert as_int.dtype == "int32" and ones.shape == (-1, 5)
    prog.verify()
    xv = np.random.RandomState(3).uniform(-1, 1, (4, 6)).astype("float32")
    got = fluid.Executor(fluid.CPUPlace()).run(
        prog, feed={"x": xv}, fetch_list=[c, e, m, mx, values, indices, as_int, ones, clipped],
        scope=fluid.Scope())
    tv = xv.reshape(4, 2, 3).transpose(0, 2, 1)
    cv = np.concatenate([tv[:, 1:], tv[:, :1]], axis=1)
    want = [cv, np.tile(cv, (1, 1, 2)), [np.tile(cv, (1, 1, 2)).mean()],
            xv.max(axis=-1, keepdims=True), -np.sort(-xv, axis=1)[:, :2],
            np.argsort(-xv, axis=1)[:, :2], xv.astype("int32"), np.ones((4, 5), "float32"),
            np.clip(xv, -0.5, 0.5)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_reshape_with_actual_shape_and_act():
    prog, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(prog, startup):
        x = fluid.layers.data("x", shape=[6], dtype="float32")
        target = fluid.layers.data("target", shape=[2], dtype="int32", append_batch_size=False)
        y = fluid.layers.reshape(x, shape=[-1, 3], actual_shape=target, act="relu")
    assert [op.type for op in prog.global_block().ops] == ["reshape2", "relu"]
    xv = np.linspace(-1, 1, 12).astype("float32").reshape(2, 6)
    (out,) = fluid.Executor(fluid.CPUPlace()).run(
        prog, feed={"x": xv, "target": np.array([3, 4], "int32")}, fetch_list=[y],
        scope=fluid.Scope())
    np.testing.assert_allclose(out, np.maximum(xv.reshape(3, 4), 0))


@pytest.mark.parametrize("build, error, message", [
    (lambda x: fluid.layers.reshape(x, shape=[-1, -1]), ValueError, "only one dimension"),
    (lambda x: fluid.layers.reshape(x, shape=[0, 7]), ValueError,
     r"op 'reshape2' at .*cannot reshape X \[-1, 6\]"),
    (lambda x: fluid.layers.softmax(x.name), TypeError, "softmax: input must be a Variable"),
    (lambda x: fluid.layers.relu([x]), TypeError, "relu: x must be a Variable, got list"),
    (lambda x: fluid.layers.clip(x, min=1.0, max=0.0), ValueError, r"clip: min \(1.0\)"),
    (lambda x: fluid.layers.reduce_sum(x, dim=2), ValueError,
     "reduce_sum: dim 2 is out of range for an input of rank 2"),
    (lambda x: fluid.layers.transpose(x, perm=[0]), ValueError, "transpose: perm .0. has 1"),
    (lambda x: fluid.layers.split(x, num_or_sections=4, dim=1), ValueError,
     "split: dimension 6 does not divide into num=4"),
    (lambda x: fluid.layers.topk(x, k=7), ValueError, "top_k: k=7"),
    (lambda x: fluid.layers.concat([x, fluid.layers.cast(x, "float64")], axis=1),
     ValueError, "concat: inputs have different dtypes"),
])
def test_layer_errors_name_the_layer(build, error, message):
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data("x", shape=[6], dtype="float32")
        with pytest.raises(error, match=message):
            build(x)


def test_layers_with_act_take_one_name_from_the_counter():
    """As Fluid: the op and its activation share one helper, so ``elementwise_add_0``'s
    activation writes ``elementwise_add_0.tmp_1`` and the next layer is ``_1``."""
    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[6], dtype="float32")
        names = [fluid.layers.elementwise_add(x, x, act="relu").name,
                 fluid.layers.elementwise_add(x, x).name,
                 fluid.layers.scale(x, act="relu").name, fluid.layers.scale(x).name,
                 fluid.layers.reshape(x, shape=[-1, 2, 3]).name,
                 fluid.layers.reshape(x, shape=[-1, 3, 2], act="relu").name]
    assert names == ["elementwise_add_0.tmp_1", "elementwise_add_1.tmp_0", "scale_0.tmp_1",
                     "scale_1.tmp_0", "reshape2_0.tmp_0", "reshape2_1.tmp_2"]
