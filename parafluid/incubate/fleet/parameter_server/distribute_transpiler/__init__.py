"""``fleet.parameter_server.distribute_transpiler``: the fleet of the DistributeTranspiler's
parameter-server mode (``transpiler_fleet.py``).

Example::

    from parafluid.incubate.fleet.parameter_server.distribute_transpiler import fleet
"""

from .transpiler_fleet import (  # noqa: F401
    DistributedTranspiler,
    TranspilerOptimizer,
    __all__,  # noqa: F401
    fleet,
)
