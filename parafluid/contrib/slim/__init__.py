"""Model compression (``fluid.contrib.Compressor`` and its strategies)."""

from .compressor import Compressor, Context
from .config import ConfigFactory
from .distillation import DistillationStrategy, FSPDistiller, L2Distiller, SoftLabelDistiller
from .prune import StructurePruner, UniformPruneStrategy
from .quantization import QuantizationStrategy
from .strategy import Strategy

__all__ = ["Compressor", "Context", "ConfigFactory", "Strategy", "StructurePruner",
           "UniformPruneStrategy", "QuantizationStrategy", "DistillationStrategy",
           "L2Distiller", "FSPDistiller", "SoftLabelDistiller"]
