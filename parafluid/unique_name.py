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
from collections.abc import Iterator

__all__ = ["generate", "guard", "switch", "UniqueNameGenerator"]


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
