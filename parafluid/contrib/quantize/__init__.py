"""Quantization-aware training (``fluid.contrib.QuantizeTranspiler``)."""

from .quantize_transpiler import QuantizeTranspiler

__all__ = ["QuantizeTranspiler"]
