"""Fluid's PSLib fleet (its C++ parameter server): not provided; importing works, using it
raises ``NotProvidedError`` saying what to use instead."""

from __future__ import annotations

__all__: list[str] = []


def __getattr__(name: str) -> object:
    from .....compat import missing_attribute

    return missing_attribute("pslib", name, __all__)
