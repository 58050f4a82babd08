"""The fleet base class and the role makers."""

from . import fleet_base, role_maker  # noqa: F401

__all__ = ["fleet_base", "role_maker"]
