"""The programs pserver mode writes, read the way Fluid 1.6's own transpiler tests read them:
op types in order on the trainer and on each pserver block, the attributes the transpiler
leaves on the trainer program and on itself.

Building programs only (nothing runs, no port is bound); tests/distributed/test_pserver_mode.py
trains with them and compares against one process.
"""

from __future__ import annotations

import math

import pytest

import parafluid as fluid

EP1, EP2 = "127.0.0.1:6174", "127.0.0.1:6175"


def _fc_net(optimizer=None, param_attr=None):
    x = fluid.layers.data(name="x", shape=[1000], dtype="float32")
    y_predict = fluid.layers.fc(input=x, size=1000, act=None,
                                param_attr=param_attr or fluid.ParamAttr(name="fc_w"),
                                bias_attr=fluid.ParamAttr(name="fc_b"))
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    cost = fluid.layers.square_error_cost(input=y_predict, label=y)
    avg_cost = fluid.layers.mean(cost)
    (optimizer or fluid.optimizer.SGD(learning_rate=0.1)).minimize(avg_cost)


def _table_net(is_distributed):
    def emb_pool(ids):
        emb = fluid.layers.embedding(input=ids, size=[1000, 64], dtype="float32",
                                     param_attr="shared_w", is_sparse=True,
                                     is_distributed=is_distributed)
        return fluid.layers.sequence_pool(input=emb, pool_type="average")

    title_ids = fluid.layers.data(name="title_ids", shape=[1], dtype="int64", lod_level=1)
    brand_ids = fluid.layers.data(name="brand_ids", shape=[1], dtype="int64", lod_level=1)
    fc0 = fluid.layers.concat(input=[emb_pool(title_ids), emb_pool(brand_ids)], axis=1)
    predict = fluid.layers.fc(input=fc0, size=2, act=None,
                              param_attr=fluid.ParamAttr(name="fc_w"),
                              bias_attr=fluid.ParamAttr(name="fc_b"))
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    cost = fluid.layers.cross_entropy(input=predict, label=label)
    fluid.optimizer.Adam(learning_rate=0.003).minimize(fluid.layers.mean(cost))


def _transpile(net, config=None, sync_mode=True, trainer_id=0):
    """As Fluid's TranspilerTest: a main program with random_seed 1 built in a fresh name
    scope, transpiled for 2 trainers and 2 pservers; returns the transpiler, the original
    program, the trainer's (main, startup) and the pservers' (main, startup) pairs."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        main.random_seed = 1
        net()
        origin = main.clone()
        t = fluid.DistributeTranspiler(config=config)
        t.transpile(trainer_id, program=main, pservers=f"{EP1},{EP2}", trainers=2,
                    sync_mode=sync_mode)
        pservers = [(t.get_pserver_program(ep), t.get_startup_program(ep)) for ep in (EP1, EP2)]
        trainer = t.get_trainer_program(wait_port=False)
    return t, origin, (trainer, startup), pservers


def _types(block):
    return [op.type for op in block.ops]


def _params_on_pservers(pservers):
    found = set()
    for prog, _ in pservers:
        for blk in prog.blocks:
            for op in blk.ops:
                if "Param" in op.input_names:
                    found.add(op.input("Param")[0].split(".block")[0])
    return found


def test_basic_model_trainer_and_pserver_programs_have_fluids_ops():
    t, origin, (trainer, startup), pservers = _transpile(_fc_net)
    (pserver, pstartup), _ = pservers
    svars = startup.global_block().vars
    assert {"fc_w.block0", "fc_w.block1", "fc_w", "fc_b"} <= set(svars)
    assert "fc_w@GRAD" not in svars and "fc_b@GRAD" not in svars
    assert _types(startup.global_block()) == ["fill_constant", "fill_constant", "uniform_random",
                                              "recv", "recv", "fetch_barrier", "concat"]
    assert _types(trainer.global_block()) == [
        "mul", "elementwise_add", "elementwise_sub", "square", "mean",
        "fill_constant", "mean_grad", "square_grad", "elementwise_sub_grad",
        "elementwise_add_grad", "send", "mul_grad", "split_byref", "send",
        "send_barrier", "recv", "recv", "fetch_barrier", "concat"]
    assert len(pserver.blocks) == 3
    assert _types(pserver.blocks[0]) == ["listen_and_serv"]
    assert _types(pserver.blocks[1]) == ["sum", "scale", "sgd"]
    assert _types(pstartup.global_block()) == ["fill_constant", "fill_constant",
                                               "uniform_random"]
    assert pstartup.global_block().var("fc_w.block1").shape == (500, 1000)
    want = {op.input("Param")[0] for op in origin.global_block().ops if "Param" in op.input_names}
    assert _params_on_pservers(pservers) == want == {"fc_w", "fc_b"}


def test_large_block_size_sends_whole_gradients_without_split_or_concat():
    config = fluid.DistributeTranspilerConfig()
    config.min_block_size = 1048576
    _, _, (trainer, _), [(pserver, pstartup), (_, pstartup2)] = _transpile(_fc_net, config)
    assert _types(trainer.global_block()) == [
        "mul", "elementwise_add", "elementwise_sub", "square", "mean",
        "fill_constant", "mean_grad", "square_grad", "elementwise_sub_grad",
        "elementwise_add_grad", "send", "mul_grad", "send", "send_barrier",
        "recv", "recv", "fetch_barrier"]
    assert len(pserver.blocks) == 2
    assert _types(pserver.blocks[0]) == ["listen_and_serv"]
    assert _types(pserver.blocks[1]) == ["sum", "scale", "sgd"]
    assert _types(pstartup.global_block()) == ["fill_constant", "fill_constant"]
    assert pstartup2.global_block().var("fc_w").shape == (1000, 1000)


def test_no_slice_var_keeps_the_whole_parameter_on_one_pserver():
    config = fluid.DistributeTranspilerConfig()
    config.slice_var_up = False
    _, _, _, [(_, s1), (_, s2)] = _transpile(_fc_net, config)
    holder = s1 if "fc_w" in s1.global_block().vars else s2
    assert holder.global_block().vars["fc_w"].shape == (1000, 1000)


def test_rmsprop_state_is_sliced_like_its_parameter():
    opt = lambda: fluid.optimizer.RMSProp(learning_rate=0.1)  # noqa: E731
    _, _, _, [(pserver, pstartup), _] = _transpile(lambda: _fc_net(opt()))
    assert len(pserver.blocks) == 3
    assert _types(pserver.blocks[1]) == ["sum", "scale", "rmsprop"]
    assert pstartup.global_block().var("fc_w.block1").shape == (500, 1000)
    # the state of the sliced parameter is sliced with it (named for its block)
    gb = pstartup.global_block()
    assert gb.var("fc_w_momentum_0.block1").shape == (500, 1000)
    assert gb.var("fc_w_mean_square_0.block1").shape == (500, 1000)
    assert gb.var("fc_b_momentum_0").shape == (1000,)


def test_async_mode_has_no_barriers_and_no_averaging():
    _, _, (trainer, _), [(pserver, _), _] = _transpile(_fc_net, sync_mode=False)
    types = _types(trainer.global_block())
    assert "send_barrier" not in types and "fetch_barrier" not in types
    assert types[-3:] == ["recv", "recv", "concat"]
    assert _types(pserver.blocks[1]) == ["sgd"]


def test_trainer_program_carries_fluids_distributed_marks():
    t, origin, (trainer, _), _ = _transpile(lambda: _table_net(True))
    assert not origin._is_distributed and origin._parameters_on_pservers is None
    assert trainer._is_distributed and trainer._is_chief
    assert trainer._distributed_lookup_table == "shared_w"
    assert trainer._endpoints == [EP1, EP2]
    assert t.has_distributed_lookup_table and t.table_name == "shared_w"
    t1, _, (trainer1, _), _ = _transpile(lambda: _table_net(True), trainer_id=1)
    assert trainer1._is_distributed and not trainer1._is_chief


def test_no_distributed_table_is_marked_as_none():
    t, _, (trainer, _), _ = _transpile(lambda: _table_net(False))
    assert not t.has_distributed_lookup_table and t.table_name is None
    assert trainer._distributed_lookup_table is None


def test_distributed_table_slices_have_ceil_rows_per_pserver():
    t, _, (trainer, _), pservers = _transpile(lambda: _table_net(True))
    # each pserver holds its shard under the table's own name, as Fluid's
    for (pserver, _), rows in zip(pservers, (500, 500)):
        assert pserver.global_block().vars[t.table_name].shape == (rows, 64)
    assert rows == math.ceil(1000 / 2)
    lookup = next(op for op in trainer.global_block().ops
                  if op.type == "distributed_lookup_table")
    assert lookup.attr("table_names") == ["shared_w", "shared_w"]
    assert lookup.attr("epmap") == [EP1, EP2] and lookup.attr("height_sections") == [500, 500]


def test_parameters_on_pservers_say_where_each_block_lives():
    _, _, (trainer, _), pservers = _transpile(
        lambda: _fc_net(fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9)))
    on = trainer._parameters_on_pservers
    blocks = on.get_distributed_vars_by_vtypes(["Param"], groupby=True)
    assert sorted(blocks) == ["fc_b", "fc_w"]
    w0, w1 = sorted(blocks["fc_w"], key=lambda r: r["block_id"])
    assert (w0["slice"], w0["slice_shape"], w0["offset"]) == ("fc_w.block0", [500, 1000], 0)
    assert (w1["slice"], w1["offset"], w1["is_slice"]) == ("fc_w.block1", 500 * 1000, True)
    # every block is declared by the pserver the record names, and the momentum with it
    for ep, (prog, _) in zip((EP1, EP2), pservers):
        names = {r["slice"] for r in on.get_distributed_vars_by_ep(ep)}
        assert names and names <= set(prog.global_block().vars)
        params = {r["slice"] for r in on.get_distributed_vars_by_ep(ep, "Param")}
        assert any(r["vtype"] == "Optimizer" for r in on.get_distributed_vars_by_ep(ep))
        assert params == {n for n in prog.global_block().vars
                          if n.split(".block")[0] in ("fc_w", "fc_b")}
    assert on.get_distributed_var_by_slice("fc_w.block1")["endpoint"] == EP1
    assert on.get_distributed_var_by_origin_and_ep("fc_w", EP1)["slice"] == "fc_w.block1"
    # the record survives clone and serialization
    again = fluid.Program.parse_from_string(trainer.serialize_to_string())
    assert again._is_distributed and \
        again._parameters_on_pservers.distributed_vars == on.distributed_vars
    assert trainer.clone()._is_chief


def test_listen_and_serv_all_attrs_hold_the_optimize_blocks():
    _, _, _, [(pserver, _), _] = _transpile(_fc_net)
    serv_op = pserver.blocks[0].ops[0]
    attrs = serv_op.all_attrs()
    assert [b.idx for b in attrs["optimize_blocks"]] == [1, 2]
    assert attrs["endpoint"] == EP1 and attrs["Fanin"] == 2
    # registered defaults show too, as Fluid's op descs hold every attribute
    mul = fluid.Program()
    with fluid.program_guard(mul):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        fluid.layers.fc(x, size=2)
    assert mul.global_block().ops[0].all_attrs()["y_num_col_dims"] == 1


@pytest.mark.parametrize("bad", [{"is_distributed": 1}, {"parameters_on_pservers": [{}]},
                                 {"distributed_lookup_table": ""}])
def test_a_document_with_a_bad_distributed_record_is_refused(bad):
    import json

    _, _, (trainer, _), _ = _transpile(_fc_net)
    head, _, body = trainer.serialize_to_string().partition(b"\n")
    doc = json.loads(body)
    doc["meta"].update(bad)
    with pytest.raises(ValueError, match="meta"):
        fluid.Program.parse_from_string(head + b"\n" + json.dumps(doc).encode())


_LOCAL_TABLE_FORWARD_BACKWARD = [
    "lookup_table", "sequence_pool", "lookup_table", "sequence_pool", "concat", "mul",
    "elementwise_add", "cross_entropy2", "mean", "fill_constant", "mean_grad",
    "cross_entropy_grad2", "elementwise_add_grad", "send", "mul_grad", "send", "concat_grad",
    "sequence_pool_grad", "lookup_table_grad", "sequence_pool_grad", "lookup_table_grad", "sum",
    "split_selected_rows", "send"]


def test_local_lookup_table_is_pulled_whole_and_its_sparse_gradient_split_by_rows():
    _, _, (trainer, _), [(pserver, _), _] = _transpile(lambda: _table_net(False))
    assert len(pserver.blocks) == 3
    assert _types(pserver.blocks[1]) == ["sum", "scale", "adam", "scale", "scale"]
    assert _types(pserver.blocks[2]) == ["sum", "scale", "adam", "scale", "scale"]
    assert len(trainer.blocks) == 1
    assert _types(trainer.blocks[0]) == _LOCAL_TABLE_FORWARD_BACKWARD + [
        "send_barrier", "recv", "recv", "recv", "fetch_barrier", "concat"]


def test_async_local_lookup_table():
    _, _, (trainer, _), [(pserver, _), _] = _transpile(lambda: _table_net(False),
                                                       sync_mode=False)
    assert len(pserver.blocks) == 3
    assert _types(pserver.blocks[1]) == ["adam", "scale", "scale"]
    assert _types(pserver.blocks[2]) == ["adam", "scale", "scale"]
    assert _types(trainer.blocks[0]) == _LOCAL_TABLE_FORWARD_BACKWARD + [
        "recv", "recv", "recv", "concat"]


def test_l2_decay_and_clip_by_value_run_on_the_pserver_in_fluids_order():
    attr = fluid.ParamAttr(name="fc_w", regularizer=fluid.regularizer.L2Decay(),
                           gradient_clip=fluid.clip.GradientClipByValue(0.1))
    _, _, (trainer, _), [(pserver, _), _] = _transpile(lambda: _fc_net(param_attr=attr))
    assert len(pserver.blocks) == 3
    # fc_w's block: average, clip (Fluid 1.6's "clip" op), then the decay, then the update
    assert _types(pserver.blocks[2]) == ["sum", "scale", "clip", "scale", "sum", "sgd"]
    assert not {"clip", "sgd"} & set(_types(trainer.global_block()))


def _one_param_net():
    x = fluid.layers.data(name="x", shape=[1000], dtype="float32")
    y_predict = fluid.layers.fc(input=x, size=1000, act=None,
                                param_attr=fluid.ParamAttr(name="fc_w"), bias_attr=False)
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    cost = fluid.layers.square_error_cost(input=y_predict, label=y)
    fluid.optimizer.SGD(learning_rate=1.0).minimize(fluid.layers.mean(cost))


def test_a_pserver_holding_no_parameter_gets_one_empty_optimize_block():
    config = fluid.DistributeTranspilerConfig()
    config.slice_var_up = False
    _, _, _, [(ps1, _), (ps2, _)] = _transpile(_one_param_net, config=config)
    held, empty = (ps1, ps2) if len(ps1.blocks[1].ops) else (ps2, ps1)
    assert _types(held.blocks[1]) == ["sum", "scale", "sgd"]
    assert len(empty.blocks) == 2 and empty.blocks[1].ops == []
    serv = empty.global_block().ops[0]
    assert [b.idx for b in serv.attr("optimize_blocks")] == [1]
    assert serv.attr("grad_to_block_id") == []


def test_pserver_program_carries_the_trainers_distributed_marks():
    _, _, (trainer, _), [(ps1, _), (ps2, _)] = _transpile(
        lambda: _fc_net(fluid.optimizer.RMSProp(learning_rate=0.1)))
    for ps in (ps1, ps2):
        assert ps._is_distributed
        assert ps._parameters_on_pservers.distributed_vars == \
            trainer._parameters_on_pservers.distributed_vars
    # each record also reads as Fluid's VarDistributed: the blocks of a sliced variable add up
    on = ps1._parameters_on_pservers
    for r in on.get_distributed_vars_by_ep(EP1):
        numel = math.prod(r.slice.shape)
        if r.is_slice:
            numel += sum(math.prod(o.slice.shape) for o in on.get_distributed_vars_by_ep(EP2)
                         if o.origin.name == r.origin.name)
        assert numel == math.prod(r.origin.shape), r
    assert {r.vtype for r in on.get_distributed_vars_by_ep(EP2)} == {"Param", "Optimizer"}


def test_piecewise_decay_switch_runs_in_the_pserver_lr_block_with_its_sub_blocks():
    def net():
        _fc_net(fluid.optimizer.Momentum(
            learning_rate=fluid.layers.piecewise_decay([10, 20], [1.0, 0.5, 0.1]),
            momentum=0.9, regularization=fluid.regularizer.L2Decay(1e-4)))
    _, _, (trainer, _), [(ps1, start1), _] = _transpile(net)
    serv = ps1.global_block().ops[0]
    lr_idx = serv.attr("lr_decay_block_id")
    assert lr_idx == 1 and serv.attr("optimize_blocks")[0].idx == 1
    assert _types(ps1.blocks[1]) == [
        "increment", "cast", "fill_constant", "fill_constant", "less_than", "logical_not",
        "conditional_block", "fill_constant", "fill_constant", "less_than", "logical_not",
        "logical_and", "logical_and", "conditional_block", "fill_constant",
        "conditional_block"]
    # each case's block is cloned right after the LR block, a child of it, as Fluid does
    conds = [op for op in ps1.blocks[1].ops if op.type == "conditional_block"]
    assert [op.attr("sub_block").idx for op in conds] == [2, 3, 4]
    for op in conds:
        sub = op.attr("sub_block")
        assert sub.program is ps1 and sub.parent_idx == 1 and _types(sub) == ["assign"]
    # then the parameter blocks: merge, average, L2 decay, update
    assert [b.idx for b in serv.attr("optimize_blocks")[1:]] == [5, 6]
    for b in serv.attr("optimize_blocks")[1:]:
        assert _types(b) == ["sum", "scale", "scale", "sum", "momentum"]
    # the pserver initializes the decayed rate and the step counter
    inits = {n for op in start1.global_block().ops for n in op.output_arg_names}
    assert {"learning_rate", "@LR_DECAY_COUNTER@"} <= inits
    assert "conditional_block" not in _types(trainer.global_block())


def test_exponential_decay_runs_in_the_pserver_lr_block_as_fluid_16_ops():
    # Fluid 1.6's layer divides the float32 step by a number (a scale op), floors it, raises
    # the decay rate to it and scales by the base rate
    _, _, (trainer, _), [(ps1, _), _] = _transpile(lambda: _fc_net(fluid.optimizer.SGD(
        learning_rate=fluid.layers.exponential_decay(learning_rate=1.0, decay_steps=2100,
                                                     decay_rate=0.1, staircase=True))))
    lr_block = ps1.blocks[1]
    assert _types(lr_block) == ["increment", "cast", "scale", "floor", "fill_constant",
                                "elementwise_pow", "scale"]
    assert lr_block.ops[2].attr("scale") == pytest.approx(1 / 2100)
    assert lr_block.ops[4].attr("value") == pytest.approx(0.1)
    assert len(ps1.blocks) == 4  # the LR block, then one block per parameter block
    assert not {"increment", "elementwise_pow"} & set(_types(trainer.global_block()))


def test_linear_warmup_switch_blocks_follow_the_lr_block_on_the_pserver():
    def net():
        _fc_net(fluid.optimizer.SGD(learning_rate=fluid.layers.linear_lr_warmup(
            0.1, warmup_steps=5, start_lr=0.0, end_lr=0.1)))
    _, _, _, [(ps1, start1), _] = _transpile(net)
    conds = [op for op in ps1.blocks[1].ops if op.type == "conditional_block"]
    assert [op.attr("sub_block").idx for op in conds] == [2, 3]
    assert _types(conds[0].attr("sub_block")) == ["scale", "scale", "scale", "assign"]
    assert _types(conds[1].attr("sub_block")) == ["fill_constant", "assign"]
    inits = {n for op in start1.global_block().ops for n in op.output_arg_names}
    assert "learning_rate_warmup" in inits
