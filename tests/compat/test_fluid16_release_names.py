"""Names of the Fluid 1.6 release beyond API.spec (tests/compat/fluid16_api.txt, section
[release]): each behaves as Fluid's."""

from __future__ import annotations

import math
import pickle
import warnings

import numpy as np
import pytest

import parafluid as fluid
from parafluid.compat import NotProvidedError, long_type
from parafluid.ops.registry import get_op_def


def _exe() -> fluid.Executor:
    return fluid.Executor(fluid.CPUPlace())


def _lod(rows, lengths, dtype="int64"):
    return fluid.create_lod_tensor(np.array(rows, dtype), [lengths], fluid.CPUPlace())


# -- fluid.Tensor, VarType, dtypes, compat ----------------------------------------------------
def test_tensor_is_lodtensor():
    assert fluid.Tensor is fluid.LoDTensor
    t = fluid.Tensor()
    t.set(np.ones([2, 3], "float32"), fluid.CPUPlace())
    assert np.array(t).shape == (2, 3)


@pytest.mark.parametrize("name, value", [
    ("BOOL", 0), ("INT16", 1), ("INT32", 2), ("INT64", 3), ("FP16", 4), ("FP32", 5),
    ("FP64", 6), ("LOD_TENSOR", 7), ("SELECTED_ROWS", 8), ("LOD_TENSOR_ARRAY", 13),
    ("RAW", 17), ("UINT8", 20), ("INT8", 21)])
def test_vartype_members_convert_with_int_to_fluids_enum_values(name, value):
    member = getattr(fluid.core.VarDesc.VarType, name)
    assert int(member) == value
    # still the dtype's name everywhere parafluid compares or stores it
    assert pickle.loads(pickle.dumps(member)) == member and int(pickle.loads(
        pickle.dumps(member))) == value


def test_a_variable_dtype_is_a_vartype_member():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data(name="x", shape=[2], dtype="float32")
    assert x.dtype == fluid.core.VarDesc.VarType.FP32


@pytest.mark.parametrize("np_dtype, member", [
    (np.float32, "FP32"), ("float64", "FP64"), (np.int64, "INT64"), (np.bool_, "BOOL"),
    (np.dtype("int32"), "INT32"), (np.float16, "FP16"), (np.uint8, "UINT8")])
def test_convert_np_dtype_to_dtype_(np_dtype, member):
    from parafluid.framework import convert_np_dtype_to_dtype_

    got = convert_np_dtype_to_dtype_(np_dtype)
    assert got == getattr(fluid.core.VarDesc.VarType, member)
    assert int(got) == int(getattr(fluid.core.VarDesc.VarType, member))


def test_convert_np_dtype_to_dtype_rejects_an_unknown_dtype():
    from parafluid.framework import convert_np_dtype_to_dtype_

    with pytest.raises(ValueError, match="Not supported numpy dtype complex64"):
        convert_np_dtype_to_dtype_(np.complex64)


def test_compat_long_type():
    assert long_type("12") == 12 and isinstance(long_type(3.9), int)


# -- require_version, load_op_library ----------------------------------------------------------
@pytest.mark.parametrize("args", [("1.4.0",), ("1.6",), ("0.1.0", "10.0.0"), ("1.6.0", "1.6.0"),
                                  ("1", "1.6.0.0")])
def test_require_version_passes_for_fluid_1_6(args):
    fluid.require_version(*args)


@pytest.mark.parametrize("args, match", [
    (("1.7.0",), "version 1.7.0 or higher is required, but 1.6.0 installed"),
    (("1.0", "1.5.9"), r"version in \[1.0, 1.5.9\] required, but 1.6.0 installed")])
def test_require_version_raises_outside_the_range(args, match):
    with pytest.raises(Exception, match=match):
        fluid.require_version(*args)


@pytest.mark.parametrize("args, err", [((1.6,), TypeError), (("1.6", 2.0), TypeError),
                                       (("1.6.a",), ValueError), (("1.0", "1.2.3.4.5"),
                                                                  ValueError)])
def test_require_version_checks_its_arguments(args, err):
    with pytest.raises(err):
        fluid.require_version(*args)


def test_load_op_library_fails_saying_what_to_use():
    with pytest.raises(NotProvidedError, match="register_op"):
        fluid.load_op_library("custom_op.so")


# -- fluid.input, fluid.average ----------------------------------------------------------------
def test_input_module_is_fluids_embedding_and_one_hot():
    from parafluid.input import embedding, one_hot

    assert embedding is fluid.embedding and one_hot is fluid.one_hot


def test_weighted_average():
    with pytest.warns(Warning, match="deprecated"):
        avg = fluid.average.WeightedAverage()
    with pytest.raises(ValueError, match="no data"):
        avg.eval()
    avg.add(value=2.0, weight=1)
    avg.add(value=4.0, weight=2)
    assert avg.eval() == pytest.approx(10 / 3)
    avg.add(value=np.array([1.0]), weight=1)
    np.testing.assert_allclose(avg.eval(), [11 / 4])
    with pytest.raises(ValueError, match="'weight' must be a number"):
        avg.add(value=1.0, weight=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="'value' must be"):
        avg.add(value="1", weight=1)
    avg.reset()
    with pytest.raises(ValueError):
        avg.eval()


# -- fluid.evaluator ---------------------------------------------------------------------------
def test_chunk_evaluator_accumulates_over_batches_and_resets():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = fluid.data(name="p", shape=[None, 1], dtype="int64", lod_level=1)
        g = fluid.data(name="g", shape=[None, 1], dtype="int64", lod_level=1)
        ev = fluid.evaluator.ChunkEvaluator(input=p, label=g, chunk_scheme="IOB",
                                            num_chunk_types=2)
    exe, scope = _exe(), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        ev.reset(exe)
        pred = [[0], [1], [4], [2], [3], [0], [1], [4]]
        gold = [[0], [1], [4], [2], [4], [0], [1], [1]]
        # batch counts (infer, label, correct) = (3, 3, 1); twice -> (6, 6, 2)
        for _ in range(2):
            exe.run(main, feed={"p": _lod(pred, [5, 3]), "g": _lod(gold, [5, 3])})
        precision, recall, f1 = ev.eval(exe)
        assert precision.dtype == np.float32 and precision.shape == (1,)
        np.testing.assert_allclose([precision[0], recall[0], f1[0]], [1 / 3] * 3, rtol=1e-6)
        ev.reset(exe)
        assert [float(x[0]) for x in ev.eval(exe)] == [0.0, 0.0, 0.0]
    assert len(ev.metrics) == 3 and len(ev.states) == 3


def test_edit_distance_evaluator():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hyp = fluid.layers.data(name="h", shape=[1], dtype="int64", lod_level=1)
        ref = fluid.layers.data(name="r", shape=[1], dtype="int64", lod_level=1)
        ev = fluid.evaluator.EditDistance(input=hyp, label=ref, ignored_tokens=[9])
    exe, scope = _exe(), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        ev.reset(exe)
        # distances, normalized by the reference length as Fluid's evaluator leaves it:
        # [1 2 3] vs [1 3] -> 1 / 2; [5] vs [5] -> 0 (9 erased)
        exe.run(main, feed={"h": _lod([[1], [2], [3], [5], [9]], [3, 2]),
                            "r": _lod([[1], [3], [5]], [2, 1])})
        # [4] vs [7 7] -> 2 / 2
        exe.run(main, feed={"h": _lod([[4]], [1]), "r": _lod([[7], [7]], [2])})
        avg_distance, avg_error = ev.eval(exe)
    np.testing.assert_allclose(np.ravel(avg_distance), [1.5 / 3])
    np.testing.assert_allclose(np.ravel(avg_error), [2 / 3])


def test_evaluators_warn_and_refuse_a_sub_block():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        p = fluid.data(name="p", shape=[None, 1], dtype="int64", lod_level=1)
        with pytest.warns(Warning, match="please use fluid.metrics.EditDistance"):
            fluid.evaluator.EditDistance(input=p, label=p)


def test_detection_map_evaluator_is_the_metric_under_its_old_name():
    assert issubclass(fluid.evaluator.DetectionMAP, fluid.metrics.DetectionMAP)
    with fluid.program_guard(fluid.Program(), fluid.Program()), \
            pytest.warns(Warning, match="DetectionMAP is deprecated"):
        det = fluid.data(name="d", shape=[None, 6], dtype="float32", lod_level=1)
        label = fluid.data(name="l", shape=[None, 1], dtype="int32", lod_level=1)
        box = fluid.data(name="b", shape=[None, 4], dtype="float32", lod_level=1)
        ev = fluid.evaluator.DetectionMAP(det, label, box, class_num=3)
    cur, accum = ev.get_map_var()
    assert cur.name != accum.name


# -- fluid.io.load_program_state / set_program_state --------------------------------------------
def test_program_state_round_trip(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[None, 3], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(input=x, size=2))
        fluid.optimizer.Adam(learning_rate=0.1).minimize(loss)
    exe, scope = _exe(), fluid.Scope()
    feed = {"x": np.ones([2, 3], "float32")}
    with fluid.scope_guard(scope):
        exe.run(startup)
        exe.run(main, feed=feed)
        fluid.save(main, str(tmp_path / "model"))
        saved = {v.name: np.array(scope.find_var(v.name).get_tensor())
                 for v in main.list_vars() if v.persistable and scope.find_var(v.name)}
        state = fluid.io.load_program_state(str(tmp_path / "model"))
        assert set(state) >= {p.name for p in main.all_parameters()}
        assert any("moment1" in k for k in state)  # the .pdopt file's optimizer state
        for k, v in state.items():
            np.testing.assert_array_equal(v, saved[k])
        exe.run(main, feed=feed)  # the values move on
        fluid.io.set_program_state(main, state)
        for k, v in state.items():
            np.testing.assert_array_equal(np.array(scope.find_var(k).get_tensor()), v)
        w = main.all_parameters()[0].name
        only = fluid.io.load_program_state(str(tmp_path / "model"), var_list=[w])
        assert list(only) == [w]
        with pytest.warns(UserWarning, match="not found in program. There are: extra"):
            fluid.io.set_program_state(main, {**state, "extra": np.zeros(1)})
        with pytest.raises(ValueError, match="shape"):
            fluid.io.set_program_state(main, {w: np.zeros([7], "float32")})
    with pytest.raises(ValueError, match="does not exist"):
        fluid.io.load_program_state(str(tmp_path / "nothing"))


# -- layers: mse_loss, distributions -----------------------------------------------------------
def test_mse_loss():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[None, 2], dtype="float32")
        y = fluid.data(name="y", shape=[None, 2], dtype="float32")
        out = fluid.layers.mse_loss(input=x, label=y)
    a = np.array([[1.5, 0.0], [2.0, 1.0]], "float32")
    b = np.array([[1.7, 1.0], [2.0, 0.0]], "float32")
    got, = _exe().run(main, feed={"x": a, "y": b}, fetch_list=[out])
    np.testing.assert_allclose(np.ravel(got), [np.mean((a - b) ** 2)], rtol=1e-6)
    with pytest.raises(TypeError, match="mse_loss: input must be a Variable"):
        fluid.layers.mse_loss(a, y)
    from parafluid.layers.nn import mse_loss

    assert mse_loss is fluid.layers.mse_loss


def _run(fetch):
    main = fluid.default_main_program()
    return _exe().run(main, fetch_list=fetch)


def test_categorical_entropy_and_kl():
    from parafluid.layers.distributions import Categorical

    la = np.array([[-0.602, -0.602, 0.3], [1.0, 2.0, 3.0]], "float32")
    lb = np.array([[-0.102, -0.112, 0.5], [0.0, 0.0, 0.0]], "float32")
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        a, b = fluid.layers.Categorical(la), Categorical(lb)
        ent, kl = _run([a.entropy(), a.kl_divergence(b)])

    def softmax(v):
        e = np.exp(v - v.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    pa, pb = softmax(la.astype("float64")), softmax(lb.astype("float64"))
    np.testing.assert_allclose(ent, -(pa * np.log(pa)).sum(-1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(kl, (pa * np.log(pa / pb)).sum(-1, keepdims=True), rtol=1e-4,
                               atol=1e-6)
    with pytest.raises(TypeError, match="Categorical"):
        a.kl_divergence(0)


def test_multivariate_normal_diag_entropy_and_kl():
    from parafluid.layers.distributions import MultivariateNormalDiag

    la, sa = np.array([0.3, 0.5], "float32"), np.array([[0.4, 0], [0, 0.5]], "float32")
    lb, sb = np.array([0.2, 0.4], "float32"), np.array([[0.3, 0], [0, 0.4]], "float32")
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        a = fluid.layers.MultivariateNormalDiag(la, sa)
        b = MultivariateNormalDiag(lb, sb)
        ent, kl = _run([a.entropy(), a.kl_divergence(b)])
    # Fluid's definitions: scale is the covariance matrix
    k = 2
    want_ent = 0.5 * (k * (1 + math.log(2 * math.pi)) + math.log(np.linalg.det(sa)))
    inv_b = np.linalg.inv(sb)
    d = lb - la
    want_kl = 0.5 * (np.trace(inv_b @ sa) + d @ inv_b @ d - k
                     + math.log(np.linalg.det(sb) / np.linalg.det(sa)))
    np.testing.assert_allclose(np.ravel(ent), [want_ent], rtol=1e-5)
    np.testing.assert_allclose(np.ravel(kl), [want_kl], rtol=1e-4)


# -- optimizers: RecomputeOptimizer, Dpsgd -----------------------------------------------------
def _mlp(opt_factory, recompute: bool, checkpoints_by_backward: bool = False):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data(name="x", shape=[None, 8], dtype="float32")
        y = fluid.data(name="y", shape=[None, 1], dtype="int64")
        fc_1 = fluid.layers.fc(input=x, size=16, act="relu")
        pred = fluid.layers.fc(input=[fc_1], size=2, act="softmax")
        cost = fluid.layers.reduce_mean(fluid.layers.cross_entropy(input=pred, label=y))
        opt = opt_factory()
        if recompute:
            opt = fluid.optimizer.RecomputeOptimizer(opt)
            if checkpoints_by_backward:
                pg = opt.backward(cost, checkpoints=[fc_1, pred])
                opt.apply_optimize(cost, None, pg)
            else:
                opt._set_checkpoints([fc_1, pred])
                opt.minimize(cost)
        else:
            opt.minimize(cost)
    return main, startup, cost


@pytest.mark.parametrize("by_backward", [False, True])
def test_recompute_optimizer_gives_the_wrapped_optimizers_numbers(by_backward):
    rng = np.random.RandomState(0)
    feeds = [{"x": rng.rand(4, 8).astype("float32"),
              "y": rng.randint(0, 2, [4, 1]).astype("int64")} for _ in range(4)]
    runs = []
    for recompute in (False, True):
        main, startup, cost = _mlp(lambda: fluid.optimizer.Adam(learning_rate=0.01),
                                   recompute, by_backward)
        with fluid.scope_guard(fluid.Scope()):
            exe = _exe()
            exe.run(startup)
            runs.append([exe.run(main, feed=f, fetch_list=[cost])[0] for f in feeds])
    np.testing.assert_array_equal(np.array(runs[0]), np.array(runs[1]))


def test_recompute_optimizer_checks_its_arguments():
    with pytest.raises(TypeError, match="optimizer must be"):
        fluid.optimizer.RecomputeOptimizer("adam")
    opt = fluid.optimizer.RecomputeOptimizer(fluid.optimizer.SGD(learning_rate=0.1))
    with pytest.raises(NotImplementedError, match="load function is not supported"):
        opt.load({})
    with pytest.raises(TypeError, match="checkpoints must be a list of Variables"):
        opt._set_checkpoints(["fc_0.tmp_0"])
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data(name="x", shape=[None, 2], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(input=x, size=1))
        with pytest.raises(ValueError, match="no checkpoints"):
            opt.minimize(loss)
        with pytest.raises(TypeError, match="checkpoints must be a list of Variables"):
            fluid.backward.append_backward(loss, checkpoints="fc")


def test_dpsgd_appends_fluids_dpsgd_op():
    assert fluid.optimizer.Dpsgd is fluid.optimizer.DpsgdOptimizer
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[None, 2], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(input=x, size=1, bias_attr=False))
        opt = fluid.optimizer.Dpsgd(learning_rate=0.01, clip=10.0, batch_size=16.0, sigma=1.0)
        try:
            get_op_def("dpsgd")
        except (KeyError, ValueError):
            pytest.skip("this build registers no dpsgd op")
        opt.minimize(loss)
    ops = [op for op in main.global_block().ops if op.type == "dpsgd"]
    assert len(ops) == 1
    op = ops[0]
    assert (op.attr("clip"), op.attr("batch_size"), op.attr("sigma")) == (10.0, 16.0, 1.0)
    assert op.input("Param") == op.output("ParamOut")


def test_dpsgd_defaults_and_checks():
    opt = fluid.optimizer.DpsgdOptimizer()
    assert (opt._clip, opt._batch_size, opt._sigma) == (0.9, 0.999, 1e-8)
    with pytest.raises(TypeError, match="sigma must be a number, got NoneType"):
        fluid.optimizer.Dpsgd(sigma=None)
    with pytest.raises(TypeError, match="clip must be a number"):
        fluid.optimizer.Dpsgd(clip="big")


# -- names left out: they import and fail on use ------------------------------------------------
@pytest.mark.parametrize("use", [
    lambda: fluid.layers.BeamSearchDecoder(None, 0, 1, 4),
    lambda: fluid.layers.dynamic_decode(None),
    lambda: fluid.dygraph.profiler.start_gperf_profiler(),
    lambda: fluid.transpiler.collective.GradAllReduce(),
    lambda: fluid.transpiler.collective.LocalSGD(nrings=2),
])
def test_left_out_release_names_fail_on_use(use):
    with pytest.raises(NotProvidedError, match="is not part of parafluid"):
        use()


# -- fluid.dataset (module path of the release's __all__) -------------------------------------
def test_in_memory_dataset_settings_and_shuffle_sizes(tmp_path):
    path = tmp_path / "part-0.txt"
    path.write_text("".join(f"1 {i} 2 {i} {i + 1}\n" for i in range(6)))
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        slots = [fluid.layers.data(name=n, shape=[1], dtype="int64", lod_level=1)
                 for n in ("a", "b")]
        dataset = fluid.dataset.DatasetFactory().create_dataset("InMemoryDataset")
    assert isinstance(dataset, fluid.dataset.InMemoryDataset)
    dataset.set_use_var(slots)
    dataset.set_filelist([str(path)])
    dataset.set_queue_num(2)
    dataset.set_fleet_send_batch_size(64)
    dataset.set_parse_content(False)
    assert (dataset.queue_num, dataset.fleet_send_batch_size, dataset.parse_content) == \
        (2, 64, False)
    dataset.load_into_memory()
    before = sorted(tuple(inst[0]) for inst in dataset._memory)
    dataset.global_shuffle()  # one process: a local shuffle
    assert sorted(tuple(inst[0]) for inst in dataset._memory) == before
    assert dataset.get_shuffle_data_size() == dataset.get_memory_data_size() == 6
    with pytest.raises(ValueError, match="fleet"):
        dataset.global_shuffle(fleet=object())
    queue = fluid.dataset.QueueDataset()
    with pytest.raises(NotImplementedError, match="does not support global shuffle"):
        queue.global_shuffle()


def _deep(checkpoints_of, use_dropout=False, use_bn=False):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data(name="x", shape=[None, 8], dtype="float32")
        y = fluid.data(name="y", shape=[None, 1], dtype="int64")
        h1 = fluid.layers.fc(x, 16, act="relu")
        h2 = fluid.layers.fc(h1, 16, act="tanh")
        if use_dropout:
            h2 = fluid.layers.dropout(h2, dropout_prob=0.5)
        if use_bn:
            h2 = fluid.layers.batch_norm(h2)
        h3 = fluid.layers.fc(h2, 16, act="relu")
        pred = fluid.layers.fc(h3, 2, act="softmax")
        cost = fluid.layers.reduce_mean(fluid.layers.cross_entropy(input=pred, label=y))
        checkpoints = checkpoints_of(h1, h3)
        if checkpoints is None:
            fluid.optimizer.Adam(0.01).minimize(cost)
        else:
            opt = fluid.optimizer.RecomputeOptimizer(fluid.optimizer.Adam(0.01))
            opt._set_checkpoints(checkpoints)
            opt.minimize(cost)
    return main, startup, cost


def _backward_start(main):
    from parafluid.framework import OpRole

    return next(i for i, op in enumerate(main.global_block().ops)
                if op.attrs.get("op_role", 0) & OpRole.Backward)


def test_recompute_replays_the_segment_before_its_gradient_ops():
    main, _, _ = _deep(lambda h1, h3: [h1, h3])
    ops = main.global_block().ops
    start = _backward_start(main)
    replayed = [op for op in ops[start:] if any(
        n.endswith("@RECOMPUTE") for n in op.output_arg_names)]
    # the second fc's mul, add and tanh, and the third fc's mul (its add's input); then, as
    # in Fluid, the ops before the first checkpoint: the first fc's mul (its add's input)
    assert [op.type for op in replayed] == ["mul", "elementwise_add", "tanh", "mul", "mul"]
    forward_outputs = {n for op in replayed for n in op.output_arg_names}
    originals = {n[:-len("@RECOMPUTE")] for n in forward_outputs}
    # no backward op reads the originals any more: they die in the forward pass
    assert not {n for op in ops[start:] for n in op.input_arg_names} & originals
    first = ops.index(replayed[0])
    assert all(not any(n in forward_outputs for n in op.input_arg_names)
               for op in ops[:first])


@pytest.mark.parametrize("kw,kept", [({"use_dropout": True}, "dropout"),
                                     ({"use_bn": True}, "batch_norm")])
def test_recompute_holds_what_ops_that_cannot_run_twice_write(kw, kept):
    # dropout (a second mask would differ) and batch_norm (its running statistics would be
    # updated twice) are not replayed; the ops around them are, reading what they wrote
    main, _, _ = _deep(lambda h1, h3: [h1, h3], **kw)
    ops = main.global_block().ops
    replayed = [op for op in ops[_backward_start(main):]
                if any(n.endswith("@RECOMPUTE") for n in op.output_arg_names)]
    assert kept not in [op.type for op in replayed]
    held = next(op for op in ops if op.type == kept).output("Y" if kept == "batch_norm"
                                                             else "Out")[0]
    assert any(held in op.input_arg_names for op in replayed)


def _chain(checkpoints_of):
    # mul -> add b1 -> add b2 -> mean, built from block calls as Fluid's optimizer tests do
    main = fluid.Program()
    block = main.global_block()
    x = block.create_parameter(name="mul.x", shape=[5, 10], dtype="float32")
    y = block.create_var(name="mul.y", shape=[10, 8], dtype="float32")
    b1 = block.create_parameter(name="b1", shape=[5, 8], dtype="float32")
    b2 = block.create_parameter(name="b2", shape=[5, 8], dtype="float32")
    outs = [block.create_var(name=n, shape=[5, 8], dtype="float32")
            for n in ("mul.out", "b1_out", "b2_out")]
    mean = block.create_var(name="mean.out", shape=[1], dtype="float32")
    block.append_op(type="mul", inputs={"X": x, "Y": y}, outputs={"Out": outs[0]})
    block.append_op(type="elementwise_add", inputs={"X": outs[0], "Y": b1},
                    outputs={"Out": outs[1]})
    block.append_op(type="elementwise_add", inputs={"X": outs[1], "Y": b2},
                    outputs={"Out": outs[2]})
    block.append_op(type="mean", inputs={"X": outs[2]}, outputs={"Out": mean})
    opt = fluid.optimizer.RecomputeOptimizer(fluid.optimizer.SGD(learning_rate=1.0))
    opt._set_checkpoints(checkpoints_of(x, *outs))
    with fluid.program_guard(main, fluid.Program()):
        opt.minimize(mean)
    return [op.type for op in block.ops[6:-3]]  # between mean_grad and the sgd ops


@pytest.mark.parametrize("checkpoints_of,replayed", [
    # one checkpoint: the ops up to its writer are a segment (mul is replayed)
    (lambda x, m, b1, b2: [b1], ["elementwise_add_grad", "mul", "elementwise_add_grad"]),
    # from an input: the segment starts at the first op
    (lambda x, m, b1, b2: [x, b2], ["mul", "elementwise_add", "elementwise_add_grad",
                                    "elementwise_add_grad"]),
    (lambda x, m, b1, b2: [b2, m], ["elementwise_add", "elementwise_add_grad",
                                    "elementwise_add_grad"]),
    (lambda x, m, b1, b2: [m, b1], ["elementwise_add_grad", "elementwise_add_grad"]),
])
def test_recompute_segments_are_fluids(checkpoints_of, replayed):
    assert _chain(checkpoints_of) == replayed + ["mul_grad"]


@pytest.mark.parametrize("kw", [{}, {"use_bn": True}, {"use_dropout": True}])
def test_recompute_trains_exactly_as_the_plain_program(kw):
    rng = np.random.RandomState(0)
    feeds = [{"x": rng.rand(4, 8).astype("float32"),
              "y": rng.randint(0, 2, [4, 1]).astype("int64")} for _ in range(3)]
    runs = []
    for checkpoints_of in (lambda h1, h3: None, lambda h1, h3: [h1, h3]):
        main, startup, cost = _deep(checkpoints_of, **kw)
        with fluid.scope_guard(fluid.Scope()):
            exe = _exe()
            exe.run(startup)
            runs.append([exe.run(main, feed=f, fetch_list=[cost])[0] for f in feeds])
    np.testing.assert_array_equal(np.array(runs[0]), np.array(runs[1]))


def test_recompute_lowers_the_peak_of_live_activations():
    from parafluid.passes.liveness import block_liveness

    def build(recompute):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            h = fluid.data(name="x", shape=[None, 32], dtype="float32")
            outs = []
            for _ in range(8):
                h = fluid.layers.fc(h, 32, act="tanh")
                outs.append(h)
            opt = fluid.optimizer.SGD(0.1)
            if recompute:
                opt = fluid.optimizer.RecomputeOptimizer(opt)
                opt._set_checkpoints(outs[1::2])
            opt.minimize(fluid.layers.mean(h))
        return main.global_block()

    def peak(block):
        # activations and their gradients: not parameters, their gradients or the data
        def activation(n):
            var = block._find_var_recursive(n)
            base = block._find_var_recursive(n.split("@")[0])
            return var is not None and not var.persistable and not var.is_data and \
                not (base is not None and base.persistable)
        live = block_liveness(block)
        return max(sum(map(activation, names)) for names in live.live_out)

    plain, recomputed = peak(build(False)), peak(build(True))
    assert recomputed < plain, (recomputed, plain)


# -- fluid.dygraph.jit.trace -----------------------------------------------------------------
class _TwoLayers(fluid.dygraph.Layer):
    def __init__(self) -> None:
        super().__init__("two")
        self.fc1 = fluid.dygraph.FC("fc1", size=4, act="relu")
        self.fc2 = fluid.dygraph.FC("fc2", size=2)

    def forward(self, x):
        return self.fc2(self.fc1(x))


def test_jit_trace_records_a_program_that_computes_what_the_layer_did():
    x = np.random.RandomState(0).rand(3, 5).astype("float32")
    with fluid.dygraph.guard():
        model = _TwoLayers()
        out, program = fluid.dygraph.jit.trace(model, [fluid.dygraph.to_variable(x)],
                                               feed_names=["img"], fetch_names=["logits"])
        want = out.numpy()
        params = {p.name: p.numpy() for p in model.parameters()}
    block = program.global_block()
    assert [op.type for op in block.ops].count("mul") == 2
    assert block.var("img").shape == (3, 5) and block.has_var("logits")
    assert {n for n in params} <= {v.name for v in block.vars.values() if v.persistable}
    scope = fluid.Scope()
    for name, value in params.items():
        scope.var(name).get_tensor().set(value, fluid.CPUPlace())
    got, = _exe().run(program, feed={"img": x}, fetch_list=["logits"], scope=scope)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_jit_trace_names_temporaries_as_fluids_tracer_so_two_traces_agree():
    x = np.random.RandomState(0).rand(3, 5).astype("float32")
    with fluid.dygraph.guard():
        model = _TwoLayers()
        programs = [fluid.dygraph.jit.trace(model, [fluid.dygraph.to_variable(x)],
                                            feed_names=["img"], fetch_names=["logits"])[1]
                    for _ in range(2)]
    first, second = (p.global_block() for p in programs)
    assert str(first) == str(second)
    temps = [v.name for v in first.vars.values() if not v.persistable and v.name != "img"
             and v.name != "logits"]
    assert temps == [f"t_{i}" for i in range(len(temps))] and temps
    assert first.ops[0].input("X") == ["img"] and first.ops[-1].output_arg_names == ["logits"]


def test_jit_trace_checks_its_arguments():
    with pytest.raises(RuntimeError, match="inside fluid.dygraph.guard"):
        fluid.dygraph.jit.trace(_TwoLayers.__new__(_TwoLayers), [])
    with fluid.dygraph.guard():
        with pytest.raises(TypeError, match="must be a fluid.dygraph.Layer"):
            fluid.dygraph.jit.trace(lambda x: x, [])
        x = fluid.dygraph.to_variable(np.ones([1, 5], "float32"))
        with pytest.raises(ValueError, match="2 feed_names for 1 variables"):
            fluid.dygraph.jit.trace(_TwoLayers(), [x], feed_names=["a", "b"])
