"""Op table: the *2 shape ops (reshape2, transpose2, squeeze2, unsqueeze2, flatten2) with
their XShape output and XShape-reading gradient ops; reshape's ShapeTensor input."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid import backward
from parafluid.framework import Program, program_guard
from parafluid.testing import OpCase, check_op, rand
from parafluid.testing.refs import run_built


def _xshape(X):
    return np.zeros((0, *X.shape), X.dtype)


def reshape_ref(target):
    def ref(X, **_):
        return {"Out": X.reshape(target), "XShape": _xshape(X)}
    return ref


def _ints(*values):
    return np.array(values, dtype="int32")


def transpose_ref(X, attrs):
    return {"Out": np.transpose(X, attrs["axis"]), "XShape": _xshape(X)}


def squeeze_ref(X, attrs):
    axes = [a % X.ndim for a in attrs["axes"]] or [i for i, d in enumerate(X.shape) if d == 1]
    return {"Out": X.reshape([d for i, d in enumerate(X.shape) if i not in axes]),
            "XShape": _xshape(X)}


def unsqueeze_ref(X, attrs):
    out = X
    for a in attrs["axes"]:
        out = np.expand_dims(out, a if a >= 0 else a + out.ndim + 1)
    return {"Out": out, "XShape": _xshape(X)}


def flatten_ref(X, attrs):
    rows = int(np.prod(X.shape[:attrs["axis"]]))
    return {"Out": X.reshape(rows, -1), "XShape": _xshape(X)}


OUT = ["Out"]

CASES = [
    OpCase("reshape2", {"X": rand(2, 25)}, attrs={"shape": [5, 10]}, ref=reshape_ref((5, 10)),
           grad=["X"], grad_outputs=OUT, id="reshape2"),
    OpCase("reshape2", {"X": rand(5, 10)}, attrs={"shape": [5, -1, 5]},
           ref=reshape_ref((5, 2, 5)), grad=["X"], grad_outputs=OUT, id="reshape2_infer_dim"),
    OpCase("reshape2", {"X": rand(2, 2, 6)}, attrs={"shape": [2, 0, 3, -1]},
           ref=reshape_ref((2, 2, 3, 2)), grad=["X"], grad_outputs=OUT,
           id="reshape2_copy_dim"),
    OpCase("reshape2", {"X": rand(6, 5), "Shape": _ints(2, 3, 5)}, attrs={"shape": [0, -1, 5]},
           ref=reshape_ref((2, 3, 5)), grad=["X"], grad_outputs=OUT,
           id="reshape2_shape_input_wins"),
    OpCase("reshape2", {"X": rand(5, 10), "ShapeTensor": [_ints(5), _ints(-1), _ints(5)]},
           attrs={"shape": [5, -1, -1]}, ref=reshape_ref((5, 2, 5)), grad=["X"],
           grad_outputs=OUT, id="reshape2_shape_tensor_list"),
    OpCase("reshape2", {"X": rand(2, 2, 6), "ShapeTensor": [_ints(2), _ints(0), _ints(-1)]},
           attrs={"shape": [-1, 0, -1]}, ref=reshape_ref((2, 2, 6)), grad=["X"],
           grad_outputs=OUT, id="reshape2_shape_tensor_copy_dim"),
    OpCase("reshape", {"X": rand(4, 6), "ShapeTensor": [_ints(3), _ints(-1)]},
           attrs={"shape": [-1, -1]}, ref=lambda X, **_: {"Out": X.reshape(3, 8)},
           grad=["X"], id="reshape_shape_tensor_list"),
    OpCase("transpose2", {"X": rand(2, 3, 4)}, attrs={"axis": [1, 0, 2]}, ref=transpose_ref,
           grad=["X"], grad_outputs=OUT, id="transpose2"),
    OpCase("transpose2", {"X": rand(2, 3, 2, 4)}, attrs={"axis": [0, 2, 3, 1]},
           ref=transpose_ref, grad=["X"], grad_outputs=OUT, id="transpose2_to_channel_last"),
    OpCase("squeeze2", {"X": rand(2, 1, 3)}, attrs={"axes": [1]}, ref=squeeze_ref,
           grad=["X"], grad_outputs=OUT, id="squeeze2"),
    OpCase("squeeze2", {"X": rand(1, 3, 1)}, attrs={"axes": []}, ref=squeeze_ref,
           grad=["X"], grad_outputs=OUT, id="squeeze2_all_ones"),
    OpCase("squeeze2", {"X": rand(3, 2, 1)}, attrs={"axes": [-1]}, ref=squeeze_ref,
           grad=["X"], grad_outputs=OUT, id="squeeze2_negative_axis"),
    OpCase("unsqueeze2", {"X": rand(3, 4)}, attrs={"axes": [0, 2]}, ref=unsqueeze_ref,
           grad=["X"], grad_outputs=OUT, id="unsqueeze2"),
    OpCase("unsqueeze2", {"X": rand(3, 4)}, attrs={"axes": [-1, 1]}, ref=unsqueeze_ref,
           grad=["X"], grad_outputs=OUT, id="unsqueeze2_negative_axis"),
    OpCase("flatten2", {"X": rand(2, 3, 4)}, attrs={"axis": 2}, ref=flatten_ref,
           grad=["X"], grad_outputs=OUT, id="flatten2"),
    OpCase("flatten2", {"X": rand(2, 3, 4)}, attrs={"axis": 0}, ref=flatten_ref,
           grad=["X"], grad_outputs=OUT, id="flatten2_axis0"),
    OpCase("flatten2", {"X": rand(2, 3)}, attrs={"axis": 2}, ref=flatten_ref,
           grad=["X"], grad_outputs=OUT, id="flatten2_axis_rank"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


@pytest.mark.parametrize("op,attrs", [("reshape2", {"shape": [3, 2]}),
                                      ("transpose2", {"axis": [1, 0]}),
                                      ("squeeze2", {"axes": []}),
                                      ("unsqueeze2", {"axes": [0]}),
                                      ("flatten2", {"axis": 1})])
def test_grad_op_reads_xshape_not_x(op, attrs):
    main, startup = Program(), Program()
    with program_guard(main, startup):
        block = main.global_block()
        x = block.create_var(name="x", shape=(2, 3), dtype="float64", is_data=True,
                             stop_gradient=False)
        out = block.create_var(name="out")
        xshape = block.create_var(name="xshape")
        block.append_op(op, inputs={"X": [x]}, outputs={"Out": [out], "XShape": [xshape]},
                        attrs=attrs)
        assert xshape.shape == (0, 2, 3)
        grads = backward.gradients([out], [x])
    grad_op = next(o for o in block.ops if o.type == op + "_grad")
    assert grad_op.input("XShape") == ["xshape"]
    assert "X" not in grad_op.inputs
    assert grads[0].shape == (2, 3)


def test_shape_layers_emit_the_fluid16_op_types_with_xshape():
    main, startup = Program(), Program()
    with program_guard(main, startup):
        x = fluid.layers.data("x", shape=[2, 6], dtype="float32")
        dim = fluid.layers.fill_constant([1], "int32", 3)
        r = fluid.layers.reshape(x, shape=[-1, dim, 4])
        t = fluid.layers.transpose(r, perm=[0, 2, 1])
        u = fluid.layers.unsqueeze(t, axes=[1])
        s = fluid.layers.squeeze(u, axes=[1])
        f = fluid.layers.flatten(s, axis=1)
    types = [o.type for o in main.global_block().ops]
    assert types == ["fill_constant", "fill_constant", "fill_constant", "reshape2",
                     "transpose2", "unsqueeze2", "squeeze2", "flatten2"]
    reshape_op = main.global_block().ops[3]
    assert reshape_op.attr("shape") == [-1, -1, 4] and len(reshape_op.input("ShapeTensor")) == 3
    # as Fluid: the layer's temporaries are the two constant dims, then Out, then XShape
    assert reshape_op.output("XShape") == ["reshape2_0.tmp_3"]
    assert r.shape == (-1, -1, 4)  # the tensor-given dim is known at run time only
    xv = rand(2, 2, 6).astype("float32")
    got, _ = run_built(main, startup, f, {"x": xv})
    np.testing.assert_allclose(got, xv.reshape(2, 3, 4).transpose(0, 2, 1).reshape(2, 12))


def test_reshape_layer_takes_a_shape_variable():
    main, startup = Program(), Program()
    with program_guard(main, startup):
        x = fluid.layers.data("x", shape=[6], dtype="float32")
        target = fluid.layers.data("t", shape=[3], dtype="int32", append_batch_size=False)
        y = fluid.layers.reshape(x, shape=target)
    assert main.global_block().ops[-1].input("Shape") == ["t"]
    assert y.shape == (-1, -1, -1)
    xv = rand(2, 6).astype("float32")
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=fluid.Scope())
    got = exe.run(main, feed={"x": xv, "t": np.array([3, 2, 2], "int32")}, fetch_list=[y],
                  scope=fluid.Scope())[0]
    np.testing.assert_allclose(got, xv.reshape(3, 2, 2))


@pytest.mark.parametrize("shape,what", [([-1, -1, 5], "only one dimension of shape may be -1"),
                                        ([2, 5, 5, 0], r"shape\[3\] = 0 copies"),
                                        ([-1, -2, 5], r"shape\[1\] = -2 is negative")])
def test_reshape_refuses_fluids_bad_shapes_as_an_assertion_too(shape, what):
    # Fluid 1.6's layer asserts these rules: its callers catch AssertionError
    with program_guard(Program(), Program()):
        x = fluid.layers.data("x", shape=[2, 25], append_batch_size=False, dtype="float32")
        for kind in (ValueError, AssertionError):
            with pytest.raises(kind, match=what):
                fluid.layers.reshape(x, shape=shape)


def test_fill_constant_refuses_an_empty_shape_as_an_assertion_too():
    with program_guard(Program(), Program()):
        for kind in (ValueError, AssertionError):
            with pytest.raises(kind, match="fill_constant: shape must not be empty"):
                fluid.layers.fill_constant(shape=[], dtype="float32", value=1)


@pytest.mark.parametrize("as_list", [False, True])
def test_fill_constant_refuses_a_shape_variable_that_is_not_int(as_list):
    with program_guard(Program(), Program()):
        dim = fluid.data(name="dim", shape=[1], dtype="float32")
        with pytest.raises(TypeError, match="must be int32 or int64, got float32"):
            fluid.layers.fill_constant(shape=[dim, 2] if as_list else dim, dtype="float32",
                                       value=1)


def test_variable_slicing_with_variable_bounds_and_steps_is_a_strided_slice():
    a = np.arange(3 * 4 * 5 * 6, dtype="float32").reshape(3, 4, 5, 6)
    main = Program()
    with program_guard(main, Program()):
        x = fluid.layers.data("x", shape=[3, 4, 5, 6], append_batch_size=False)
        minus_1 = fluid.layers.fill_constant([1], "int32", -1)
        minus_3 = fluid.layers.fill_constant([1], "int32", -3)
        outs = [x[-3:3, 0:100:2, -1:2:-1], x[minus_3:3:1, 0:100:2, :, minus_1:2:minus_1],
                x[minus_1, 0:100:2, :, -1:2:-1]]
        assert [op.type for op in main.global_block().ops].count("strided_slice") == 3
    got = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": a}, fetch_list=outs)
    for g, w in zip(got, [a[-3:3, 0:100:2, -1:2:-1], a[-3:3:1, 0:100:2, :, -1:2:-1],
                          a[-1, 0:100:2, :, -1:2:-1]]):
        np.testing.assert_array_equal(g, w)
