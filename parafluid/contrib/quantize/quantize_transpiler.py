"""``fluid.contrib.QuantizeTranspiler``: quantization-aware training, freezing, int8 weights.

``training_transpile`` puts a fake quantize and a fake dequantize op (``ops/fake_quant.py``)
in front of every input of the quantizable ops (``conv2d``, ``depthwise_conv2d``, ``mul``),
weights with ``weight_bits`` bits, activations with ``activation_bits``, and points the
gradient ops of those ops at the dequantized values, so training sees the rounding error
while gradients pass straight through. ``freeze_program`` turns an evaluation program into
the inference form: weights are rounded to integers in the scope, the layer computes on
integers and one ``fake_dequantize_max_abs`` after it rescales by both scales.
``convert_to_int8`` stores those integer weights as int8 variables ``<name>.int8``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import unique_name
from ...framework import Program, default_main_program, default_startup_program, program_guard
from ...initializer import Constant
from ...layer_helper import LayerHelper
from ...layers.learning_rate_scheduler import autoincreased_step_counter
from ...param_attr import ParamAttr
from ...scope import Scope, global_scope

__all__ = ["QuantizeTranspiler"]

QUANTIZABLE_OP_TYPES = ("conv2d", "depthwise_conv2d", "mul")
QUANT_TYPES = ("abs_max", "range_abs_max", "moving_average_abs_max")
FAKE_QUANT_OPS = tuple(f"fake_quantize_{t}" for t in QUANT_TYPES)
FAKE_DEQUANT_OP = "fake_dequantize_max_abs"


def _bin(bits: int) -> int:
    return (1 << (bits - 1)) - 1


def _original_name(name: str) -> str:
    for suffix in (".quantized.dequantized", ".quantized", ".dequantized", ".scale"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


class QuantizeTranspiler:
    """Rewrites Fluid programs for simulated (fake) quantization and for int8 inference.

    Args:
        weight_bits: bits of the weights (biases stay float).
        activation_bits: bits of the activations.
        activation_quantize_type: ``'abs_max'`` (scale of each batch, at training and
            inference), ``'range_abs_max'`` (the maximum over a window of ``window_size``
            batches, kept for inference) or ``'moving_average_abs_max'`` (a moving average
            with ``moving_rate``, kept for inference).
        weight_quantize_type: one of the same three.
        window_size: the window of ``range_abs_max``.
        moving_rate: the decay of ``moving_average_abs_max``.

    Example::

        t = fluid.contrib.QuantizeTranspiler(activation_quantize_type="range_abs_max")
        t.training_transpile(main, startup)   # after optimizer.minimize(loss)
        test = main.clone(for_test=True)
        ...                                   # train main
        t.freeze_program(test, fluid.CPUPlace())
    """

    def __init__(self, weight_bits: int = 8, activation_bits: int = 8,
                 activation_quantize_type: str = "abs_max",
                 weight_quantize_type: str = "abs_max", window_size: int = 10000,
                 moving_rate: float = 0.9) -> None:
        for what, kind in (("weight_quantize_type", weight_quantize_type),
                           ("activation_quantize_type", activation_quantize_type)):
            if kind not in QUANT_TYPES:
                raise ValueError(f"QuantizeTranspiler: {what} must be one of "
                                 f"{list(QUANT_TYPES)}, got {kind!r}")
        for what, bits in (("weight_bits", weight_bits), ("activation_bits", activation_bits)):
            if isinstance(bits, bool) or not isinstance(bits, int) or not 1 < bits <= 16:
                raise ValueError(f"QuantizeTranspiler: {what} must be an int in [2, 16], "
                                 f"got {bits!r}")
        if not isinstance(window_size, int) or window_size < 1:
            raise ValueError(f"QuantizeTranspiler: window_size must be a positive int, "
                             f"got {window_size!r}")
        self.weight_bits = weight_bits
        self.activation_bits = activation_bits
        self.activation_quantize_type = activation_quantize_type
        self.weight_quantize_type = weight_quantize_type
        self.window_size = window_size
        self.moving_rate = float(moving_rate)
        self.global_step = None

    # ------------------------------------------------------------------ training
    def training_transpile(self, program: Program | None = None,
                           startup_program: Program | None = None) -> None:
        """Insert fake quantize / dequantize ops before the quantizable ops of ``program``
        (in place); their gradient ops, if ``minimize`` already ran, read the dequantized
        values. New scales and statistics are initialized by ``startup_program``."""
        program = default_main_program() if program is None else program
        startup_program = default_startup_program() if startup_program is None \
            else startup_program
        params = {p.name for p in program.global_block().iter_parameters()}
        grad_types = {f"{t}_grad" for t in QUANTIZABLE_OP_TYPES}
        with program_guard(program, startup_program):
            helper = LayerHelper(type(self).__name__)
            if "range_abs_max" in (self.weight_quantize_type, self.activation_quantize_type):
                self.global_step = autoincreased_step_counter()
            for block in program.blocks:
                dequantized: dict[str, str] = {}
                for op in list(block.ops):
                    if op.type in QUANTIZABLE_OP_TYPES:
                        for name in op.input_arg_names:
                            if name not in dequantized:
                                idx = block.ops.index(op)
                                weight = name in params
                                dequantized[name] = self._insert_quant_dequant(
                                    helper, block, idx, block._var_recursive(name),
                                    self.weight_bits if weight else self.activation_bits,
                                    self.weight_quantize_type if weight
                                    else self.activation_quantize_type)
                            op._rename_input(name, dequantized[name])
                    elif op.type in grad_types:
                        renamed = [n for n in op.input_arg_names if n in dequantized]
                        if not renamed:
                            raise ValueError(f"QuantizeTranspiler: {op.type} reads none of the "
                                             f"quantized inputs {sorted(dequantized)}: was its "
                                             "forward op built in another program?")
                        for name in renamed:
                            op._rename_input(name, dequantized[name])
        program._bump()

    def _insert_quant_dequant(self, helper: LayerHelper, block: Any, idx: int, var: Any,
                              bits: int, kind: str) -> str:
        quant = block.create_var(name=f"{var.name}.quantized", shape=var.shape,
                                 dtype=var.dtype, type=var.type)
        ins: dict[str, Any] = {"X": var}
        outs: dict[str, Any] = {"Out": quant}
        attrs: dict[str, Any] = {"bit_length": bits}
        if kind == "abs_max":
            scale = block.create_var(name=f"{var.name}.scale", shape=[1], dtype=var.dtype)
        else:
            scale = helper.create_parameter(
                ParamAttr(name=f"{var.name}.scale", initializer=Constant(0.001),
                          trainable=False), shape=[1], dtype=var.dtype)
            scale.stop_gradient = True
            ins["InScale"] = scale
            attrs["is_test"] = False
        outs["OutScale"] = scale
        if kind == "range_abs_max":
            scales = self._state(helper, "scales", var.dtype, self.window_size, 0.0)
            ins.update(Iter=self.global_step, OutScales=scales)
            outs["OutScales"] = scales
            attrs["window_size"] = self.window_size
        elif kind == "moving_average_abs_max":
            state = self._state(helper, "state", var.dtype, 1, 1.0)
            accum = self._state(helper, "accum", var.dtype, 1, 1.0)
            ins.update(InState=state, InAccum=accum)
            outs.update(OutState=state, OutAccum=accum)
            attrs["moving_rate"] = self.moving_rate
        block._insert_op(idx, f"fake_quantize_{kind}", inputs=ins, outputs=outs, attrs=attrs)
        dequant = block.create_var(name=f"{quant.name}.dequantized", shape=var.shape,
                                   dtype=var.dtype, type=var.type)
        block._insert_op(idx + 1, FAKE_DEQUANT_OP, inputs={"X": quant, "Scale": scale},
                         outputs={"Out": dequant}, attrs={"max_range": float(_bin(bits))})
        return dequant.name

    @staticmethod
    def _state(helper: LayerHelper, prefix: str, dtype: Any, size: int, value: float) -> Any:
        var = helper.create_global_variable(name=unique_name.generate(prefix), persistable=True,
                                            dtype=dtype, shape=[size], stop_gradient=True)
        helper.set_variable_initializer(var, Constant(value))
        return var

    # ------------------------------------------------------------------ inference
    def freeze_program(self, program: Program, place: Any, scope: Scope | None = None) -> None:
        """Rewrite a transpiled evaluation program (in place) for inference: each weight is
        rounded in ``scope`` to ``round(w / max|w| * (2**(weight_bits-1) - 1))``, its fake
        quantize/dequantize ops go, the quantizable op computes on integers and one
        ``fake_dequantize_max_abs`` after it rescales its output."""
        scope = global_scope() if scope is None else scope
        program = default_main_program() if program is None else program
        persistable = {v.name for v in program.list_vars() if v.persistable}
        wbin, abin = _bin(self.weight_bits), _bin(self.activation_bits)
        for block in program.blocks:
            in_rename: dict[str, str] = {}
            out_rename: dict[str, str] = {}
            scales: dict[str, Any] = {}  # weight -> float scale, activation -> scale var name
            for op in list(block.ops):
                for name in op.input_arg_names:
                    if name in out_rename:
                        op._rename_input(name, out_rename[name])
                if op.type in FAKE_QUANT_OPS:
                    x = op.input("X")[0]
                    if x not in persistable:
                        scales[x] = op.output("OutScale")[0]
                        continue
                    w = _read(scope, x, "freeze_program")
                    if self.weight_quantize_type == "abs_max":
                        s = float(np.abs(w).max())
                    else:
                        s = float(_read(scope, op.output("OutScale")[0], "freeze_program")[0])
                    scales[x] = s
                    q = np.round(np.clip(w, -s, s) / (s if s > 0 else 1.0) * wbin)
                    scope.find_var(x).get_tensor().set(q.astype(w.dtype), place)
                    in_rename[op.output("Out")[0]] = x
                    block._remove_op(block.ops.index(op))
                elif op.type == FAKE_DEQUANT_OP:
                    x = op.input("X")[0]
                    in_rename[op.output("Out")[0]] = in_rename.get(x, x)
                    block._remove_op(block.ops.index(op))
                elif op.type in QUANTIZABLE_OP_TYPES:
                    self._insert_post_dequant(block, op, in_rename, out_rename, scales,
                                              wbin * abin)
        _remove_unused_vars(program)

    @staticmethod
    def _insert_post_dequant(block: Any, op: Any, in_rename: dict[str, str],
                             out_rename: dict[str, str], scales: dict[str, Any],
                             range_product: int) -> None:
        w_scale = act_scale = None
        for name in op.input_arg_names:
            if name in in_rename:
                op._rename_input(name, in_rename[name])
            s = scales.get(_original_name(name))
            if isinstance(s, float):
                w_scale = s
            elif s is not None:
                act_scale = s
        if w_scale is None or act_scale is None:
            raise ValueError(f"freeze_program: {op.type} (inputs {op.input_arg_names}) needs one "
                             "quantized weight and one quantized activation; was the program "
                             "transpiled with training_transpile?")
        if len(op.output_arg_names) != 1:
            raise ValueError(f"freeze_program: {op.type} has outputs {op.output_arg_names}; "
                             "only one output can be rescaled")
        out = block._var_recursive(op.output_arg_names[0])
        deq = block.create_var(name=f"{out.name}.dequantized", shape=out.shape,
                               dtype=out.dtype, type=out.type)
        block._insert_op(block.ops.index(op) + 1, FAKE_DEQUANT_OP,
                         inputs={"X": out, "Scale": block._var_recursive(act_scale)},
                         outputs={"Out": deq},
                         attrs={"max_range": float(range_product / (w_scale or 1.0))})
        out_rename[out.name] = deq.name

    def convert_to_int8(self, program: Program, place: Any, scope: Scope | None = None) -> None:
        """Store the weights of a frozen program's quantizable ops as int8 variables
        ``<weight>.int8`` (in ``scope`` and the program) and point the ops at them; the
        program is then for storage: float kernels do not run on int8 weights."""
        scope = global_scope() if scope is None else scope
        program = default_main_program() if program is None else program
        gblock = program.global_block()
        converted: dict[str, str] = {}
        for block in program.blocks:
            for op in block.ops:
                if op.type not in QUANTIZABLE_OP_TYPES:
                    continue
                for name in op.input_arg_names:
                    var = block._var_recursive(name)
                    if not var.persistable:
                        continue
                    if name not in converted:
                        w = _read(scope, name, "convert_to_int8")
                        lim = np.iinfo(np.int8)
                        if np.abs(w).max() > lim.max or not np.array_equal(w, np.round(w)):
                            raise ValueError(f"convert_to_int8: weight {name!r} holds values "
                                             "that are not int8 integers; run freeze_program "
                                             "first (with weight_bits <= 8)")
                        int8 = f"{name}.int8"
                        gblock.create_parameter(name=int8, shape=var.shape, dtype="int8",
                                                trainable=False)
                        scope.var(int8).get_tensor().set(w.astype(np.int8), place)
                        converted[name] = int8
                    op._rename_input(name, converted[name])
        _remove_unused_vars(program)


def _read(scope: Scope, name: str, where: str) -> np.ndarray:
    var = scope.find_var(name)
    if var is None or not var.is_initialized():
        raise ValueError(f"{where}: variable {name!r} has no value in the scope; run the "
                         "startup program (and train) in this scope first")
    return np.array(var.get_tensor())


def _remove_unused_vars(program: Program) -> None:
    used = {n for block in program.blocks for op in block.ops
            for n in op.input_arg_names + op.output_arg_names}
    for block in program.blocks:
        for name in [n for n in block.vars if n not in used]:
            block._remove_var(name)
