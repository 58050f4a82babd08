"""Op table: embeddings and ids (lookup_table / lookup_table_v2, hash, shard_index, cvm); the
embedding layer's sparse update and padding_idx."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_op


def lookup_ref(W, Ids, attrs):
    flat = Ids.reshape(-1)
    out = W[flat].copy()
    if attrs["padding_idx"] != -1:
        out[flat == attrs["padding_idx"]] = 0
    shape = Ids.shape[:-1] if Ids.ndim > 1 and Ids.shape[-1] == 1 else Ids.shape
    return {"Out": out.reshape(*shape, W.shape[1])}


def _embedding_program(is_sparse, padding_idx=None):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(ids, size=[6, 3], is_sparse=is_sparse,
                                     padding_idx=padding_idx,
                                     param_attr=fluid.ParamAttr(name="emb_w"))
        loss = fluid.layers.mean(emb)
        fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, loss


CVM_X = np.abs(rand(3, 4, seed=6)) * 5

CVM_IN = np.abs(rand(3, 2, seed=7))

CASES = [
    OpCase("shard_index", {"X": np.array([[1], [6], [12], [19]], "int64")},
           attrs={"index_num": 20, "nshards": 2, "shard_id": 0},
           ref=lambda X: {"Out": np.array([[1], [6], [-1], [-1]])}),
    OpCase("lookup_table", {"W": rand(5, 3), "Ids": np.array([[1], [3], [1], [0]], "int64")},
           ref=lookup_ref, grad=["W"]),
    OpCase("lookup_table", {"W": rand(5, 3), "Ids": np.array([4, 2, 4], "int64")},
           attrs={"padding_idx": 2}, ref=lookup_ref, grad=["W"], id="lookup_table_1d_padding"),
    OpCase("lookup_table", {"W": rand(6, 2), "Ids": np.array([[[1], [5]], [[1], [0]]], "int64")},
           attrs={"is_sparse": True}, ref=lookup_ref, grad=["W"], id="lookup_table_sparse"),
    OpCase("lookup_table_v2", {"W": rand(5, 3), "Ids": np.array([[1], [3], [1], [0]], "int64")},
           ref=lambda W, Ids: {"Out": W[Ids]}, grad=["W"]),  # keeps the trailing 1: [4, 1, 3]
    OpCase("lookup_table_v2", {"W": rand(5, 3), "Ids": np.array([4, 2, 4], "int64")},
           attrs={"padding_idx": 2, "is_sparse": True},
           ref=lambda W, Ids: {"Out": np.where((Ids == 2)[:, None], 0.0, W[Ids])}, grad=["W"],
           id="lookup_table_v2_sparse_padding"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


@pytest.mark.parametrize("data,seed,want", [
    # reference values of the xxHash library (XXH64)
    (b"", 0, 0xEF46DB3751D8E999),
    (b"abc", 0, 0x44BC2CF5AD770999),
    (bytes(range(40)), 0, 17715543491017654761),
    (bytes(range(101)), 7, 16751395520403760378),
])
def test_xxh64_matches_the_reference(data, seed, want):
    from parafluid.ops.embedding import xxh64

    assert xxh64(data, seed) == want


def test_hash_op_hashes_int32_rows_with_one_seed_per_hash():
    rows = np.array([[1, 2, 3], [7, 7, 7], [1, 2, 3]], "int32")
    case = OpCase("hash", {"X": rows}, attrs={"num_hash": 2, "mod_by": 1000},
                  ref=lambda X: {"Out": np.array([[756, 228], [208, 658], [756, 228]])[..., None]})
    check_op(case)


@pytest.mark.parametrize("use_cvm", [True, False])
def test_cvm_forward_and_fluid_gradient_rule(use_cvm):
    show = np.log(CVM_X[:, :1] + 1)
    want = np.concatenate([show, np.log(CVM_X[:, 1:2] + 1) - show, CVM_X[:, 2:]], 1) \
        if use_cvm else CVM_X[:, 2:]
    check_op(OpCase("cvm", {"X": CVM_X, "CVM": CVM_IN}, attrs={"use_cvm": use_cvm},
                    ref=lambda X, CVM: {"Y": want}))
    dy = rand(*want.shape, seed=8)
    grad = run_op(OpCase("cvm_grad", {"X": CVM_X, "CVM": CVM_IN, "Y@GRAD": dy},
                         attrs={"use_cvm": use_cvm}, outputs=["X@GRAD"]))["X@GRAD"]
    np.testing.assert_allclose(grad[:, :2], CVM_IN)
    np.testing.assert_allclose(grad[:, 2:], dy[:, 2:] if use_cvm else dy)


@pytest.mark.parametrize("is_sparse", [False, True])
def test_embedding_sgd_updates_only_looked_up_rows(is_sparse):
    main, startup, loss = _embedding_program(is_sparse, padding_idx=4)
    grad_var = main.global_block().var("emb_w@GRAD")
    assert grad_var.type == ("selected_rows" if is_sparse else "lod_tensor")
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    before = np.array(scope.find_var("emb_w").get_tensor())
    ids = np.array([[1], [3], [1], [4]], "int64")
    exe.run(main, feed={"ids": ids}, fetch_list=[loss], scope=scope)
    after = np.array(scope.find_var("emb_w").get_tensor())
    # mean over 4x3 outputs: each looked-up element has gradient 1/12; row 1 is used twice
    # and row 4 is the padding row (zero gradient).
    expected = before.copy()
    expected[1] -= 0.5 * 2 / 12
    expected[3] -= 0.5 / 12
    np.testing.assert_allclose(after, expected, rtol=1e-6)


def test_embedding_negative_padding_idx_counts_from_the_end():
    main, _, _ = _embedding_program(False, padding_idx=-1)
    op = next(op for op in main.global_block().ops if op.type == "lookup_table")
    assert op.attr("padding_idx") == 5


def test_lookup_table_id_out_of_range():
    case = OpCase("lookup_table", {"W": rand(4, 2), "Ids": np.array([[1], [4]], "int64")})
    with pytest.raises(fluid.OpRunError, match="id 4 is out of range for a table of 4 rows"):
        run_op(case)
