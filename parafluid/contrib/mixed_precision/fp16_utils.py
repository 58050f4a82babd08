"""The float16 rewrite of a program and the dynamic loss-scaling update.

``rewrite_program`` walks the global block once, classifying each op: white-list ops run
in float16, black-list ops (and ops in no list) in float32, gray-list ops follow their
producers (float32 if any input comes from a float32 op, float16 if one comes from a
float16 op, untouched if their inputs are only feeds, parameters or constants). A ``cast``
is inserted before an op for each float input of the other precision (one per variable,
named ``<var>.cast_fp16`` / ``<var>.cast_fp32`` and reused), and the float outputs of
float16 ops become float16. The gradient of each ``cast`` is the cast back, so parameters
and their gradients stay float32 (the master weights). Only dense tensors are cast (sparse
gradients and tensor arrays keep their dtype); ops holding a sub-block (``while``,
``conditional_block``) and the sub-blocks themselves stay float32, and so do the ops that
write those ops' inputs.
"""

from __future__ import annotations

from typing import Any

from ... import layers
from ...dtypes import VarType
from ...framework import Program
from ...ops.registry import Meta, get_op_def, input_metas
from .fp16_lists import AutoMixedPrecisionLists, cpu_float32_only

__all__ = ["rewrite_program", "update_loss_scaling"]

_FP16, _FP32 = "float16", "float32"
# NOTE: only dense tensors are cast; a sparse or array input keeps its dtype
_VALID_TYPES = (VarType.LOD_TENSOR,)
_SUFFIX = {_FP16: "fp16", _FP32: "fp32"}


def _inferred_dtypes(block: Any, op: Any) -> dict[str, str] | None:
    """Output variable -> the dtype ``op``'s shape rule gives it for its current inputs, or
    None when the rule cannot say (no rule, or an input of unknown shape)."""
    opdef = get_op_def(op.type)
    if opdef.infer_shape is None:
        return None
    ins = input_metas(op, opdef, block)
    if ins is None:
        return None
    try:
        inferred = opdef.infer_shape(ins, op.attrs)
    except (ValueError, TypeError):
        return None
    out = {}
    for slot, names in op.outputs.items():
        metas = inferred.get(slot)
        if metas is None:
            continue
        metas = metas if isinstance(metas, list) else [metas] * len(names)
        for name, meta in zip(names, metas):
            if meta is not None:
                out[name] = Meta(*meta).dtype
    return out


def _insert_cast_op(block: Any, op: Any, idx: int, src: str, dest: str) -> int:
    """Cast ``op``'s ``src`` float inputs to ``dest`` (casts inserted at ``idx``); for a
    float16 op, its float32 outputs become float16. Returns the number of casts added."""
    added = 0
    for slot in op.input_names:
        if src == _FP32 and op.type == "batch_norm" and slot != "X":
            continue  # scale, bias and the running statistics stay float32
        for name in op.input(slot):
            var = block._find_var_recursive(name)
            if var is None or var.type not in _VALID_TYPES:
                continue
            if var.dtype != src:
                continue
            cast_name = f"{name}.cast_{_SUFFIX[dest]}"
            out = block.vars.get(cast_name)
            if out is None or out.dtype != dest:
                out = block.create_var(name=cast_name, dtype=dest, shape=var.shape,
                                       lod_level=var.lod_level, persistable=False,
                                       stop_gradient=var.stop_gradient)
                block._insert_op(idx, "cast", inputs={"X": [name]}, outputs={"Out": [out]},
                                 attrs={"in_dtype": src, "out_dtype": dest,
                                        "op_role": op.attrs.get("op_role", 0)})
                added += 1
            op._rename_input(name, cast_name)
    if src == _FP32 and dest == _FP16:
        inferred = _inferred_dtypes(block, op)
        for slot in op.output_names:
            for name in op.output(slot):
                var = block._find_var_recursive(name)
                if var is None or var.type not in _VALID_TYPES or var.dtype != _FP32:
                    continue
                # NOTE: the op's own dtype rule says which outputs follow the float16
                # inputs (batch_norm's running statistics stay float32, for instance)
                follows = inferred.get(name) == _FP16 if inferred is not None else \
                    (op.type != "batch_norm" or slot == "Y")
                if follows:
                    var.dtype = _FP16
                    if op.has_attr("out_dtype"):  # a cast now casting to float16
                        op._set_attr("out_dtype", _FP16)
    block.program._bump()
    return added


def rewrite_program(main_prog: Program, amp_lists: AutoMixedPrecisionLists) -> None:
    """Rewrite ``main_prog``'s global block for mixed precision, in place (as Fluid's
    ``decorate`` does before it appends the backward pass); see the module docstring."""
    block = main_prog.global_block()
    # NOTE: an op holding a sub-block (while, conditional_block) is left as it is: its
    # sub-block reads its inputs by name, so they cannot be renamed to casts; the ops
    # writing those inputs run in float32 so that the sub-block gets what it was built for
    keep_fp32 = {n for op in block.ops if op.sub_blocks for n in op.input_arg_names}
    white, black = set(), set()
    writer: dict[str, Any] = {}  # variable -> the op that last wrote it so far
    for op in block.ops:
        if op.sub_blocks:
            pass
        elif op.type in amp_lists.black_list or op.type in cpu_float32_only or \
                keep_fp32.intersection(op.output_arg_names):
            black.add(id(op))
        elif op.type in amp_lists.white_list:
            white.add(id(op))
        elif op.type in amp_lists.gray_list:
            after_black = after_white = False
            for name in op.input_arg_names:
                prev = writer.get(name)
                if prev is None:
                    continue  # a feed, a parameter or a constant from the startup program
                if id(prev) in black or prev.type in amp_lists.black_list:
                    after_black = True
                elif id(prev) in white or prev.type in amp_lists.white_list:
                    after_white = True
            if after_black:
                black.add(id(op))
            elif after_white:
                white.add(id(op))
        else:
            black.add(id(op))  # an op in no list runs in float32, to be safe
        for name in op.output_arg_names:
            writer[name] = op
    idx = 0
    while idx < len(block.ops):
        op = block.ops[idx]
        added = 0
        if id(op) in black:
            added = _insert_cast_op(block, op, idx, _FP16, _FP32)
        elif id(op) in white:
            added = _insert_cast_op(block, op, idx, _FP32, _FP16)
        idx += added + 1


def update_loss_scaling(is_overall_finite: Any, prev_loss_scaling: Any, num_good_steps: Any,
                        num_bad_steps: Any, incr_every_n_steps: Any,
                        decr_every_n_nan_or_inf: Any, incr_ratio: float,
                        decr_ratio: float) -> None:
    """Append the dynamic loss-scaling update: after ``incr_every_n_steps`` finite steps in
    a row the scale grows by ``incr_ratio`` (if it stays finite); after
    ``decr_every_n_nan_or_inf`` steps with inf/nan gradients in a row it shrinks by
    ``decr_ratio``, never below 1. Each change restarts both counters."""
    zero_steps = layers.fill_constant(shape=[1], dtype="int32", value=0)
    with layers.Switch() as switch:
        with switch.case(is_overall_finite):
            should_incr = layers.less_than(incr_every_n_steps, num_good_steps + 1)
            with layers.Switch() as switch1:
                with switch1.case(should_incr):
                    new_scaling = prev_loss_scaling * incr_ratio
                    with layers.Switch() as switch2:
                        with switch2.case(layers.isfinite(new_scaling)):
                            layers.assign(new_scaling, prev_loss_scaling)
                    layers.assign(zero_steps, num_good_steps)
                    layers.assign(zero_steps, num_bad_steps)
                with switch1.default():
                    layers.increment(num_good_steps)
                    layers.assign(zero_steps, num_bad_steps)
        with switch.default():
            should_decr = layers.less_than(decr_every_n_nan_or_inf, num_bad_steps + 1)
            with layers.Switch() as switch3:
                with switch3.case(should_decr):
                    new_scaling = prev_loss_scaling * decr_ratio
                    one = layers.fill_constant(shape=[1], dtype="float32", value=1.0)
                    with layers.Switch() as switch4:
                        with switch4.case(layers.less_than(new_scaling, one)):
                            layers.assign(one, prev_loss_scaling)
                        with switch4.default():
                            layers.assign(new_scaling, prev_loss_scaling)
                    layers.assign(zero_steps, num_good_steps)
                    layers.assign(zero_steps, num_bad_steps)
                with switch3.default():
                    layers.assign(zero_steps, num_good_steps)
                    layers.increment(num_bad_steps)
