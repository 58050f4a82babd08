"""Structure of the multi-device SSA graph: replicas, versions, edges, aggregation nodes."""

from __future__ import annotations

import pytest
from dp_models import mlp

import parafluid as fluid
from parafluid import unique_name
from parafluid.parallel.ssa_graph import ALL_DEVICES, GraphOptions, build_graph

GS = fluid.BuildStrategy.GradientScaleStrategy


def program(loss: str = "mean") -> tuple[fluid.Program, str]:
    with unique_name.guard():
        main, _, cost = mlp(loss=loss)()
    return main, cost.name


def node_of(graph: object, type: str, device: int = 0) -> list:
    return [n for n in graph.nodes if n.type == type and n.device == device]


def test_every_op_is_replicated_once_per_device() -> None:
    main, loss = program()
    ops = main.global_block().ops
    g = build_graph(main, 3, GraphOptions(loss_name=loss))
    for d in range(3):
        replicas = [n for n in g.nodes if n.device == d]
        assert [n.op_index for n in replicas] == list(range(len(ops)))
    assert g.count("c_allreduce_sum") == 6  # 3 fc layers x (w, b)
    assert all(n.device == ALL_DEVICES for n in g.nodes if n.type == "c_allreduce_sum")


def test_all_reduce_follows_the_op_producing_each_gradient() -> None:
    main, loss = program()
    ops = main.global_block().ops
    g = build_graph(main, 2, GraphOptions(loss_name=loss))
    for k, node in enumerate(g.nodes):
        if node.type != "c_allreduce_sum":
            continue
        grad = node.inputs["X"][0][1]
        producer = ops[node.op_index]
        assert grad in producer.output_arg_names
        assert grad in producer.attrs["op_role_var"]
        # right after the producer's replicas (or right after another all-reduce of it)
        assert g.nodes[k - 1].op_index == node.op_index
        assert {(d, grad) for d, _, _ in node.inputs["X"]} == {(0, grad), (1, grad)}
        producers = {n.index for n in g.nodes if n.op is producer}
        assert producers <= node.deps


def test_versions_and_write_after_read_edges() -> None:
    main, loss = program()
    g = build_graph(main, 2, GraphOptions(loss_name=loss))
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
    g = build_graph(main, 4, GraphOptions(loss_name=loss, fuse_all_reduce=True))
    for node in g.nodes:
        assert all(dep < node.index for dep in node.deps)


@pytest.mark.parametrize("scale,value", [(GS.CoeffNumDevice, 0.25), (GS.One, 1.0),
                                         (GS.Customized, None)])
def test_scale_loss_grad(scale: GS, value: float | None) -> None:
    main, loss = program()
    g = build_graph(main, 4, GraphOptions(loss_name=loss, scale=scale))
    fills = [n for n in g.nodes if n.kind == "scale_loss_grad"]
    if value is None:
        assert not fills
        assert all(loss + "@GRAD" in reads for reads in g.reads0), "fed by the user"
    else:
        assert len(fills) == 4 and all(n.attrs["value"] == value for n in fills)
    assert main.global_block().ops[[op.type for op in main.global_block().ops]
                                   .index("fill_constant")].attrs["value"] == 1.0


def test_no_loss_name_means_no_aggregation() -> None:
    main, _ = program()
    g = build_graph(main, 2, GraphOptions())
    assert not g.params_grads and g.count("c_allreduce_sum") == 0
    assert all(n.kind == "compute" for n in g.nodes)


def test_reduce_mode_owners_are_greedy_balanced() -> None:
    main, loss = program()
    g = build_graph(main, 2, GraphOptions(loss_name=loss, reduce=True))
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
    g = build_graph(main, 1, GraphOptions(loss_name=loss, reduce=True))
    assert not any(n.kind == "collective" for n in g.nodes)
    assert len(g.nodes) == len(main.global_block().ops)


def test_fused_all_reduce_groups_gradients_up_to_a_cap() -> None:
    main, loss = program()
    g = build_graph(main, 2, GraphOptions(loss_name=loss, fuse_all_reduce=True))
    fused = [n for n in g.nodes if n.type == "c_allreduce_coalesced"]
    assert len(fused) == 1 and fused[0].attrs["nvars"] == 6
    assert g.count("c_allreduce_sum") == 0
    # the group waits for its last gradient: it follows every gradient producer
    for _, grad in g.params_grads:
        producers = [n.index for n in g.nodes if n.op is not None
                     and grad in n.op.output_arg_names and n.device != ALL_DEVICES]
        assert all(p < fused[0].index for p in producers)
    capped = build_graph(main, 2, GraphOptions(loss_name=loss, fuse_all_reduce=True,
                                               fuse_cap_bytes=16 * 16 * 4))
    sizes = [n.attrs["nvars"] for n in capped.nodes if n.type == "c_allreduce_coalesced"]
    assert sum(sizes) == 6 and len(sizes) > 1


def test_collectives_are_chained_in_program_order() -> None:
    main, loss = program()
    g = build_graph(main, 2, GraphOptions(loss_name=loss))
    comm = [n for n in g.nodes if n.kind == "collective"]
    for prev, node in zip(comm, comm[1:]):
        assert prev.index in node.deps


def test_sequential_execution_chains_each_device() -> None:
    main, loss = program()
    g = build_graph(main, 2, GraphOptions(loss_name=loss, sequential=True))
    last = {0: None, 1: None}
    for node in g.nodes:
        for d in ((0, 1) if node.device == ALL_DEVICES else (node.device,)):
            if last[d] is not None:
                assert last[d] in node.deps
            last[d] = node.index


def test_graph_prints_one_node_a_line() -> None:
    main, loss = program()
    text = str(build_graph(main, 2, GraphOptions(loss_name=loss)))
    lines = text.splitlines()
    assert lines[0].startswith("#0 dev0 {Out=[fc_0.tmp_0@0#1]} = mul(X=[x@0#0], "
                               "Y=[fc_0.w_0@0#0])")
    assert any("all {Out=[fc_2.b_0@GRAD@0#2, fc_2.b_0@GRAD@1#2]} = c_allreduce_sum("
               "X=[fc_2.b_0@GRAD@0#1, fc_2.b_0@GRAD@1#1])" in line for line in lines)


def test_op_without_outputs_prints_a_dummy() -> None:
    from parafluid.parallel.ssa_graph import _Builder

    b = _Builder(1)
    node = b.add("c_broadcast", {"root": 0}, {"X": [(0, "w")]}, {"Out": []}, ALL_DEVICES,
                 None, 0, "collective")
    assert node.dummy == (0, "@DUMMY@0", 1)
    assert "{@DUMMY@=[@DUMMY@0@0#1]} = c_broadcast(X=[w@0#0])" in node.to_string()


def test_unknown_loss_name_is_an_error() -> None:
    main, _ = program()
    with pytest.raises(ValueError, match="loss_name 'nope' is not a variable"):
        build_graph(main, 2, GraphOptions(loss_name="nope"))
