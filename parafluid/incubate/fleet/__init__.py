"""Fleet: one training script for the parameter-server and the collective modes.

``fleet.parameter_server.distribute_transpiler.fleet`` and ``fleet.collective.fleet`` wrap
the DistributeTranspiler (pserver mode, nccl2 mode); ``fleet.base.role_maker`` says who this
process is (from the launcher's variables or given by hand). docs/fleet.md shows a script.
"""

from . import base, collective, parameter_server  # noqa: F401

__all__ = ["base", "collective", "parameter_server"]
