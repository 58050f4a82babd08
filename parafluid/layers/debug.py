"""``layers.Print``: print a tensor (and its gradient) as the program runs."""

from __future__ import annotations

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["Print"]


def Print(input: Variable, first_n: int = -1, message: str | None = None, summarize: int = 20,
          print_tensor_name: bool = True, print_tensor_type: bool = True,
          print_tensor_shape: bool = True, print_tensor_lod: bool = True,
          print_phase: str = "both", print_tensor_layout: bool = True) -> Variable:
    """Return ``input`` unchanged through a ``print`` op that writes its name, shape, dtype,
    LoD and first ``summarize`` values (-1: all) to stdout each run (only the first
    ``first_n`` runs when >= 0). ``print_phase``: ``"forward"``, ``"backward"`` (the
    gradient, when the output reaches a loss) or ``"both"``. Use the returned variable
    afterwards: the gradient is printed only along it.

    Example::

        h = fluid.layers.Print(h, message="hidden:", summarize=5)
    """
    if not isinstance(input, Variable):
        raise TypeError(f"Print: input must be a Variable, got {type(input).__name__}")
    if str(print_phase).upper() not in ("FORWARD", "BACKWARD", "BOTH"):
        raise ValueError(f"Print: print_phase must be 'forward', 'backward' or 'both', got "
                         f"{print_phase!r}")
    helper = LayerHelper("print_" + input.name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("print", inputs={"In": [input]}, outputs={"Out": [out]},
                     attrs={"first_n": int(first_n), "summarize": int(summarize),
                            "message": message or "", "print_tensor_name": print_tensor_name,
                            "print_tensor_type": print_tensor_type,
                            "print_tensor_shape": print_tensor_shape,
                            "print_tensor_layout": print_tensor_layout,
                            "print_tensor_lod": print_tensor_lod,
                            "print_phase": str(print_phase).upper()})
    return out
