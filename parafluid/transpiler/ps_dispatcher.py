"""Which pserver gets which block: Fluid's ``PSDispatcher``, ``RoundRobin`` and ``HashName``.

Example::

    eps = ["127.0.0.1:6174", "127.0.0.1:6175"]
    RoundRobin(eps).dispatch(["a", "b", "c"])   # [eps[0], eps[1], eps[0]]
    HashName(eps).dispatch(["a", "b", "c"])     # the same in every process, every run
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from ..distributed.endpoints import parse_endpoints

__all__ = ["PSDispatcher", "RoundRobin", "HashName", "stable_hash"]


def _name_of(var: Any) -> str:
    """A name from a str, a Variable (``.name``) or a Fluid VarBlock-like (``.name()``)."""
    if isinstance(var, str):
        return var
    name = getattr(var, "name", None)
    if callable(name):
        name = name()
    if not isinstance(name, str):
        raise TypeError(f"dispatch: expected variables or names, got {type(var).__name__}")
    return name


def stable_hash(name: str) -> int:
    """CRC-32 of the UTF-8 name: the same in every process.

    NOTE: Fluid 1.x used Python's ``hash()``, which is salted per process since Python 3.3, so
    trainers and pservers could disagree on where a block lives; a fixed hash cannot.
    """
    return zlib.crc32(name.encode("utf-8"))


class PSDispatcher:
    """Base class: ``dispatch(varlist)`` returns one endpoint per variable; ``reset()``.

    Args:
        pserver_endpoints: the pservers' ``ip:port`` list (a comma-separated str works too).
    """

    def __init__(self, pserver_endpoints: Sequence[str] | str) -> None:
        self._eps = parse_endpoints(pserver_endpoints, f"{type(self).__name__}: pserver_endpoints")
        self._step = 0

    @property
    def eps(self) -> list[str]:
        return self._eps

    def reset(self) -> None:
        """Start over (RoundRobin's next variable goes to the first endpoint again)."""
        self._step = 0

    def dispatch(self, varlist: Sequence[Any]) -> list[str]:
        raise NotImplementedError(f"{type(self).__name__} must implement dispatch(varlist)")


class RoundRobin(PSDispatcher):
    """Cycle over the endpoints in order; the position carries over between calls."""

    def dispatch(self, varlist: Sequence[Any]) -> list[str]:
        out = []
        for _ in varlist:
            out.append(self._eps[self._step])
            self._step = (self._step + 1) % len(self._eps)
        return out


class HashName(PSDispatcher):
    """Endpoint ``stable_hash(name) % n`` for each variable name."""

    def dispatch(self, varlist: Sequence[Any]) -> list[str]:
        return [self._eps[stable_hash(_name_of(v)) % len(self._eps)] for v in varlist]
