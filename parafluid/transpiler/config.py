"""``DistributeTranspilerConfig``: Fluid 1.6's settings of the distribute transpiler.

Fields are checked when set (``TypeError``/``ValueError`` naming the field). The nccl2 mode
reads ``mode``, ``nccl_comm_num`` and ``wait_port``; the parameter-server fields are kept for
the pserver mode.

Example::

    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    t = fluid.DistributeTranspiler(config=config)
"""

from __future__ import annotations

from typing import Any

__all__ = ["DistributeTranspilerConfig", "MODES"]

MODES = ("pserver", "nccl2", "collective")

# name -> (accepted types, default); None in the types means the field may be None.
_FIELDS: dict[str, tuple[tuple[type, ...], Any]] = {
    "slice_var_up": ((bool,), True),
    "split_method": ((type, type(None)), None),  # a dispatcher class; None: RoundRobin
    "min_block_size": ((int,), 8192),
    "enable_dc_asgd": ((bool,), False),
    "mode": ((str,), "pserver"),
    "print_log": ((bool,), False),
    "wait_port": ((bool,), True),
    "runtime_split_send_recv": ((bool,), False),
    "sync_mode": ((bool,), True),
    "nccl_comm_num": ((int,), 1),
    "use_hierarchical_allreduce": ((bool,), False),
    "hierarchical_allreduce_inter_nranks": ((int,), 0),
    "geo_sgd_mode": ((bool,), False),
    "geo_sgd_need_push_nums": ((int,), 100),
    "collective_mode": ((str, type(None)), None),
}


class DistributeTranspilerConfig:
    """Settings of ``DistributeTranspiler`` (Fluid 1.6 fields and defaults).

    Attributes:
        slice_var_up: split large variables into blocks over the pservers (True).
        split_method: the dispatcher class (RoundRobin or HashName; None means RoundRobin).
        min_block_size: the smallest block, in elements (8192).
        mode: "pserver" (default), "nccl2" (collective all-reduce over trainers) or
            "collective".
        sync_mode: synchronous training (True).
        print_log, wait_port, enable_dc_asgd, runtime_split_send_recv, nccl_comm_num,
        use_hierarchical_allreduce, hierarchical_allreduce_inter_nranks, geo_sgd_mode,
        geo_sgd_need_push_nums, collective_mode: Fluid's other fields, stored.
    """

    def __init__(self) -> None:
        for name, (_, default) in _FIELDS.items():
            object.__setattr__(self, name, default)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _FIELDS:
            raise AttributeError(f"DistributeTranspilerConfig has no field {name!r} (fields: "
                                 f"{', '.join(_FIELDS)})")
        types, _ = _FIELDS[name]
        if isinstance(value, bool) and bool not in types:
            raise TypeError(f"DistributeTranspilerConfig.{name} must be "
                            f"{' or '.join(t.__name__ for t in types)}, got bool")
        if not isinstance(value, types):
            raise TypeError(f"DistributeTranspilerConfig.{name} must be "
                            f"{' or '.join(t.__name__ for t in types)}, got "
                            f"{type(value).__name__}")
        if name == "mode" and value not in MODES:
            raise ValueError(f"DistributeTranspilerConfig.mode must be one of {MODES}, got "
                             f"{value!r}")
        if name in ("min_block_size", "nccl_comm_num") and value < 1:
            raise ValueError(f"DistributeTranspilerConfig.{name} must be >= 1, got {value}")
        # NOTE: as Fluid's: splitting sends at run time is for asynchronous training only
        if name == "runtime_split_send_recv" and value and self.sync_mode:
            raise ValueError("if you want to set runtime_split_send_recv to be true, make "
                             "ensure config.sync_mode is false at first")
        if name == "sync_mode" and value and self.runtime_split_send_recv:
            raise ValueError("if you want to set sync_mode to be true, make ensure "
                             "config.runtime_split_send_recv is false at first")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in _FIELDS)
        return f"DistributeTranspilerConfig({fields})"
