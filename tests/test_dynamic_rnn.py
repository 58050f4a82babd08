"""DynamicRNN over LoD input (forward), against a numpy RNN run on each sequence alone; the
rank-table ops it is built from."""

import numpy as np
import pytest

import parafluid as fluid

L = fluid.layers
D, H = 3, 4
RNG = np.random.RandomState(9)
WX = RNG.uniform(-0.8, 0.8, (D, H)).astype("float32")
WH = RNG.uniform(-0.8, 0.8, (H, H)).astype("float32")
LENGTHS = [2, 4, 1, 4]  # unsorted, with a tie: the rank table must keep the input order
XS = RNG.uniform(-1, 1, (sum(LENGTHS), D)).astype("float32")
WEIGHTS = RNG.uniform(-1, 1, (sum(LENGTHS), H))  # weighs every output row in the loss


def _loss_weights():
    """WEIGHTS as a float64 constant of the program (layers.assign takes float32 or int32
    arrays only, as Fluid's)."""
    w = L.create_parameter(list(WEIGHTS.shape), "float64",
                           default_initializer=fluid.initializer.NumpyArrayInitializer(WEIGHTS))
    w.stop_gradient = True
    return w


def _init(a):
    return fluid.initializer.NumpyArrayInitializer(a)


def _program(boot=False):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        sentence = L.data(name="sentence", shape=[D], dtype="float32", lod_level=1)
        h0 = L.data(name="h0", shape=[H], dtype="float32") if boot else None
        drnn = L.DynamicRNN()
        with drnn.block():
            word = drnn.step_input(sentence)
            prev = drnn.memory(init=h0, need_reorder=True) if boot else drnn.memory(shape=[H])
            hidden = L.fc(input=[word, prev], size=H, act="tanh", bias_attr=False,
                          param_attr=[fluid.ParamAttr(name="wx", initializer=_init(WX)),
                                      fluid.ParamAttr(name="wh", initializer=_init(WH))])
            drnn.update_memory(prev, hidden)
            drnn.output(hidden)
        out = drnn()
        last = L.sequence_last_step(out)
    return main, startup, out, last


def _numpy(h0=None):
    outs, lasts, start = [], [], 0
    for k, n in enumerate(LENGTHS):
        h = np.zeros(H, "float32") if h0 is None else h0[k]
        for t in range(n):
            h = np.tanh(XS[start + t] @ WX + h @ WH)
            outs.append(h)
        lasts.append(h)
        start += n
    return np.stack(outs), np.stack(lasts)


@pytest.mark.parametrize("boot", [False, True])
def test_dynamic_rnn_matches_numpy_per_sequence(boot):
    main, startup, out, last = _program(boot)
    place = fluid.CPUPlace()
    feed = {"sentence": fluid.create_lod_tensor(XS, [LENGTHS], place)}
    h0 = RNG.uniform(-1, 1, (len(LENGTHS), H)).astype("float32") if boot else None
    if boot:
        feed["h0"] = h0
    exe, scope = fluid.Executor(place), fluid.Scope()
    exe.run(startup, scope=scope)
    got, got_last = exe.run(main, feed=feed, fetch_list=[out, last], scope=scope,
                            return_numpy=False)
    want, want_last = _numpy(h0)
    assert got.recursive_sequence_lengths() == [LENGTHS]
    np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(got_last), want_last, rtol=1e-5, atol=1e-6)


def test_rank_table_orders_longest_first_and_keeps_ties_in_order():
    import torch

    from parafluid.lod import attach_lod, lengths_to_offsets
    from parafluid.ops.registry import get_op_def

    x = attach_lod(torch.zeros(sum(LENGTHS), 1), [lengths_to_offsets(LENGTHS)])
    table = get_op_def("lod_rank_table").kernel({"X": x}, {"level": 0}, None)["Out"]
    assert table.tolist() == [[1, 4], [3, 4], [0, 2], [2, 1]]
    arr = get_op_def("lod_tensor_to_array").kernel(
        {"X": attach_lod(torch.arange(11.0).reshape(-1, 1), [lengths_to_offsets(LENGTHS)]),
         "RankTable": table}, {}, None)["Out"]
    # step t holds, in rank order, token t of each sequence longer than t
    assert [a.reshape(-1).tolist() for a in arr] == [[2, 7, 0, 6], [3, 8, 1], [4, 9], [5, 10]]
    back = get_op_def("array_to_lod_tensor").kernel({"X": arr, "RankTable": table}, {},
                                                    None)["Out"]
    assert back.reshape(-1).tolist() == list(range(11))


def test_dynamic_rnn_misuse_is_named():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        drnn = L.DynamicRNN()
        with pytest.raises(ValueError, match="inside 'with drnn.block"):
            drnn.memory(shape=[H])


def test_dynamic_rnn_gradient_matches_finite_differences():
    """Through the rank-table ops, the arrays, the shrunk memories and the loop."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        sentence = L.data(name="sentence", shape=[D], dtype="float64", lod_level=1)
        sentence.stop_gradient = False
        h0 = L.data(name="h0", shape=[H], dtype="float64")
        h0.stop_gradient = False
        drnn = L.DynamicRNN()
        with drnn.block():
            word = drnn.step_input(sentence)
            prev = drnn.memory(init=h0, need_reorder=True)
            hidden = L.fc(input=[word, prev], size=H, act="tanh", bias_attr=False,
                          param_attr=[fluid.ParamAttr(name="wx", initializer=_init(WX)),
                                      fluid.ParamAttr(name="wh", initializer=_init(WH))])
            drnn.update_memory(prev, hidden)
            drnn.output(hidden)
        out = drnn()
        weights = _loss_weights()
        loss = L.reduce_sum(L.elementwise_mul(out, weights))
        gx, gh = fluid.backward.gradients([loss], [sentence, h0])
    main.verify()
    place = fluid.CPUPlace()
    exe, scope = fluid.Executor(place), fluid.Scope()
    exe.run(startup, scope=scope)
    xs = XS.astype("float64")
    h0v = RNG.uniform(-1, 1, (len(LENGTHS), H))

    def run(x, h, fetch):
        return exe.run(main, feed={"sentence": fluid.create_lod_tensor(x, [LENGTHS], place),
                                   "h0": h}, fetch_list=fetch, scope=scope)

    got_x, got_h = run(xs, h0v, [gx, gh])
    for arr, got, f in ((xs, got_x, lambda a: run(a, h0v, [loss])[0]),
                        (h0v, got_h, lambda a: run(xs, a, [loss])[0])):
        fd = np.zeros_like(arr)
        for k in np.ndindex(arr.shape):
            d = np.zeros_like(arr)
            d[k] = 1e-6
            fd[k] = (float(f(arr + d)) - float(f(arr - d))) / 2e-6
        np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-7)


CTX_LENGTHS = [3, 1, 2, 2]  # one context sequence per input sentence
CTX = RNG.uniform(-1, 1, (sum(CTX_LENGTHS), D))
WC = RNG.uniform(-0.8, 0.8, (D, H))
BIAS = RNG.uniform(-0.5, 0.5, (len(LENGTHS), H))


def _static_input_program():
    """h_t = tanh(x_t wx + h_{t-1} wh + sum(ctx of the sequence) wc + bias of the sequence):
    ``ctx`` is a LoD static input (a sequence per sentence), ``bias`` one row per
    sentence."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        sentence = L.data(name="sentence", shape=[D], dtype="float64", lod_level=1)
        ctx = L.data(name="ctx", shape=[D], dtype="float64", lod_level=1)
        bias = L.data(name="bias", shape=[H], dtype="float64")
        for v in (sentence, ctx, bias):
            v.stop_gradient = False
        drnn = L.DynamicRNN()
        with drnn.block():
            word = drnn.step_input(sentence)
            context = drnn.static_input(ctx)
            b = drnn.static_input(bias)
            prev = drnn.memory(shape=[H], dtype="float64")
            pooled = L.sequence_pool(context, pool_type="sum")
            hidden = L.fc(input=[word, prev, pooled], size=H, bias_attr=False,
                          param_attr=[fluid.ParamAttr(name="wx", initializer=_init(WX)),
                                      fluid.ParamAttr(name="wh", initializer=_init(WH)),
                                      fluid.ParamAttr(name="wc", initializer=_init(WC))])
            hidden = L.tanh(L.elementwise_add(hidden, b))
            drnn.update_memory(prev, hidden)
            drnn.output(hidden)
        out = drnn()
        loss = L.reduce_sum(L.elementwise_mul(out, _loss_weights()))
        grads = fluid.backward.gradients([loss], [sentence, ctx, bias])
    return main, startup, out, loss, grads


def _static_input_numpy(xs, ctx, bias):
    outs, start, cstart = [], 0, 0
    for k, (n, m) in enumerate(zip(LENGTHS, CTX_LENGTHS)):
        pooled = ctx[cstart:cstart + m].sum(0)
        h = np.zeros(H)
        for t in range(n):
            h = np.tanh(xs[start + t] @ WX + h @ WH + pooled @ WC + bias[k])
            outs.append(h)
        start, cstart = start + n, cstart + m
    return np.stack(outs)


def test_static_input_with_and_without_lod_matches_numpy_and_finite_differences():
    """Fluid 1.6's static_input: the static value reordered by the rank table and cut to
    the running sequences each step (a LoD one keeps whole sequences); its gradient flows
    back in the feed's order."""
    main, startup, out, loss, grads = _static_input_program()
    main.verify()
    place = fluid.CPUPlace()
    exe, scope = fluid.Executor(place), fluid.Scope()
    exe.run(startup, scope=scope)
    xs = XS.astype("float64")

    def run(x, c, b, fetch):
        return exe.run(main, feed={"sentence": fluid.create_lod_tensor(x, [LENGTHS], place),
                                   "ctx": fluid.create_lod_tensor(c, [CTX_LENGTHS], place),
                                   "bias": b}, fetch_list=fetch, scope=scope)

    got = run(xs, CTX, BIAS, [out, *grads])
    np.testing.assert_allclose(got[0], _static_input_numpy(xs, CTX, BIAS), rtol=1e-10)
    args = [xs, CTX, BIAS]
    for pos, analytic in enumerate(got[1:]):
        fd = np.zeros_like(args[pos])
        for k in np.ndindex(fd.shape):
            d = np.zeros_like(fd)
            d[k] = 1e-6
            hi, lo = list(args), list(args)
            hi[pos], lo[pos] = args[pos] + d, args[pos] - d
            fd[k] = (float(run(*hi, [loss])[0]) - float(run(*lo, [loss])[0])) / 2e-6
        np.testing.assert_allclose(analytic, fd, rtol=1e-5, atol=1e-7)


def test_element_accessors_read_and_write_one_element_in_place():
    t = fluid.LoDTensor()
    t.set(np.arange(6, dtype="float32").reshape(2, 3), fluid.CPUPlace())
    assert t._get_float_element(4) == 4.0
    t._set_float_element(4, 9.5)
    np.testing.assert_array_equal(np.array(t), [[0, 1, 2], [3, 9.5, 5]])
    with pytest.raises(IndexError, match="element 6 of a tensor of 6"):
        t._get_float_element(6)
    with pytest.raises(TypeError, match="expected torch.float64"):
        t._get_double_element(0)
    d = fluid.LoDTensor()
    d.set(np.zeros(2), fluid.CPUPlace())
    d._set_double_element(1, 0.25)
    assert d._get_double_element(1) == 0.25


def _recorded_static_input_program(record_steps: bool):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[2], dtype="float32", lod_level=1)
        s = fluid.layers.data(name="s", shape=[3], dtype="float32", lod_level=1)
        s.stop_gradient = False
        steps = None
        if record_steps:
            # declared, never written before the loop: it starts empty in each run
            steps = main.global_block().create_var(
                name="seen", type=fluid.core.VarDesc.VarType.LOD_TENSOR_ARRAY, dtype="float32")
        rnn = fluid.layers.DynamicRNN()
        with rnn.block():
            xt = rnn.step_input(x)
            st = rnn.static_input(s)
            if record_steps:
                fluid.layers.array_write(st, i=rnn.step_idx, array=steps)
            last = fluid.layers.sequence_pool(st, pool_type="last")
            rnn.output(fluid.layers.fc(input=[xt, last], size=2))
        loss = fluid.layers.mean(fluid.layers.sequence_pool(rnn(), pool_type="last"))
        fluid.backward.append_backward(loss)
    return main, startup, steps


def _lod_tensor(data, lengths):
    t = fluid.LoDTensor()
    t.set(data, fluid.CPUPlace())
    t.set_recursive_sequence_lengths([lengths])
    return t


def test_static_input_gradient_keeps_the_sequences_of_its_input():
    main, startup, _ = _recorded_static_input_program(record_steps=False)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": _lod_tensor(np.ones((6, 2), "float32"), [1, 3, 2]),
            "s": _lod_tensor(np.arange(18, dtype="float32").reshape(6, 3), [1, 2, 3])}
    grad, = exe.run(main, feed=feed, fetch_list=["s@GRAD"], scope=scope, return_numpy=False)
    assert grad.recursive_sequence_lengths() == [[1, 2, 3]]
    assert np.array(grad).shape == (6, 3)


def test_a_declared_tensor_array_starts_empty_in_each_run():
    main, startup, steps = _recorded_static_input_program(record_steps=True)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": _lod_tensor(np.ones((4, 2), "float32"), [1, 3]),
            "s": _lod_tensor(np.arange(9, dtype="float32").reshape(3, 3), [1, 2])}
    for _ in range(2):  # a second run does not see the first run's items
        seen, = exe.run(main, feed=feed, fetch_list=[steps], scope=scope)
        assert len(seen) == 3
        # step 0 sees both sequences in rank order (the longer x sequence first)
        np.testing.assert_array_equal(seen[0], [[3, 4, 5], [6, 7, 8], [0, 1, 2]])
        np.testing.assert_array_equal(seen[1], [[3, 4, 5], [6, 7, 8]])


def test_nested_dynamic_rnn_over_two_level_lod_matches_numpy_and_finite_differences():
    """A DynamicRNN over paragraphs whose step is a whole sentence (LoD level 1 inside), and
    an inner DynamicRNN over its words: as Fluid's nested DynamicRNN over a 2-level LoD."""
    rng = np.random.RandomState(3)
    paragraphs = [[2, 1], [3], [1, 2, 2]]  # words per sentence, sentences per paragraph
    words = sum(sum(p) for p in paragraphs)
    xs = rng.uniform(-1, 1, (words, 3))
    wv = rng.uniform(-1, 1, (3, 2))
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[3], dtype="float64", lod_level=2)
        x.stop_gradient = False
        outer = L.DynamicRNN()
        with outer.block():
            sentence = outer.step_input(x)
            assert sentence.lod_level == 1
            inner = L.DynamicRNN()
            with inner.block():
                word = inner.step_input(sentence)
                assert word.lod_level == 0
                inner.output(L.fc(input=word, size=2, act="tanh", bias_attr=False,
                                  param_attr=fluid.ParamAttr(name="w", initializer=_init(wv))))
            outer.output(L.sequence_last_step(inner()))
        out = outer()
        loss = L.reduce_sum(L.elementwise_mul(
            out, L.assign(np.linspace(-1, 1, 12).reshape(6, 2).astype("float32"))))
        gx, = fluid.backward.gradients([loss], [x])
    place = fluid.CPUPlace()
    exe, scope = fluid.Executor(place), fluid.Scope()
    exe.run(startup, scope=scope)
    lengths = [[len(p) for p in paragraphs], [n for p in paragraphs for n in p]]

    def run(a, fetch):
        return exe.run(main, feed={"x": fluid.create_lod_tensor(a, lengths, place)},
                       fetch_list=fetch, scope=scope, return_numpy=False)

    got, grad = run(xs, [out, gx])
    ends = np.cumsum(lengths[1]) - 1  # the last word of every sentence, in order
    np.testing.assert_allclose(np.array(got), np.tanh(xs[ends] @ wv), rtol=1e-12)
    assert got.recursive_sequence_lengths() == [lengths[0]]
    fd = np.zeros_like(xs)
    for k in np.ndindex(xs.shape):
        d = np.zeros_like(xs)
        d[k] = 1e-6
        fd[k] = (np.array(run(xs + d, [loss])[0]).item() -
                 np.array(run(xs - d, [loss])[0]).item()) / 2e-6
    np.testing.assert_allclose(np.array(grad), fd, atol=1e-7)
