"""Readers of ``fluid.contrib`` (``distributed_batch_reader``)."""

from .distributed_reader import distributed_batch_reader

__all__ = ["distributed_batch_reader"]
