"""The scopes of a data-parallel run: one per device, mirrored from the executor's scope.

Device 0 works in the executor's scope; device ``i > 0`` in a child scope that gets its own
copy of every persistable it reads the first time it is needed, and again whenever the value
in the executor's scope was replaced from outside (a checkpoint loaded, a tensor set), so
the devices never silently diverge. Temporaries of past runs stay in per-device local
scopes (children of the device scopes) until they are dropped.

Example::

    ds = DeviceScopes(scope, devices)
    ds.materialize(plan.persist_reads)      # before a run
    ds.local(1).find_var("fc_0.tmp_0")      # a temporary of device 1's last run
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from ..scope import Scope

__all__ = ["DeviceScopes"]


class DeviceScopes:
    """Per-device scopes of one ParallelExecutor (or shared with another, see ``share``)."""

    def __init__(self, scope: Scope, devices: list[torch.device],
                 share: DeviceScopes | None = None) -> None:
        self.devices = devices
        if share is not None:
            self.scopes: list[Scope] = share.scopes
            # NOTE: shared with the source: what it copied to the devices is in place there,
            # so this executor must not copy device 0's values over them again (batch_norm's
            # moving statistics, for one, differ per device).
            self._root_values: dict[str, Any] = share._root_values
        else:
            self.scopes = [scope] + [scope.new_scope() for _ in range(len(devices) - 1)]
            self._root_values = {}  # persistable -> ref to the root value last copied
        self._locals: list[Scope | None] = [None] * len(devices)

    def materialize(self, persist_reads: list[list[str]]) -> None:
        """Give device i > 0 its own copy of each persistable it reads, when needed."""
        root = self.scopes[0]
        for d in range(1, len(self.devices)):
            dscope = self.scopes[d]
            for name in persist_reads[d]:
                src = root.find_var(name)
                if src is None or src.value is None:
                    continue  # reported as missing when the run looks it up
                holder = dscope.find_local_var(name)
                seen = self._root_values.get(name)
                if holder is not None and holder.value is not None and seen is not None \
                        and seen() is src.value:
                    continue
                dscope.var(name).value = _copy_to(src.value, self.devices[d])
        for names in persist_reads[1:]:
            for name in names:
                src = root.find_var(name)
                if src is not None and src.value is not None:
                    self._root_values[name] = _ref(src.value)

    def refresh(self) -> None:
        """Copy every persistable to the devices again on the next ``materialize`` (device 0
        ran steps of its own, updating values in place)."""
        self._root_values.clear()

    def note_own_writes(self, names: list[str]) -> None:
        """Device 0's writes of a run are ours: not a reason to copy to the devices again."""
        root = self.scopes[0]
        for name in names:
            holder = root.find_var(name)
            if holder is not None and holder.value is not None:
                self._root_values[name] = _ref(holder.value)

    @property
    def local_scopes(self) -> list[Scope | None]:
        """Each device's scope of run temporaries (None: none since the last drop)."""
        return list(self._locals)

    def local(self, d: int) -> Scope:
        """Device ``d``'s scope for the temporaries of runs (created on first use)."""
        local = self._locals[d]
        if local is None:
            local = self._locals[d] = self.scopes[d].new_scope()
        return local

    def drop_locals(self) -> None:
        for d, local in enumerate(self._locals):
            if local is not None:
                self.scopes[d].drop_kid(local)
        self._locals = [None] * len(self.devices)

    def release(self, owner: bool) -> None:
        """Free what these scopes hold: the temporaries of past runs and, for the ``owner``
        (the executor that created the device scopes, not one sharing them), the devices'
        copies; the device scopes are detached from the executor's scope. An executor
        still sharing them copies what it needs from device 0 again on its next run."""
        self.drop_locals()
        if owner:
            root = self.scopes[0]
            for kid in self.scopes[1:]:
                kid.erase(kid.local_var_names())
                root.drop_kid(kid)
            self._root_values.clear()


def _copy_to(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to(device, copy=True)
    if hasattr(value, "to"):
        return value.to(device)
    return value


def _ref(value: Any) -> Any:
    """A weak reference where the value allows one (tensors do), else a strong one."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value
