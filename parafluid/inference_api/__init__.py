"""The inference API of ``fluid.core`` (``AnalysisConfig``, ``NativeConfig``,
``create_paddle_predictor``, ``PaddleTensor``, zero-copy tensors): the configs
(``config.py``) and the predictor over a saved inference model (``predictor.py``)."""

from . import compiled  # noqa: F401  (registers with CompiledProgram.with_inference_optimize)
