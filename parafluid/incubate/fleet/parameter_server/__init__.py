"""Fleet's parameter-server implementations: ``distribute_transpiler`` (the pserver mode of
the DistributeTranspiler); ``pslib`` (Fluid's C++ parameter server) is not provided."""

from . import distribute_transpiler, pslib  # noqa: F401

__all__ = ["distribute_transpiler", "pslib"]
