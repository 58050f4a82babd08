"""fluid.dygraph's layer classes (dygraph/nn.py) in static mode: each appends exactly the ops
of the fluid.layers function of its name and computes the same numbers from the same
parameters; a layer object called twice shares its parameters; a model of them trains."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid import dygraph
from parafluid.compat import NotProvided

L = fluid.layers
EDGES = np.array([[[1, 2], [1, 3], [2, 4], [0, 0]], [[1, 2], [2, 3], [3, 4], [4, 5]]], "int32")

# name, make the layer object, call it, the fluid.layers call it stands for, inputs
ROWS = [
    ("FC", lambda: dygraph.FC("fc", size=4, act="relu"), lambda f, a: f(a[0]),
     lambda a: L.fc(a[0], size=4, act="relu"), [("x", [3, 5], "float32")]),
    ("FC_two_inputs", lambda: dygraph.FC("fc", size=4), lambda f, a: f([a[0], a[1]]),
     lambda a: L.fc([a[0], a[1]], size=4), [("x", [3, 5], "float32"), ("y", [3, 2], "float32")]),
    ("Linear", lambda: dygraph.Linear(5, 4, act="tanh"), lambda f, a: f(a[0]),
     lambda a: L.fc(a[0], size=4, num_flatten_dims=2, act="tanh"),
     [("x", [2, 3, 5], "float32")]),
    ("Conv2D", lambda: dygraph.Conv2D("conv", num_filters=2, filter_size=3, padding=1,
                                      act="relu"),
     lambda f, a: f(a[0]), lambda a: L.conv2d(a[0], num_filters=2, filter_size=3, padding=1,
                                              act="relu"),
     [("x", [2, 3, 6, 6], "float32")]),
    ("Conv3D", lambda: dygraph.Conv3D("conv3d", num_filters=2, filter_size=2, stride=2),
     lambda f, a: f(a[0]), lambda a: L.conv3d(a[0], num_filters=2, filter_size=2, stride=2),
     [("x", [2, 2, 4, 4, 4], "float32")]),
    ("Pool2D", lambda: dygraph.Pool2D("pool", pool_size=2, pool_type="avg", pool_stride=2),
     lambda f, a: f(a[0]), lambda a: L.pool2d(a[0], pool_size=2, pool_type="avg",
                                              pool_stride=2),
     [("x", [2, 3, 6, 6], "float32")]),
    ("BatchNorm", lambda: dygraph.BatchNorm("bn", num_channels=3, act="relu"),
     lambda f, a: f(a[0]), lambda a: L.batch_norm(a[0], act="relu"),
     [("x", [4, 3, 2, 2], "float32")]),
    ("Embedding", lambda: dygraph.Embedding("emb", size=[10, 4], padding_idx=0),
     lambda f, a: f(a[0]), lambda a: L.embedding(a[0], size=[10, 4], padding_idx=0),
     [("ids", [6, 1], "int64")]),
    ("LayerNorm", lambda: dygraph.LayerNorm("ln", begin_norm_axis=1, act="tanh"),
     lambda f, a: f(a[0]), lambda a: L.layer_norm(a[0], begin_norm_axis=1, act="tanh"),
     [("x", [3, 2, 4], "float32")]),
    ("GRUUnit", lambda: dygraph.GRUUnit("gru", size=9), lambda f, a: f(a[0], a[1])[0],
     lambda a: L.gru_unit(a[0], a[1], size=9)[0],
     [("x", [3, 9], "float32"), ("h", [3, 3], "float32")]),
    ("NCE", lambda: dygraph.NCE("nce", num_total_classes=10, num_neg_samples=3, seed=1),
     lambda f, a: f(a[0], a[1]),
     # Fluid 1.6's NCE layer has a bias only when bias_attr is given
     lambda a: L.nce(a[0], a[1], num_total_classes=10, num_neg_samples=3, seed=1,
                     bias_attr=False),
     [("x", [4, 5], "float32"), ("label", [4, 1], "int64")]),
    ("NCE_bias", lambda: dygraph.NCE("nce", num_total_classes=10, num_neg_samples=3, seed=1,
                                     bias_attr=fluid.ParamAttr()),
     lambda f, a: f(a[0], a[1]),
     lambda a: L.nce(a[0], a[1], num_total_classes=10, num_neg_samples=3, seed=1),
     [("x", [4, 5], "float32"), ("label", [4, 1], "int64")]),
    ("PRelu", lambda: dygraph.PRelu("prelu", mode="channel"), lambda f, a: f(a[0]),
     lambda a: L.prelu(a[0], mode="channel"), [("x", [2, 3, 2, 2], "float32")]),
    ("BilinearTensorProduct", lambda: dygraph.BilinearTensorProduct("btp", size=4, act="relu"),
     lambda f, a: f(a[0], a[1]),
     lambda a: L.bilinear_tensor_product(a[0], a[1], size=4, act="relu"),
     [("x", [3, 5], "float32"), ("y", [3, 6], "float32")]),
    ("Conv2DTranspose", lambda: dygraph.Conv2DTranspose("up", num_filters=2, filter_size=2,
                                                        stride=2),
     lambda f, a: f(a[0]), lambda a: L.conv2d_transpose(a[0], num_filters=2, filter_size=2,
                                                        stride=2),
     [("x", [2, 3, 3, 3], "float32")]),
    ("Conv3DTranspose", lambda: dygraph.Conv3DTranspose("up3d", num_filters=2, filter_size=2,
                                                        stride=2),
     lambda f, a: f(a[0]), lambda a: L.conv3d_transpose(a[0], num_filters=2, filter_size=2,
                                                        stride=2, bias_attr=False),
     [("x", [1, 2, 2, 2, 2], "float32")]),
    ("Conv3DTranspose_bias", lambda: dygraph.Conv3DTranspose(
        "up3d", num_filters=2, filter_size=2, stride=2, bias_attr=fluid.ParamAttr()),
     lambda f, a: f(a[0]), lambda a: L.conv3d_transpose(a[0], num_filters=2, filter_size=2,
                                                        stride=2),
     [("x", [1, 2, 2, 2, 2], "float32")]),
    ("GroupNorm", lambda: dygraph.GroupNorm("gn", groups=2), lambda f, a: f(a[0]),
     lambda a: L.group_norm(a[0], groups=2), [("x", [2, 4, 3, 3], "float32")]),
    ("GroupNorm_affine", lambda: dygraph.GroupNorm("gn", groups=2, param_attr=fluid.ParamAttr(),
                                                   bias_attr=fluid.ParamAttr()),
     lambda f, a: f(a[0]),
     lambda a: L.group_norm(a[0], groups=2, param_attr=fluid.ParamAttr(),
                            bias_attr=fluid.ParamAttr()), [("x", [2, 4, 3, 3], "float32")]),
    ("SpectralNorm", lambda: dygraph.SpectralNorm("sn", dim=1, power_iters=2),
     lambda f, a: f(a[0]), lambda a: L.spectral_norm(a[0], dim=1, power_iters=2),
     [("w", [4, 6], "float32")]),
    ("TreeConv", lambda: dygraph.TreeConv("tree", output_size=3, num_filters=2),
     lambda f, a: f(a[0], a[1]), lambda a: L.tree_conv(a[0], a[1], output_size=3,
                                                       num_filters=2, bias_attr=False),
     [("nodes", [2, 5, 4], "float32"), ("edges", [2, 4, 2], "int32")]),
    ("TreeConv_bias", lambda: dygraph.TreeConv("tree", output_size=3, num_filters=2,
                                               bias_attr=fluid.ParamAttr()),
     lambda f, a: f(a[0], a[1]), lambda a: L.tree_conv(a[0], a[1], output_size=3,
                                                       num_filters=2),
     [("nodes", [2, 5, 4], "float32"), ("edges", [2, 4, 2], "int32")]),
]


def _inputs(spec):
    return [L.data(name=n, shape=s, dtype=d, append_batch_size=False) for n, s, d in spec]


def _feed(spec):
    rng = np.random.RandomState(0)
    out = {}
    for n, s, d in spec:
        if n == "edges":
            out[n] = EDGES
        elif d.startswith("int"):
            out[n] = rng.randint(0, 10, s).astype(d)
        else:
            out[n] = rng.uniform(-1, 1, s).astype(d)
    return out


def _types(program):
    return [op.type for op in program.global_block().ops]


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_layer_object_appends_its_functions_ops_and_computes_its_numbers(row):
    _, make, call, call_fn, spec = row
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        layer = make()
        out = call(layer, _inputs(spec))
    ref_main, ref_startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(ref_main, ref_startup):
        ref_out = call_fn(_inputs(spec))
    assert _types(main) == _types(ref_main)
    params = main.all_parameters()
    assert [p.name for p in layer.parameters()] == [p.name for p in params]
    assert all(p.name.startswith(layer.full_name() + ".") for p in params)
    assert [p.shape for p in params] == [p.shape for p in ref_main.all_parameters()]
    assert layer.state_dict() == {p.name: p for p in params}

    exe, scope, ref_scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope(), fluid.Scope()
    exe.run(startup, scope=scope)
    exe.run(ref_startup, scope=ref_scope)
    rng = np.random.RandomState(1)
    for p, q in zip(params, ref_main.all_parameters()):
        value = rng.uniform(0.1, 1.0, p.shape).astype(p.dtype)  # same values in both
        for s, v in ((scope, p), (ref_scope, q)):
            s.find_var(v.name).get_tensor().set(value, fluid.CPUPlace())
    feed = _feed(spec)
    got, = exe.run(main, feed=feed, fetch_list=[out], scope=scope)
    want, = exe.run(ref_main, feed=feed, fetch_list=[ref_out], scope=ref_scope)
    assert got.shape == want.shape and np.abs(want).sum() > 0
    np.testing.assert_array_equal(got, want)


def test_a_layer_called_twice_shares_its_parameters():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        fc = dygraph.FC("fc", size=3, param_attr=fluid.ParamAttr(name="shared_w"))
        conv = dygraph.Conv2D("conv", num_filters=2, filter_size=1)
        a, b = _inputs([("a", [2, 4], "float32"), ("b", [5, 4], "float32")])
        ya, yb = fc(a), fc(b)
        img = _inputs([("img", [1, 3, 2, 2], "float32")])[0]
        conv(conv(L.slice(img, axes=[1], starts=[0], ends=[2])))  # 2 channels in and out
        with pytest.raises(ValueError, match=r"FC fc/FC_\d+: parameter 'shared_w' has shape "
                                             r"\[4, 3\] but this input needs \[6, 3\]"):
            fc(_inputs([("c", [2, 6], "float32")])[0])
    assert sorted(p.name for p in main.all_parameters()) == sorted(
        ["shared_w", fc.bias.name, conv.weight.name, conv.bias.name])
    assert fc.weight.name == "shared_w" and len(fc.parameters()) == 2
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    x = np.ones((2, 4), "float32")
    got_a, got_b = exe.run(main, feed={"a": x, "b": np.ones((5, 4), "float32"),
                                       "img": np.ones((1, 3, 2, 2), "float32")},
                           fetch_list=[ya, yb], scope=scope)
    np.testing.assert_array_equal(got_a[0], got_b[0])


class Net(dygraph.Layer):
    """conv, batch norm, pool, fc: the logits of two classes."""

    def __init__(self, name_scope, filters):
        super().__init__(name_scope)
        self.conv = dygraph.Conv2D("conv", num_filters=filters, filter_size=3, padding=1)
        self.bn = dygraph.BatchNorm("bn", num_channels=filters, act="relu")
        self.pool = dygraph.Pool2D("pool", pool_size=2, pool_stride=2)
        self.fc = dygraph.FC("fc", size=2)

    def forward(self, x):
        return self.fc(self.pool(self.bn(self.conv(x))))


def _mean_loss(net, x, y):
    return L.mean(L.softmax_with_cross_entropy(net(x), y))


def test_layer_objects_build_a_model_that_trains():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup):
        img = L.data(name="img", shape=[1, 4, 4], dtype="float32")
        label = L.data(name="label", shape=[1], dtype="int64")
        net = Net("net", filters=4)
        loss = _mean_loss(net, img, label)
        fluid.optimizer.Adam(learning_rate=0.02).minimize(loss)
    assert len(net.parameters()) == 8  # conv 2, batch norm 4, fc 2
    assert [type(s).__name__ for s in net.sublayers()] == ["Conv2D", "BatchNorm", "Pool2D",
                                                           "FC"]
    rng = np.random.RandomState(0)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = []
    for _ in range(80):
        xs = rng.uniform(-1, 1, (16, 1, 4, 4)).astype("float32")
        ys = (xs[:, 0, :2].sum((1, 2)) > xs[:, 0, 2:].sum((1, 2))).astype("int64")[:, None]
        losses.append(float(exe.run(main, feed={"img": xs, "label": ys}, fetch_list=[loss],
                                    scope=scope)[0]))
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


def test_the_layer_classes_are_provided_with_fluids_keywords():
    for name in ["FC", "Conv2D", "Conv3D", "Pool2D", "BatchNorm", "Embedding", "LayerNorm",
                 "GRUUnit", "NCE", "PRelu", "BilinearTensorProduct", "Conv2DTranspose",
                 "Conv3DTranspose", "GroupNorm", "SpectralNorm", "TreeConv", "Linear"]:
        cls = getattr(fluid.dygraph, name)
        assert not isinstance(cls, NotProvided) and issubclass(cls, dygraph.Layer), name
    with pytest.raises(ValueError, match="BatchNorm bn/BatchNorm_0: num_channels is 5 but input"):
        with fluid.program_guard(fluid.Program(), fluid.Program()), fluid.unique_name.guard():
            dygraph.BatchNorm("bn", num_channels=5)(_inputs([("x", [2, 3, 4, 4], "float32")])[0])
    with pytest.raises(ValueError, match="FC fc/FC_0: a WeightNormParamAttr makes a computed"):
        with fluid.program_guard(fluid.Program(), fluid.Program()), fluid.unique_name.guard():
            dygraph.FC("fc", 2, param_attr=fluid.WeightNormParamAttr(dim=None))(
                _inputs([("x", [2, 3], "float32")])[0])


def _values(params, seed=1):
    rng = np.random.RandomState(seed)
    return [rng.uniform(0.1, 1.0, p.shape).astype(p.dtype) for p in params]


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_imperative_layer_equals_static_layer_forward_and_gradients(row):
    """The same layer object code, the same parameter values: the imperative forward and the
    gradients of its trainable parameters equal the static Program's."""
    _, make, call, _, spec = row
    feed = _feed(spec)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        layer = make()
        out = call(layer, _inputs(spec))
        loss = L.reduce_sum(L.square(L.cast(out, "float32")))
        trainable = [p for p in layer.parameters() if p.trainable]
        grads = fluid.backward.gradients([loss], trainable) if trainable else []
    values = _values(layer.parameters())
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for p, v in zip(layer.parameters(), values):
        scope.find_var(p.name).get_tensor().set(v, fluid.CPUPlace())
    static = exe.run(main, feed=feed, fetch_list=[out, *grads], scope=scope)

    with fluid.dygraph.guard(), fluid.unique_name.guard():
        layer = make()
        inputs = [fluid.dygraph.to_variable(feed[n]) for n, _, _ in spec]
        call(layer, inputs)  # the first call makes the parameters
        assert [p.name for p in layer.parameters()] == [p.name for p in main.all_parameters()]
        for p, v in zip(layer.parameters(), values):
            p.set_value(v)
        out = call(layer, inputs)
        assert len(layer.parameters()) == len(values)  # the second call made none
        if any(p.trainable for p in layer.parameters()):
            loss = L.reduce_sum(L.square(L.cast(out, "float32")))
            loss.backward()
        imperative = [out.numpy()] + [p.gradient() for p in layer.parameters() if p.trainable]
    assert len(imperative) == len(static)
    for got, want in zip(imperative, static):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_imperative_model_of_layer_objects_trains_as_its_program():
    rng = np.random.RandomState(0)
    xs = rng.uniform(-1, 1, (8, 1, 4, 4)).astype("float32")
    data = [(xs, (xs[:, 0, :2].sum((1, 2)) > 0).astype("int64")[:, None])] * 6  # fit a batch

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        net = Net("net", filters=3)
        loss = _mean_loss(net, L.data(name="x", shape=[1, 4, 4], dtype="float32"),
                          L.data(name="y", shape=[1], dtype="int64"))
        fluid.optimizer.Momentum(0.1, momentum=0.9).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    start = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in net.parameters()}
    static = [float(exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)[0])
              for x, y in data]
    static_params = {p.name: np.array(scope.find_var(p.name).get_tensor())
                     for p in net.parameters()}

    with fluid.dygraph.guard(), fluid.unique_name.guard():
        net = Net("net", filters=3)
        x0, y0 = (fluid.dygraph.to_variable(v) for v in data[0])
        _mean_loss(net, x0, y0)  # make the parameters, then start from the static ones
        net.load_dict(start)
        opt = fluid.optimizer.Momentum(0.1, momentum=0.9)
        imperative = []
        for x, y in data:
            loss = _mean_loss(net, fluid.dygraph.to_variable(x), fluid.dygraph.to_variable(y))
            loss.backward()
            opt.minimize(loss)
            net.clear_gradients()
            imperative.append(loss.numpy().item())
        params = {p.name: p.numpy() for p in net.parameters()}
    assert static[-1] < static[0]
    np.testing.assert_allclose(imperative, static, rtol=1e-5, atol=1e-6)
    for name, value in static_params.items():
        np.testing.assert_allclose(params[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_layer_objects_compose_through_add_sublayer_and_add_parameter():
    """A container built with add_sublayer / add_parameter / create_variable around the layer
    classes, imperative: its parameters are its sublayers', its forward theirs."""
    x = np.random.RandomState(0).uniform(-1, 1, (4, 3)).astype("float32")
    with fluid.dygraph.guard(), fluid.unique_name.guard():
        seq = dygraph.Layer("seq")
        first = seq.add_sublayer("first", dygraph.FC("fc", size=5, act="relu"))
        second = seq.add_sublayer("second", dygraph.Linear(5, 2))
        y = second(first(fluid.dygraph.to_variable(x)))
        shared = seq.add_parameter("shared", second.weight)
        assert shared is second.weight
        assert seq.sublayers() == [first, second]
        assert [p.name for p in seq.parameters(include_sublayers=False)] == [shared.name]
        assert {p.name for p in seq.parameters()} == \
            {p.name for p in first.parameters() + second.parameters()}
        tmp = seq.create_variable(name="buffer", dtype="float32")
        assert tmp.name == f"{seq.full_name()}.buffer"
        w1, b1 = (p.numpy() for p in first.parameters())
        w2, b2 = (p.numpy() for p in second.parameters())
        np.testing.assert_allclose(y.numpy(), np.maximum(x @ w1 + b1, 0) @ w2 + b2, rtol=1e-5,
                                   atol=1e-6)


def test_imperative_batch_norm_uses_its_moving_statistics_after_eval():
    rng = np.random.RandomState(0)
    x1, x2 = (rng.uniform(-1, 3, (4, 3, 2, 2)).astype("float32") for _ in range(2))
    with fluid.dygraph.guard():
        bn = dygraph.BatchNorm("bn", num_channels=3, momentum=0.5)
        bn(fluid.dygraph.to_variable(x1))  # training: batch statistics, moving ones updated
        mean, var = bn._mean.numpy(), bn._variance.numpy()
        np.testing.assert_allclose(mean, 0.5 * x1.mean((0, 2, 3)), rtol=1e-5)
        bn.eval()
        got = bn(fluid.dygraph.to_variable(x2)).numpy()
        scale, bias = bn.weight.numpy(), bn.bias.numpy()
    want = (x2 - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) \
        * scale[:, None, None] + bias[:, None, None]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_parameter_made_on_the_first_call_gets_the_data_parallel_value_before_use():
    """Under DataParallel the tracer's build hook gives every new parameter trainer 0's value;
    a layer object's parameters, made inside its first forward, get it before any op reads
    them (here the hook writes ones, as a broadcast would)."""
    x = np.random.RandomState(0).uniform(-1, 1, (2, 3)).astype("float32")
    with fluid.dygraph.guard():
        tracer = fluid.framework._dygraph_tracer()
        seen = []

        def broadcast(params):
            for p in params:
                seen.append(p.name)
                p.set_value(np.ones(p.shape, p.dtype))

        tracer._on_build = broadcast
        fc = dygraph.FC("fc", size=4)
        y = fc(fluid.dygraph.to_variable(x)).numpy()
    assert seen == [fc.weight.name, fc.bias.name]
    np.testing.assert_allclose(y, x @ np.ones((3, 4)) + 1, rtol=1e-6)
