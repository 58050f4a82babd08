"""The package version (a module of its own, so that any layer may read it)."""

from __future__ import annotations

__all__ = ["__version__", "fluid_version", "require_version"]

__version__ = "0.1.0"

# The Fluid release whose API parafluid implements: what fluid.require_version compares.
fluid_version = "1.6.0"


def require_version(min_version: str, max_version: str | None = None) -> None:
    """Raise unless the Fluid version parafluid implements (``fluid_version``, 1.6.0) lies in
    ``[min_version, max_version]``, as Fluid's ``require_version`` checks the installed
    PaddlePaddle.

    Args:
        min_version: the lowest acceptable version, like ``'1.4.0'`` (1 to 4 numbers).
        max_version: the highest acceptable version, or None for no upper bound.

    Example::

        fluid.require_version('1.4.0')            # passes
        fluid.require_version('1.7', '2.0')       # raises Exception
    """
    import re

    if not isinstance(min_version, str):
        raise TypeError("The type of 'min_version' in require_version must be str, but "
                        f"received {type(min_version)}.")
    if not isinstance(max_version, (str, type(None))):
        raise TypeError("The type of 'max_version' in require_version must be str or "
                        f"type(None), but received {type(max_version)}.")
    for what, value in (("min_version", min_version), ("max_version", max_version)):
        if value is not None and re.fullmatch(r"\d+(\.\d+){0,3}", value) is None:
            raise ValueError(f"The value of '{what}' in require_version must be in format "
                             f"'\\d+(\\.\\d+){{0,3}}', like '1.5.2.0', but received {value}")

    def padded(v: str) -> list[int]:
        parts = [int(p) for p in v.split(".")]
        return parts + [0] * (4 - len(parts))

    installed = padded(fluid_version)
    if installed < padded(min_version) or \
            (max_version is not None and installed > padded(max_version)):
        if max_version is None:
            raise Exception(f"PaddlePaddle version {min_version} or higher is required, but "
                            f"{fluid_version} installed, Maybe you are using a develop "
                            "version, please make sure the version is good with your code.")
        raise Exception(f"PaddlePaddle version in [{min_version}, {max_version}] required, "
                        f"but {fluid_version} installed.")
