"""Op table: Fluid 1.6's remaining tensor and control-flow helper ops (fill,
fill_zeros_like2, coalesce_tensor, lookup_sparse_table, rnn_memory_helper,
merge_lod_tensor_infer, conditional_block_infer, get_places) against numpy references."""

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.ops import get_op_def
from parafluid.scope import SelectedRows
from parafluid.testing import OpCase, check_op, rand, run_op, run_op_chain


def coalesce_ref(Input, attrs):
    pieces, outs = [], []
    for x in Input:
        n = x.size
        room = -(-n * x.itemsize // 4096) * 4096 // x.itemsize
        if attrs["copy_data"]:
            outs.append(x)
            piece = np.zeros(room, x.dtype)
            piece[:n] = x.reshape(-1)
        else:
            # set_constant fills the whole buffer, the alignment gaps too
            fill = attrs["constant"] if attrs["set_constant"] else 0.0
            outs.append(np.full(x.shape, fill, x.dtype))
            piece = np.full(room, fill, x.dtype)
        pieces.append(piece)
    return {"Output": outs, "FusedOutput": np.concatenate(pieces)}


MASK = np.array([[True], [False], [True], [False]])
IN_T, IN_F = rand(2, 3, seed=3), rand(2, 3, seed=4)


def merge_ref(X, Mask, InTrue, InFalse):
    out = np.zeros((4, 3))
    out[Mask.reshape(-1)] = InTrue
    out[~Mask.reshape(-1)] = InFalse
    return {"Out": out}


CASES = [
    OpCase("fill", {}, attrs={"value": [1.0, 2.5, -3.0, 4.0], "shape": [2, 2],
                              "dtype": "float64"},
           ref=lambda attrs: {"Out": np.array([[1.0, 2.5], [-3.0, 4.0]])}, id="fill-float64"),
    OpCase("fill", {}, attrs={"value": [1.0, 2.7, -3.2], "shape": [3], "dtype": 3},
           ref=lambda attrs: {"Out": np.array([1, 2, -3], "int64")}, id="fill-int64-proto-dtype"),
    OpCase("fill_zeros_like2", {"X": rand(2, 3)}, attrs={"dtype": 5},
           ref=lambda X, attrs: {"Out": np.zeros((2, 3), "float32")}, id="fill_zeros_like2-fp32"),
    OpCase("fill_zeros_like2", {"X": rand(4)}, attrs={"dtype": "int32"},
           ref=lambda X, attrs: {"Out": np.zeros(4, "int32")}, id="fill_zeros_like2-int32"),
    OpCase("coalesce_tensor", {"Input": [rand(3, 4, seed=1), rand(5, seed=2)]},
           attrs={"dtype": "float64", "copy_data": True}, ref=coalesce_ref,
           out_counts={"Output": 2}, id="coalesce-copy"),
    OpCase("coalesce_tensor", {"Input": [rand(600, seed=1), rand(2, 2, seed=2)]},
           attrs={"dtype": 6, "set_constant": True, "constant": 0.5}, ref=coalesce_ref,
           out_counts={"Output": 2}, id="coalesce-constant-over-one-chunk"),
    OpCase("rnn_memory_helper", {"X": rand(3, 2)}, ref=lambda X: {"Out": X}, grad=["X"],
           id="rnn_memory_helper"),
    OpCase("merge_lod_tensor_infer", {"X": rand(4, 3), "Mask": MASK, "InTrue": IN_T,
                                      "InFalse": IN_F},
           ref=merge_ref, id="merge_lod_tensor_infer"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_coalesce_outputs_are_views_of_the_fused_buffer():
    a, b = torch.ones(3), torch.ones(2, 2)
    out = get_op_def("coalesce_tensor").kernel(
        {"Input": [a, b]}, {"dtype": "float32", "copy_data": True, "set_constant": False,
                            "constant": 0.0}, None)
    out["FusedOutput"].zero_()
    assert float(out["Output"][0].sum()) == 0 and float(out["Output"][1].sum()) == 0
    assert out["FusedOutput"].numel() == 2 * 1024  # two 4096-byte float32 regions


def table():
    return SelectedRows(torch.tensor([7, 2]), torch.arange(12, dtype=torch.float32)
                        .reshape(4, 3), height=100)


def test_lookup_sparse_table_grows_the_table_for_new_ids():
    w = table()
    kernel = get_op_def("lookup_sparse_table").kernel
    attrs = {"padding_idx": -1, "auto_grown_table": True, "is_test": False}
    out = kernel({"W": w, "Ids": torch.tensor([[2], [9], [7], [9]])}, attrs, None)["Out"]
    np.testing.assert_array_equal(out.numpy(), np.array([[3, 4, 5], [6, 7, 8], [0, 1, 2],
                                                         [6, 7, 8]], "float32"))
    assert w.rows.tolist() == [7, 2, 9]
    test = kernel({"W": w, "Ids": torch.tensor([5, 9])}, {**attrs, "is_test": True},
                  None)["Out"]
    np.testing.assert_array_equal(test.numpy(), [[0, 0, 0], [6, 7, 8]])
    padded = kernel({"W": w, "Ids": torch.tensor([7])}, {**attrs, "padding_idx": 7},
                    None)["Out"]
    np.testing.assert_array_equal(padded.numpy(), [[0, 0, 0]])
    with pytest.raises(ValueError, match="preallocated rows are all taken"):
        kernel({"W": w, "Ids": torch.tensor([11, 12])}, attrs, None)


def test_lookup_sparse_table_case():
    # the table must be a SelectedRows: checked through the kernel above; the shape rule:
    meta = get_op_def("lookup_sparse_table").infer_shape(
        {"W": fluid.ops.registry.Meta((100, 3), "float32", "selected_rows"),
         "Ids": fluid.ops.registry.Meta((4, 1), "int64")}, {})
    assert meta["Out"].shape == (4, 3)


def test_rnn_memory_helper_grad_without_out_grad_is_zeros():
    x = torch.ones(2, 3)
    got = get_op_def("rnn_memory_helper_grad").kernel({"X": x, "Out@GRAD": None}, {}, None)
    assert torch.equal(got["X@GRAD"], torch.zeros(2, 3))


def test_get_places_lists_the_asked_places():
    out = get_op_def("get_places").kernel({}, {"device_count": 3, "device_type": "CPU"},
                                          None)["Out"]
    assert len(out) == 3 and all(isinstance(p, fluid.CPUPlace) for p in out)
    with pytest.raises(ValueError, match="device_type must be"):
        get_op_def("get_places").kernel({}, {"device_count": 1, "device_type": "TPU"}, None)


def test_conditional_block_infer_runs_its_block_like_conditional_block():
    def build(op_type, flag):
        main = fluid.Program()
        with fluid.program_guard(main, fluid.Program()):
            x = fluid.layers.data("x", [3], dtype="float64", append_batch_size=False)
            cond = fluid.layers.fill_constant([1], "bool", flag)
            out = main.global_block().create_var(name="out", shape=[3], dtype="float64")
            fluid.layers.assign(fluid.layers.fill_constant([3], "float64", -1.0), out)
            sub = main._create_block()
            doubled = fluid.layers.scale(x, 2.0)
            fluid.layers.assign(doubled, out)
            main._rollback()
            main.global_block().append_op(
                op_type, inputs={"Cond": [cond], "Input": [x, out]}, outputs={"Out": [out]},
                attrs={"sub_block": sub, "is_scalar_condition": True})
        return main, out

    x = np.array([1.0, -2.0, 3.0])
    for flag in (True, False):
        want = run_fetch(*build("conditional_block", flag), x)
        got = run_fetch(*build("conditional_block_infer", flag), x)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, 2 * x if flag else -np.ones(3))


def run_fetch(program, out, x):
    exe = fluid.Executor(fluid.CPUPlace())
    return exe.run(program, feed={"x": x}, fetch_list=[out], scope=fluid.Scope())[0]


def test_merge_lod_tensor_infer_equals_merge_lod_tensor():
    ops = [("merge_lod_tensor", {"X": ["x"], "Mask": ["m"], "InTrue": ["t"], "InFalse": ["f"]},
            {"Out": ["out"]}, {})]
    feed = {"x": rand(4, 3), "m": MASK, "t": IN_T, "f": IN_F}
    want, = run_op_chain(ops, feed, ["out"])
    np.testing.assert_array_equal(run_op(CASES[-1])["Out"], want)
    assert get_op_def("merge_lod_tensor_infer").grad is None
