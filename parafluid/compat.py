"""What of Fluid 1.x parafluid deliberately does not provide, and what to use instead.

Such a name still imports (``from parafluid.layers import lstm`` works), so that a script fails
where it *uses* the feature, with a ``NotProvidedError`` saying what to do, not with an
``AttributeError`` or ``ImportError`` at the top of the file. Names that are neither
provided nor listed here raise an ``AttributeError`` that points to docs/fluid_compat.md.

Example::

    import parafluid as fluid
    fluid.layers.lstm(...)   # NotProvidedError: layers.lstm (the cuDNN LSTM ...) is not part ...
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["NotProvidedError", "NotProvided", "NOT_PROVIDED", "missing_attribute",
           "long_type", "int_type"]

# paddle.compat's integer types (Python 3 has one): Fluid programs write compat.long_type(x)
long_type = int
int_type = int

_DOC = "docs/fluid_compat.md"

# name as a Fluid program spells it -> (what it is, what to use instead)
NOT_PROVIDED: dict[str, tuple[str, str]] = {
    "op.RecurrentOp": ("a creator of the C++ 'recurrent' op from keyword arguments",
                       "build recurrent programs with fluid.layers.StaticRNN or DynamicRNN"),
    "op.DynamicRecurrentOp": ("a creator of a 'dynamic_recurrent' op, which Fluid 1.6's C++ "
                              "side no longer registers",
                              "use fluid.layers.DynamicRNN"),
    "op.CondOp": ("a creator of a 'cond' op, which Fluid 1.6's C++ side no longer registers",
                  "use fluid.layers.IfElse, Switch or cond"),
    "fluid.inference": ("the C++ inference API's Python package",
                        "use fluid.core.AnalysisConfig and fluid.core.create_paddle_predictor "
                        "(or fluid.io.load_inference_model with fluid.Executor)"),
    "fluid.recordio_writer": ("RecordIO files",
                              "feed numpy arrays, or use fluid.io.DataLoader.from_generator"),
    "fluid.load_op_library": ("loading a shared library of custom C++ operators",
                              "write the op in Python with parafluid.ops.registry.register_op "
                              "(slots, attrs, infer_shape, a torch kernel, a gradient maker)"),
    "layers.open_files": ("reader ops over RecordIO files",
                          "feed numpy arrays, or use fluid.io.DataLoader"),
}


def _family(keys: Iterable[str], what: str, instead: str) -> None:
    for key in keys:
        NOT_PROVIDED[key] = (what, instead)


# Families of Fluid 1.6 names not provided (yet), one reason each (docs/fluid_compat.md)
# -- fluid.incubate.fleet ------------------------------------------------------------------
_family(["pslib.fleet", "pslib.PSLib", "pslib.DownpourOptimizer"],
        "fleet's PSLib mode (Fluid's C++ parameter server)",
        "use fleet from parafluid.incubate.fleet.parameter_server.distribute_transpiler "
        "(docs/fleet.md)")


# -- fluid.layers.rnn's dynamic decoding ---------------------------------------------------
_family(["layers.BeamSearchDecoder", "layers.dynamic_decode"],
        "dynamic decoding in a While loop (BeamSearchDecoder, dynamic_decode)",
        "decode with fluid.layers.beam_search / beam_search_decode in a While loop, or "
        "fluid.contrib.BeamSearchDecoder")
# -- the imperative mode's C++ tools -------------------------------------------------------
_family(["dygraph.profiler"], "the gperftools CPU profiler of Paddle's C++ core",
        "use fluid.profiler.profiler (per-op timings) or Python's cProfile")
# -- fluid.transpiler.collective -----------------------------------------------------------
_family(["transpiler.collective.GradAllReduce", "transpiler.collective.LocalSGD"],
        "the c_allreduce collective transpilers",
        "use DistributeTranspiler in nccl2 mode (config.mode = 'nccl2') with "
        "CompiledProgram.with_data_parallel, or fleet's collective mode")


class NotProvidedError(NotImplementedError):
    """A Fluid 1.x feature that parafluid does not provide was used."""


def _message(key: str) -> str:
    what, instead = NOT_PROVIDED[key]
    return (f"{key} ({what}) is not part of parafluid: {instead}. "
            f"See {_DOC} for what is covered.")


class NotProvided:
    """Stands for a Fluid name parafluid does not provide: importing it works, using it
    (calling it, reading an attribute, entering it) raises ``NotProvidedError``."""

    def __init__(self, key: str) -> None:
        object.__setattr__(self, "_key", key)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # keep copy/pickle/inspect probes ordinary
        raise NotProvidedError(_message(object.__getattribute__(self, "_key")))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotProvidedError(_message(self._key))

    def __enter__(self) -> Any:
        raise NotProvidedError(_message(self._key))

    def __exit__(self, *exc: Any) -> None:
        return None

    def __repr__(self) -> str:
        return f"<not provided by parafluid: {self._key}>"


def missing_attribute(prefix: str, name: str, known: Iterable[str]) -> Any:
    """Module ``__getattr__`` body: a ``NotProvided`` for a listed name, else an
    AttributeError with close matches and the coverage table's path."""
    key = f"{prefix}.{name}"
    if key in NOT_PROVIDED:
        return NotProvided(key)
    if name.startswith("__"):
        raise AttributeError(f"module {prefix!r} has no attribute {name!r}")
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise AttributeError(f"{prefix}.{name} is not provided by parafluid{hint} "
                         f"(what is covered: {_DOC})")
