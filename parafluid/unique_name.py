"""Process-wide unique names with Fluid's scheme: ``fc_0``, ``fc_0.w_0``, ``fc_0.tmp_1``.

Example::

    from parafluid import unique_name
    with unique_name.guard():
        unique_name.generate("fc")   # 'fc_0'
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator

__all__ = ["generate", "generate_with_ignorable_key", "guard", "switch", "UniqueNameGenerator"]


class UniqueNameGenerator:
    """Counts names per key; ``generate("fc")`` returns ``fc_0``, then ``fc_1``, ..."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.ids: defaultdict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def __call__(self, key: str) -> str:
        with self._lock:
            n = self.ids[key]
            self.ids[key] = n + 1
        return f"{self.prefix}{key}_{n}"


_generator = UniqueNameGenerator()


def generate(key: str) -> str:
    """Return ``key_<n>`` with a per-key counter global to the process."""
    return _generator(key)


def _static_mode() -> bool:
    return False


# NOTE: the framework installs its in_dygraph_mode here (this module is below it)
in_dygraph_mode: Callable[[], bool] = _static_mode


def generate_with_ignorable_key(key: str) -> str:
    """``generate(key)``; in the imperative mode ``generate("tmp")``, as Fluid's: every
    temporary of every step is named from one key, so the keys do not pile up."""
    return _generator("tmp" if in_dygraph_mode() else key)


def switch(new_generator: UniqueNameGenerator | None = None) -> UniqueNameGenerator:
    """Install ``new_generator`` (a fresh one if None) and return the previous one."""
    global _generator
    old = _generator
    _generator = new_generator if new_generator is not None else UniqueNameGenerator()
    return old


@contextlib.contextmanager
def guard(new_generator: UniqueNameGenerator | str | None = None) -> Iterator[None]:
    """Use a fresh name counter inside the block (a str argument becomes a name prefix)."""
    if isinstance(new_generator, str):
        new_generator = UniqueNameGenerator(new_generator)
    old = switch(new_generator)
    try:
        yield
    finally:
        switch(old)
