"""``fleet.collective``: the fleet of the collective (nccl2) mode (``collective_fleet.py``).

Example::

    from parafluid.incubate.fleet.collective import fleet, DistributedStrategy
"""

from .collective_fleet import (  # noqa: F401
    Collective,
    CollectiveOptimizer,
    DistFCConfig,
    DistributedStrategy,
    LambConfig,
    __all__,  # noqa: F401
    fleet,
)
