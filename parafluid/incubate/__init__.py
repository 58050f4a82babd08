"""``fluid.incubate``: Fluid 1.6's fleet API for distributed training (``incubate.fleet``)."""

from . import fleet  # noqa: F401

__all__ = ["fleet"]
