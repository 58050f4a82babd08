"""How ``exe.run`` runs a ``CompiledProgram(...).with_inference_optimize(config)``: through
the predictor of ``config``. Registered with the executors (``register_inference``) when
the inference API loads; they never import it.
"""

from __future__ import annotations

from typing import Any

from ..feed_fetch import fetch_names
from ..parallel.compiled_program import register_inference
from .config import AnalysisConfig, NativeConfig
from .predictor import PaddleTensor, create_paddle_predictor

__all__ = ["run_compiled_inference"]


def run_compiled_inference(compiled: Any, exe: Any, feed: Any, fetch_list: list[Any],
                           return_numpy: bool) -> list[Any]:
    """A list of PaddleTensors in: the predictor's outputs; a dict ``{name: array}`` in: the
    loaded program run on ``exe`` in the predictor's scope (default fetch: its targets).
    The predictor is made on the first run and kept by ``compiled``."""
    if compiled._predictor is None:
        compiled._predictor = create_paddle_predictor(compiled._infer_config)
    predictor = compiled._predictor
    if isinstance(feed, (list, tuple)) and all(isinstance(t, PaddleTensor) for t in feed):
        if fetch_list:
            raise ValueError("CompiledProgram (inference): a PaddleTensor feed returns the "
                             "model's outputs; leave fetch_list empty, or feed a dict "
                             "{name: array} to fetch by name")
        return predictor.run(list(feed))
    if not isinstance(feed, dict):
        raise TypeError("CompiledProgram (inference): feed a list of fluid.core."
                        "PaddleTensor (one per model input) or a dict {name: array}, got "
                        f"{type(feed).__name__}")
    fetch = fetch_names(fetch_list) or predictor.get_output_names()
    return exe.run(predictor.program(), feed=feed, fetch_list=fetch,
                   scope=predictor._scope, return_numpy=return_numpy)


register_inference((AnalysisConfig, NativeConfig), run_compiled_inference)
