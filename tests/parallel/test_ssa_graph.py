"""Structure of the multi-device SSA graph: replicas, versions, edges, aggregation nodes.

The graph is built, as the ParallelExecutor builds it, from the program after the gradient
aggregation pass (``dp_graph``).
"""

from __future__ import annotations

from typing import Any

import pytest
from dp_models import mlp

import parafluid as fluid
from parafluid import unique_name
from parafluid.engine.graph import ALL_DEVICES, GraphOptions, build_graph
from parafluid.framework import OpRole
from parafluid.passes.grad_aggregation import (
    AggregationOptions,
    aggregate_gradients,
    find_params_grads,
)

GS = fluid.BuildStrategy.GradientScaleStrategy


def dp_graph(main: fluid.Program, ndev: int, loss_name: str | None = None,
             sequential: bool = False, **opts: Any) -> Any:
    """The aggregation pass, then the graph; with the (param, grad) pairs and owners."""
    program = aggregate_gradients(main, AggregationOptions(loss_name=loss_name, nranks=ndev,
                                                           **opts))
    g = build_graph(program, ndev, GraphOptions(sequential=sequential))
    g.program = program
    g.params_grads = [(p, gr) for p, gr, _ in find_params_grads(main)] \
        if loss_name is not None and ndev > 1 else []
    g.owners = {n.op.input("X")[0]: n.attrs["root"] for n in g.nodes
                if n.type == "c_broadcast" and n.op.attrs["op_role"] == OpRole.Optimize}
    return g


def program(loss: str = "mean") -> tuple[fluid.Program, str]:
    with unique_name.guard():
        main, _, cost = mlp(loss=loss)()
    return main, cost.name


def node_of(graph: object, type: str, device: int = 0) -> list:
    return [n for n in graph.nodes if n.type == type and n.device == device]


def test_every_op_is_replicated_once_per_device() -> None:
    main, loss = program()
    g = dp_graph(main, 3, loss)
    ops = g.program.global_block().ops
    local = [i for i, op in enumerate(ops) if not op.type.startswith("c_")]
    assert len(local) == len(main.global_block().ops) + 1  # + the loss-gradient scale
    for d in range(3):
        replicas = [n for n in g.nodes if n.device == d]
        assert [n.op_index for n in replicas] == local
    assert g.count("c_allreduce_sum") == 6  # 3 fc layers x (w, b)
    assert all(n.device == ALL_DEVICES for n in g.nodes if n.type == "c_allreduce_sum")


def test_all_reduce_follows_the_op_producing_each_gradient() -> None:
    main, loss = program()
    g = dp_graph(main, 2, loss)
    ops = g.program.global_block().ops
    for k, node in enumerate(g.nodes):
        if node.type != "c_allreduce_sum":
            continue
        grad = node.inputs["X"][0][1]
        producer = ops[node.op_index - 1]
        while producer.type == "c_allreduce_sum":
            producer = ops[ops.index(producer) - 1]
        assert grad in producer.output_arg_names
        assert grad in producer.attrs["op_role_var"]
        # right after the producer's replicas (or right after another all-reduce of it)
        assert g.nodes[k - 1].op is producer or g.nodes[k - 1].type == "c_allreduce_sum"
        assert {(d, grad) for d, _, _ in node.inputs["X"]} == {(0, grad), (1, grad)}
        producers = {n.index for n in g.nodes if n.op is producer}
        assert producers <= node.deps


def test_versions_and_write_after_read_edges() -> None:
    main, loss = program()
    g = dp_graph(main, 2, loss)
    sgd = node_of(g, "sgd", 1)[0]
    param = sgd.inputs["Param"][0]
    assert param[2] == 0 and sgd.outputs["ParamOut"][0] == (1, param[1], 1)
    readers = [n for n in g.nodes if n is not sgd and any(
        ref == param for refs in n.inputs.values() for ref in refs)]
    assert readers, "the forward mul and the backward mul_grad read the parameter"
    for r in readers:
        assert r.index in sgd.deps, f"{r} must run before the in-place update"
    grad = sgd.inputs["Grad"][0]
    assert grad[2] == 2, "version 1 from mul_grad, version 2 from the all-reduce"


def test_edges_point_backwards_so_node_order_is_topological() -> None:
    main, loss = program()
    g = dp_graph(main, 4, loss, fuse_all_reduce=True)
    for node in g.nodes:
        assert all(dep < node.index for dep in node.deps)


@pytest.mark.parametrize("scale,value", [(GS.CoeffNumDevice, 0.25), (GS.One, 1.0),
                                         (GS.Customized, None)])
def test_scale_loss_grad(scale: GS, value: float | None) -> None:
    main, loss = program()
    g = dp_graph(main, 4, loss, scale=scale)
    role = OpRole.Backward | OpRole.Loss
    fills = [n for n in g.nodes if n.type == "fill_constant" and n.attrs["op_role"] == role]
    scales = [n for n in g.nodes if n.type == "scale" and n.attrs["op_role"] == role]
    if value is None:
        assert not fills and not scales
        assert all(loss + "@GRAD" in reads for reads in g.reads0), "fed by the user"
    else:
        assert len(fills) == 4 and all(n.attrs["value"] == 1.0 for n in fills)
        assert len(scales) == (4 if value != 1.0 else 0)
        assert all(n.attrs["scale"] == value for n in scales)
        assert all(n.outputs["Out"][0][1] == loss + "@GRAD" for n in scales)
    assert main.global_block().ops[[op.type for op in main.global_block().ops]
                                   .index("fill_constant")].attrs["value"] == 1.0


def test_no_loss_name_means_no_aggregation() -> None:
    main, _ = program()
    g = dp_graph(main, 2)
    assert not g.params_grads and g.count("c_allreduce_sum") == 0
    assert all(n.kind == "compute" for n in g.nodes)


def test_reduce_mode_owners_are_greedy_balanced() -> None:
    main, loss = program()
    g = dp_graph(main, 2, loss, reduce=True)
    block = main.global_block()
    sizes = {p.name: p.shape[0] * (p.shape[1] if len(p.shape) > 1 else 1)
             for p in block.all_parameters()}
    load = [0, 0]
    for p, _ in g.params_grads:  # in the order gradients are produced
        expect = min((0, 1), key=lambda d: (load[d], d))
        assert g.owners[p] == expect
        load[expect] += sizes[p]
    assert g.count("c_reduce_sum") == 6 and g.count("c_broadcast") == 6
    assert g.count("c_allreduce_sum") == 0
    for node in g.nodes:
        if node.type == "sgd":
            assert node.device == g.owners[node.inputs["Param"][0][1]], "owner-only update"
        if node.type == "c_broadcast":
            p = node.inputs["X"][0][1]
            root = g.owners[p]
            assert node.inputs["X"][0][0] == root
            assert [d for d, _, _ in node.outputs["Out"]] == [1 - root]


def test_reduce_mode_with_one_device_is_plain() -> None:
    main, loss = program()
    g = dp_graph(main, 1, loss, reduce=True)
    assert not any(n.kind == "collective" for n in g.nodes)
    assert len(g.nodes) == len(main.global_block().ops)


def test_fused_all_reduce_groups_gradients_up_to_a_cap() -> None:
    main, loss = program()
    g = dp_graph(main, 2, loss, fuse_all_reduce=True)
    fused = [n for n in g.nodes if n.type == "c_allreduce_coalesced"]
    assert len(fused) == 1 and fused[0].attrs["nvars"] == 6
    assert g.count("c_allreduce_sum") == 0
    # the group waits for its last gradient: it follows every gradient producer
    for _, grad in g.params_grads:
        producers = [n.index for n in g.nodes
                     if grad in n.op.output_arg_names and n.device != ALL_DEVICES]
        assert all(p < fused[0].index for p in producers)
    capped = dp_graph(main, 2, loss, fuse_all_reduce=True, fuse_cap_bytes=16 * 16 * 4)
    sizes = [n.attrs["nvars"] for n in capped.nodes if n.type == "c_allreduce_coalesced"]
    assert sum(sizes) == 6 and len(sizes) > 1


def test_collectives_are_chained_in_program_order() -> None:
    main, loss = program()
    g = dp_graph(main, 2, loss)
    comm = [n for n in g.nodes if n.kind == "collective"]
    for prev, node in zip(comm, comm[1:]):
        assert prev.index in node.deps


def test_sequential_execution_chains_each_device() -> None:
    main, loss = program()
    g = dp_graph(main, 2, loss, sequential=True)
    last = {0: None, 1: None}
    for node in g.nodes:
        for d in ((0, 1) if node.device == ALL_DEVICES else (node.device,)):
            if last[d] is not None:
                assert last[d] in node.deps
            last[d] = node.index


def test_graph_prints_one_node_a_line() -> None:
    main, loss = program()
    text = str(dp_graph(main, 2, loss))
    lines = text.splitlines()
    assert lines[0].startswith("#0 dev0 {Out=[fc_0.tmp_0@0#1]} = mul(X=[x@0#0], "
                               "Y=[fc_0.w_0@0#0])")
    assert any("all {Out=[fc_2.b_0@GRAD@0#2, fc_2.b_0@GRAD@1#2]} = c_allreduce_sum("
               "X=[fc_2.b_0@GRAD@0#1, fc_2.b_0@GRAD@1#1])" in line for line in lines)


def test_op_without_outputs_prints_a_dummy() -> None:
    from parafluid.engine.graph import _Builder

    main, _ = program()
    block = main.global_block()
    op = block._make_op("c_broadcast", {"X": ["fc_0.w_0"]}, {"Out": ["fc_0.w_0"]},
                        {"root": 0}, infer=False)
    b = _Builder(1)
    node = b.add(op, 0, {"X": [(0, "w")]}, {"Out": []}, ALL_DEVICES, True)
    assert node.dummy == (0, "@DUMMY@0", 1)
    assert "{@DUMMY@=[@DUMMY@0@0#1]} = c_broadcast(X=[w@0#0])" in node.to_string()


def test_unknown_loss_name_is_an_error() -> None:
    main, _ = program()
    with pytest.raises(ValueError, match="loss_name 'nope' is not a variable"):
        dp_graph(main, 2, "nope")
