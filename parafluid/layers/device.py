"""``fluid.layers.device``: Fluid's device-listing layer, kept for the programs that import it.

Example::

    places = fluid.layers.device.get_places(device_count=2)   # a PLACE_LIST Variable
"""

from __future__ import annotations

from typing import Any

from ..dtypes import VarType
from ..layer_helper import LayerHelper
from ..unique_name import generate

__all__ = ["get_places"]


def get_places(device_count: int | None = None, device_type: str | None = None) -> Any:
    """A ``PLACE_LIST`` variable that the ``get_places`` op fills, when the program runs,
    with ``device_count`` places of ``device_type`` ("CPU", "CUDA", or "AUTO": CUDA when the
    program runs on a GPU), as Fluid 1.6's layer (whose consumer, ParallelDo, is gone: to
    run data-parallel, give ``fluid.cpu_places()`` / ``fluid.cuda_places()`` to
    ``CompiledProgram.with_data_parallel``)."""
    kind = (device_type or "AUTO").upper()
    if kind == "GPU":
        kind = "CUDA"
    if kind not in ("AUTO", "CPU", "CUDA"):
        raise ValueError(f"get_places: device_type must be 'CPU', 'CUDA' or 'AUTO', got "
                         f"{device_type!r}")
    helper = LayerHelper("get_places")
    out = helper.create_variable(name=generate(helper.name + ".out"), type=VarType.PLACE_LIST)
    helper.append_op("get_places", outputs={"Out": [out]},
                     attrs={"device_type": kind, "device_count": int(device_count or 0)})
    return out
