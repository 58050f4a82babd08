"""Quantization-aware training as a compression strategy (``QuantizationStrategy``), over
``fluid.contrib.QuantizeTranspiler``.

At ``start_epoch`` the training and evaluation programs get fake quantize / dequantize ops;
after ``end_epoch`` the evaluation program is frozen for inference (integer weights in the
scope, one rescale after each quantized layer) and becomes the Compressor's result; the
models named by ``float_model_save_path`` (frozen, float storage) and
``int8_model_save_path`` (int8 weights) are saved with ``fluid.io.save_inference_model``
for ``save_in_nodes`` -> ``save_out_nodes``.
"""

from __future__ import annotations

import logging
from typing import Any

from ... import io
from ...framework import Program
from ..quantize.quantize_transpiler import QuantizeTranspiler
from .config import register_class
from .strategy import Strategy

__all__ = ["QuantizationStrategy"]

_logger = logging.getLogger("parafluid.slim")


@register_class
class QuantizationStrategy(Strategy):
    """Quantization-aware training from ``start_epoch``; freeze and save after
    ``end_epoch``. ``mobile_model_save_path`` and ``mkldnn_int8_model_save_path`` (formats
    of other inference engines) are accepted and not written."""

    def __init__(self, start_epoch: int = 0, end_epoch: int = 0,
                 float_model_save_path: str | None = None,
                 mobile_model_save_path: str | None = None,
                 int8_model_save_path: str | None = None,
                 mkldnn_int8_model_save_path: str | None = None,
                 activation_bits: int = 8, weight_bits: int = 8,
                 activation_quantize_type: str = "abs_max",
                 weight_quantize_type: str = "abs_max",
                 save_in_nodes: list[str] | None = None,
                 save_out_nodes: list[str] | None = None) -> None:
        super().__init__(start_epoch, end_epoch)
        self.float_model_save_path = float_model_save_path
        self.mobile_model_save_path = mobile_model_save_path
        self.int8_model_save_path = int8_model_save_path
        self.mkldnn_int8_model_save_path = mkldnn_int8_model_save_path
        self.save_in_nodes = list(save_in_nodes or [])
        self.save_out_nodes = list(save_out_nodes or [])
        if (float_model_save_path or int8_model_save_path) and not (
                self.save_in_nodes and self.save_out_nodes):
            raise ValueError("QuantizationStrategy: saving a model needs save_in_nodes and "
                             "save_out_nodes (the inference model's inputs and outputs)")
        self.transpiler = QuantizeTranspiler(weight_bits, activation_bits,
                                             activation_quantize_type, weight_quantize_type)
        self.transpiled = False

    def _transpile(self, context: Any) -> None:
        startup = Program()
        programs = [context.optimize_program]
        if context.eval_program is not None and context.eval_program is not \
                context.optimize_program:
            programs.append(context.eval_program)
        for p in programs:
            self.transpiler.training_transpile(p, startup)
        context.run_program(startup, startup)
        self.transpiled = True

    def on_epoch_begin(self, context: Any) -> None:
        if context.epoch_id == self.start_epoch and not self.transpiled:
            self._transpile(context)

    def on_epoch_end(self, context: Any) -> None:
        if context.epoch_id != self.end_epoch or context.eval_program is None:
            return
        frozen = context.eval_program.clone(for_test=True)
        self.transpiler.freeze_program(frozen, context.place, context.scope)
        context.eval_program = frozen
        exe = context.executor
        block = frozen.global_block()
        targets = [block.var(n) for n in self.save_out_nodes] if self.save_out_nodes else []
        if self.float_model_save_path:
            io.save_inference_model(self.float_model_save_path, self.save_in_nodes, targets,
                                    exe, main_program=frozen, scope=context.scope)
        if self.int8_model_save_path:
            int8 = frozen.clone()
            self.transpiler.convert_to_int8(int8, context.place, context.scope)
            io.save_inference_model(self.int8_model_save_path, self.save_in_nodes,
                                    [int8.global_block().var(n) for n in self.save_out_nodes],
                                    exe, main_program=int8, scope=context.scope)
        for what, path in (("mobile", self.mobile_model_save_path),
                           ("MKL-DNN int8", self.mkldnn_int8_model_save_path)):
            if path:
                _logger.warning("QuantizationStrategy: the %s model format is not provided; "
                                "%s is not written", what, path)

    def state(self) -> dict[str, Any]:
        return {"transpiled": self.transpiled}

    def restore(self, context: Any, state: dict[str, Any]) -> None:
        if state.get("transpiled"):
            self._transpile(context)
