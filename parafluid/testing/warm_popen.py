"""The multi-process tests' ``Popen``: children forked from a warm interpreter (the code lives
in ``parafluid.distributed.warm_popen``, where the launcher can use it too)."""

from __future__ import annotations

from ..distributed.warm_popen import SERVER_ENV, WarmPopen, warm_eligible, warm_server_env

__all__ = ["WarmPopen", "warm_eligible", "warm_server_env", "SERVER_ENV"]
