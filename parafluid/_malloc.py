"""Keep freed tensor memory in the process instead of returning it to the OS (glibc only).

torch's CPU allocator is plain malloc. A training step frees and re-allocates the same
multi-megabyte activations every iteration; with glibc's defaults those blocks are mmap-ed and
unmapped each time (or trimmed off the heap), so every step pays a page fault per 4 KiB of
activations, and in a multi-threaded ParallelExecutor the faults also serialize on the
process's memory-map lock. Measured on the benchmark CNN: a 1-thread step took 93 ms with the
defaults and 48 ms with the settings below.

Set ``PARAFLUID_TUNE_MALLOC=0`` before importing parafluid to keep glibc's defaults.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["tune_malloc", "TUNED"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's maximum: blocks below it come from the heap
_TRIM_THRESHOLD = 1 << 30  # give memory back only when 1 GiB lies free at the heap's top


def tune_malloc() -> bool:
    """Apply the settings; True if glibc accepted them."""
    if not sys.platform.startswith("linux") or os.environ.get("PARAFLUID_TUNE_MALLOC") == "0":
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) == 1
    return ok and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD) == 1


TUNED = tune_malloc()
