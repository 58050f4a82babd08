"""Places: where a tensor lives: ``CPUPlace()``, ``CUDAPlace(i)``, ``cpu_places()``."""

from __future__ import annotations

import os
import warnings

import torch

__all__ = ["CPUPlace", "CUDAPlace", "CUDAPinnedPlace", "cpu_places", "cuda_places",
           "cuda_pinned_places",
           "is_compiled_with_cuda", "to_device", "cpu_device_count"]


class CPUPlace:
    """The host CPU."""

    device_type = "cpu"
    # NOTE: Fluid's Place is a variant of (CUDAPlace, CPUPlace, CUDAPinnedPlace); ``_type()``
    # is the alternative's index, which Fluid's programs compare
    _TYPE = 1

    def _type(self) -> int:
        return self._TYPE

    def _equals(self, other: object) -> bool:
        return type(other) is type(self)

    def is_cpu_place(self) -> bool:
        return type(self) is CPUPlace

    def is_gpu_place(self) -> bool:
        return False

    def is_cuda_pinned_place(self) -> bool:
        return type(self) is CUDAPinnedPlace

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUPlace)

    def __hash__(self) -> int:
        return hash("cpu")

    def __repr__(self) -> str:
        return "CPUPlace"


class CUDAPinnedPlace(CPUPlace):
    """Page-locked host memory; on this implementation, ordinary host memory."""

    _TYPE = 2

    def __repr__(self) -> str:
        return "CUDAPinnedPlace"


class CUDAPlace:
    """GPU number ``device_id`` (as torch numbers the visible GPUs)."""

    device_type = "cuda"

    def __init__(self, device_id: int = 0) -> None:
        if not isinstance(device_id, int) or device_id < 0:
            raise ValueError(f"CUDAPlace: device_id must be an int >= 0, got {device_id!r}")
        self.device_id = device_id

    def _type(self) -> int:
        return 0

    def _equals(self, other: object) -> bool:
        return self == other

    def is_cpu_place(self) -> bool:
        return False

    def is_gpu_place(self) -> bool:
        return True

    def is_cuda_pinned_place(self) -> bool:
        return False

    def gpu_device_id(self) -> int:
        return self.device_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CUDAPlace) and other.device_id == self.device_id

    def __hash__(self) -> int:
        return hash(("cuda", self.device_id))

    def __repr__(self) -> str:
        return f"CUDAPlace({self.device_id})"


class Place:
    """Fluid's ``core.Place``: a holder of any place, set with ``set_place``."""

    def __init__(self) -> None:
        self._place: CPUPlace | CUDAPlace = CPUPlace()

    def set_place(self, place: object) -> None:
        inner = place._place if isinstance(place, Place) else place
        if not isinstance(inner, (CPUPlace, CUDAPlace)):
            raise TypeError(f"Place.set_place: expected a CPUPlace, CUDAPlace or "
                            f"CUDAPinnedPlace, got {type(place).__name__}")
        self._place = inner

    def _type(self) -> int:
        return self._place._type()

    def _equals(self, other: object) -> bool:
        return self._place._equals(other._place if isinstance(other, Place) else other)

    def is_cpu_place(self) -> bool:
        return self._place.is_cpu_place()

    def is_gpu_place(self) -> bool:
        return self._place.is_gpu_place()

    def is_cuda_pinned_place(self) -> bool:
        return self._place.is_cuda_pinned_place()

    def gpu_device_id(self) -> int:
        if not isinstance(self._place, CUDAPlace):
            raise ValueError(f"Place.gpu_device_id: the place is {self._place!r}, not a GPU")
        return self._place.device_id

    def __repr__(self) -> str:
        return repr(self._place)


def is_compiled_with_cuda() -> bool:
    """True when torch can see at least one GPU."""
    return torch.cuda.is_available()


def to_device(place: object) -> torch.device:
    """Map a place to a ``torch.device``; a CUDAPlace without a visible GPU is a clear error."""
    if isinstance(place, Place):
        place = place._place
    if place is None or isinstance(place, CPUPlace):
        return torch.device("cpu")
    if isinstance(place, CUDAPlace):
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"{place} was requested but torch sees no CUDA device on this machine; "
                "use fluid.CPUPlace() (use_cuda=False) or check CUDA_VISIBLE_DEVICES")
        n = torch.cuda.device_count()
        if place.device_id >= n:
            raise RuntimeError(f"{place} was requested but only {n} CUDA device(s) are visible")
        return torch.device("cuda", place.device_id)
    if isinstance(place, torch.device):
        return place
    raise TypeError(f"expected a CPUPlace or CUDAPlace, got {type(place).__name__}: {place!r}")


def cpu_device_count() -> int:
    """CPU_NUM from the environment; unset means 1, with a warning (as Fluid does)."""
    raw = os.environ.get("CPU_NUM")
    if raw is None:
        warnings.warn("CPU_NUM is not set; using 1 CPU device. Set CPU_NUM=N in the "
                      "environment to run N CPU devices in parallel.", stacklevel=3)
        os.environ["CPU_NUM"] = "1"
        return 1
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"CPU_NUM must be a positive integer, got {raw!r}") from None
    if n < 1:
        raise ValueError(f"CPU_NUM must be a positive integer, got {raw!r}")
    return n


def cpu_places(device_count: int | None = None) -> list[CPUPlace]:
    """``device_count`` CPU places (default: CPU_NUM)."""
    if device_count is None:
        device_count = cpu_device_count()
    return [CPUPlace() for _ in range(device_count)]


def cuda_pinned_places(device_count: int | None = None) -> list[CUDAPinnedPlace]:
    """``device_count`` pinned-host places (default: CPU_NUM), as Fluid's."""
    if device_count is None:
        device_count = cpu_device_count()
    return [CUDAPinnedPlace() for _ in range(device_count)]


def cuda_places(device_ids: list[int] | None = None) -> list[CUDAPlace]:
    """One CUDAPlace per visible GPU (or per id given); an error where there is none."""
    if not torch.cuda.is_available():
        raise RuntimeError("cuda_places(): torch sees no CUDA device on this machine; "
                           "use cpu_places() (use_cuda=False)")
    if device_ids is None:
        device_ids = list(range(torch.cuda.device_count()))
    return [CUDAPlace(i) for i in device_ids]
