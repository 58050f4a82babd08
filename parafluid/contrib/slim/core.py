"""Fluid's ``contrib.slim.core`` import path: the Compressor, its context, config and the
strategy base."""

from .compressor import Compressor, Context
from .config import ConfigFactory
from .strategy import Strategy

__all__ = ["Compressor", "Context", "ConfigFactory", "Strategy"]
