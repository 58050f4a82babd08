"""Fluid's global flags: the one store that ``fluid.core.globals()`` shows and the runtime reads.

A flag's value is the one written last: through ``core.globals()["FLAGS_x"] = v`` or through
the environment variable of the same name, which also gives the initial values (as Fluid
reads its flags from the environment at start). Every value is checked when it is written
through ``core.globals()`` and when it is read from the environment; a bad one is a
ValueError naming the flag, what it must be and what it got.

The flags the runtime reads:

- ``FLAGS_rpc_deadline`` (ms, default 180000): how long any distributed wait may take
  (``parafluid.distributed.deadline``);
- ``FLAGS_check_nan_inf`` (bool): check every op's outputs for NaN/Inf
  (``parafluid.engine.atomic``);
- ``FLAGS_eager_delete_tensor_gb`` (GB): negative turns eager deletion off
  (``parafluid.passes.release_memory``); ``core._set_eager_deletion_mode`` sets it too;
- ``FLAGS_selected_gpus`` (ids like ``"0,1"``): the GPUs of a collective trainer
  (``parafluid.distributed.collective``);
- ``FLAGS_reader_deadline`` (ms, default 180000): how long ``multiprocess_reader`` waits for
  a child's next sample before it names the child as stuck
  (``parafluid.dataio.multiprocess_reader``).
- ``FLAGS_rpc_overlap_send`` (bool, default True; parafluid's own): a parameter-server
  trainer's ``send`` starts its messages and the backward pass goes on; the send barrier
  (or the next recv) waits for them (``parafluid.ops.rpc``). False: each send waits.
- ``FLAGS_dygraph_debug`` (bool): ``fluid.dygraph.base._print_debug_msg`` reports the
  imperative mode's object counts (``parafluid.dygraph.base``).
- ``FLAGS_fuse_parameter_memory_size`` (MB, default -1) and ``FLAGS_fuse_parameter_groups_size``
  (default 1): with ``BuildStrategy.fuse_all_reduce_ops``, a group of gradients is closed
  once it holds that many MB (> 0; otherwise 32 MB) or more than that many gradients (> 1;
  otherwise no limit), a layer's gradients kept together as in Fluid
  (``parafluid.passes.grad_aggregation``).
- ``FLAGS_collective_shared_memory_mb`` (MB, default 8; parafluid's own): each collective
  trainer's share of the shared memory through which the trainers of one machine sum their
  dense gradients (a larger buffer goes through in pieces); 0 keeps every all-reduce on
  gloo (``parafluid.distributed.collective``).

The others are accepted and kept so that scripts which set them run; they change nothing.

Example::

    from parafluid import core
    core.globals()["FLAGS_rpc_deadline"] = 5000   # as FLAGS_rpc_deadline=5000 in the environment
    flag("FLAGS_rpc_deadline")                     # 5000
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Flag", "FLAGS", "flag", "set_flag", "known_flags", "flags_guard"]

_TRUE = ("1", "true", "True", "TRUE", "yes", "on")
_FALSE = ("0", "false", "False", "FALSE", "no", "off", "")


def _bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and raw.strip() in _TRUE + _FALSE:
        return raw.strip() in _TRUE
    raise ValueError(f"{name} must be a bool (1/0, true/false), got {raw!r}")


def _number(name: str, raw: Any, what: str) -> float:
    if isinstance(raw, bool):
        raise ValueError(f"{name} must be {what}, got {raw!r}")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {what}, got {raw!r}") from None
    if value != value:  # NaN: every bound a reader compares it with would be false
        raise ValueError(f"{name} must be {what}, got {raw!r}")
    return int(value) if value.is_integer() else value


def _deadline_ms(name: str, raw: Any) -> float:
    ms = _number(name, raw, "a number of milliseconds")
    if not ms > 0:
        raise ValueError(f"{name} must be > 0 ms, got {raw!r}")
    return ms


def _gb(name: str, raw: Any) -> float:
    return float(_number(name, raw, "a number (GB; negative turns eager deletion off)"))


def _gpu_ids(name: str, raw: Any) -> str:
    text = ",".join(str(i) for i in raw) if isinstance(raw, (list, tuple)) else str(raw)
    ids = [x.strip() for x in text.split(",") if x.strip()]
    if not all(x.isdigit() for x in ids):
        raise ValueError(f"{name} must be GPU ids like '0,1', got {raw!r}")
    return ",".join(ids)


def _megabytes(name: str, raw: Any) -> float:
    mb = _number(name, raw, "a number of MB")
    if mb < 0 or mb == float("inf"):
        raise ValueError(f"{name} must be a number of MB >= 0 (0 turns it off), got {raw!r}")
    return mb


def _fraction(name: str, raw: Any) -> float:
    return float(_number(name, raw, "a number"))


def _int(name: str, raw: Any) -> int:
    value = _number(name, raw, "an integer")
    if not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {raw!r}")
    return value


def _text(name: str, raw: Any) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"{name} must be a str, got {type(raw).__name__}: {raw!r}")
    return raw


@dataclass(frozen=True)
class Flag:
    """One flag: its default, the parser that checks a written value, and who reads it."""

    default: Any
    parse: Callable[[str, Any], Any]
    read_by: str = ""  # the module whose behaviour it changes; "" for an accepted no-op


FLAGS: dict[str, Flag] = {
    "FLAGS_rpc_deadline": Flag(180000, _deadline_ms, "parafluid.distributed.deadline"),
    "FLAGS_check_nan_inf": Flag(False, _bool, "parafluid.engine.atomic"),
    "FLAGS_eager_delete_tensor_gb": Flag(0.0, _gb, "parafluid.passes.release_memory"),
    "FLAGS_selected_gpus": Flag("", _gpu_ids, "parafluid.distributed.collective"),
    "FLAGS_reader_deadline": Flag(180000, _deadline_ms, "parafluid.dataio.multiprocess_reader"),
    "FLAGS_rpc_overlap_send": Flag(True, _bool, "parafluid.ops.rpc"),
    "FLAGS_dygraph_debug": Flag(False, _bool, "parafluid.dygraph.base"),
    "FLAGS_fuse_parameter_memory_size": Flag(-1.0, _fraction,
                                             "parafluid.passes.grad_aggregation"),
    "FLAGS_fuse_parameter_groups_size": Flag(1, _int, "parafluid.passes.grad_aggregation"),
    "FLAGS_collective_shared_memory_mb": Flag(8, _megabytes,
                                              "parafluid.distributed.collective"),
    "FLAGS_fast_eager_deletion_mode": Flag(True, _bool),
    "FLAGS_memory_fraction_of_eager_deletion": Flag(1.0, _fraction),
    "FLAGS_fraction_of_gpu_memory_to_use": Flag(0.92, _fraction),
    "FLAGS_allocator_strategy": Flag("auto_growth", _text),
    "FLAGS_cudnn_deterministic": Flag(False, _bool),
    "FLAGS_benchmark": Flag(False, _bool),
    "FLAGS_use_mkldnn": Flag(False, _bool),
    "FLAGS_cpu_deterministic": Flag(False, _bool),
}

# name -> (value written through set_flag, the environment's text when it was written)
_WRITTEN: dict[str, tuple[Any, str | None]] = {}
_LOCK = threading.Lock()


def _spec(name: str) -> Flag:
    spec = FLAGS.get(name)
    if spec is None:
        raise KeyError(f"core.globals(): unknown flag {name!r}; known: {sorted(FLAGS)}")
    return spec


_UNSET: Any = object()


def flag(name: str, default: Any = _UNSET) -> Any:
    """The value of flag ``name``: the one written last (``set_flag`` or the environment),
    else ``default`` when given, else the flag's own default. A malformed environment value
    is a ValueError naming the flag.

    Example::

        flag("FLAGS_check_nan_inf")   # False unless set
    """
    spec = _spec(name)
    env = os.environ.get(name)
    written = _WRITTEN.get(name)
    # NOTE: a written value holds until the environment variable changes: the last writer wins
    if written is not None and written[1] == env:
        return written[0]
    if env is None or env.strip() == "":
        return spec.default if default is _UNSET else default
    return spec.parse(name, env)


def set_flag(name: str, value: Any) -> None:
    """Write flag ``name`` (checked at once: ValueError naming it for a bad value).

    Example::

        set_flag("FLAGS_rpc_deadline", 5000)
    """
    spec = _spec(name)
    parsed = spec.parse(name, value)
    with _LOCK:
        _WRITTEN[name] = (parsed, os.environ.get(name))


def known_flags() -> list[str]:
    """The names of every flag, in declaration order."""
    return list(FLAGS)


@contextlib.contextmanager
def flags_guard() -> Iterator[None]:
    """Flags written inside (through ``set_flag`` or ``core.globals()``) are as before after.

    Example::

        with flags_guard():
            set_flag("FLAGS_check_nan_inf", True)
            exe.run(main, feed=feed)
    """
    with _LOCK:
        saved = dict(_WRITTEN)
    try:
        yield
    finally:
        with _LOCK:
            _WRITTEN.clear()
            _WRITTEN.update(saved)
