"""What the engine and the passes know of an op is declared in its registration row: LoD
sharing (``share_lod``), the in-place form (``inplace``), fresh outputs (``fresh_output``)
and communication (``comm``). New ops declare them the same way and get the same
treatment; no table outside the rows names op types."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.engine.graph import build_graph
from parafluid.engine.inplace import plan_inplace
from parafluid.ops.registry import get_op_def, register_op, registered_ops, same_as
from parafluid.profiler import is_comm_op
from parafluid.testing import run_layers


def _double(ins: dict, attrs: dict, ctx: Any) -> dict:
    return {"Out": ins["X"] * 2.0}


def _concat(ins: dict, attrs: dict, ctx: Any) -> dict:
    return {"Out": torch.cat(list(ins["X"]), dim=1)}


def _two(ins: dict, attrs: dict, ctx: Any) -> dict:
    return {"Out": ins["X"] + 1.0, "Aux": ins["X"] - 1.0}


register_op("oprow_test_double", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"),
            kernel=_double, share_lod=("X", "Out"))
register_op("oprow_test_double_no_lod", inputs=("X",), outputs=("Out",),
            infer_shape=same_as("X"), kernel=_double)
register_op("oprow_test_concat", inputs=("X[]",), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": ins["X"][0]._replace(
                shape=(ins["X"][0].shape[0], sum(m.shape[1] for m in ins["X"])))},
            kernel=_concat, share_lod=("X", "Out"))
register_op("oprow_test_two", inputs=("X",), outputs=("Out", "Aux"),
            infer_shape=lambda ins, attrs: {"Out": ins["X"], "Aux": ins["X"]}, kernel=_two,
            share_lod=("X", ("Out",)))
# an op with an in-place form, and a producer whose output is always a new tensor
register_op("oprow_test_neg", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"),
            kernel=lambda ins, attrs, ctx: {"Out": torch.neg(ins["X"])},
            inplace=lambda x, y, attrs: x.neg_())
register_op("oprow_test_fresh", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"),
            kernel=_double, fresh_output=True)


def _append(op_type: str, inputs: dict[str, list[Any]], outs: tuple[str, ...] = ("Out",)
            ) -> list[Any]:
    block = fluid.default_main_program().global_block()
    made = [block.create_var(name=fluid.unique_name.generate(op_type), dtype="float32")
            for _ in outs]
    block.append_op(op_type, inputs=inputs, outputs={s: [v] for s, v in zip(outs, made)})
    return made


_SEQ = fluid.create_lod_tensor(np.arange(10, dtype="float32").reshape(5, 2), [[2, 3]],
                               fluid.CPUPlace())
_ROWS = np.arange(10, dtype="float32").reshape(5, 2)


def _pooled(rows: np.ndarray) -> np.ndarray:
    return np.stack([rows[:2].sum(0), rows[2:].sum(0)])


def test_a_row_that_shares_lod_hands_it_on_and_one_that_does_not_keeps_it() -> None:
    def build(op_type: str) -> Any:
        def go() -> list[Any]:
            xs = fluid.layers.data(name="xs", shape=[2], dtype="float32", lod_level=1)
            out, = _append(op_type, {"X": [xs]})
            return [fluid.layers.sequence_pool(out, "sum")]
        return go

    pooled, = run_layers(build("oprow_test_double"), {"xs": _SEQ})
    np.testing.assert_array_equal(pooled, _pooled(_ROWS * 2.0))
    with pytest.raises(fluid.OpRunError, match="sequence_pool.*create_lod_tensor"):
        run_layers(build("oprow_test_double_no_lod"), {"xs": _SEQ})


def test_lod_sharing_from_a_list_slot_and_to_chosen_outputs_of_several() -> None:
    def build() -> list[Any]:
        xs = fluid.layers.data(name="xs", shape=[2], dtype="float32", lod_level=1)
        cat, = _append("oprow_test_concat", {"X": [xs, xs]})
        out, aux = _append("oprow_test_two", {"X": [xs]}, ("Out", "Aux"))
        return [fluid.layers.sequence_pool(cat, "sum"), fluid.layers.sequence_pool(out, "sum"),
                aux]

    cat, out, aux = run_layers(build, {"xs": _SEQ})
    np.testing.assert_array_equal(cat, _pooled(np.concatenate([_ROWS, _ROWS], axis=1)))
    np.testing.assert_array_equal(out, _pooled(_ROWS + 1.0))
    np.testing.assert_array_equal(aux, _ROWS - 1.0)

    def aux_pooled() -> list[Any]:
        xs = fluid.layers.data(name="xs", shape=[2], dtype="float32", lod_level=1)
        _, aux = _append("oprow_test_two", {"X": [xs]}, ("Out", "Aux"))
        return [fluid.layers.sequence_pool(aux, "sum")]

    with pytest.raises(fluid.OpRunError, match="create_lod_tensor"):
        run_layers(aux_pooled, {"xs": _SEQ})  # Aux is not in the row's outputs


def test_every_activation_hands_its_lod_on_as_fluid_does() -> None:
    for name in ("relu", "atan", "softshrink", "rsqrt"):
        assert get_op_def(name).share_lod == ("X", ("Out",)), name


def test_a_share_lod_row_naming_unknown_slots_is_refused() -> None:
    with pytest.raises(ValueError, match="'oprow_test_bad': share_lod=\\('Y', \\('Out',\\)\\) "
                                         "must name an input slot"):
        register_op("oprow_test_bad", inputs=("X",), outputs=("Out",), kernel=_double,
                    share_lod=("Y", "Out"))
    with pytest.raises(ValueError, match="inplace= needs inputs X \\(and Y\\) and the one "
                                         "output Out"):
        register_op("oprow_test_bad2", inputs=("X",), outputs=("Out", "Aux"), kernel=_two,
                    inplace=lambda x, y, attrs: None)


def _inplace_nodes(producer: str) -> tuple[list[str], dict[int, Any]]:
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        t, = _append(producer, {"X": [x]})
        out, = _append("oprow_test_neg", {"X": [t]})
        fluid.layers.mean(out)
    graph = build_graph(main, 1)
    plan = plan_inplace(graph, main.global_block(), {"x"}, set(), [torch.device("cpu")])
    return [graph.nodes[i].type for i in plan], plan


def test_the_inplace_planner_reads_the_rows() -> None:
    assert _inplace_nodes("oprow_test_fresh")[0] == ["oprow_test_neg"]
    # the producer's row does not promise a fresh tensor: its output may be a view
    assert _inplace_nodes("oprow_test_double_no_lod")[0] == []
    for name in ("relu", "sigmoid", "tanh", "scale", "elementwise_add", "elementwise_sub",
                 "elementwise_mul", "elementwise_div"):
        assert get_op_def(name).inplace is not None, name
    for name in ("mul", "matmul", "relu", "conv2d", "pool2d", "batch_norm", "softmax",
                 "fused_elemwise_activation", "elementwise_add"):
        assert get_op_def(name).fresh_output, name


def test_an_op_run_in_place_computes_what_its_kernel_computes(monkeypatch) -> None:
    monkeypatch.setenv("CPU_NUM", "1")
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    t, = _append("oprow_test_fresh", {"X": [x]})
    out, = _append("oprow_test_neg", {"X": [t]})  # runs in place: t dies here
    loss = fluid.layers.mean(out)
    bs = fluid.BuildStrategy()
    bs.enable_inplace = True
    pe = fluid.ParallelExecutor(False, build_strategy=bs)
    feed = {"x": np.arange(6, dtype="float32").reshape(2, 3)}
    got, = pe.run([loss], feed=feed)
    np.testing.assert_array_equal(np.ravel(got), [np.mean(-2.0 * feed["x"])])
    plan = next(iter(pe._plans.values()))
    assert plan.inplace_nodes


def test_communication_is_what_the_rows_declare() -> None:
    comm = {t for t in registered_ops() if get_op_def(t).comm}
    assert comm == {"c_allreduce_sum", "c_reduce_sum", "c_broadcast", "c_allreduce_coalesced",
                    "c_dgc_allreduce",
                    "gen_nccl_id", "send", "recv", "send_barrier", "fetch_barrier",
                    "listen_and_serv", "distributed_lookup_table", "node_send", "node_recv",
                    "memcpy", "c_allreduce_max", "c_allreduce_min", "c_allreduce_prod",
                    "c_allgather", "c_reducescatter", "c_sync_calc_stream",
                    "c_sync_comm_stream", "allreduce", "broadcast"}
    assert all(is_comm_op(t) for t in comm)
    assert not is_comm_op("relu") and not is_comm_op("no_such_op")


def test_the_run_context_has_no_transport() -> None:
    from parafluid.engine.plan import RunServices
    from parafluid.engine.runtime import RunContext

    assert not hasattr(RunServices(), "transport")
    assert not hasattr(RunContext, "transport")
