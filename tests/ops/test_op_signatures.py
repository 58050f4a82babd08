"""Every Fluid 1.6 op type parafluid registers declares Fluid's input slots, output slots and
attributes (parafluid/specs/fluid16_op_slots.txt, read from Fluid's op makers), or the gap
is listed in ``KNOWN_GAPS`` with the reason.

Attributes that only switch a backend or a fused kernel of Fluid's (MKL-DNN, cuDNN,
int8 scales) may be left out: they change no value parafluid computes (the registry's
``BACKEND_ATTRS``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from parafluid.ops.registry import BACKEND_ATTRS, get_op_def, has_op

SLOTS = Path(__file__).resolve().parents[2] / "parafluid" / "specs" / "fluid16_op_slots.txt"


_TENSOR_ARGS = "the tensor form of an attribute (the attribute form is provided)"
_BATCH_BUFS = "Fluid's batch kernels' intermediate buffers; parafluid's kernels make none"
_PS = "parafluid's parameter-server ops name their state differently"
_IS_TEST = "not declared; the op computes the same in training and inference"
_MKLDNN_IN = "MKL-DNN fusion inputs, written only by Fluid's MKL-DNN passes"

# op type -> (the Fluid slots/attributes it lacks, as "in:X" / "out:Y" / "attr:z", why)
KNOWN_GAPS: dict[str, tuple[str, str]] = {
    "batch_norm": ("attr:fuse_with_relu", "set only by Fluid's fusion pass"),
    "c_broadcast": ("attr:use_calc_stream", "one stream per device"),
    "conditional_block": ("out:Scope attr:skip_eager_deletion_vars",
                          "parafluid keeps the sub-block's scope itself"),
    "conditional_block_infer": ("attr:skip_eager_deletion_vars",
                                "parafluid keeps the sub-block's scope itself"),
    "conv2d": ("in:Bias in:ResidualData", _MKLDNN_IN),
    "conv2d_fusion": ("attr:padding_algorithm",
                      "the inference pass that writes it gives explicit paddings"),
    "conv2d_transpose": ("in:Bias", _MKLDNN_IN),
    "conv3d": ("in:ResidualData", _MKLDNN_IN),
    "depthwise_conv2d": ("in:Bias in:ResidualData", _MKLDNN_IN),
    "depthwise_conv2d_transpose": ("in:Bias", _MKLDNN_IN),
    "data_norm": ("attr:data_layout", "the [N, C] form, where both layouts agree"),
    "distributed_lookup_table": ("in:W out:Outputs attr:endpoints", _PS),
    "gen_nccl_id": ("out:NCCLID attr:trainers",
                    "parafluid's rendezvous registers the communicator by endpoints"),
    "listen_and_serv": ("in:X attr:dc_asgd attr:prefetch_var_name_to_block_id "
                        "attr:sparse_grad_to_param attr:checkpint_block_id", _PS),
    "lookup_table": ("attr:grad_inplace attr:trainer_id attr:height_sections attr:epmap "
                     "attr:table_names", "the remote-prefetch form of the parameter server"),
    "lookup_table_v2": ("attr:trainer_id attr:height_sections attr:epmap attr:table_names",
                        "the remote-prefetch form of the parameter server"),
    "matmul": ("attr:head_number", "multi-head matmul (head_number > 1) is not provided"),
    "sample_logits": ("out:LogitsDim out:LabelsDim", "Fluid's shape-carrying buffers"),
    "softmax": ("attr:data_format", "an MKL-DNN layout hint"),
    "sync_batch_norm": ("attr:fuse_with_relu", "set only by Fluid's fusion pass"),
    "transpose": ("attr:data_format", "an MKL-DNN layout hint"),
    "uniform_random_batch_size_like": ("attr:diag_num attr:diag_step attr:diag_val",
                                       "the diagonal initialisation is not provided"),
    "while": ("attr:skip_eager_deletion_vars", "parafluid's release plan decides"),
}
for _act in ("abs", "ceil", "cos", "exp", "floor", "gelu", "leaky_relu", "log", "logsigmoid",
             "reciprocal", "relu", "round", "rsqrt", "sigmoid", "sin", "softplus", "softsign",
             "sqrt", "square", "tanh", "tanh_shrink"):
    KNOWN_GAPS[_act] = ("attr:is_test", _IS_TEST)


def parse_slots(text: str) -> dict[str, dict[str, list[str]]]:
    """op type -> {"in": [...], "out": [...], "attrs": [...]} (names without [] / ? marks)."""
    assert re.search(r"^# commit [0-9a-f]{40}\.$", text, re.M), f"{SLOTS.name}: no commit line"
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split()
        assert len(cols) == 4 and [c.split("=")[0] for c in cols[1:]] == ["in", "out", "attrs"], \
            f"{SLOTS.name}:{n}: expected 'op in=... out=... attrs=...', got {line!r}"

        def names(col: str) -> list[str]:
            value = col.split("=", 1)[1]
            return [] if value == "-" else [re.sub(r"(\[\])?\??$", "", v) for v in value.split(",")]
        out[cols[0]] = {"in": names(cols[1]), "out": names(cols[2]), "attrs": names(cols[3])}
    return out


FLUID_SLOTS = parse_slots(SLOTS.read_text())


def gaps(op: str, fluid: dict[str, list[str]]) -> set[str]:
    """What of Fluid's declaration the registered op lacks."""
    opdef = get_op_def(op)
    return ({f"in:{n}" for n in fluid["in"] if n not in opdef.input_by_name}
            | {f"out:{n}" for n in fluid["out"] if n not in opdef.output_by_name}
            | {f"attr:{n}" for n in fluid["attrs"]
               if n not in opdef.attrs and n not in BACKEND_ATTRS})


def test_the_slot_list_reads_fluids_makers():
    assert len(FLUID_SLOTS) > 350
    assert FLUID_SLOTS["conv2d"]["in"] == ["Input", "Filter", "Bias", "ResidualData"]
    assert FLUID_SLOTS["while"] == {"in": ["X", "Condition"], "out": ["Out", "StepScopes"],
                                    "attrs": ["sub_block", "is_test",
                                              "skip_eager_deletion_vars"]}
    assert "dim" in FLUID_SLOTS["reduce_sum"]["attrs"]


def test_registered_fluid_ops_declare_fluids_slots_and_attributes_or_list_the_gap():
    problems = []
    for op, fluid in sorted(FLUID_SLOTS.items()):
        if not has_op(op):
            continue
        missing = gaps(op, fluid)
        listed = set(KNOWN_GAPS[op][0].split()) if op in KNOWN_GAPS else set()
        if missing - listed:
            problems.append(f"{op}: lacks Fluid's {sorted(missing - listed)}; declare them "
                            f"(or list them in KNOWN_GAPS with the reason)")
        if listed - missing:
            problems.append(f"{op}: KNOWN_GAPS lists {sorted(listed - missing)}, which the op "
                            f"declares now; drop them from the entry")
    for op in KNOWN_GAPS:
        if op not in FLUID_SLOTS or not has_op(op):
            problems.append(f"KNOWN_GAPS {op}: not a registered Fluid op type")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("declared, expected", [
    ({"in": ["X", "Nope"], "out": ["Out"], "attrs": ["use_mkldnn"]}, {"in:Nope"}),
    ({"in": ["X"], "out": ["Out", "Extra"], "attrs": ["zzz"]}, {"out:Extra", "attr:zzz"}),
])
def test_a_missing_slot_or_attribute_is_found(declared, expected):
    assert gaps("relu", declared) == expected


# --------------------------------------------------------------------------- defaults

DEFAULTS = Path(__file__).resolve().parents[2] / "parafluid" / "specs" / \
    "fluid16_op_attr_defaults.txt"

# "op.attribute" -> why parafluid's default differs from Fluid's
_SET = "every layer (or pass) appending the op sets it"
KNOWN_DEFAULT_DIFFS: dict[str, str] = {
    "dgc.use_nesterov": "the DGC momentum optimizer always sets it",
    "distributed_lookup_table.table_names": _SET,
    "fill_constant.shape": _SET,
    "fused_elemwise_activation.save_intermediate_out": _SET,
    "gen_nccl_id.hierarchical_allreduce_inter_nranks": _SET,
    "listen_and_serv.endpoint": _SET,
    "listen_and_serv.pserver_id": _SET,
    "nearest_interp.interp_method": "Fluid's shared interpolate maker defaults every "
                                    "interp op to 'bilinear'; parafluid to the op's method; "
                                    + _SET,
    "py_func.forward_callable_id": _SET,
    "trilinear_interp.interp_method": "Fluid's shared interpolate maker defaults to "
                                      "'bilinear', which a 5-D input refuses",
    "uniform_random.shape": _SET,
}


def parse_defaults(text: str) -> dict[str, dict[str, Any]]:
    """op type -> {attribute: Fluid's default} (``REQUIRED`` where Fluid sets none; the
    attributes whose default is not a literal are left out)."""
    assert re.search(r"^# commit [0-9a-f]{40}\.$", text, re.M), f"{DEFAULTS.name}: no commit"
    out: dict[str, dict[str, Any]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split()
        assert len(cols) == 3, f"{DEFAULTS.name}:{n}: expected 'op attribute default': {line!r}"
        op, name, value = cols
        if value == "?":
            continue
        out.setdefault(op, {})[name] = REQUIRED if value == "required" else \
            ast.literal_eval(value)
    return out


REQUIRED = object()
FLUID_DEFAULTS = parse_defaults(DEFAULTS.read_text())


def same_default(fluid: Any, ours: Any) -> bool:
    if isinstance(fluid, bool) or isinstance(ours, bool):
        return fluid is ours or (isinstance(ours, bool) and fluid == ours)
    if isinstance(fluid, (int, float)) and isinstance(ours, (int, float)):
        return abs(fluid - ours) <= 1e-6 * max(1.0, abs(fluid))
    if isinstance(fluid, list) and isinstance(ours, (list, tuple)):
        return len(fluid) == len(ours) and all(same_default(a, b) for a, b in zip(fluid, ours))
    return fluid == ours


def default_diffs() -> dict[str, str]:
    """"op.attribute" -> "Fluid X, parafluid Y" for every differing default."""
    out = {}
    for op, attrs in sorted(FLUID_DEFAULTS.items()):
        if not has_op(op):
            continue
        ours = get_op_def(op).attrs
        for name, fluid in attrs.items():
            if fluid is REQUIRED or name in BACKEND_ATTRS or name not in ours:
                continue
            if not same_default(fluid, ours[name]):
                out[f"{op}.{name}"] = f"Fluid {fluid!r}, parafluid {ours[name]!r}"
    return out


def test_the_default_list_reads_fluids_makers():
    assert FLUID_DEFAULTS["conv2d"]["strides"] == [1, 1]
    assert FLUID_DEFAULTS["pool2d"]["ksize"] is REQUIRED
    assert FLUID_DEFAULTS["leaky_relu"]["alpha"] == pytest.approx(0.02)
    assert FLUID_DEFAULTS["brelu"]["t_max"] == 24


def test_registered_fluid_ops_default_their_attributes_as_fluid_or_list_why_not():
    diffs = default_diffs()
    new = {k: v for k, v in diffs.items() if k not in KNOWN_DEFAULT_DIFFS}
    stale = sorted(k for k in KNOWN_DEFAULT_DIFFS if k not in diffs)
    assert not new, "defaults that differ from Fluid 1.6's (fix them, or list them in " \
        "KNOWN_DEFAULT_DIFFS with the reason):\n" + "\n".join(f"{k}: {v}"
                                                              for k, v in new.items())
    assert not stale, f"KNOWN_DEFAULT_DIFFS lists defaults that agree now: {stale}"


def test_a_different_default_is_found():
    assert same_default(1, 1.0) and same_default([1, 1], (1, 1)) and not same_default(True, 1)
    assert not same_default(0.02, 0.2) and not same_default("NCHW", "NCDHW")
