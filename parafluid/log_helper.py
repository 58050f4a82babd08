"""``fluid.log_helper``: the logger Fluid's modules write to.

Example::

    import logging
    from parafluid.log_helper import get_logger
    logger = get_logger(__name__, logging.INFO, fmt="%(asctime)s-%(levelname)s: %(message)s")
    logger.info("epoch 1 done")
"""

from __future__ import annotations

import logging

__all__ = ["get_logger"]


def get_logger(name: str, level: int, fmt: str | None = None) -> logging.Logger:
    """The logger ``name`` at ``level``, writing to stderr with format ``fmt``; its records do
    not also reach the root logger's handlers. Calling it again for the same name does not
    add a second handler."""
    logger = logging.getLogger(name)
    logger.setLevel(level)
    if not any(getattr(h, "_parafluid_log_helper", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler._parafluid_log_helper = True  # type: ignore[attr-defined]
        if fmt:
            handler.setFormatter(logging.Formatter(fmt=fmt))
        logger.addHandler(handler)
    logger.propagate = False
    return logger
