"""Transports for distributed training: deadlines, the collective communicator over
torch.distributed, the rendezvous, the ZeroMQ RPC runtime of the parameter servers, and the
launcher. Nothing here knows about programs: the ops reach these through the run context.

``fluid.distributed.env()`` tells a script its trainer id, the trainer count and endpoints
from Fluid's ``PADDLE_*`` variables or torchrun's (see ``env.py``).
"""

from __future__ import annotations

# NOTE: the function shadows its module as an attribute of this package;
# ``from parafluid.distributed.env import DistributedEnv`` still reaches the module.
from .env import DistributedEnv, env

__all__ = ["env", "DistributedEnv"]
