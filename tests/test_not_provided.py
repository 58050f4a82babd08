"""Fluid op types parafluid refuses (parafluid/ops/not_provided.py): a program holding one
fails at build, load and verify with an error naming the op and the reason."""

import pytest

import parafluid as fluid
from parafluid.ops import has_op
from parafluid.ops.not_provided import NOT_PROVIDED
from parafluid.serialization import program_from_dict, program_to_dict
from parafluid.verifier import find_problems


def test_every_refused_op_has_a_reason_and_no_registration():
    for op_type, reason in NOT_PROVIDED.items():
        assert len(reason) > 20, op_type
        assert not has_op(op_type), f"{op_type} is both registered and refused"


def test_building_a_refused_op_names_it_and_the_reason():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data("x", [3])
        with pytest.raises(ValueError, match=r"'tensorrt_engine' \(Fluid 1.6\) is not provided "
                                             r"by parafluid: an engine .*TensorRT"):
            main.global_block().append_op("tensorrt_engine", inputs={"Xs": [x]},
                                          outputs={"Ys": [x]})


def test_verify_and_load_refuse_a_program_holding_one():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data("x", [3])
        fluid.layers.relu(x)
    doc = program_to_dict(main)
    for od in doc["blocks"][0]["ops"]:
        od["type"] = "c_comm_init"
    with pytest.raises(ValueError, match="'c_comm_init' .* not provided by parafluid: creates "
                                         "an NCCL communicator"):
        program_from_dict(doc)
    main.global_block().ops[0].type = "quantize"
    assert any("'quantize'" in p and "MKL-DNN-only" in p for p in find_problems(main))
    with pytest.raises(ValueError, match="'quantize' .* MKL-DNN-only"):
        main.verify()
