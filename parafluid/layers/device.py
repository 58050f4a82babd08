"""``fluid.layers.device``: Fluid's device-listing layer, kept for the programs that import it.

Example::

    places = fluid.layers.device.get_places(device_count=2)   # [CPUPlace, CPUPlace]
"""

from __future__ import annotations

from typing import Any

from ..place import cpu_places, cuda_places, is_compiled_with_cuda

__all__ = ["get_places"]


def get_places(device_count: int | None = None, device_type: str | None = None) -> list[Any]:
    """The places to run on: ``device_count`` of ``device_type`` ("CPU" or "CUDA"; default:
    CUDA when a GPU is visible, else CPU).

    Fluid returned a variable for its (removed) ParallelDo; parafluid returns the list of
    places, which is what ``CompiledProgram.with_data_parallel(places=...)`` takes.
    """
    kind = (device_type or ("CUDA" if is_compiled_with_cuda() else "CPU")).upper()
    if kind == "CPU":
        return cpu_places(device_count)
    if kind in ("CUDA", "GPU"):
        places = cuda_places()
        return places[:device_count] if device_count else places
    raise ValueError(f"get_places: device_type must be 'CPU' or 'CUDA', got {device_type!r}")
